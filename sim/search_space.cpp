#include "sim/search_space.hpp"

#include <algorithm>
#include <map>
#include <utility>

#include "common/error.hpp"

namespace strata {

namespace {

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> found;
  for (int64_t d = 1; d <= n; ++d) {
    if (n % d == 0) found.push_back(d);
  }
  return found;
}

struct ScheduleChoice {
  ScheduleKind schedule = ScheduleKind::k1F1B;
  int64_t vpp = 1;
};

std::vector<ScheduleChoice> schedules(int64_t pp, int64_t layers) {
  if (pp == 1) return {{ScheduleKind::k1F1B, 1}};
  std::vector<ScheduleChoice> choices{{ScheduleKind::k1F1B, 1}};
  if (layers % pp == 0) {
    for (const int64_t vpp : divisors(layers / pp)) {
      if (vpp >= 2) choices.push_back({ScheduleKind::kInterleaved, vpp});
    }
  }
  choices.push_back({ScheduleKind::kGpipe, 1});
  return choices;
}

}  // namespace

Enumeration enumerate_plans(const SearchSpace& space) {
  const ModelSpec& model = space.model;
  Enumeration out;
  std::map<std::string, RefusalCount> refusals;
  const auto consider = [&](const ParallelPlan& plan) {
    ++out.enumerated;
    try {
      validate_plan(plan, model, plan.gpus(), "search");
      out.plans.push_back(plan);
    } catch (const InputError& refused) {
      RefusalCount& count = refusals[refused.field()];
      if (count.plans++ == 0) {
        count.field = refused.field();
        count.example = refused.problem();
      }
    }
  };

  for (const int64_t gpus : space.gpus) {
    const int64_t tp_limit = space.allow_cross_node_tp ? gpus : space.cluster.gpus_per_node;
    for (const int64_t tp : divisors(gpus)) {
      if (tp > tp_limit) continue;
      for (const int64_t pp : divisors(model.layers)) {
        if (gpus % (tp * pp) != 0) continue;
        const int64_t dp = gpus / (tp * pp);
        // A global batch that dp does not divide is tried (and refused) once.
        const std::vector<int64_t> micro_batches = space.global_batch % dp == 0
                                                       ? divisors(space.global_batch / dp)
                                                       : std::vector<int64_t>{1};
        for (const ScheduleChoice& choice : schedules(pp, model.layers)) {
          for (const int64_t micro_batch : micro_batches) {
            for (int64_t zero = 0; zero <= (dp > 1 ? 3 : 0); ++zero) {
              for (const RecomputeKind recompute :
                   {RecomputeKind::kNone, RecomputeKind::kSelective, RecomputeKind::kFull}) {
                for (const bool sequence_parallel : {false, true}) {
                  if (sequence_parallel && tp == 1) continue;
                  ParallelPlan plan;
                  plan.dp = dp;
                  plan.tp = tp;
                  plan.pp = pp;
                  plan.vpp = choice.vpp;
                  plan.schedule = choice.schedule;
                  plan.zero_stage = zero;
                  plan.micro_batch = micro_batch;
                  plan.global_batch = space.global_batch;
                  plan.seq_len = space.seq_len;
                  plan.recompute = recompute;
                  plan.sequence_parallel = sequence_parallel;
                  plan.dtype = space.dtype;
                  consider(plan);
                }
              }
            }
          }
        }
      }
    }
  }
  for (auto& [field, count] : refusals) out.refusals.push_back(std::move(count));
  std::stable_sort(out.refusals.begin(), out.refusals.end(),
                   [](const RefusalCount& a, const RefusalCount& b) { return a.plans > b.plans; });
  return out;
}

}  // namespace strata
