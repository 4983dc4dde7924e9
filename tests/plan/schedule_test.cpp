// Pipeline schedules: each runs every (micro-batch, chunk) forward and backward exactly once,
// a backward after its forward, with the warm-up and in-flight counts their papers state.

#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

#include "plan/schedule.hpp"

namespace strata {
namespace {

// Largest number of (micro-batch, chunk) forwards whose backward has not run yet.
int64_t max_in_flight(const StageSchedule& order) {
  int64_t in_flight = 0;
  int64_t peak = 0;
  for (const PipelineWork& w : order) {
    in_flight += w.kind == WorkKind::kForward ? 1 : -1;
    peak = std::max(peak, in_flight);
  }
  return peak;
}

void check_complete(const StageSchedule& order, int64_t micro_batches, int64_t chunks) {
  std::set<std::pair<int64_t, int64_t>> forwards;
  std::set<std::pair<int64_t, int64_t>> backwards;
  for (const PipelineWork& w : order) {
    const auto key = std::make_pair(w.micro_batch, w.chunk);
    if (w.kind == WorkKind::kForward) {
      CHECK(forwards.insert(key).second);
    } else {
      CHECK(forwards.count(key) == 1);  // backward after its forward
      CHECK(backwards.insert(key).second);
    }
  }
  CHECK(forwards.size() == static_cast<size_t>(micro_batches * chunks));
  CHECK(backwards.size() == forwards.size());
}

// Narayanan et al. 2021 Sec. 2.2.1: stage s of p warms up with p - s - 1 forwards and holds at
// most p - s micro-batches (GPipe: all m).
TEST_CASE("1F1B warm-up is p - s - 1 forwards and in-flight micro-batches are p - s",
          "[schedule]") {
  for (const int64_t p : {1, 2, 4, 8}) {
    for (const int64_t m : {1, 3, 8, 16}) {
      for (int64_t s = 0; s < p; ++s) {
        INFO("p " << p << " m " << m << " s " << s);
        const StageSchedule order = one_f_one_b_schedule(s, p, m);
        check_complete(order, m, 1);
        const int64_t warmup = std::min(p - s - 1, m);
        for (int64_t i = 0; i < warmup; ++i)
          CHECK(order[static_cast<size_t>(i)].kind == WorkKind::kForward);
        CHECK(max_in_flight(order) == std::min(p - s, m));
      }
    }
  }
}

TEST_CASE("the 1F1B worked example of schedule.hpp", "[schedule]") {
  const auto F = WorkKind::kForward;
  const auto B = WorkKind::kBackward;
  const StageSchedule expected = {{F, 0, 0}, {F, 1, 0}, {F, 2, 0}, {B, 0, 0}, {F, 3, 0}, {B, 1, 0},
                                  {F, 4, 0}, {B, 2, 0}, {F, 5, 0}, {B, 3, 0}, {B, 4, 0}, {B, 5, 0}};
  CHECK(one_f_one_b_schedule(1, 4, 6) == expected);
}

TEST_CASE("GPipe runs every forward before any backward", "[schedule]") {
  const StageSchedule order = gpipe_schedule(6);
  check_complete(order, 6, 1);
  CHECK(max_in_flight(order) == 6);
}

// Megatron-LM's interleaved schedule: stage s warms up with (p - s - 1) * 2 + (v - 1) * p
// virtual micro-batches, and forward chunk order cycles through chunks every p micro-batches.
TEST_CASE("interleaved 1F1B follows Megatron-LM's order", "[schedule]") {
  for (const int64_t p : {2, 4}) {
    for (const int64_t v : {2, 3}) {
      for (const int64_t m : {2 * p, 4 * p}) {
        for (int64_t s = 0; s < p; ++s) {
          INFO("p " << p << " v " << v << " m " << m << " s " << s);
          const StageSchedule order = interleaved_schedule(s, p, m, v);
          check_complete(order, m, v);
          const int64_t warmup = std::min((p - s - 1) * 2 + (v - 1) * p, m * v);
          CHECK(max_in_flight(order) == std::min(warmup + 1, m * v));
          // The first p forwards run chunk 0 on micro-batches 0..p-1, then chunk 1.
          CHECK(order[0] == PipelineWork{WorkKind::kForward, 0, 0});
          if (warmup > p)
            CHECK(order[static_cast<size_t>(p)] == PipelineWork{WorkKind::kForward, 0, 1});
          // The first backward is chunk v - 1 of micro-batch 0.
          const auto first_backward =
              std::find_if(order.begin(), order.end(),
                           [](const PipelineWork& w) { return w.kind == WorkKind::kBackward; });
          CHECK(*first_backward == PipelineWork{WorkKind::kBackward, 0, v - 1});
        }
      }
    }
  }
}

TEST_CASE("interleaved with m == p runs all forwards first, as Megatron-LM does", "[schedule]") {
  const StageSchedule order = interleaved_schedule(0, 4, 4, 2);
  check_complete(order, 4, 2);
  CHECK(max_in_flight(order) == 8);
}

}  // namespace
}  // namespace strata
