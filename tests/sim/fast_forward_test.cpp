// simulate() with and without the steady-state fast-forward (SimOptions::fast_forward, the CLI's
// --no-fast-forward; sim/engine_fast_forward.hpp). The fact checked: the copy is exact, so the
// two ways give the same step to the nanosecond and the byte: every task's start, transfer and
// finish, every rank's memory timeline, every metric and the trace; and on the plans whose
// schedule repeats, periods were copied (the comparison is not between two simulations).

#include <catch2/catch.hpp>

#include <fmt/format.h>

#include "plan/framework.hpp"
#include "sim/simulate.hpp"
#include "sim/trace.hpp"
#include "tests/sim/fast_forward_check.hpp"
#include "tests/sim/sim_fixtures.hpp"

namespace strata {
namespace {

using test::compile_checked;
using test::make_plan;
using test::small_model;

struct Case {
  ParallelPlan plan;
  GraphMode mode = GraphMode::kFolded;
  std::vector<SlowRank> slow;
};

// Plans with many micro-batches over schedules, ZeRO stages, recompute, sequence parallelism,
// overlap, offload and both graph modes, a rank that computes slower, and Horovod's background
// thread (its ticks come after the last micro-batch, outside the copied periods). The model is
// large enough for the GPUs to be slower than the host that issues their kernels: a host-bound
// stage's host runs ahead at its own pace, so the pipeline's state does not repeat and nothing is
// copied (exactly, again).
std::vector<Case> grid() {
  std::vector<Case> cases;
  const auto add = [&](const ParallelPlan& plan, GraphMode mode = GraphMode::kFolded,
                       std::vector<SlowRank> slow = {}) {
    cases.push_back({plan, mode, std::move(slow)});
  };
  add(make_plan(1, 2, 4, 1, 32, 1024));
  add(make_plan(2, 2, 4, 1, 64, 1024), GraphMode::kFull);
  {
    ParallelPlan p = make_plan(2, 4, 2, 1, 48, 1024);  // 16 GPUs: DP across nodes
    p.zero_stage = 1;
    p.sequence_parallel = true;
    p.recompute = RecomputeKind::kSelective;
    p.overlap.grad_reduce = true;
    p.overlap.tp_comm = true;
    add(p);
  }
  {
    ParallelPlan p = make_plan(1, 2, 4, 1, 48, 1024);
    p.schedule = ScheduleKind::kInterleaved;
    p.vpp = 2;
    add(p);
  }
  {
    ParallelPlan p = make_plan(2, 1, 4, 1, 64, 1024);
    p.zero_stage = 3;
    p.recompute = RecomputeKind::kFull;
    add(p);
  }
  {
    ParallelPlan p = make_plan(1, 8, 2, 1, 24, 1024);
    p.schedule = ScheduleKind::kGpipe;
    add(p);
  }
  {
    ParallelPlan p = apply_framework(make_plan(2, 2, 2, 1, 32, 1024), Framework::kDeepSpeed);
    p.zero_stage = 1;
    p.offload = {.optimizer = true};
    add(p);
  }
  {
    ParallelPlan p = make_plan(1, 2, 4, 1, 32, 1024);
    add(p, GraphMode::kFull, {{3, 1.3}});
  }
  {
    ParallelPlan p = apply_framework(make_plan(16, 1, 1, 1, 128, 1024), Framework::kHorovod);
    add(p);
  }
  return cases;
}

TEST_CASE("fast-forward gives the simulated step to the nanosecond over a grid of plans",
          "[sim][fast-forward]") {
  const ModelSpec model = small_model(8, 4096, 32, 32000, 1024);
  for (const Case& c : grid()) {
    const CompiledPlan compiled = compile_checked(model, c.plan, c.mode);
    SimOptions options;
    options.slow_ranks = c.slow;
    const SimResult copied = simulate(compiled, options);
    options.fast_forward = false;
    const SimResult simulated = simulate(compiled, options);
    INFO(fmt::format("dp {} tp {} pp {} vpp {} zero {} {} {} graph {}: {} of {} activities copied",
                     c.plan.dp, c.plan.tp, c.plan.pp, c.plan.vpp, c.plan.zero_stage,
                     to_string(c.plan.schedule), to_string(c.plan.recompute),
                     c.mode == GraphMode::kFull ? "full" : "folded", copied.engine.fast_forwarded,
                     copied.engine.activities));
    test::require_same_step(copied, simulated);
    CHECK(trace_json(compiled, copied) == trace_json(compiled, simulated));
    CHECK(copied.engine.fast_forwarded > 0);
  }
}

}  // namespace
}  // namespace strata
