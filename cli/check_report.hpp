#pragma once
// What `strata check` prints and writes: a table of each scenario's expectations (expected,
// predicted, difference, tolerance, ok or REGRESSED, and the published figure beside the
// prediction where the scenario records one: shown, never checked), a summary line, and the same
// checks as JUnit XML (one testcase per scenario and metric, classname = scenario, name =
// metric; a failure states expected, predicted, difference and tolerance).

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/check_expectations.hpp"

namespace strata::cli {

// One scenario's checks, as `strata check` reports them.
struct ScenarioOutcome {
  std::string name;  // the file name without .json: "korthikanti2022-175b"
  std::string path;
  std::string description;
  std::string plan_text;  // "llama3-70b on 64 x dgx-h100: dp 2 x tp 8 x pp 4, ..."
  std::vector<MetricCheck> checks;
  std::vector<ReferenceFigure> reference;
  std::string reference_source;
  nlohmann::json report;  // the simulated step's report, for the reference figures
};

int64_t regression_count(const std::vector<ScenarioOutcome>& outcomes);

// The table (with the published figures and the prediction's difference to them in two more
// columns when a scenario records some), the sources of the published figures, and the summary
// line. With `update` (strata check --update) the result column says which expected values were
// rewritten.
std::string check_table(const std::vector<ScenarioOutcome>& outcomes, bool update);

std::string check_junit(const std::vector<ScenarioOutcome>& outcomes);

// "expected 19.8, predicted 13.2, difference -6.6 (-33.33%), tolerance rel 2% (+-0.396)".
std::string check_text(const MetricCheck& check);

}  // namespace strata::cli
