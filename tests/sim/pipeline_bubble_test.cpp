// Pipeline bubbles against their closed forms (Narayanan et al. 2021, Sec. 2.2; also
// data/reference/stated_facts.csv): with uniform stages and free communication, the idle
// time of a stage over its ideal (pipeline) compute time is (p-1)/m for GPipe and 1F1B and
// (p-1)/(v*m) for interleaved 1F1B with v model chunks per stage. The simulator reports the
// bubble as a share of the step (StageResult::bubble_fraction); its seconds, that share times
// the step, are checked against the paper's ratio times the stage's compute time outside the
// optimizer step.

#include <catch2/catch.hpp>

#include <algorithm>

#include <fmt/format.h>

#include "sim/simulate.hpp"
#include "tests/sim/sim_fixtures.hpp"

namespace strata {
namespace {

using test::free_network_cluster;
using test::make_plan;
using test::no_launch_overhead;
using test::small_model;

// The largest stage's bubble over its pipeline compute time (its busy time without the
// optimizer step). A stage's layers dominate its embedding, head and loss (vocabulary 32 against
// hidden 2048, 8 layers per model chunk, the unfused attention's score passes making each layer
// long next to the last stage's final norm), so stages are uniform to well under 0.1%: the
// bubble's error is that imbalance times m / (p - 1).
double simulated_bubble(ScheduleKind schedule, int64_t p, int64_t m, int64_t v) {
  const ModelSpec model = small_model(8 * p * v, 2048, 16, 32, 2048);
  ParallelPlan plan = make_plan(1, 1, p, 1, m, 2048);
  plan.attention = AttentionKind::kUnfused;
  plan.schedule = schedule;
  plan.vpp = v;
  validate_plan(plan, model, std::nullopt, "test");
  const ClusterSpec cluster = free_network_cluster();
  const CompiledPlan compiled = compile_plan(model, cluster, plan, GraphMode::kFolded);
  SimOptions options;
  options.calibration = no_launch_overhead(cluster.device);
  const SimResult result = simulate(compiled, options);
  std::vector<double> optimizer_s(result.per_stage.size(), 0);
  for (TaskId id = 0; id < compiled.graph.size(); ++id) {
    const Task& t = compiled.graph.task(id);
    if (t.kind != TaskKind::kCompute || t.phase != Phase::kOptimizer) continue;
    const TaskTiming& timing = result.tasks[static_cast<size_t>(id)];
    optimizer_s[static_cast<size_t>(t.rank)] +=
        static_cast<double>(timing.finish_ns - timing.start_ns) / 1e9;  // folded: rank = stage
  }
  double worst = 0;
  for (const StageResult& stage : result.per_stage) {
    REQUIRE(stage.bubble_fraction <= 1.0);
    const double bubble_s = stage.bubble_fraction * result.step_time_s;
    const double pipeline_s = stage.busy_s - optimizer_s[static_cast<size_t>(stage.stage)];
    worst = std::max(worst, bubble_s / pipeline_s);
  }
  return worst;
}

TEST_CASE("GPipe and 1F1B bubble is (p-1)/m of the ideal time", "[sim][bubble]") {
  for (const ScheduleKind schedule : {ScheduleKind::kGpipe, ScheduleKind::k1F1B}) {
    for (const int64_t p : {2, 4, 8}) {
      for (const int64_t m : {p, 2 * p, 4 * p}) {
        const double expected = static_cast<double>(p - 1) / static_cast<double>(m);
        const double measured = simulated_bubble(schedule, p, m, 1);
        INFO(fmt::format("{} p={} m={}: bubble {:.5f}, (p-1)/m {:.5f}", to_string(schedule), p, m,
                         measured, expected));
        CHECK(measured == Approx(expected).epsilon(0.01));
      }
    }
  }
}

TEST_CASE("interleaved 1F1B bubble is (p-1)/(v*m) of the ideal time", "[sim][bubble]") {
  for (const int64_t p : {2, 4}) {
    for (const int64_t v : {2, 3}) {
      for (const int64_t m : {p, 2 * p}) {
        const double expected = static_cast<double>(p - 1) / static_cast<double>(v * m);
        const double measured = simulated_bubble(ScheduleKind::kInterleaved, p, m, v);
        INFO(fmt::format("interleaved p={} v={} m={}: bubble {:.5f}, (p-1)/(vm) {:.5f}", p, v, m,
                         measured, expected));
        CHECK(measured == Approx(expected).epsilon(0.01));
      }
    }
  }
}

}  // namespace
}  // namespace strata
