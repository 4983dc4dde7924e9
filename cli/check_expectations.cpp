#include "cli/check_expectations.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "cli/check_scenario_file.hpp"
#include "common/error.hpp"

namespace strata::cli {

namespace {

// Keys that document an object and are always allowed (as JsonFields::refuse_unknown allows).
bool documentation_key(const std::string& key) {
  return key == "source" || key == "note" || key == "$comment";
}

std::string metric_list(const MetricKinds& metrics, MetricKind kind) {
  std::vector<std::string> names;
  for (const auto& [name, metric_kind] : metrics) {
    if (metric_kind == kind) names.push_back(name);
  }
  return fmt::format("{}", fmt::join(names, ", "));
}

// Reads the expectations of one file; every error names the file and the field.
class ExpectationReader {
 public:
  ExpectationReader(std::string path, const MetricKinds& metrics)
      : path_(std::move(path)), metrics_(metrics) {}

  [[noreturn]] void fail(const std::string& field, const std::string& problem,
                         const std::string& fix) const {
    throw InputError(path_, field, problem, fix);
  }

  // The metric's kind; an unknown name is refused, listing the metrics.
  MetricKind kind_of(const std::string& metric, const std::string& field) const {
    const auto found = metrics_.find(metric);
    if (found != metrics_.end()) return found->second;
    fail(field,
         fmt::format("'{}' is not a number or boolean metric of the `strata simulate --json` "
                     "report; its numbers are: {}; its booleans: {}",
                     metric, metric_list(metrics_, MetricKind::kNumber),
                     metric_list(metrics_, MetricKind::kBoolean)),
         "use one of those names (check its spelling)");
  }

  double tolerance(const nlohmann::ordered_json& value, const std::string& field) const {
    if (!value.is_number()) {
      fail(field, fmt::format("expected a number, found {} {}", value.type_name(), value.dump()),
           "write a tolerance >= 0, e.g. 0.02");
    }
    const double number = value.get<double>();
    if (!(number >= 0)) {
      fail(field, fmt::format("must be >= 0, found {}", value.dump()),
           "use a tolerance >= 0 (0 asks for the exact value)");
    }
    return number;
  }

  Expectation number_expectation(const std::string& metric, const nlohmann::ordered_json& given,
                                 const std::string& field) const {
    const std::string example = R"({"value": ..., "rel_tol": 0.02})";
    if (!given.is_object()) {
      fail(field,
           fmt::format("{} is a number metric: expected an object {}, found {} {}", metric, example,
                       given.type_name(), given.dump()),
           fmt::format("write \"{}\": {} (\"abs_tol\" for a tolerance in the metric's unit); "
                       "strata check --update fills in the value",
                       metric, example));
    }
    Expectation expectation{metric, nullptr, {}};
    for (const auto& [key, value] : given.items()) {
      const std::string key_field = fmt::format("{}.{}", field, key);
      if (key == "value") {
        if (!value.is_number()) {
          fail(key_field,
               fmt::format("expected a number, found {} {}", value.type_name(), value.dump()),
               fmt::format("write the expected {} as a number", metric));
        }
        expectation.value = value;
      } else if (key == "rel_tol") {
        expectation.tolerance.rel = tolerance(value, key_field);
      } else if (key == "abs_tol") {
        expectation.tolerance.abs = tolerance(value, key_field);
      } else if (!documentation_key(key)) {
        fail(key_field, "unknown field",
             "remove it or correct its spelling; the fields of a number expectation are: value, "
             "rel_tol, abs_tol (and \"note\" for documentation)");
      }
    }
    if (expectation.value.is_null()) {
      fail(field + ".value", "missing",
           fmt::format("add \"value\": the expected {} (strata check --update fills it in)",
                       metric));
    }
    if (!expectation.tolerance.rel && !expectation.tolerance.abs) {
      fail(field, "no tolerance",
           "add \"rel_tol\" (a fraction of the value: 0.02 is 2%) and/or \"abs_tol\" (in the "
           "metric's unit)");
    }
    return expectation;
  }

  Expectation boolean_expectation(const std::string& metric, const nlohmann::ordered_json& given,
                                  const std::string& field) const {
    if (!given.is_boolean()) {
      fail(field,
           fmt::format("{} is a boolean metric: expected true or false, found {} {}", metric,
                       given.type_name(), given.dump()),
           fmt::format("write \"{}\": true or false (a boolean takes no value object and no "
                       "tolerance)",
                       metric));
    }
    return {metric, given, {}};
  }

  std::vector<Expectation> expectations(const nlohmann::ordered_json& scenario) const {
    const auto found = scenario.find("expect");
    if (found == scenario.end() || found->is_null()) {
      fail(
          "expect", "missing: strata check compares the scenario's predictions with it",
          R"(add "expect": {"step_time_s": {"value": 0, "rel_tol": 0.02}} and run strata check --update on the file to fill in the value)");
    }
    if (!found->is_object()) {
      fail("expect",
           fmt::format("expected an object of metrics, found {} {}", found->type_name(),
                       found->dump()),
           R"(write "expect": {"step_time_s": {"value": ..., "rel_tol": 0.02}, ...})");
    }
    std::vector<Expectation> out;
    for (const auto& [metric, given] : found->items()) {
      if (documentation_key(metric)) continue;
      const std::string field = "expect." + metric;
      out.push_back(kind_of(metric, field) == MetricKind::kNumber
                        ? number_expectation(metric, given, field)
                        : boolean_expectation(metric, given, field));
    }
    if (out.empty()) {
      fail("expect", "no metric to check",
           R"(add at least one, e.g. "step_time_s": {"value": ..., "rel_tol": 0.02})");
    }
    return out;
  }

  void read_reference(const nlohmann::ordered_json& scenario, ScenarioExpectations& out) const {
    const auto found = scenario.find("reference");
    if (found == scenario.end() || found->is_null()) return;
    if (!found->is_object()) {
      fail("reference",
           fmt::format("expected an object, found {} {}", found->type_name(), found->dump()),
           R"(write "reference": {"step_time_s": 13.75, "source": "where it was published"})");
    }
    for (const auto& [key, value] : found->items()) {
      const std::string field = "reference." + key;
      if (key == "source") {
        if (!value.is_string() || value.get<std::string>().empty()) {
          fail(field, fmt::format("expected a non-empty string, found {}", value.dump()),
               "name where the figures were published (file and row, or paper and table)");
        }
        out.reference_source = value.get<std::string>();
        continue;
      }
      if (documentation_key(key)) continue;
      if (kind_of(key, field) != MetricKind::kNumber || !value.is_number()) {
        fail(field,
             fmt::format("expected the published figure of a number metric as a number, found "
                         "{} {}",
                         value.type_name(), value.dump()),
             fmt::format("write \"{}\": the published number", key));
      }
      out.reference.push_back({key, value.get<double>()});
    }
    if (out.reference.empty()) {
      fail("reference", "no published figure",
           R"(add one, e.g. "step_time_s": 13.75, or remove "reference")");
    }
    if (out.reference_source.empty()) {
      fail("reference.source", "missing",
           "add \"source\": where the figures were published (file and row, or paper and table)");
    }
  }

  ScenarioExpectations read() const {
    const nlohmann::ordered_json scenario = read_scenario_json(path_);
    ScenarioExpectations out;
    if (const auto found = scenario.find("description"); found != scenario.end()) {
      if (!found->is_string()) {
        fail("description",
             fmt::format("expected a string, found {} {}", found->type_name(), found->dump()),
             "write one sentence in double quotes");
      }
      out.description = found->get<std::string>();
    }
    out.expect = expectations(scenario);
    read_reference(scenario, out);
    return out;
  }

 private:
  std::string path_;
  const MetricKinds& metrics_;
};

}  // namespace

MetricKinds report_metric_kinds(const nlohmann::json& report) {
  MetricKinds kinds;
  for (const auto& [key, value] : report.items()) {
    if (value.is_number()) kinds[key] = MetricKind::kNumber;
    if (value.is_boolean()) kinds[key] = MetricKind::kBoolean;
  }
  return kinds;
}

double Tolerance::allowed(double value) const {
  return std::max(rel.value_or(0) * std::abs(value), abs.value_or(0));
}

ScenarioExpectations read_expectations(const std::string& path, const MetricKinds& metrics) {
  return ExpectationReader(path, metrics).read();
}

std::vector<MetricCheck> check_expectations(const ScenarioExpectations& expectations,
                                            const nlohmann::json& report) {
  std::vector<MetricCheck> checks;
  for (const Expectation& e : expectations.expect) {
    const auto found = report.find(e.metric);
    STRATA_ASSERT(found != report.end() && found->is_boolean() == e.value.is_boolean(),
                  "the report lacks metric '" + e.metric + "' or has it as another kind");
    MetricCheck check{e.metric, e.value, *found, e.tolerance, false};
    if (e.value.is_boolean()) {
      check.holds = *found == e.value;
    } else {
      const double expected = e.value.get<double>();
      check.holds = std::abs(found->get<double>() - expected) <= e.tolerance.allowed(expected);
    }
    checks.push_back(std::move(check));
  }
  return checks;
}

}  // namespace strata::cli
