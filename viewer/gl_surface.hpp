#pragma once
// Where the viewer draws: an OpenGL 3.3 core context with Dear ImGui (its OpenGL 3 backend), either
// offscreen on EGL's surfaceless Mesa platform (no display server: tests, CI, --screenshot) or in
// a GLFW window.
//
// Both create their own ImGui context with the dark style and no imgui.ini, call `draw` once per
// frame between ImGui::NewFrame() and ImGui::Render(), and clear to the window background color
// before rendering ImGui's draw data.

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

#include "viewer/image.hpp"

namespace strata::viewer {

// Thrown when no OpenGL context can be made (no EGL display, no window system); the message
// names the call that failed.
struct SurfaceError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class HeadlessRenderer {
 public:
  // An EGL surfaceless display and context and a width x height RGBA8 framebuffer object.
  // Several renderers may be alive at once on one thread: each call makes its own EGL and ImGui
  // contexts current.
  HeadlessRenderer(int width, int height);
  ~HeadlessRenderer();
  HeadlessRenderer(const HeadlessRenderer&) = delete;
  HeadlessRenderer& operator=(const HeadlessRenderer&) = delete;

  // One frame: ImGui::NewFrame (display size width x height, 1/60 s after the previous frame),
  // draw(), ImGui::Render, then rendering into the framebuffer, finished (glFinish) before it
  // returns. Mouse input for the frame is what the caller set in ImGui::GetIO() before the call.
  void frame(const std::function<void()>& draw);
  // The framebuffer as an image, the top row first.
  Image pixels() const;

  int width() const { return width_; }
  int height() const { return height_; }

 private:
  struct State;
  std::unique_ptr<State> state_;  // EGL display and context, framebuffer, ImGui context
  int width_;
  int height_;
};

struct WindowOptions {
  int width = 1600;
  int height = 900;
  std::string title = "strata view";
  int frames = 0;               // when > 0, close after this many frames
  std::string screenshot_path;  // when set (frames > 0), the last frame is written there as PNG
};

// Opens a GLFW window and draws frames until it is closed (or `frames` frames); throws
// SurfaceError when GLFW cannot open one (no display).
void run_window(const WindowOptions& options, const std::function<void()>& draw);

}  // namespace strata::viewer
