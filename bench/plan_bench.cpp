// strata_bench_plan: how fast the plan compiler lowers a training step to a task graph, and how
// much memory the graph takes, on the two workloads the design is sized for (docs/design.md,
// "Scale: symmetry folding"):
//  (a) Llama 3 405B on 16,384 H100s, folded (one rank per pipeline stage): target < 100 ms;
//  (b) GPT-3 175B on 64 H100s, full (every rank): targets < 1 s and < 1 GB.
// Usage: strata_bench_plan [NAME...]   (no name: all; names as printed, e.g. gpt3-175b-full)
// Figures are printed, not asserted: timings depend on the machine. Exit code 0 unless an input
// is refused (2) or a graph breaks its invariants (1).

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench/workloads.hpp"
#include "common/error.hpp"
#include "models/model_reader.hpp"
#include "plan/graph_validator.hpp"
#include "plan/lowering.hpp"
#include "plan/parallel_plan.hpp"
#include "topologies/cluster_spec.hpp"

namespace {

using strata::GraphMode;
using strata::ParallelPlan;

constexpr double kBytesPerMB = 1e6;

struct PlanBenchmark {
  std::string name;
  std::string description;
  std::string model;
  std::string cluster;
  ParallelPlan plan;
  GraphMode mode = GraphMode::kFolded;
  int runs = 1;  // lowering and validation are each timed as the best of these
  double target_lowering_ms = 0;
  int64_t target_memory_bytes = 0;  // 0: no memory target
};

std::vector<PlanBenchmark> benchmarks() {
  const ParallelPlan llama = strata::bench::llama3_405b_plan(128);
  const ParallelPlan gpt3 = strata::bench::gpt3_175b_plan();

  return {
      {"llama3-405b-folded", "Llama 3 405B on 16,384 H100s, folded graph (one rank per stage)",
       "llama3-405b", "dgx-h100", llama, GraphMode::kFolded, 5, 100, 0},
      {"gpt3-175b-full", "GPT-3 175B on 64 H100s, full graph (every rank)", "gpt3-175b", "dgx-h100",
       gpt3, GraphMode::kFull, 3, 1000, 1'000'000'000},
  };
}

// The process's peak resident set so far (Linux reports ru_maxrss in KiB).
int64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;
}

double elapsed_ms(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

const char* verdict(bool met) { return met ? "met" : "MISSED"; }

// Runs one benchmark and prints its figures; returns false when the graph is invalid.
bool run(const PlanBenchmark& bench) {
  const strata::ModelSpec model = strata::load_model(bench.model);
  const strata::ClusterSpec cluster = strata::load_cluster(bench.cluster);
  strata::validate_plan(bench.plan, model, bench.plan.gpus(), "benchmark " + bench.name);

  double lowering_ms = std::numeric_limits<double>::infinity();
  double validation_ms = std::numeric_limits<double>::infinity();
  int64_t task_count = 0;
  int64_t footprint_bytes = 0;
  strata::ValidationReport report;
  for (int i = 0; i < bench.runs; ++i) {
    auto start = std::chrono::steady_clock::now();
    const strata::TaskGraph graph =
        strata::lower_to_task_graph(model, bench.plan, cluster.gpus_per_node, bench.mode);
    lowering_ms = std::min(lowering_ms, elapsed_ms(start));

    start = std::chrono::steady_clock::now();
    report = strata::validate_graph(graph);
    validation_ms = std::min(validation_ms, elapsed_ms(start));

    task_count = graph.size();
    footprint_bytes = graph.footprint_bytes();
  }
  // The lowering again, back to back with no validation between: glibc then hands a lowering
  // that grows its vectors fresh pages each time, where a validation before it leaves free heap
  // blocks that serve them (bench/results/plan-cpu.md). Raising MALLOC_MMAP_THRESHOLD_ removes
  // the difference.
  double back_to_back_ms = std::numeric_limits<double>::infinity();
  for (int i = 0; i < bench.runs; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const strata::TaskGraph graph =
        strata::lower_to_task_graph(model, bench.plan, cluster.gpus_per_node, bench.mode);
    back_to_back_ms = std::min(back_to_back_ms, elapsed_ms(start));
  }
  const int64_t rss_bytes = peak_rss_bytes();

  const ParallelPlan& p = bench.plan;
  fmt::print("{}: {}\n", bench.name, bench.description);
  fmt::print(
      "  plan        {} on {}: dp {} x tp {} x pp {} = {} GPUs, global batch {}, "
      "micro-batch {}, seq {}, {} graph\n",
      bench.model, bench.cluster, p.dp, p.tp, p.pp, p.gpus(), p.global_batch, p.micro_batch,
      p.seq_len, strata::to_string(bench.mode));
  fmt::print(
      "  lowering    {:9.1f} ms  wall clock of lower_to_task_graph, best of {} runs; "
      "target < {:.0f} ms: {}\n",
      lowering_ms, bench.runs, bench.target_lowering_ms,
      verdict(lowering_ms < bench.target_lowering_ms));
  fmt::print("  lowering    {:9.1f} ms  the same, back to back without validation between\n",
             back_to_back_ms);
  fmt::print(
      "  validation  {:9.1f} ms  wall clock of validate_graph (acyclicity, p2p, "
      "collectives, memory), best of {} runs; {}\n",
      validation_ms, bench.runs, report.ok() ? "graph valid" : "GRAPH INVALID");
  fmt::print("  tasks       {:9}     tasks in the graph\n", task_count);
  const bool has_memory_target = bench.target_memory_bytes > 0;
  const std::string memory_target =
      has_memory_target ? fmt::format("; target < {:.0f} MB: ",
                                      static_cast<double>(bench.target_memory_bytes) / kBytesPerMB)
                        : "";
  fmt::print("  footprint   {:9.1f} MB  bytes the graph holds (TaskGraph::footprint_bytes){}{}\n",
             static_cast<double>(footprint_bytes) / kBytesPerMB, memory_target,
             has_memory_target ? verdict(footprint_bytes < bench.target_memory_bytes) : "");
  fmt::print(
      "  peak RSS    {:9.1f} MB  the process's resident high-water mark so far "
      "(getrusage ru_maxrss){}{}\n",
      static_cast<double>(rss_bytes) / kBytesPerMB, memory_target,
      has_memory_target ? verdict(rss_bytes < bench.target_memory_bytes) : "");
  for (const std::string& error : report.errors) fmt::print("  invalid: {}\n", error);
  std::fflush(stdout);
  return report.ok();
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> chosen(argv + 1, argv + argc);
  std::vector<PlanBenchmark> selected;
  for (const PlanBenchmark& bench : benchmarks()) {
    if (chosen.empty() || std::find(chosen.begin(), chosen.end(), bench.name) != chosen.end()) {
      selected.push_back(bench);
    }
  }
  if (selected.size() < chosen.size() || selected.empty()) {
    std::string names;
    for (const PlanBenchmark& bench : benchmarks()) names += " " + bench.name;
    std::fprintf(stderr, "strata_bench_plan: unknown benchmark name; the benchmarks are:%s\n",
                 names.c_str());
    return 2;
  }
  bool all_valid = true;
  try {
    for (size_t i = 0; i < selected.size(); ++i) {
      if (i > 0) std::fputs("\n", stdout);
      all_valid = run(selected[i]) && all_valid;
    }
  } catch (const strata::InputError& error) {
    std::fprintf(stderr, "strata_bench_plan: error: %s\n", error.what());
    return 2;
  }
  return all_valid ? 0 : 1;
}
