#pragma once
// Two simulated steps that must be the same to the nanosecond and the byte: a step simulated with
// the steady-state fast-forward and without it (tests/sim/fast_forward_test.cpp and the shipped
// scenarios' test in tests/cli).

#include <catch2/catch.hpp>

#include "sim/result.hpp"

namespace strata::test {

inline void require_same_comm(const CommSeconds& a, const CommSeconds& b) {
  CHECK(a.tp == b.tp);
  CHECK(a.cp == b.cp);
  CHECK(a.ep == b.ep);
  CHECK(a.dp == b.dp);
  CHECK(a.pp == b.pp);
}

// Every figure of the step, every stage's, every task's times and every rank's memory timeline;
// the engine's event and solve counts too (the fast-forward counts the events it copies).
inline void require_same_step(const SimResult& a, const SimResult& b) {
  CHECK(a.step_time_s == b.step_time_s);
  CHECK(a.tokens_per_s == b.tokens_per_s);
  CHECK(a.mfu == b.mfu);
  CHECK(a.hfu == b.hfu);
  CHECK(a.bubble_fraction == b.bubble_fraction);
  require_same_comm(a.exposed_comm_s, b.exposed_comm_s);
  require_same_comm(a.comm_s, b.comm_s);
  CHECK(a.peak_memory_bytes == b.peak_memory_bytes);
  CHECK(a.fits_in_memory == b.fits_in_memory);
  CHECK(a.cost_usd_per_step == b.cost_usd_per_step);
  CHECK(a.energy_joules_per_step == b.energy_joules_per_step);
  REQUIRE(a.per_stage.size() == b.per_stage.size());
  for (size_t s = 0; s < a.per_stage.size(); ++s) {
    const StageResult& x = a.per_stage[s];
    const StageResult& y = b.per_stage[s];
    CHECK(x.busy_s == y.busy_s);
    CHECK(x.idle_s == y.idle_s);
    CHECK(x.bubble_fraction == y.bubble_fraction);
    require_same_comm(x.exposed_comm_s, y.exposed_comm_s);
    require_same_comm(x.comm_s, y.comm_s);
    CHECK(x.peak_memory_bytes == y.peak_memory_bytes);
    CHECK(x.memory.total() == y.memory.total());
  }
  REQUIRE(a.tasks.size() == b.tasks.size());
  size_t differing = 0;
  for (size_t t = 0; t < a.tasks.size(); ++t) {
    const TaskTiming& x = a.tasks[t];
    const TaskTiming& y = b.tasks[t];
    if (x.start_ns != y.start_ns || x.transfer_ns != y.transfer_ns || x.finish_ns != y.finish_ns) {
      ++differing;
    }
  }
  CHECK(differing == 0);
  REQUIRE(a.memory_timeline.size() == b.memory_timeline.size());
  for (size_t r = 0; r < a.memory_timeline.size(); ++r) {
    const auto& x = a.memory_timeline[r];
    const auto& y = b.memory_timeline[r];
    REQUIRE(x.size() == y.size());
    size_t samples_differing = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      if (x[i].time_ns != y[i].time_ns || x[i].bytes != y[i].bytes) ++samples_differing;
    }
    CHECK(samples_differing == 0);
  }
  CHECK(a.engine.activities == b.engine.activities);
  CHECK(a.engine.events == b.engine.events);
  CHECK(a.engine.rate_updates == b.engine.rate_updates);
}

}  // namespace strata::test
