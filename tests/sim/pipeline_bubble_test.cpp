// Pipeline bubbles against their closed forms (Narayanan et al. 2021, Sec. 2.2; also
// data/reference/stated_facts.csv): with uniform stages and free communication, the idle
// time of a stage over its ideal (pipeline) compute time is (p-1)/m for GPipe and 1F1B and
// (p-1)/(v*m) for interleaved 1F1B with v model chunks per stage.

#include <catch2/catch.hpp>

#include <fmt/format.h>

#include "sim/simulate.hpp"
#include "tests/sim/sim_fixtures.hpp"

namespace strata {
namespace {

using test::free_network_cluster;
using test::make_plan;
using test::no_launch_overhead;
using test::small_model;

// A stage's layers dominate its embedding, head and loss (vocabulary 32 against hidden 2048, 8
// layers per model chunk, the unfused attention's score passes making each layer long next to the
// last stage's final norm), so stages are uniform to well under 0.1%: the bubble's error is that
// imbalance times m / (p - 1).
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
  double worst = 0;
  for (const StageResult& stage : result.per_stage) {
    worst = std::max(worst, stage.bubble_fraction);
  }
  return worst;
}

TEST_CASE("GPipe and 1F1B bubble is (p-1)/m", "[sim][bubble]") {
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

TEST_CASE("interleaved 1F1B bubble is (p-1)/(v*m)", "[sim][bubble]") {
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
