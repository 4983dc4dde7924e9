#include "sim/search.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <tuple>

#include "common/error.hpp"
#include "common/parallel_for.hpp"
#include "common/units.hpp"
#include "plan/compile.hpp"
#include "plan/memory_plan.hpp"
#include "sim/step_bound.hpp"

namespace strata {

namespace {

// Plans per batch: enough to keep a few cores busy, few enough that little is simulated past the
// point where the bound would have skipped it. Fixed, so that the plans simulated do not depend
// on the number of threads or MPI ranks.
constexpr size_t kBatchPlans = 16;

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// Dollars per million tokens for a step of `step_s` on `gpus` GPUs (SimResult's formula).
double cost_per_million_tokens(double step_s, int64_t gpus, double price, double tokens) {
  return step_s / kSecondsPerHour * static_cast<double>(gpus) * price / tokens * 1e6;
}

struct Candidate {
  PlanOutcome outcome;
  double objective_bound = 0;  // the objective at the bound's step time: the sort key
};

// p is dominated by q: q is no slower, no dearer and (comparing sizes) uses no more GPUs, and is
// better in one of them.
bool dominates(const PlanOutcome& q, const PlanOutcome& p, bool compare_gpus) {
  const PlanFigures& a = q.figures;
  const PlanFigures& b = p.figures;
  const int64_t qg = compare_gpus ? q.plan.gpus() : 0;
  const int64_t pg = compare_gpus ? p.plan.gpus() : 0;
  const bool no_worse =
      a.step_time_s <= b.step_time_s && a.cost_usd_per_step <= b.cost_usd_per_step && qg <= pg;
  const bool better =
      a.step_time_s < b.step_time_s || a.cost_usd_per_step < b.cost_usd_per_step || qg < pg;
  return no_worse && better;
}

std::vector<size_t> pareto_front(const std::vector<PlanOutcome>& ranked, bool compare_gpus) {
  std::vector<size_t> front;
  for (size_t p = 0; p < ranked.size(); ++p) {
    bool dominated = false;
    for (size_t q = 0; q < ranked.size() && !dominated; ++q)
      dominated = q != p && dominates(ranked[q], ranked[p], compare_gpus);
    if (!dominated) front.push_back(p);
  }
  std::sort(front.begin(), front.end(), [&ranked](size_t a, size_t b) {
    const PlanOutcome& x = ranked[a];
    const PlanOutcome& y = ranked[b];
    return std::make_tuple(x.plan.gpus(), x.figures.step_time_s, x.index) <
           std::make_tuple(y.plan.gpus(), y.figures.step_time_s, y.index);
  });
  return front;
}

}  // namespace

PlanFigures plan_figures(const CompiledPlan& compiled, const SimResult& result) {
  PlanFigures f;
  f.step_time_s = result.step_time_s;
  f.tokens_per_s = result.tokens_per_s;
  f.mfu = result.mfu;
  f.hfu = result.hfu;
  f.bubble_fraction = result.bubble_fraction;
  f.exposed_comm_s = result.exposed_comm_s;
  f.peak_memory_bytes = result.peak_memory_bytes;
  f.device_memory_bytes = compiled.cluster.device.hbm_bytes;
  f.fits_in_memory = result.fits_in_memory;
  f.cost_usd_per_step = result.cost_usd_per_step;
  f.cost_usd_per_million_tokens = result.cost_usd_per_million_tokens;
  f.energy_joules_per_step = result.energy_joules_per_step;
  const auto busiest = std::max_element(
      result.per_stage.begin(), result.per_stage.end(),
      [](const StageResult& a, const StageResult& b) { return a.busy_s < b.busy_s; });
  if (busiest != result.per_stage.end()) {
    const CommSeconds& exposed = busiest->exposed_comm_s;
    f.compute_s = busiest->busy_s;
    f.stage_exposed_comm_s = exposed;
    f.bubble_s = busiest->bubble_fraction * result.step_time_s;
  }
  f.tasks = compiled.graph.size();
  return f;
}

double objective_value(Objective objective, const PlanFigures& figures) {
  return objective == Objective::kTime ? figures.step_time_s : figures.cost_usd_per_million_tokens;
}

double search_price_usd_per_gpu_hour(const SearchSpace& space, const SearchOptions& options) {
  return options.sim.price_usd_per_gpu_hour > 0 ? options.sim.price_usd_per_gpu_hour
                                                : space.cluster.price_usd_per_gpu_hour;
}

PlanOutcome evaluate_plan(const SearchSpace& space, const SearchOptions& options,
                          PlanOutcome candidate) {
  const CompiledPlan compiled = compile_plan(space.model, space.cluster, candidate.plan,
                                             GraphMode::kFolded, GraphCheck::kSkip);
  candidate.memory_plan_peak_bytes = compiled.memory.peak_bytes;
  if (!compiled.memory.fits && !options.include_oom) {
    candidate.fate = PlanFate::kOverMemory;
    return candidate;
  }
  const TimeNs horizon_ns = std::isinf(candidate.horizon_s)
                                ? kNoHorizon
                                : static_cast<TimeNs>(std::ceil(candidate.horizon_s * 1e9));
  const std::optional<SimResult> result = simulate_within(compiled, options.sim, horizon_ns);
  if (!result) {
    candidate.fate = PlanFate::kStopped;
    return candidate;
  }
  candidate.figures = plan_figures(compiled, *result);
  candidate.fate = PlanFate::kSimulated;
  return candidate;
}

ThreadEvaluator::ThreadEvaluator(const SearchSpace& space, const SearchOptions& options,
                                 std::function<void()> on_done)
    : space_(space), options_(options), on_done_(std::move(on_done)) {}

std::vector<PlanOutcome> ThreadEvaluator::evaluate(std::span<const PlanOutcome> batch) {
  std::vector<PlanOutcome> outcomes(batch.size());
  const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  const auto threads = static_cast<size_t>(options_.threads > 0 ? options_.threads : cores);
  std::mutex done_mutex;
  parallel_for(batch.size(), threads, [&](size_t i) {
    outcomes[i] = evaluate_plan(space_, options_, batch[i]);
    if (!on_done_) return;
    const std::lock_guard lock(done_mutex);
    on_done_();
  });
  return outcomes;
}

SearchResult run_search(const SearchSpace& space, const SearchOptions& options,
                        PlanEvaluator& evaluator,
                        const std::function<void(int64_t, int64_t)>& on_batch) {
  STRATA_ASSERT(options.top >= 1, "a search ranks at least one plan");
  SearchResult result;
  const Enumeration enumeration = enumerate_plans(space);
  result.counts.enumerated = enumeration.enumerated;
  result.counts.refused = enumeration.enumerated - static_cast<int64_t>(enumeration.plans.size());
  result.refusals = enumeration.refusals;

  const double price = search_price_usd_per_gpu_hour(space, options);
  const auto tokens = static_cast<double>(space.global_batch * space.seq_len);
  StepBoundModel bounds(space.model, space.cluster, options.sim.calibration);
  std::vector<Candidate> candidates;
  for (size_t i = 0; i < enumeration.plans.size(); ++i) {
    const ParallelPlan& plan = enumeration.plans[i];
    if (!options.include_oom &&
        peak_memory_lower_bound_bytes(space.model, plan) > space.cluster.device.hbm_bytes) {
      ++result.counts.over_memory_bound;
      continue;
    }
    Candidate c;
    c.outcome.index = static_cast<int64_t>(i);
    c.outcome.plan = plan;
    c.outcome.bound_step_time_s = static_cast<double>(bounds.step_lower_bound_ns(plan)) * 1e-9;
    c.objective_bound =
        options.objective == Objective::kTime
            ? c.outcome.bound_step_time_s
            : cost_per_million_tokens(c.outcome.bound_step_time_s, plan.gpus(), price, tokens);
    candidates.push_back(std::move(c));
  }
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return std::tie(a.objective_bound, a.outcome.index) <
           std::tie(b.objective_bound, b.outcome.index);
  });

  std::vector<double> best;              // objectives of the ranked plans, ascending
  std::map<int64_t, double> fastest_of;  // GPUs -> best step time ranked
  // The step time a plan must beat to matter: the K-th best objective (as this plan's step
  // time) or its cluster size's fastest step, whichever is longer.
  const auto horizon_s = [&](const ParallelPlan& plan) {
    if (options.exhaustive) return kInfinity;
    const auto k = static_cast<size_t>(options.top);
    double kth = best.size() >= k ? best[k - 1] : kInfinity;
    if (options.objective != Objective::kTime && !std::isinf(kth))
      kth = kth / cost_per_million_tokens(1.0, plan.gpus(), price, tokens);
    const auto fastest = fastest_of.find(plan.gpus());
    return std::max(kth, fastest == fastest_of.end() ? kInfinity : fastest->second);
  };
  size_t next = 0;
  if (on_batch) on_batch(0, static_cast<int64_t>(candidates.size()));
  while (next < candidates.size()) {
    std::vector<PlanOutcome> batch;
    for (; next < candidates.size() && batch.size() < kBatchPlans; ++next) {
      PlanOutcome& candidate = candidates[next].outcome;
      candidate.horizon_s = horizon_s(candidate.plan);
      if (candidate.bound_step_time_s <= candidate.horizon_s) {
        batch.push_back(candidate);
      } else {
        ++result.counts.skipped_by_bound;
      }
    }
    if (batch.empty()) break;
    for (PlanOutcome& outcome : evaluator.evaluate(batch)) {
      if (outcome.fate == PlanFate::kOverMemory) {
        ++result.counts.over_memory_plan;
        continue;
      }
      if (outcome.fate == PlanFate::kStopped) {
        ++result.counts.stopped;
        continue;
      }
      ++result.counts.simulated;
      if (!outcome.figures.fits_in_memory && !options.include_oom) {
        ++result.counts.over_memory_simulated;
        continue;
      }
      const double value = objective_value(options.objective, outcome.figures);
      best.insert(std::upper_bound(best.begin(), best.end(), value), value);
      const auto [group, added] =
          fastest_of.try_emplace(outcome.plan.gpus(), outcome.figures.step_time_s);
      if (!added) group->second = std::min(group->second, outcome.figures.step_time_s);
      result.ranked.push_back(std::move(outcome));
    }
    // Plans skipped by the bound are decided too: the bar advances over them.
    if (on_batch) on_batch(static_cast<int64_t>(next), static_cast<int64_t>(candidates.size()));
  }
  if (on_batch) {
    on_batch(static_cast<int64_t>(candidates.size()), static_cast<int64_t>(candidates.size()));
  }
  const Objective objective = options.objective;
  std::sort(result.ranked.begin(), result.ranked.end(),
            [objective](const PlanOutcome& a, const PlanOutcome& b) {
              return std::make_tuple(objective_value(objective, a.figures), a.index) <
                     std::make_tuple(objective_value(objective, b.figures), b.index);
            });
  result.pareto = pareto_front(result.ranked, space.gpus.size() > 1);
  return result;
}

}  // namespace strata
