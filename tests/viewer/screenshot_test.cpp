// The viewer drawn headless (EGL, Mesa's surfaceless platform) on a known trace: tiny-gpt on 4
// pipeline stages with 8 micro-batches under 1F1B, from `strata simulate`
// (tests/viewer/data/tiny_pp4_1f1b.json). Pixel probes at places computed from the trace and the
// viewer's own layout, not from the picture:
//  - stage 0's first forward box has the forward color;
//  - stage 3's compute lane is shaded as bubble while it waits in warm-up, and not once it works;
//  - nothing is drawn in the lanes' area below the last lane;
//  - the picture matches a golden PNG reviewed by eye (tests/viewer/golden/), within a small
//    tolerance for Mesa versions; with STRATA_UPDATE_GOLDEN=1 the test rewrites it instead.
// And the mouse, as ImGui sees it: the wheel zooms about the cursor, a click selects the box
// under it and outlines it.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <imgui.h>

#include "viewer/gl_surface.hpp"
#include "viewer/image.hpp"
#include "viewer/palette.hpp"
#include "viewer/viewer_app.hpp"

namespace strata::viewer {
namespace {

const std::string kTracePath = STRATA_SOURCE_DIR "/tests/viewer/data/tiny_pp4_1f1b.json";
const std::string kGoldenPath = STRATA_SOURCE_DIR "/tests/viewer/golden/tiny_pp4_1f1b.png";
constexpr int kWidth = 1200;
constexpr int kHeight = 700;

std::array<uint8_t, 4> rgba_of(ImU32 color) {
  return {static_cast<uint8_t>(color >> IM_COL32_R_SHIFT),
          static_cast<uint8_t>(color >> IM_COL32_G_SHIFT),
          static_cast<uint8_t>(color >> IM_COL32_B_SHIFT), 255};
}

// The row of the lane of `pid` named `thread` (first source).
LaneRow row_of(const ViewerApp& app, int32_t pid, const std::string& thread) {
  const Trace& trace = app.sources()[0].trace;
  for (const LaneRow& row : app.geometry().rows) {
    const Lane& lane = trace.lanes[static_cast<size_t>(row.lane)];
    if (lane.pid == pid && lane.thread_name == thread) return row;
  }
  FAIL("no lane for pid " << pid << " " << thread);
  throw std::logic_error("unreachable");
}

// The earliest event of `pid`'s compute lane with this phase.
const TraceEvent& first_compute(const Trace& trace, int32_t pid, EventPhase phase) {
  for (const Lane& lane : trace.lanes) {
    if (lane.pid != pid || lane.thread_name != "compute") continue;
    for (const int32_t index : lane.events) {
      const TraceEvent& e = trace.events[static_cast<size_t>(index)];
      if (e.phase == phase) return e;
    }
  }
  FAIL("no " << to_string(phase) << " event on pid " << pid);
  throw std::logic_error("unreachable");
}

int pixel_x(const ViewerApp& app, double time_ns) {
  const TimelineSource& source = app.sources()[0];
  return static_cast<int>(
      std::floor(app.geometry().left + app.view().x_of(time_ns + source.offset_ns)));
}

struct Rendered {
  Rendered() : app({load_trace(kTracePath)}, {}), renderer(kWidth, kHeight) {
    for (int i = 0; i < 3; ++i) renderer.frame([this] { app.draw(); });
  }
  ViewerApp app;
  HeadlessRenderer renderer;
};

TEST_CASE("stage 0's first forward box has the forward color", "[viewer][screenshot]") {
  Rendered r;
  const Image image = r.renderer.pixels();
  const TraceEvent& forward = first_compute(r.app.sources()[0].trace, 0, EventPhase::kForward);
  REQUIRE(forward.micro_batch == 0);
  const LaneRow row = row_of(r.app, 0, "compute");
  // Two pixels into the box, at the top of the row's box (below its 1-pixel margin, above the
  // micro-batch label, which is centered).
  const int x = pixel_x(r.app, static_cast<double>(forward.start_ns)) + 2;
  const int y = static_cast<int>(std::ceil(row.y0)) + 2;
  CHECK(image.at(x, y) == rgba_of(kForwardColor));
}

TEST_CASE("stage 3 is shaded as bubble while it waits in warm-up, not once it computes",
          "[viewer][screenshot]") {
  Rendered r;
  const Image image = r.renderer.pixels();
  const Trace& trace = r.app.sources()[0].trace;
  const LaneRow row = row_of(r.app, 3, "compute");
  const int y = static_cast<int>((row.y0 + row.y1) / 2);
  // 1F1B: the last stage starts when the first micro-batch has gone through stages 0-2.
  const TraceEvent& first = first_compute(trace, 3, EventPhase::kForward);
  REQUIRE(first.start_ns > trace.start_ns);
  const auto waiting = image.at(pixel_x(r.app, static_cast<double>(first.start_ns) / 2), y);
  INFO("waiting pixel " << int(waiting[0]) << "," << int(waiting[1]) << "," << int(waiting[2]));
  CHECK(waiting[0] > waiting[1] + 20);  // the bubble's translucent red over the background
  CHECK(waiting[0] > waiting[2] + 20);
  const auto working = image.at(pixel_x(r.app, static_cast<double>(first.start_ns)) + 2,
                                static_cast<int>(std::ceil(row.y0)) + 2);
  CHECK(working == rgba_of(kForwardColor));
}

TEST_CASE("nothing is drawn in the lanes' area below the last lane", "[viewer][screenshot]") {
  Rendered r;
  const Image image = r.renderer.pixels();
  const TimelineGeometry& g = r.app.geometry();
  REQUIRE(g.rows.size() == 16);  // 4 ranks x 4 streams (no TP: no tp-comm lane)
  const int top = static_cast<int>(std::ceil(g.rows.back().y1)) + 2;
  const int bottom = static_cast<int>(g.bottom) - 2;
  REQUIRE(bottom - top > 50);  // the 700-pixel window leaves room below the lanes
  const auto background = image.at(static_cast<int>(g.left) + 5, top);
  CHECK(background[0] < 40);  // the dark theme's background
  int64_t drawn = 0;
  for (int y = top; y < bottom; ++y) {
    for (int x = static_cast<int>(g.left); x < static_cast<int>(g.left + g.width); ++x) {
      if (image.at(x, y) != background) ++drawn;
    }
  }
  CHECK(drawn == 0);
}

// The filter as the side panel sets it: hiding rank 0 and the pp-send stream leaves 3 ranks x 3
// streams of lanes; showing only micro-batch 7 leaves stage 0's first forward undrawn.
TEST_CASE("the filter hides ranks, streams and micro-batches from the timeline",
          "[viewer][screenshot]") {
  Rendered r;
  r.app.filter().hidden_pids.insert(0);
  r.app.filter().hidden_threads.insert("pp-send");
  r.renderer.frame([&] { r.app.draw(); });
  CHECK(r.app.geometry().rows.size() == 9);

  r.app.filter() = EventFilter{};
  r.app.filter().micro_batch = 7;
  r.renderer.frame([&] { r.app.draw(); });
  REQUIRE(r.app.geometry().rows.size() == 16);
  const Image image = r.renderer.pixels();
  const TraceEvent& forward = first_compute(r.app.sources()[0].trace, 0, EventPhase::kForward);
  const LaneRow row = row_of(r.app, 0, "compute");
  CHECK(image.at(pixel_x(r.app, static_cast<double>(forward.start_ns)) + 2,
                 static_cast<int>(std::ceil(row.y0)) + 2) != rgba_of(kForwardColor));
}

TEST_CASE("the rendering matches the reviewed golden PNG", "[viewer][screenshot]") {
  Rendered r;
  const Image image = r.renderer.pixels();
  if (std::getenv("STRATA_UPDATE_GOLDEN") != nullptr) {
    std::filesystem::create_directories(std::filesystem::path(kGoldenPath).parent_path());
    write_png(kGoldenPath, image);
    WARN("rewrote " << kGoldenPath << ": review it by eye before committing");
  }
  const Image golden = read_png(kGoldenPath);
  // Mesa's llvmpipe may round an edge or a glyph differently between versions: a channel may
  // differ by 24 and 0.5% of the pixels by more.
  const ImageDifference difference = compare_images(image, golden, 24);
  REQUIRE(difference.same_size);
  INFO(difference.differing << " of " << difference.pixels << " pixels differ, by up to "
                            << difference.max_channel_delta);
  if (static_cast<double>(difference.differing) > 0.005 * static_cast<double>(difference.pixels)) {
    const std::string actual =
        (std::filesystem::temp_directory_path() / "strata_view_actual.png").string();
    write_png(actual, image);
    FAIL("the rendering differs from " << kGoldenPath << "; it is in " << actual);
  }
}

// ImGui reads the mouse from its IO at each frame: a press and release without moving over a
// box selects it, and the selection is outlined in white; a wheel notch up at the cursor zooms
// in by the viewer's step (0.85) and keeps the time under the cursor.
TEST_CASE("a click selects the box under it and the wheel zooms about the cursor",
          "[viewer][screenshot]") {
  Rendered r;
  ImGuiIO& io = ImGui::GetIO();
  const Trace& trace = r.app.sources()[0].trace;
  const TraceEvent& forward = first_compute(trace, 1, EventPhase::kForward);
  const LaneRow row = row_of(r.app, 1, "compute");
  const auto frame = [&] { r.renderer.frame([&] { r.app.draw(); }); };

  // Click the middle of the forward box.
  const double middle_ns = static_cast<double>(forward.start_ns + forward.dur_ns / 2);
  const double x =
      r.app.geometry().left + r.app.view().x_of(middle_ns + r.app.sources()[0].offset_ns);
  io.MousePos = ImVec2(static_cast<float>(x), (row.y0 + row.y1) / 2);
  frame();
  io.MouseDown[0] = true;
  frame();
  io.MouseDown[0] = false;
  frame();  // the release selects, after this frame's lanes are drawn
  frame();
  REQUIRE(r.app.selected().valid());
  CHECK(&trace.events[static_cast<size_t>(r.app.selected().event)] == &forward);
  const Image image = r.renderer.pixels();
  const double x0 =
      r.app.geometry().left +
      r.app.view().x_of(static_cast<double>(forward.start_ns) + r.app.sources()[0].offset_ns);
  // The outline is a 2-pixel white line around the box, centered one pixel left of it.
  const auto outline =
      image.at(static_cast<int>(std::floor(x0)) - 1, static_cast<int>((row.y0 + row.y1) / 2));
  INFO("outline pixel " << int(outline[0]) << "," << int(outline[1]) << "," << int(outline[2])
                        << " at " << x0 << "," << (row.y0 + row.y1) / 2);

  CHECK(std::min({outline[0], outline[1], outline[2]}) > 200);

  const TimeView before = r.app.view();
  const float mouse_x = r.app.geometry().left + 300;
  io.MousePos = ImVec2(mouse_x, (row.y0 + row.y1) / 2);
  frame();
  io.MouseWheel = 1;
  frame();
  io.MouseWheel = 0;
  const TimeView after = r.app.view();
  CHECK(after.ns_per_px == Approx(before.ns_per_px * 0.85));
  CHECK(after.time_at(300) == Approx(before.time_at(300)));
}

}  // namespace
}  // namespace strata::viewer
