#include "cli/view_command.hpp"

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/error.hpp"
#include "viewer/gl_surface.hpp"
#include "viewer/image.hpp"
#include "viewer/trace_model.hpp"
#include "viewer/viewer_app.hpp"

namespace strata::cli {

namespace {

struct ViewOptions {
  std::vector<std::string> traces;
  std::string screenshot;
  std::string size = "1600x900";
  std::string range;
  int frames = 0;  // 0: 3 for a screenshot, until closed for a window
  std::string tab = "timeline";
  bool window = false;
};

struct Size {
  int width = 0;
  int height = 0;
};

Size parse_size(const std::string& text) {
  Size size;
  char x = 0;
  char extra = 0;
  const int read = std::sscanf(text.c_str(), "%d%c%d%c", &size.width, &x, &size.height, &extra);
  constexpr int kMin = 200;
  constexpr int kMax = 8192;
  if (read != 3 || x != 'x' || size.width < kMin || size.height < kMin || size.width > kMax ||
      size.height > kMax) {
    throw InputError(
        "command line", "--size",
        fmt::format("'{}' is not WIDTHxHEIGHT with each in [{}, {}]", text, kMin, kMax),
        "write e.g. --size 1600x900");
  }
  return size;
}

viewer::Tab parse_tab(const std::string& text) {
  if (text == "timeline") return viewer::Tab::kTimeline;
  if (text == "memory") return viewer::Tab::kMemory;
  if (text == "compare") return viewer::Tab::kCompare;
  throw InputError("command line", "--tab", fmt::format("'{}' is not a tab", text),
                   "use timeline, memory or compare");
}

int run_view(const ViewOptions& options) {
  const Size size = parse_size(options.size);
  viewer::ViewerOptions viewer_options;
  viewer_options.tab = parse_tab(options.tab);
  if (viewer_options.tab == viewer::Tab::kCompare && options.traces.size() < 2) {
    throw InputError("command line", "--tab", "compare needs two traces",
                     "pass a second trace: strata view PREDICTED.json MEASURED.json");
  }
  if (!options.range.empty()) {
    viewer_options.range = viewer::parse_time_range(options.range, "--range");
  }
  if (options.frames < 0) {
    throw InputError("command line", "--frames", "is negative", "e.g. --frames 3");
  }
  // Every trace is read and checked before any window opens.
  std::vector<viewer::Trace> traces;
  for (const std::string& path : options.traces) traces.push_back(viewer::load_trace(path));
  viewer::ViewerApp app(std::move(traces), viewer_options);
  const auto draw = [&app] { app.draw(); };

  // A screenshot is taken after 3 frames unless --frames says otherwise (ImGui lays out tables
  // and tab bars over the first frames); a window stays open until closed.
  const int screenshot_frames = options.frames > 0 ? options.frames : 3;
  try {
    if (!options.screenshot.empty() && !options.window) {
      viewer::HeadlessRenderer renderer(size.width, size.height);
      for (int i = 0; i < screenshot_frames; ++i) renderer.frame(draw);
      viewer::write_png(options.screenshot, renderer.pixels());
      std::printf("strata view: wrote %s (%dx%d, %d frames, headless)\n",
                  options.screenshot.c_str(), size.width, size.height, screenshot_frames);
      return 0;
    }
    viewer::WindowOptions window;
    window.width = size.width;
    window.height = size.height;
    window.title = "strata view: " + options.traces.front();
    window.frames = options.screenshot.empty() ? options.frames : screenshot_frames;
    window.screenshot_path = options.screenshot;
    viewer::run_window(window, draw);
    if (!options.screenshot.empty()) {
      std::printf("strata view: wrote %s (%dx%d, window)\n", options.screenshot.c_str(), size.width,
                  size.height);
    }
  } catch (const viewer::SurfaceError& error) {
    throw InputError("display", options.screenshot.empty() || options.window ? "DISPLAY" : "EGL",
                     error.what(),
                     "run inside a desktop session or under xvfb-run, or render without a "
                     "display: strata view TRACE --screenshot out.png");
  }
  return 0;
}

}  // namespace

void add_view_command(CLI::App& app, std::function<int()>& run) {
  auto options = std::make_shared<ViewOptions>();
  CLI::App* command = app.add_subcommand(
      "view",
      "Open a trace (strata simulate --trace, strata train --trace, any Chrome trace) in the "
      "timeline viewer; a second trace is stacked under the first and compared with it");
  command->add_option("traces", options->traces, "TRACE.json [SECOND.json]")
      ->required()
      ->expected(1, 2);
  command
      ->add_option("--screenshot", options->screenshot,
                   "Render without a display (EGL, Mesa surfaceless), write this PNG and exit")
      ->type_name("PNG");
  command->add_option("--size", options->size, "Window or screenshot size (default 1600x900)")
      ->type_name("WxH");
  command
      ->add_option("--range", options->range,
                   "The time range shown first, from step start: T0:T1 (us, or with a unit: "
                   "0:2.5ms)")
      ->type_name("T0:T1");
  command->add_option("--frames", options->frames,
                      "Frames to render before the screenshot (default 3), or before a window "
                      "closes by itself");
  command->add_option("--tab", options->tab, "The tab shown first: timeline, memory, compare")
      ->type_name("TAB");
  command->add_flag("--window", options->window,
                    "With --screenshot: render in a real window (GLFW) and capture it");
  command->callback([options, &run] { run = [options] { return run_view(*options); }; });
}

}  // namespace strata::cli
