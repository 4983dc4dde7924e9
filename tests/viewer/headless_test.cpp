// Offscreen rendering on EGL's surfaceless Mesa platform (viewer/gl_surface.hpp): ImGui draw-list
// rectangles land on the pixels they name, top row first, over the window background color, and
// the same frames give the same bytes. No EGL display is a failure here, not a skip: CI installs
// Mesa (scripts/setup).

#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <cstdint>
#include <memory>

#include <imgui.h>

#include "viewer/gl_surface.hpp"

namespace strata::viewer {
namespace {

using Rgba = std::array<uint8_t, 4>;

constexpr int kWidth = 320;
constexpr int kHeight = 200;
constexpr int kFrames = 3;  // ImGui draws a new window from its second frame on

// Red covers x in [20, 60), y in [10, 40) from the top-left; blue x in [250, 300), y in
// [150, 190).
constexpr Rgba kRed = {255, 0, 0, 255};
constexpr Rgba kBlue = {0, 0, 255, 255};

// A window covering the display, without title, border, padding or background, whose draw list
// holds the two rectangles at display coordinates.
void draw_rectangles() {
  ImGui::SetNextWindowPos(ImVec2(0, 0));
  ImGui::SetNextWindowSize(ImGui::GetIO().DisplaySize);
  ImGui::PushStyleVar(ImGuiStyleVar_WindowPadding, ImVec2(0, 0));
  ImGui::PushStyleVar(ImGuiStyleVar_WindowBorderSize, 0.0f);
  ImGui::Begin("rectangles", nullptr,
               ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoBackground);
  ImDrawList* draw_list = ImGui::GetWindowDrawList();
  draw_list->AddRectFilled(ImVec2(20, 10), ImVec2(60, 40), IM_COL32(255, 0, 0, 255));
  draw_list->AddRectFilled(ImVec2(250, 150), ImVec2(300, 190), IM_COL32(0, 0, 255, 255));
  ImGui::End();
  ImGui::PopStyleVar(2);
}

// The rectangles plus an ordinary window with text, a button and a slider: antialiased glyphs
// and translucent fills, the pixels most likely to vary between runs if anything does.
void draw_widgets() {
  draw_rectangles();
  ImGui::SetNextWindowPos(ImVec2(70, 20));
  ImGui::Begin("Strata");
  ImGui::Text("step time %.3f s", 1.234);
  ImGui::Button("simulate");
  float value = 0.25f;
  ImGui::SliderFloat("dp", &value, 0.0f, 1.0f);
  ImGui::End();
}

Image render(HeadlessRenderer& renderer, void (*draw)()) {
  for (int i = 0; i < kFrames; ++i) renderer.frame(draw);
  return renderer.pixels();
}

// The dark style's WindowBg as 8-bit unsigned normalized color (OpenGL rounds to nearest), opaque:
// the renderer clears to it.
Rgba clear_color() {
  ImGuiStyle style;
  ImGui::StyleColorsDark(&style);
  const ImVec4 color = style.Colors[ImGuiCol_WindowBg];
  const auto unorm8 = [](float f) { return static_cast<uint8_t>(std::lround(f * 255.0f)); };
  return {unorm8(color.x), unorm8(color.y), unorm8(color.z), 255};
}

// Draw-list coordinates are framebuffer pixels from the top-left: each rectangle's center has
// exactly its color, and the same point mirrored vertically has the clear color (a missing row
// flip would swap them).
TEST_CASE("headless frames put draw-list rectangles at their pixels, top row first",
          "[viewer][headless]") {
  HeadlessRenderer renderer(kWidth, kHeight);
  CHECK(renderer.width() == kWidth);
  CHECK(renderer.height() == kHeight);
  const Image image = render(renderer, draw_rectangles);
  REQUIRE(image.width == kWidth);
  REQUIRE(image.height == kHeight);
  REQUIRE(image.rgba.size() == size_t{kWidth} * kHeight * 4);

  CHECK(image.at(40, 25) == kRed);
  CHECK(image.at(275, 170) == kBlue);
  CHECK(image.at(20, 10) == kRed);  // the rectangle's first pixel, top-left
  CHECK(image.at(59, 39) == kRed);  // its last, bottom-right (the max corner is exclusive)
  CHECK(image.at(60, 25) == clear_color());
  CHECK(image.at(40, kHeight - 1 - 25) == clear_color());
  CHECK(image.at(275, kHeight - 1 - 170) == clear_color());
  CHECK(image.at(160, 100) == clear_color());
}

// Rendering is deterministic: two renderers alive at once, drawing the same frames interleaved,
// give identical bytes, and the first one's destruction leaves the second working (the shared
// EGL display outlives it). The frames contain text and widgets, not only the clear color, and
// are opaque everywhere (a screenshot shows no checkerboard through translucent windows).
TEST_CASE("two headless renderers give byte-identical frames", "[viewer][headless]") {
  auto first = std::make_unique<HeadlessRenderer>(kWidth, kHeight);
  HeadlessRenderer second(kWidth, kHeight);
  for (int i = 0; i < kFrames; ++i) {
    first->frame(draw_widgets);
    second.frame(draw_widgets);
  }
  const Image first_image = first->pixels();
  CHECK(second.pixels().rgba == first_image.rgba);

  first.reset();
  second.frame(draw_widgets);
  const Image second_image = second.pixels();
  CHECK(second_image.rgba == first_image.rgba);

  const Rgba background = clear_color();
  int not_background = 0;
  int not_opaque = 0;
  for (int y = 0; y < kHeight; ++y) {
    for (int x = 0; x < kWidth; ++x) {
      const Rgba pixel = second_image.at(x, y);
      if (pixel != background && pixel != kRed && pixel != kBlue) ++not_background;
      if (pixel[3] != 255) ++not_opaque;
    }
  }
  CHECK(not_background > 1000);  // the "Strata" window: title bar, text, button, slider
  CHECK(not_opaque == 0);        // translucent windows over an opaque clear stay opaque
}

}  // namespace
}  // namespace strata::viewer
