#include "cli/check_simulation.hpp"

#include <string>

#include "cli/simulate_report.hpp"
#include "common/error.hpp"
#include "common/parallel_for.hpp"
#include "models/model_reader.hpp"
#include "plan/compile.hpp"
#include "sim/simulate.hpp"

namespace strata::cli {

nlohmann::json simulated_report(const PlanInputs& inputs) {
  const SimOptions options;  // `strata simulate` with no simulator flag
  const CompiledPlan compiled =
      compile_plan(inputs.model, inputs.cluster, inputs.plan, GraphMode::kFolded);
  if (!compiled.validation.ok()) {
    std::string errors;
    for (const auto& error : compiled.validation.errors) errors += "\n  " + error;
    STRATA_ASSERT(false, "the compiled task graph breaks its invariants:" + errors);
  }
  return simulate_report_json(compiled, options, simulate(compiled, options));
}

std::vector<nlohmann::json> simulated_reports(const std::vector<PlanInputs>& inputs, int64_t jobs) {
  STRATA_ASSERT(jobs >= 1, "simulated_reports needs at least one thread");
  std::vector<nlohmann::json> reports(inputs.size());
  parallel_for(inputs.size(), static_cast<size_t>(jobs),
               [&](size_t i) { reports[i] = simulated_report(inputs[i]); });
  return reports;
}

MetricKinds checkable_metrics() {
  ParallelPlan plan;  // one GPU, one sequence of 256 tokens (tiny-gpt's learned positions)
  plan.seq_len = 256;
  PlanInputs probe{load_model("tiny-gpt"), load_cluster("dgx-a100"), plan};
  validate_plan(probe.plan, probe.model, std::nullopt, "strata check's metric probe");
  return report_metric_kinds(simulated_report(probe));
}

}  // namespace strata::cli
