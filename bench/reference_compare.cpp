// bench/reference_compare: the simulator against Korthikanti et al. 2022 on A100
// (data/reference/korthikanti2022.csv and korthikanti2022_layer_time.csv): iteration times of
// the four configurations in both recompute modes, the selective-over-full throughput gain, the
// per-layer forward and backward times of the 22B model, and the mean absolute error.

#include <chrono>
#include <cmath>
#include <cstdio>

#include <fmt/format.h>

#include "plan/compile.hpp"
#include "sim/simulate.hpp"
#include "tests/reference_csv.hpp"
#include "tests/sim/korthikanti_cases.hpp"

namespace strata {
namespace {

struct Simulated {
  CompiledPlan compiled;
  SimResult result;
};

Simulated run(const ModelSpec& model, const ParallelPlan& plan) {
  validate_plan(plan, model, std::nullopt, "reference_compare");
  CompiledPlan compiled = compile_plan(model, load_cluster("dgx-a100"), plan, GraphMode::kFolded);
  SimResult result = simulate(compiled);
  return {std::move(compiled), std::move(result)};
}

// Time from the first to the last task of one layer's passes on stage 0 (forward; backward with
// its recomputation), micro-batch 0.
std::pair<double, double> layer_times_ms(const Simulated& sim, int32_t layer) {
  TimeNs fwd_begin = INT64_MAX, fwd_end = 0, bwd_begin = INT64_MAX, bwd_end = 0;
  const TaskGraph& graph = sim.compiled.graph;
  for (TaskId id = 0; id < graph.size(); ++id) {
    const Task& task = graph.task(id);
    if (task.layer != layer || task.micro_batch != 0 || task.kind == TaskKind::kMemory) continue;
    const TaskTiming& t = sim.result.tasks[static_cast<size_t>(id)];
    if (task.phase == Phase::kForward) {
      fwd_begin = std::min(fwd_begin, t.start_ns);
      fwd_end = std::max(fwd_end, t.finish_ns);
    } else {
      bwd_begin = std::min(bwd_begin, t.start_ns);
      bwd_end = std::max(bwd_end, t.finish_ns);
    }
  }
  return {static_cast<double>(fwd_end - fwd_begin) / 1e6,
          static_cast<double>(bwd_end - bwd_begin) / 1e6};
}

void compare_iterations() {
  std::puts("Iteration time, Korthikanti et al. 2022 Table 5 (A100, DGX A100 nodes):");
  std::puts(fmt::format("{:<16} {:>10} {:>10} {:>7} {:>10} {:>10} {:>7} {:>8} {:>8}", "model",
                        "full (s)", "measured", "err", "sel+SP", "measured", "err", "gain%",
                        "meas%")
                .c_str());
  double error_sum = 0;
  int count = 0;
  for (const test::KorthikantiCase& c : test::korthikanti_cases()) {
    const double full = run(c.model, c.full_recompute).result.step_time_s;
    const double selective = run(c.model, c.selective).result.step_time_s;
    const double full_error = full / c.measured_full_s - 1;
    const double selective_error = selective / c.measured_selective_s - 1;
    error_sum += std::abs(full_error) + std::abs(selective_error);
    count += 2;
    std::puts(fmt::format("{:<16} {:>10.2f} {:>10.2f} {:>+6.1f}% {:>10.2f} {:>10.2f} {:>+6.1f}% "
                          "{:>8.1f} {:>8.1f}",
                          c.name, full, c.measured_full_s, full_error * 100, selective,
                          c.measured_selective_s, selective_error * 100,
                          (full / selective - 1) * 100, c.measured_increase_pct)
                  .c_str());
  }
  std::puts(fmt::format("mean absolute error: {:.1f}% over {} iteration times (target: each "
                        "within 10%, gain within 5 points)",
                        error_sum / count * 100, count)
                .c_str());
}

void compare_layers() {
  std::puts("\nTime per transformer layer, 22B (Table 4: h 6144, 64 heads, s 2048, b 4, t 8):");
  std::puts(fmt::format("{:<44} {:>8} {:>8} {:>8} {:>8}", "experiment", "fwd ms", "measured",
                        "bwd ms", "measured")
                .c_str());
  const auto cases = test::korthikanti_cases();
  const test::KorthikantiCase& c22 = cases.front();
  for (const test::CsvRow& row : test::read_reference_csv("korthikanti2022_layer_time.csv")) {
    const std::string& experiment = row.at("experiment");
    ParallelPlan plan = c22.full_recompute;
    plan.recompute = RecomputeKind::kNone;
    if (experiment.find("full recompute") != std::string::npos)
      plan.recompute = RecomputeKind::kFull;
    if (experiment.find("selective") != std::string::npos) {
      plan.recompute = RecomputeKind::kSelective;
    }
    plan.sequence_parallel = experiment.find("sequence parallelism") != std::string::npos;
    const auto [fwd, bwd] = layer_times_ms(run(c22.model, plan), 24);
    std::puts(fmt::format("{:<44} {:>8.2f} {:>8} {:>8.2f} {:>8}", experiment, fwd,
                          row.at("forward_ms"), bwd, row.at("backward_ms"))
                  .c_str());
  }
}

}  // namespace
}  // namespace strata

int main() {
  const auto begin = std::chrono::steady_clock::now();
  strata::compare_iterations();
  strata::compare_layers();
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  std::printf("\n(%.1f s of wall time)\n", wall_s);
  return 0;
}
