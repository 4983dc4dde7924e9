#pragma once
// How `strata check` simulates its scenarios: each exactly as `strata simulate --scenario FILE`
// does (the folded graph, the default simulator options: built-in efficiency tables, the
// cluster's price), on a pool of threads, the reports kept in the scenarios' order so that the
// output does not depend on the thread count.

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/check_expectations.hpp"
#include "cli/plan_options.hpp"

namespace strata::cli {

// The report `strata simulate --scenario FILE --json` writes for these inputs.
nlohmann::json simulated_report(const PlanInputs& inputs);

// simulated_report of each input, in order, on min(jobs, inputs) threads (jobs >= 1). An exception
// of one simulation is rethrown after all threads have stopped (the first input's that threw).
std::vector<nlohmann::json> simulated_reports(const std::vector<PlanInputs>& inputs, int64_t jobs);

// The metrics expectations may name: the top-level number and boolean keys of the report, taken
// from the report of one step of tiny-gpt on one A100 (milliseconds to simulate), so that the
// list is the report's own and a misspelt metric is refused before any scenario is simulated.
MetricKinds checkable_metrics();

}  // namespace strata::cli
