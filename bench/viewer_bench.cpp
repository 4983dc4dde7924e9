// strata_bench_viewer: frame times of `strata view` on large traces, headless (EGL, Mesa's
// llvmpipe: the rasterizer runs on the CPU, so a frame's time is all of its cost).
//
// For 10K, 100K and 1M complete events it writes a synthetic pipeline trace as JSON (16 ranks in
// 4 stages, 4 streams each: compute ops back to back by micro-batch, TP/DP collectives and PP
// sends and recvs between them), reads it with the viewer's parser, and renders 1600x900
// frames: the whole step fitted (every event on screen, most narrower than a pixel and merged),
// a 10% window, and a pan across the step (the window moving each frame). It prints the mean
// and worst frame time of each against the target (under 33 ms: 30 frames per second), the
// boxes drawn per frame, and the time to read the trace.
//
// Usage: strata_bench_viewer [EVENTS...]   (default 10000 100000 1000000)

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "viewer/gl_surface.hpp"
#include "viewer/trace_model.hpp"
#include "viewer/viewer_app.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using strata::viewer::TimeView;

constexpr int kWidth = 1600;
constexpr int kHeight = 900;
constexpr int kRanks = 16;
constexpr int kStages = 4;
constexpr int kFrames = 20;
constexpr double kTargetMs = 33.0;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// A trace of about `events` complete events: each rank's compute stream runs ops of 2-9 us back
// to back, phase and micro-batch changing every 40 ops; every 8th op has a TP all-reduce on the
// tp stream, every 40th a PP send and recv and every 200th a DP all-reduce. Deterministic.
std::string synthetic_trace(int64_t events) {
  fmt::memory_buffer out;
  fmt::format_to(fmt::appender(out), "{{\"traceEvents\":[\n");
  const char* streams[] = {"compute", "tp-comm", "pp-send", "pp-recv", "dp-comm"};
  for (int rank = 0; rank < kRanks; ++rank) {
    fmt::format_to(fmt::appender(out),
                   "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{0},\"tid\":0,\"args\":"
                   "{{\"name\":\"rank {0} (stage {1})\",\"stage\":{1}}}}},\n",
                   rank, rank % kStages);
    for (int tid = 0; tid < 5; ++tid) {
      fmt::format_to(fmt::appender(out),
                     "{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{},\"tid\":{},\"args\":"
                     "{{\"name\":\"{}\"}}}},\n",
                     rank, tid, streams[tid]);
    }
  }
  // Per rank: n compute ops and about n/8 + n/20 + n/200 others (0.18 n): n = events / (1.18
  // ranks).
  const int64_t ops =
      std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(events) / (1.18 * kRanks)));
  int64_t task = 0;
  bool first = true;
  auto event = [&](int rank, int tid, const char* cat, int64_t start_ns, int64_t dur_ns,
                   const char* phase, int64_t micro_batch) {
    fmt::format_to(fmt::appender(out),
                   "{}{{\"name\":\"{} mb{} op\",\"cat\":\"{}\",\"ph\":\"X\",\"pid\":{},\"tid\":{},"
                   "\"ts\":{}.{:03},\"dur\":{}.{:03},\"args\":{{\"task\":{},\"phase\":\"{}\","
                   "\"micro_batch\":{}}}}}",
                   first ? "" : ",\n", phase, micro_batch, cat, rank, tid, start_ns / 1000,
                   start_ns % 1000, dur_ns / 1000, dur_ns % 1000, task++, phase, micro_batch);
    first = false;
  };
  for (int rank = 0; rank < kRanks; ++rank) {
    int64_t time_ns = 1000 * (rank % kStages) * 50;
    for (int64_t i = 0; i < ops; ++i) {
      const int64_t dur_ns = 2000 + (i * 7919 + rank * 104729) % 7000;
      const int64_t micro_batch = (i / 40) % 8;
      const char* phase = (i / 40) % 2 == 0 ? "fwd" : "bwd";
      event(rank, 0, "compute", time_ns, dur_ns, phase, micro_batch);
      if (i % 8 == 7) event(rank, 1, "tp", time_ns + dur_ns, 1500, phase, micro_batch);
      if (i % 40 == 39) {
        event(rank, 2, "pp", time_ns + dur_ns, 3000, phase, micro_batch);
        event(rank, 3, "pp", time_ns, 2500, phase, micro_batch);
      }
      if (i % 200 == 199) event(rank, 4, "dp", time_ns, 20000, "bwd", -1);
      time_ns += dur_ns + (i % 8 == 7 ? 1500 : 0);
    }
  }
  fmt::format_to(fmt::appender(out), "\n]}}\n");
  return fmt::to_string(out);
}

struct FrameTimes {
  double mean_ms = 0;
  double worst_ms = 0;
  double draw_ms = 0;  // of the mean: building the frame (culling, merging, ImGui's vertices)
  int64_t boxes = 0;
};

// Renders kFrames frames, calling `before` ahead of each (to move the view), and times them.
template <typename Before>
FrameTimes time_frames(strata::viewer::HeadlessRenderer& renderer, strata::viewer::ViewerApp& app,
                       Before before) {
  FrameTimes times;
  for (int i = 0; i < kFrames; ++i) {
    before(i);
    const Clock::time_point start = Clock::now();
    double draw_ms = 0;
    renderer.frame([&] {
      const Clock::time_point draw_start = Clock::now();
      app.draw();
      draw_ms = ms_since(draw_start);
    });
    const double ms = ms_since(start);
    times.draw_ms += draw_ms / kFrames;
    times.mean_ms += ms / kFrames;
    times.worst_ms = std::max(times.worst_ms, ms);
    times.boxes = app.boxes_drawn();
  }
  return times;
}

void print(const char* what, const FrameTimes& t) {
  std::printf(
      "  %-22s mean %6.2f ms (building %5.2f, rendering %5.2f)  worst %6.2f ms  %6lld boxes  %s\n",
      what, t.mean_ms, t.draw_ms, t.mean_ms - t.draw_ms, t.worst_ms,
      static_cast<long long>(t.boxes), t.worst_ms < kTargetMs ? "met" : "MISSED");
}

void run(int64_t events) {
  const std::string text = synthetic_trace(events);
  const Clock::time_point load_start = Clock::now();
  strata::viewer::Trace trace = strata::viewer::parse_trace(text, "synthetic");
  const double load_ms = ms_since(load_start);
  const size_t count = trace.events.size();
  const size_t lanes = trace.lanes.size();
  strata::viewer::ViewerApp app({std::move(trace)}, {});
  strata::viewer::HeadlessRenderer renderer(kWidth, kHeight);
  // Three frames to lay out (ImGui sizes tables and tab bars on the first ones).
  for (int i = 0; i < 3; ++i) renderer.frame([&] { app.draw(); });

  std::printf("%zu events in %zu lanes (%.1f MB of JSON, read in %.0f ms)\n", count, lanes,
              static_cast<double>(text.size()) / 1e6, load_ms);
  const double step_ns = static_cast<double>(app.sources()[0].summary.step_ns);
  const double width = app.geometry().width;
  print("whole step fitted",
        time_frames(renderer, app, [&](int) { app.set_view(TimeView::fit(0, step_ns, width)); }));
  print("10% window", time_frames(renderer, app, [&](int) {
          app.set_view(TimeView::fit(0.45 * step_ns, 0.55 * step_ns, width));
        }));
  print("panning a 10% window", time_frames(renderer, app, [&](int frame) {
          const double begin = step_ns * 0.9 * frame / kFrames;
          app.set_view(TimeView::fit(begin, begin + 0.1 * step_ns, width));
        }));
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> sizes = {10'000, 100'000, 1'000'000};
  if (argc > 1) {
    sizes.clear();
    for (int i = 1; i < argc; ++i) sizes.push_back(std::atoll(argv[i]));
  }
  std::printf(
      "strata_bench_viewer: %dx%d frames, headless (EGL surfaceless, llvmpipe); target "
      "< %.0f ms per frame\n",
      kWidth, kHeight, kTargetMs);
  for (const int64_t events : sizes) run(events);
  return 0;
}
