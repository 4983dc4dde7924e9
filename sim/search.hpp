#pragma once
// The search: rank every plan of a search space by its simulated step (docs/design.md: enumerate ->
// prune (validity, memory) -> compile -> simulate (threads) -> rank, Pareto front).
//
// Plans validate_plan refuses are counted by reason. A plan whose memory lower bound
// (peak_memory_lower_bound_bytes) exceeds the device is dropped unread; the others are ordered by
// a lower bound on their objective (StepBoundModel) and taken in fixed-size batches: a batch is
// compiled (folded graph), plans the memory plan says do not fit are dropped, the rest simulated
// event by event on all cores. A plan is skipped unsimulated only when its lower bound is above
// the K-th best objective simulated so far and above the best step time of its cluster size, and
// its simulation stops once its clock passes both (so the top K and each size's fastest plan,
// hence the Pareto front, are exact). Batches are fixed in size and order, so which plans are
// simulated does not depend on threads or MPI ranks.

#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <vector>

#include "plan/parallel_plan.hpp"
#include "sim/result.hpp"
#include "sim/search_space.hpp"
#include "sim/simulate.hpp"

namespace strata {

// What the ranking minimizes: step time, or dollars per token (kCost and kTokensPerDollar rank
// alike, since every plan of a search trains the same tokens per step; they differ in what the
// report prints).
enum class Objective : uint8_t { kTime, kCost, kTokensPerDollar };

struct SearchOptions {
  Objective objective = Objective::kTime;
  int64_t top = 10;
  bool include_oom = false;  // simulate and rank plans that do not fit in memory too
  bool exhaustive = false;   // simulate every plan that fits: no step-time bound
  SimOptions sim;            // calibration and price
  int64_t threads = 0;       // 0: every core
};

// What the search keeps of one simulated plan.
struct PlanFigures {
  double step_time_s = 0;
  double tokens_per_s = 0;
  double mfu = 0;
  double hfu = 0;
  double bubble_fraction = 0;
  CommSeconds exposed_comm_s;  // the largest stage's, per kind
  int64_t peak_memory_bytes = 0;
  int64_t device_memory_bytes = 0;
  bool fits_in_memory = false;
  double cost_usd_per_step = 0;
  double cost_usd_per_million_tokens = 0;
  double energy_joules_per_step = 0;
  // The step as its busiest stage spends it: computing, idle in the pipeline bubble, and waiting
  // on each kind of communication (the terms that explain why one plan beats another).
  double compute_s = 0;
  double bubble_s = 0;
  CommSeconds stage_exposed_comm_s;
  int64_t tasks = 0;
};

PlanFigures plan_figures(const CompiledPlan& compiled, const SimResult& result);

enum class PlanFate : uint8_t {
  kSimulated,
  kOverMemory,  // the memory plan says it does not fit: not simulated
  kStopped,     // its simulated clock passed the horizon: slower than the plans it had to beat
};

// A plan of the search, and what became of it.
struct PlanOutcome {
  int64_t index = 0;  // in enumeration order
  ParallelPlan plan;
  double bound_step_time_s = 0;  // StepBoundModel's
  // Simulate only up to this step time (seconds; infinity: to the end).
  double horizon_s = std::numeric_limits<double>::infinity();
  PlanFate fate = PlanFate::kSimulated;
  int64_t memory_plan_peak_bytes = 0;
  PlanFigures figures;  // when simulated
};

// Compiles and simulates plans; the search hands it one batch at a time.
class PlanEvaluator {
 public:
  virtual ~PlanEvaluator() = default;
  // The batch's outcomes, in its order.
  virtual std::vector<PlanOutcome> evaluate(std::span<const PlanOutcome> batch) = 0;
};

// One plan: compile (folded, unvalidated), check the memory plan, simulate up to its horizon.
PlanOutcome evaluate_plan(const SearchSpace& space, const SearchOptions& options,
                          PlanOutcome candidate);

// Evaluates a batch on `options.threads` threads of this process; calls `on_done` (from any of
// them, one at a time) after each plan.
class ThreadEvaluator : public PlanEvaluator {
 public:
  ThreadEvaluator(const SearchSpace& space, const SearchOptions& options,
                  std::function<void()> on_done = {});
  std::vector<PlanOutcome> evaluate(std::span<const PlanOutcome> batch) override;

 private:
  const SearchSpace& space_;
  const SearchOptions& options_;
  std::function<void()> on_done_;
};

struct SearchCounts {
  int64_t enumerated = 0;
  int64_t refused = 0;
  int64_t over_memory_bound = 0;      // dropped by peak_memory_lower_bound_bytes
  int64_t over_memory_plan = 0;       // compiled, then dropped by the memory plan
  int64_t skipped_by_bound = 0;       // their lower bound cannot reach the top K
  int64_t stopped = 0;                // simulated until their clock passed the top K's horizon
  int64_t simulated = 0;              // to the end of the step
  int64_t over_memory_simulated = 0;  // simulated, but the simulated timeline peaks over memory
};

struct SearchResult {
  SearchCounts counts;
  std::vector<RefusalCount> refusals;
  std::vector<PlanOutcome> ranked;  // every simulated plan, best first (ties: enumeration order)
  std::vector<size_t> pareto;       // indices into `ranked`: the front, by GPUs then step time
};

// The ranking's key (lower is better).
double objective_value(Objective objective, const PlanFigures& figures);

// The price plans are costed at: options.sim's, else the cluster's.
double search_price_usd_per_gpu_hour(const SearchSpace& space, const SearchOptions& options);

// `on_batch(decided, candidates)` before the first batch, after each and at the end, for a
// progress bar: the candidates decided so far, simulated or skipped by the bound.
SearchResult run_search(const SearchSpace& space, const SearchOptions& options,
                        PlanEvaluator& evaluator,
                        const std::function<void(int64_t, int64_t)>& on_batch = {});

}  // namespace strata
