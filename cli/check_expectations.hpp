#pragma once
// What a scenario expects of its simulated step, for `strata check` (scenarios/README.md):
//   "expect": {"step_time_s": {"value": 13.2, "rel_tol": 0.02},
//              "bubble_fraction": {"value": 0.074, "abs_tol": 0.005},
//              "fits_in_memory": true},
//   "reference": {"step_time_s": 13.75, "source": "data/reference/korthikanti2022.csv ..."}
// "expect" names metrics of the `strata simulate --json` report (its top-level numbers and
// booleans): a number metric takes {"value", "rel_tol" and/or "abs_tol"}, a boolean metric is
// given bare. "reference" holds published figures for the same metrics, printed beside the
// prediction and never checked.
//
// A number holds when |predicted - value| <= max(rel_tol x |value|, abs_tol), a tolerance not
// given counting as 0: {"value": 13.2, "rel_tol": 0.02} holds for 12.936 to 13.464. A boolean
// holds when equal.

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata::cli {

enum class MetricKind : uint8_t { kNumber, kBoolean };

// The metrics an expectation may name, with their kind: the report's top-level number and boolean
// keys (step_time_s, mfu, peak_memory_bytes, fits_in_memory, ...).
using MetricKinds = std::map<std::string, MetricKind>;
MetricKinds report_metric_kinds(const nlohmann::json& report);

struct Tolerance {
  std::optional<double> rel;  // a fraction of |value|: 0.02 is 2%
  std::optional<double> abs;  // in the metric's unit

  // The largest |predicted - value| that holds.
  double allowed(double value) const;
};

struct Expectation {
  std::string metric;
  nlohmann::json value;  // a number or a boolean, as written
  Tolerance tolerance;   // numbers only
};

struct ReferenceFigure {
  std::string metric;
  double value = 0;
};

struct ScenarioExpectations {
  std::string description;
  std::vector<Expectation> expect;         // in the file's order
  std::vector<ReferenceFigure> reference;  // in the file's order
  std::string reference_source;
};

// Reads `path`'s "description", "expect" and "reference". Throws InputError naming the file and
// the field (`expect.mfu.rel_tol`) for a missing or empty "expect", an unknown metric, a number
// given for a boolean metric or the other way round, a missing value, no tolerance, a negative
// tolerance, an unknown key, or a reference figure without a source.
ScenarioExpectations read_expectations(const std::string& path, const MetricKinds& metrics);

// One expectation against the prediction.
struct MetricCheck {
  std::string metric;
  nlohmann::json expected;   // a number or a boolean
  nlohmann::json predicted;  // the report's value
  Tolerance tolerance;
  bool holds = false;
};

// Each expectation against the report of the scenario's simulated step, in the file's order.
std::vector<MetricCheck> check_expectations(const ScenarioExpectations& expectations,
                                            const nlohmann::json& report);

}  // namespace strata::cli
