#pragma once
// Validation against published runs (`strata validate`): each run of the reference data
// (published_runs.hpp) simulated as published, the variants of what it leaves unstated each
// simulated and the fastest that fits kept (as a tuned run would have been), and its predicted
// figures set beside the measured ones.

#include <string>
#include <vector>

#include "sim/published_runs.hpp"
#include "sim/simulate.hpp"

namespace strata {

struct FigureOutcome {
  RunMetric metric = RunMetric::kStepTimeS;
  double measured = 0;
  double predicted = 0;
  double error = 0;  // predicted / measured - 1
};

struct RunOutcome {
  std::string choice;  // the variant kept ("" when nothing was unstated)
  bool fits = true;    // in memory; false when no variant fits (then the fastest is kept)
  std::vector<FigureOutcome> figures;
};

// The run must be modelled (empty not_modelled). Throws InputError for a plan the run's cluster
// refuses.
RunOutcome validate_run(const PublishedRun& run, const SimOptions& options = {});

// The figure a simulated step predicts for a metric.
double predicted_figure(const SimResult& result, const ParallelPlan& plan, RunMetric metric);

}  // namespace strata
