#include <algorithm>

#include "plan/schedule.hpp"

namespace strata {

// Worked example, p = 4, m = 6, stage 1: warm-up 2 forwards (F0 F1), steady 1F1B
// (F2 B0 F3 B1 F4 B2 F5 B3), drain (B4 B5).
StageSchedule one_f_one_b_schedule(int64_t stage, int64_t stages, int64_t micro_batches) {
  const int64_t warmup = std::min(stages - stage - 1, micro_batches);
  StageSchedule order;
  order.reserve(static_cast<size_t>(2 * micro_batches));
  for (int64_t m = 0; m < warmup; ++m) order.push_back({WorkKind::kForward, m, 0});
  const int64_t steady = micro_batches - warmup;
  for (int64_t i = 0; i < steady; ++i) {
    order.push_back({WorkKind::kForward, warmup + i, 0});
    order.push_back({WorkKind::kBackward, i, 0});
  }
  for (int64_t m = steady; m < micro_batches; ++m) order.push_back({WorkKind::kBackward, m, 0});
  return order;
}

}  // namespace strata
