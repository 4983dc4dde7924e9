#include "plan/schedule.hpp"

namespace strata {

StageSchedule gpipe_schedule(int64_t micro_batches) {
  StageSchedule order;
  order.reserve(static_cast<size_t>(2 * micro_batches));
  for (int64_t m = 0; m < micro_batches; ++m) order.push_back({WorkKind::kForward, m, 0});
  for (int64_t m = 0; m < micro_batches; ++m) order.push_back({WorkKind::kBackward, m, 0});
  return order;
}

StageSchedule build_schedule(const ParallelPlan& plan, int64_t stage) {
  switch (plan.schedule) {
    case ScheduleKind::kGpipe:
      return gpipe_schedule(plan.micro_batches());
    case ScheduleKind::k1F1B:
      return one_f_one_b_schedule(stage, plan.pp, plan.micro_batches());
    case ScheduleKind::kInterleaved:
      return interleaved_schedule(stage, plan.pp, plan.micro_batches(), plan.vpp);
  }
  return {};
}

}  // namespace strata
