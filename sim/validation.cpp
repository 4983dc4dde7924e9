// Published runs against their simulation (sim/validation.hpp).

#include "sim/validation.hpp"

#include <optional>

#include "common/error.hpp"
#include "topologies/cluster_spec.hpp"

namespace strata {

double predicted_figure(const SimResult& result, const ParallelPlan& plan, RunMetric metric) {
  switch (metric) {
    case RunMetric::kStepTimeS:
      return result.step_time_s;
    case RunMetric::kTokensPerSPerGpu:
      return result.tokens_per_s / static_cast<double>(plan.gpus());
    case RunMetric::kMfu:
      return result.mfu;
    case RunMetric::kPeakMemoryGib:
      return static_cast<double>(result.peak_memory_bytes) / (1024.0 * 1024.0 * 1024.0);
  }
  return 0;
}

RunOutcome validate_run(const PublishedRun& run, const SimOptions& options) {
  STRATA_ASSERT(run.not_modelled.empty() && !run.variants.empty() && !run.measured.empty(),
                "validate_run needs a modelled run with a plan and a measured figure");
  const ClusterSpec cluster = load_cluster(run.cluster);
  struct Kept {
    const PlanVariant* variant;
    SimResult result;
  };
  std::optional<Kept> best;
  for (const PlanVariant& variant : run.variants) {
    validate_plan(variant.plan, run.model, std::nullopt, run.source);
    validate_plan_on_device(variant.plan, cluster.device, run.source);
    const CompiledPlan compiled =
        compile_plan(run.model, cluster, variant.plan, GraphMode::kFolded, GraphCheck::kSkip);
    SimResult result = simulate(compiled, options);
    // A variant that fits beats one that does not; then the faster wins (the first of equals).
    const bool better = !best || (result.fits_in_memory && !best->result.fits_in_memory) ||
                        (result.fits_in_memory == best->result.fits_in_memory &&
                         result.step_time_s < best->result.step_time_s);
    if (better) best = Kept{&variant, std::move(result)};
  }
  RunOutcome outcome;
  outcome.choice = best->variant->choice;
  outcome.fits = best->result.fits_in_memory;
  for (const MeasuredFigure& figure : run.measured) {
    const double predicted = predicted_figure(best->result, best->variant->plan, figure.metric);
    outcome.figures.push_back(
        {figure.metric, figure.value, predicted, predicted / figure.value - 1});
  }
  return outcome;
}

}  // namespace strata
