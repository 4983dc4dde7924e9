// The engine's steady-state fast-forward (sim/engine_fast_forward.hpp) on pipelines built from
// activities directly. The fact checked: a run with the period map gives every activity the start
// and finish of the run without it, to the nanosecond, and the same event and solve counts; and
// it does copy periods where the schedule repeats (the copy is not vacuous) and none where a
// period's tasks differ from the next's.

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <vector>

#include "sim/engine.hpp"

namespace strata {
namespace {

// A forward pipeline of `stages` stages over `micro_batches` micro-batches, built twice (with and
// without the period map) from the same description. Micro-batch m on stage s is a compute on
// the stage's processor (after m - 1's there, and after m's transfer from stage s - 1), then a
// transfer to stage s + 1: two flows of different sizes that share the stage's link max-min (the
// survivor speeds up when the other ends) and slow the computes of the processors they touch. The
// first stage is the slowest, so no backlog grows before a later one and the pipeline settles into
// a period of one micro-batch. Every stage-0 compute waits for a step-start delay, and an optimizer
// step waits for every last-stage compute: tasks once per step, which never repeat.
struct Pipeline {
  int stages = 4;
  int micro_batches = 40;
  std::vector<TimeNs> stage_ns{5000, 3000, 4000, 4500};
  double bytes = 10000;
  // A micro-batch whose computes take `straggle` times longer (-1: none).
  int straggler = -1;
  double straggle = 1.0;
  // Micro-batches of odd index compute this much longer: the schedule repeats every two.
  TimeNs odd_extra_ns = 0;
  // A wrong period map, to check that the engine trusts none: every activity's counterpart this
  // many activities past the right one; or, with a seed, a random activity of the graph.
  int32_t misalign = 0;
  uint64_t random_seed = 0;
};

struct Run {
  std::vector<TimeNs> start, finish;
  EngineStats stats;
};

Run run(const Pipeline& p, bool fast_forward, int32_t max_periods = 4) {
  Engine engine;
  std::vector<ProcessorId> processors;
  for (int s = 0; s < p.stages; ++s) processors.push_back(engine.add_processor(0.8));
  std::vector<PathId> paths;
  for (int s = 0; s + 1 < p.stages; ++s) {
    const std::array<PathHop, 1> hops{PathHop{engine.add_link(12e9), 1.0f}};
    paths.push_back(engine.add_path(hops));
  }
  const ActivityId step_start = engine.add({.kind = ActivityKind::kDelay, .duration_ns = 100});
  PeriodMap map;
  std::vector<ActivityId> last_compute(static_cast<size_t>(p.stages), kNoActivity);
  std::vector<ActivityId> last_stage_computes;
  std::vector<ActivityId> first_of_micro_batch;
  for (int m = 0; m < p.micro_batches; ++m) {
    first_of_micro_batch.push_back(static_cast<ActivityId>(engine.size()));
    ActivityId arriving = step_start;
    for (int s = 0; s < p.stages; ++s) {
      TimeNs duration = p.stage_ns[static_cast<size_t>(s)] + (m % 2 == 1 ? p.odd_extra_ns : 0);
      if (m == p.straggler)
        duration = static_cast<TimeNs>(static_cast<double>(duration) * p.straggle);
      std::vector<ActivityId> deps{arriving};
      if (last_compute[static_cast<size_t>(s)] != kNoActivity) {
        deps.push_back(last_compute[static_cast<size_t>(s)]);
      }
      const ActivityId compute = engine.add({.kind = ActivityKind::kCompute,
                                             .duration_ns = duration,
                                             .processor = processors[static_cast<size_t>(s)]},
                                            deps);
      last_compute[static_cast<size_t>(s)] = compute;
      if (s == 0) map.anchors.push_back(compute);
      if (s + 1 == p.stages) {
        last_stage_computes.push_back(compute);
        continue;
      }
      const std::array<ActivityId, 1> after{compute};
      std::array<ActivityId, 2> flows{};
      for (const double share : {1.0, 0.6}) {
        flows[share == 1.0 ? 0 : 1] =
            engine.add({.kind = ActivityKind::kFlow,
                        .bytes = p.bytes * share,
                        .path = paths[static_cast<size_t>(s)],
                        .touches = {processors[static_cast<size_t>(s)],
                                    processors[static_cast<size_t>(s) + 1]}},
                       after);
      }
      arriving = engine.add({.kind = ActivityKind::kDelay}, flows);
    }
  }
  engine.add({.kind = ActivityKind::kDelay, .duration_ns = 700}, last_stage_computes);
  // Micro-batch m's activities play m + 1's: the same place in the next block.
  map.next.assign(static_cast<size_t>(engine.size()), kNoActivity);
  for (int m = 0; m + 1 < p.micro_batches; ++m) {
    const ActivityId block = first_of_micro_batch[static_cast<size_t>(m) + 1] -
                             first_of_micro_batch[static_cast<size_t>(m)];
    for (ActivityId a = first_of_micro_batch[static_cast<size_t>(m)];
         a < first_of_micro_batch[static_cast<size_t>(m) + 1]; ++a) {
      map.next[static_cast<size_t>(a)] =
          std::min<ActivityId>(a + block + p.misalign, static_cast<ActivityId>(engine.size()) - 1);
    }
  }
  if (p.random_seed != 0) {
    uint64_t state = p.random_seed;
    for (ActivityId& next : map.next) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      next = static_cast<ActivityId>((state >> 33) % static_cast<uint64_t>(engine.size()));
    }
  }
  map.max_periods = max_periods;
  if (fast_forward) engine.set_period_map(map);
  REQUIRE(engine.run());
  Run r;
  for (ActivityId a = 0; a < engine.size(); ++a) {
    r.start.push_back(engine.start_ns(a));
    r.finish.push_back(engine.finish_ns(a));
  }
  r.stats = engine.stats();
  return r;
}

void require_same(const Run& copied, const Run& simulated) {
  REQUIRE(copied.start == simulated.start);
  REQUIRE(copied.finish == simulated.finish);
  CHECK(copied.stats.events == simulated.stats.events);
  CHECK(copied.stats.rate_updates == simulated.stats.rate_updates);
  CHECK(copied.stats.activities == simulated.stats.activities);
  CHECK(simulated.stats.fast_forwarded == 0);
}

TEST_CASE("fast-forward copies a repeating pipeline's periods to the nanosecond",
          "[engine][fast-forward]") {
  const Pipeline p;
  const Run copied = run(p, true);
  const Run simulated = run(p, false);
  require_same(copied, simulated);
  // 40 micro-batches of 13 activities; the pipeline fills in 3 and drains in 3, and a repeat is
  // seen after two periods: most of the middle is copied.
  CHECK(copied.stats.fast_forwarded >= 20 * 13);
  // The flows share their links: rates were solved.
  CHECK(simulated.stats.rate_updates > 0);
}

TEST_CASE("a straggling micro-batch is simulated, the periods around it copied",
          "[engine][fast-forward]") {
  Pipeline p;
  p.micro_batches = 80;
  p.straggler = 41;
  p.straggle = 1.7;
  const Run copied = run(p, true);
  require_same(copied, run(p, false));
  CHECK(copied.stats.fast_forwarded > 0);
}

TEST_CASE("a schedule that repeats every two micro-batches is copied two at a time, never one",
          "[engine][fast-forward]") {
  Pipeline p;
  p.odd_extra_ns = 700;
  const Run simulated = run(p, false);
  const Run one = run(p, true, 1);
  require_same(one, simulated);
  CHECK(one.stats.fast_forwarded == 0);
  const Run two = run(p, true, 2);
  require_same(two, simulated);
  CHECK(two.stats.fast_forwarded > 0);
}

TEST_CASE("a wrong period map changes nothing: the engine checks what it copies",
          "[engine][fast-forward]") {
  Pipeline p;
  const Run simulated = run(p, false);
  for (const int32_t misalign : {1, -1, 2, 7}) {
    p.misalign = misalign;
    INFO("counterparts " << misalign << " activities past the right ones");
    require_same(run(p, true), simulated);
  }
  p.misalign = 0;
  for (const uint64_t seed : {1, 2, 3}) {
    p.random_seed = seed;
    INFO("random counterparts, seed " << seed);
    require_same(run(p, true), simulated);
  }
}

}  // namespace
}  // namespace strata
