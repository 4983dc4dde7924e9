// strata_bench_engine: how fast the discrete-event engine (sim/engine.hpp) answers events, on two
// synthetic graphs shaped like what the simulator gives it:
//  (a) dag: ~2M delays and computes on 64 processors, each processor a stream of work with cross
//      dependencies on other streams (no flows): target 10M events/s on one core;
//  (b) rings: ~200K flows in rings over 256 links, each ring a sequence of steps (a latency delay,
//      then one flow per link), some rings crossing two groups' links with weight 2, computes
//      slowed while the flows touch their processors: every step re-solves max-min rates.
// Usage: strata_bench_engine [NAME...]   (no name: all; names as printed: dag, rings)
// Figures are printed, not asserted: timings depend on the machine. The simulated end time is
// printed as a checksum: it must not change between runs or machines.

#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "sim/engine.hpp"

namespace {

using strata::ActivityId;
using strata::ActivityKind;
using strata::ActivitySpec;
using strata::Engine;

constexpr double kBytesPerMB = 1e6;
constexpr double kTargetEventsPerSecond = 10e6;

// A fixed-seed linear congruential generator: the graphs are the same on every run.
class Random {
 public:
  explicit Random(uint64_t seed) : state_(seed) {}
  uint64_t below(uint64_t bound) {
    state_ = state_ * 6364136223846793005ULL + 1442695040888963407ULL;
    return (state_ >> 33) % bound;
  }

 private:
  uint64_t state_;
};

// A size field of /proc/self/status ("VmHWM:", "VmRSS:"), in bytes; 0 if unknown.
int64_t status_bytes(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field, 0) == 0) return std::stoll(line.substr(field.size())) * 1024;
  }
  return 0;
}

// Resets VmHWM to the current resident set (Linux: write 5 to clear_refs), so that the peak
// leaves out what the process held before; returns false where the kernel refuses.
bool reset_peak_rss() {
  std::ofstream clear_refs("/proc/self/clear_refs");
  clear_refs << "5";
  clear_refs.flush();
  return static_cast<bool>(clear_refs);
}

// Bytes the allocator has handed out and not taken back (glibc mallinfo2: heap plus mmapped).
int64_t allocated_bytes() {
  const struct mallinfo2 info = mallinfo2();
  return static_cast<int64_t>(info.uordblks + info.hblkhd);
}

double elapsed_ms(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// (a) 64 streams of 32,768 activities each, built step by step (ids interleave the streams as a
// simulator's would). Each activity follows the previous one of its stream; a quarter also wait
// for the previous step of a random other stream, a sixteenth for the step before that. Three
// quarters are computes of 100 to 2,099 ns on the stream's processor, the rest delays.
void build_dag(Engine& engine) {
  constexpr int kStreams = 64;
  constexpr int kSteps = 32768;
  Random random(2024);
  std::vector<strata::ProcessorId> processors;
  for (int p = 0; p < kStreams; ++p) processors.push_back(engine.add_processor(0.9));
  std::vector<ActivityId> deps;
  for (int step = 0; step < kSteps; ++step) {
    for (int p = 0; p < kStreams; ++p) {
      deps.clear();
      const ActivityId id = static_cast<ActivityId>(step) * kStreams + p;
      if (step > 0) deps.push_back(id - kStreams);
      if (step > 0 && random.below(4) == 0) {
        deps.push_back((step - 1) * kStreams + static_cast<ActivityId>(random.below(kStreams)));
      }
      if (step > 1 && random.below(16) == 0) {
        deps.push_back((step - 2) * kStreams + static_cast<ActivityId>(random.below(kStreams)));
      }
      ActivitySpec spec;
      spec.kind = random.below(4) == 0 ? ActivityKind::kDelay : ActivityKind::kCompute;
      spec.processor = processors[p];
      spec.duration_ns = 100 + static_cast<strata::TimeNs>(random.below(2000));
      engine.add(spec, deps);
    }
  }
}

// (b) 32 groups of 8 GPUs, each group a ring of 8 links of 50 GB/s (256 links). Per group, two
// rings of 400 steps over those links: a "tp" ring of one-hop flows (1-2 MB, touching both end
// GPUs, with a 2-5 us compute on each GPU per step), and a "dp" ring whose flows (4-8 MB) also
// cross the same link of the partner group (g xor 1) with weight 2. A step is a latency delay
// (3 us) after the previous step's flows, then its 8 flows. 64 rings x 400 steps x 8 = 204,800
// flows; components are pairs of groups (16 links).
void build_rings(Engine& engine) {
  constexpr int kGroups = 32;
  constexpr int kGpusPerGroup = 8;
  constexpr int kSteps = 400;
  constexpr double kLinkBytesPerS = 50e9;
  constexpr strata::TimeNs kLatencyNs = 3000;
  Random random(7);
  std::vector<strata::ProcessorId> gpus;
  std::vector<strata::LinkId> links;
  for (int i = 0; i < kGroups * kGpusPerGroup; ++i) {
    gpus.push_back(engine.add_processor(0.85));
    links.push_back(engine.add_link(kLinkBytesPerS));
  }
  std::vector<strata::PathId> tp_paths;
  std::vector<strata::PathId> dp_paths;
  for (int g = 0; g < kGroups; ++g) {
    for (int i = 0; i < kGpusPerGroup; ++i) {
      const strata::LinkId own = links[g * kGpusPerGroup + i];
      const strata::LinkId partner = links[(g ^ 1) * kGpusPerGroup + i];
      const std::vector<strata::PathHop> tp{{own, 1.0f}};
      const std::vector<strata::PathHop> dp{{own, 1.0f}, {partner, 2.0f}};
      tp_paths.push_back(engine.add_path(tp));
      dp_paths.push_back(engine.add_path(dp));
    }
  }
  // previous[r]: the flows of ring r's last step.
  std::vector<std::vector<ActivityId>> previous(2 * kGroups);
  for (int step = 0; step < kSteps; ++step) {
    for (int r = 0; r < 2 * kGroups; ++r) {
      const int g = r / 2;
      const bool tp = r % 2 == 0;
      ActivitySpec latency;
      latency.kind = ActivityKind::kDelay;
      latency.duration_ns = kLatencyNs;
      const ActivityId start = engine.add(latency, previous[r]);
      previous[r].clear();
      for (int i = 0; i < kGpusPerGroup; ++i) {
        const int gpu = g * kGpusPerGroup + i;
        const int next_gpu = g * kGpusPerGroup + (i + 1) % kGpusPerGroup;
        ActivitySpec flow;
        flow.kind = ActivityKind::kFlow;
        flow.path = tp ? tp_paths[gpu] : dp_paths[gpu];
        flow.bytes = tp ? 1e6 + static_cast<double>(random.below(1'000'000))
                        : 4e6 + static_cast<double>(random.below(4'000'000));
        flow.touches = {gpus[gpu], gpus[next_gpu]};
        previous[r].push_back(engine.add(flow, {{start}}));
        if (tp) {
          ActivitySpec work;
          work.kind = ActivityKind::kCompute;
          work.processor = gpus[gpu];
          work.duration_ns = 2000 + static_cast<strata::TimeNs>(random.below(3000));
          engine.add(work, {{start}});
        }
      }
    }
  }
}

struct EngineBenchmark {
  std::string name;
  std::string description;
  std::function<void(Engine&)> build;
};

std::vector<EngineBenchmark> benchmarks() {
  return {
      {"dag", "2,097,152 delays and computes on 64 processors with cross dependencies", build_dag},
      {"rings", "204,800 flows in 64 rings over 256 links, with computes they slow", build_rings},
  };
}

void run(const EngineBenchmark& bench) {
  const bool own_peak = reset_peak_rss();
  auto start = std::chrono::steady_clock::now();
  Engine engine;
  bench.build(engine);
  const double build_ms = elapsed_ms(start);
  start = std::chrono::steady_clock::now();
  engine.run();
  const double run_ms = elapsed_ms(start);
  const int64_t peak_bytes = status_bytes("VmHWM:");
  const int64_t resident_bytes = status_bytes("VmRSS:");
  const int64_t heap_bytes = allocated_bytes();
  const strata::EngineStats stats = engine.stats();
  const double events_per_s = static_cast<double>(stats.events) / (run_ms / 1e3);

  fmt::print("{}: {}\n", bench.name, bench.description);
  fmt::print("  activities  {:12}\n", stats.activities);
  fmt::print("  events      {:12}     starts plus completions\n", stats.events);
  fmt::print("  solves      {:12}     max-min rate updates\n", stats.rate_updates);
  fmt::print("  simulated   {:12} ns  end time (checksum)\n", engine.now_ns());
  fmt::print("  build       {:12.1f} ms  wall clock of the add() calls\n", build_ms);
  fmt::print("  run         {:12.1f} ms  wall clock of Engine::run(), one core\n", run_ms);
  fmt::print("  rate        {:12.2f} M events/s; target: 10M events/s on one core: {}\n",
             events_per_s / 1e6, events_per_s >= kTargetEventsPerSecond ? "met" : "MISSED");
  const auto per_activity = [&](int64_t bytes) {
    return static_cast<double>(bytes) / static_cast<double>(stats.activities);
  };
  fmt::print("  peak RSS    {:12.1f} MB  VmHWM {}, {:.1f} bytes per activity\n",
             static_cast<double>(peak_bytes) / kBytesPerMB,
             own_peak ? "of this benchmark" : "of the process so far", per_activity(peak_bytes));
  fmt::print("  resident    {:12.1f} MB  VmRSS after run(), {:.1f} bytes per activity\n",
             static_cast<double>(resident_bytes) / kBytesPerMB, per_activity(resident_bytes));
  fmt::print(
      "  allocated   {:12.1f} MB  malloc'd and in use after run(), {:.1f} bytes per activity\n",
      static_cast<double>(heap_bytes) / kBytesPerMB, per_activity(heap_bytes));
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> chosen(argv + 1, argv + argc);
  std::vector<EngineBenchmark> selected;
  for (const EngineBenchmark& bench : benchmarks()) {
    if (chosen.empty() || std::find(chosen.begin(), chosen.end(), bench.name) != chosen.end()) {
      selected.push_back(bench);
    }
  }
  if (selected.size() < chosen.size() || selected.empty()) {
    std::string names;
    for (const EngineBenchmark& bench : benchmarks()) names += " " + bench.name;
    std::fprintf(stderr, "strata_bench_engine: unknown benchmark name; the benchmarks are:%s\n",
                 names.c_str());
    return 2;
  }
  // Each benchmark runs in a child process, so that its memory figures are its own.
  int status = 0;
  for (size_t i = 0; i < selected.size(); ++i) {
    if (i > 0) std::fputs("\n", stdout);
    std::fflush(stdout);
    const pid_t child = fork();
    if (child == 0) {
      run(selected[i]);
      std::fflush(stdout);
      _exit(0);
    }
    int child_status = 0;
    if (child < 0 || waitpid(child, &child_status, 0) < 0 || child_status != 0) status = 1;
  }
  return status;
}
