// simulate() on whole plans: what the simulated timeline must agree with.

#include <catch2/catch.hpp>

#include <cmath>

#include <fmt/format.h>

#include "common/error.hpp"
#include "plan/framework.hpp"
#include "sim/simulate.hpp"
#include "tests/sim/sim_fixtures.hpp"

namespace strata {
namespace {

using test::compile_checked;
using test::make_plan;
using test::small_model;

// Plans small enough to compile and simulate in full, over schedules, ZeRO stages, recompute
// modes, sequence parallelism and layouts that cross nodes (dgx nodes hold 8 GPUs).
std::vector<ParallelPlan> small_plans() {
  std::vector<ParallelPlan> plans;
  auto add = [&](ParallelPlan plan) { plans.push_back(plan); };
  add(make_plan(2, 2, 2, 1, 8, 256));
  {
    ParallelPlan p = make_plan(4, 2, 2, 2, 32, 256);  // 16 GPUs: DP across nodes
    p.zero_stage = 1;
    add(p);
  }
  {
    ParallelPlan p = make_plan(2, 4, 2, 1, 8, 256);
    p.sequence_parallel = true;
    p.recompute = RecomputeKind::kSelective;
    p.zero_stage = 2;
    add(p);
  }
  {
    ParallelPlan p = make_plan(4, 1, 4, 1, 16, 256);  // 16 GPUs, ZeRO-3 gathers across nodes
    p.zero_stage = 3;
    p.recompute = RecomputeKind::kFull;
    add(p);
  }
  {
    ParallelPlan p = make_plan(2, 2, 2, 1, 16, 256);
    p.schedule = ScheduleKind::kInterleaved;
    p.vpp = 2;
    add(p);
  }
  {
    ParallelPlan p = make_plan(2, 8, 2, 1, 8, 256);  // 32 GPUs: TP fills a node
    p.schedule = ScheduleKind::kGpipe;
    add(p);
  }
  {
    // DeepSpeed ZeRO-3 with optimizer and parameters offloaded (host copies, a host step) and a
    // two-layer prefetch window, torchtitan's op-level recompute.
    ParallelPlan p = apply_framework(make_plan(4, 2, 1, 1, 8, 256), Framework::kDeepSpeed);
    p.zero_stage = 3;
    p.offload = {.optimizer = true, .params = true};
    p.prefetch_layers = 2;
    p.recompute = RecomputeKind::kSelectiveOp;
    add(p);
  }
  {
    // Horovod over two nodes: reductions launch at the background thread's wakes.
    ParallelPlan p = apply_framework(make_plan(16, 1, 1, 1, 16, 256), Framework::kHorovod);
    add(p);
  }
  {
    // Other rank orders (plan/rank_layout.hpp): DP innermost, so the TP groups cross the nodes;
    // and Megatron-LM's --use-tp-pp-dp-mapping, the pipeline inside DP.
    ParallelPlan p = make_plan(4, 4, 2, 1, 16, 256);
    p.rank_order = parse_rank_order("dp-tp-pp", "test", "rank_order");
    add(p);
    p.rank_order = parse_rank_order("tp-cp-ep-pp-dp", "test", "rank_order");
    p.zero_stage = 1;
    add(p);
  }
  return plans;
}

std::string describe(const ParallelPlan& p) {
  return fmt::format("dp {} tp {} pp {} vpp {} zero {} {} {} sp {} order {}", p.dp, p.tp, p.pp,
                     p.vpp, p.zero_stage, to_string(p.schedule), to_string(p.recompute),
                     p.sequence_parallel, p.axes().order_text());
}

const ModelSpec& model() {
  static const ModelSpec m = small_model(8, 512, 8, 1024, 256);
  return m;
}

// Symmetry folding: one rank per stage, with each collective's flows weighted by its symmetric
// copies, predicts the same step as simulating every rank (docs/design.md, "Scale").
TEST_CASE("folded and full graphs agree within 1% on step time", "[sim][folding]") {
  for (const std::string cluster : {"dgx-a100", "dgx-h100"}) {
    for (const ParallelPlan& plan : small_plans()) {
      const double folded =
          simulate(compile_checked(model(), plan, GraphMode::kFolded, cluster)).step_time_s;
      const double full =
          simulate(compile_checked(model(), plan, GraphMode::kFull, cluster)).step_time_s;
      INFO(fmt::format("{} on {}: folded {:.6f} s, full {:.6f} s", describe(plan), cluster, folded,
                       full));
      CHECK(std::abs(folded / full - 1) <= 0.01);
    }
  }
}

// The memory timeline replays the same memory tasks as the memory plan, in time order instead of
// program order. The two orders differ only for a pipeline send's buffer, which the plan releases
// when the send is issued and the simulation when the receiver has taken it; so the simulated
// peak per stage is the plan's, plus at most the pipeline messages still in flight (one forward
// and one backward per model chunk), and exactly the plan's without pipeline parallelism.
TEST_CASE("the simulated memory peak is the memory plan's", "[sim][memory]") {
  std::vector<ParallelPlan> plans = small_plans();
  {
    ParallelPlan p = make_plan(8, 1, 1, 1, 16, 256);  // ZeRO-3 gathers, no pipeline
    p.zero_stage = 3;
    plans.push_back(p);
  }
  {
    ParallelPlan p = make_plan(2, 4, 1, 2, 8, 256);
    p.sequence_parallel = true;
    p.recompute = RecomputeKind::kSelective;
    plans.push_back(p);
  }
  for (const ParallelPlan& plan : plans) {
    const int64_t message_bytes = plan.seq_len * plan.micro_batch * model().hidden * 2 /
                                  (plan.sequence_parallel ? plan.tp : 1);
    const int64_t in_flight = plan.pp == 1 ? 0 : 2 * plan.vpp * message_bytes;
    for (const GraphMode mode : {GraphMode::kFolded, GraphMode::kFull}) {
      const CompiledPlan compiled = compile_checked(model(), plan, mode);
      const SimResult result = simulate(compiled);
      INFO(describe(plan) << " " << to_string(mode));
      REQUIRE(result.per_stage.size() == compiled.memory.stages.size());
      for (size_t s = 0; s < result.per_stage.size(); ++s) {
        const int64_t simulated = result.per_stage[s].peak_memory_bytes;
        const int64_t planned = compiled.memory.stages[s].peak_bytes;
        INFO("stage " << s << ": simulated " << simulated << ", planned " << planned);
        CHECK(simulated >= planned);
        CHECK(simulated <= planned + in_flight);
        CHECK(result.per_stage[s].memory.total() == simulated);
      }
    }
  }
}

// Same inputs, same outputs: every task's timing and every metric are identical across runs.
TEST_CASE("simulation is deterministic", "[sim][determinism]") {
  const CompiledPlan compiled = compile_checked(model(), small_plans()[1], GraphMode::kFull);
  const SimResult a = simulate(compiled);
  const SimResult b = simulate(compiled);
  REQUIRE(a.tasks.size() == b.tasks.size());
  for (size_t i = 0; i < a.tasks.size(); ++i) {
    CHECK(a.tasks[i].start_ns == b.tasks[i].start_ns);
    CHECK(a.tasks[i].transfer_ns == b.tasks[i].transfer_ns);
    CHECK(a.tasks[i].finish_ns == b.tasks[i].finish_ns);
  }
  CHECK(a.step_time_s == b.step_time_s);
  CHECK(a.exposed_comm_s.dp == b.exposed_comm_s.dp);
}

// A straggler sets the pace of data parallelism: one rank of a DP group slowed by f gives nearly
// the step of every rank slowed by f (all wait for it at the gradient reduction), and a slower
// step than none slowed.
TEST_CASE("a slow rank slows the whole step to its pace", "[sim][straggler]") {
  ParallelPlan plan = make_plan(4, 1, 1, 4, 32, 256);
  const CompiledPlan compiled = compile_checked(model(), plan, GraphMode::kFull);
  const double base = simulate(compiled).step_time_s;
  SimOptions one;
  one.slow_ranks = {{2, 1.5}};
  const double one_slow = simulate(compiled, one).step_time_s;
  SimOptions all;
  for (int64_t r = 0; r < 4; ++r) all.slow_ranks.push_back({r, 1.5});
  const double all_slow = simulate(compiled, all).step_time_s;
  INFO(fmt::format("none {:.6f} s, rank 2 x1.5 {:.6f} s, all x1.5 {:.6f} s", base, one_slow,
                   all_slow));
  CHECK(one_slow > base * 1.3);
  CHECK(std::abs(one_slow / all_slow - 1) <= 0.02);
}

// Mixed device types: on a DP-only plan whose step is compute-bound, replacing half the H100s of
// a dgx-h100 cluster by A100s gives the step of all ranks on A100s (the slow half sets the pace).
TEST_CASE("mixed devices: the slower devices set the pace", "[sim][mixed]") {
  ParallelPlan plan = make_plan(4, 1, 1, 4, 32, 256);
  const CompiledPlan compiled = compile_checked(model(), plan, GraphMode::kFull, "dgx-h100");
  const DeviceSpec a100 = load_device("a100-80gb");
  SimOptions half;
  half.rank_devices = {{0, 1, a100}};
  SimOptions every;
  every.rank_devices = {{0, 3, a100}};
  const double h100 = simulate(compiled).step_time_s;
  const double mixed = simulate(compiled, half).step_time_s;
  const double a100_only = simulate(compiled, every).step_time_s;
  INFO(fmt::format("H100 {:.6f} s, half A100 {:.6f} s, all A100 {:.6f} s", h100, mixed, a100_only));
  CHECK(mixed > h100 * 1.2);
  CHECK(std::abs(mixed / a100_only - 1) <= 0.02);
}

// Options that need every rank simulated are refused on a folded graph.
TEST_CASE("stragglers and mixed devices need a full graph", "[sim][errors]") {
  const CompiledPlan folded = compile_checked(model(), small_plans()[0], GraphMode::kFolded);
  SimOptions slow;
  slow.slow_ranks = {{0, 2.0}};
  CHECK_THROWS_AS(simulate(folded, slow), InputError);
  const CompiledPlan full = compile_checked(model(), small_plans()[0], GraphMode::kFull);
  SimOptions outside;
  outside.slow_ranks = {{8, 2.0}};
  CHECK_THROWS_AS(simulate(full, outside), InputError);
}

}  // namespace
}  // namespace strata
