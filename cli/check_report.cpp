#include "cli/check_report.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "cli/junit_xml.hpp"

namespace strata::cli {

namespace {

// Booleans as written, whole numbers whole, others to 6 significant digits.
std::string value_text(const nlohmann::json& value) {
  if (value.is_boolean()) return value.get<bool>() ? "true" : "false";
  if (value.is_number_integer()) return value.dump();
  return fmt::format("{:.6g}", value.get<double>());
}

// predicted - expected, and as a percentage of expected: "+0.4 (+3.03%)"; "" for a boolean that
// holds, "differs" for one that does not.
std::string difference_text(const nlohmann::json& expected, const nlohmann::json& predicted) {
  if (expected.is_boolean()) return expected == predicted ? "" : "differs";
  const double e = expected.get<double>();
  const double difference = predicted.get<double>() - e;
  if (e == 0) return fmt::format("{:+.4g}", difference);
  return fmt::format("{:+.4g} ({:+.2f}%)", difference, difference / std::abs(e) * 100);
}

std::string tolerance_text(const MetricCheck& check) {
  if (check.expected.is_boolean()) return "exact";
  std::vector<std::string> parts;
  if (check.tolerance.rel) parts.push_back(fmt::format("rel {:g}%", *check.tolerance.rel * 100));
  if (check.tolerance.abs) parts.push_back(fmt::format("abs {:g}", *check.tolerance.abs));
  return fmt::format("{}", fmt::join(parts, ", "));
}

// Columns padded to their widest cell; the columns in `right` are right-aligned (`right` may
// name more columns than the rows have).
std::string aligned(const std::vector<std::vector<std::string>>& rows,
                    const std::vector<bool>& right) {
  std::vector<size_t> width(right.size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      if (c > 0) line += "  ";
      line += right[c] ? fmt::format("{:>{}}", row[c], width[c])
                       : fmt::format("{:<{}}", row[c], width[c]);
    }
    line.erase(line.find_last_not_of(' ') + 1);
    out += line + "\n";
  }
  return out;
}

}  // namespace

int64_t regression_count(const std::vector<ScenarioOutcome>& outcomes) {
  int64_t count = 0;
  for (const ScenarioOutcome& outcome : outcomes) {
    for (const MetricCheck& check : outcome.checks) count += check.holds ? 0 : 1;
  }
  return count;
}

std::string check_text(const MetricCheck& check) {
  std::string text = fmt::format("expected {}, predicted {}", value_text(check.expected),
                                 value_text(check.predicted));
  if (check.expected.is_boolean()) return text;
  return text + fmt::format(", difference {}, tolerance {} (+-{:.4g})",
                            difference_text(check.expected, check.predicted), tolerance_text(check),
                            check.tolerance.allowed(check.expected.get<double>()));
}

std::string check_table(const std::vector<ScenarioOutcome>& outcomes, bool update) {
  const bool any_published = std::any_of(outcomes.begin(), outcomes.end(),
                                         [](const auto& o) { return !o.reference.empty(); });
  std::vector<std::vector<std::string>> rows = {
      {"scenario", "metric", "expected", "predicted", "difference", "tolerance", "result"}};
  if (any_published) rows[0].insert(rows[0].end(), {"published", "vs published"});
  // The published figure of `metric` and the prediction's difference to it, when recorded.
  const auto published = [any_published](const ScenarioOutcome& outcome, const std::string& metric,
                                         std::vector<std::string>& row) {
    if (!any_published) return;
    for (const ReferenceFigure& figure : outcome.reference) {
      if (figure.metric != metric) continue;
      const nlohmann::json predicted = outcome.report.at(metric);
      row.insert(row.end(), {value_text(figure.value), difference_text(figure.value, predicted)});
      return;
    }
    row.insert(row.end(), {"", ""});
  };
  std::vector<std::string> regressed;
  size_t expectations = 0;
  size_t rewritten = 0;
  std::string sources;
  for (const ScenarioOutcome& outcome : outcomes) {
    for (const MetricCheck& check : outcome.checks) {
      const bool equal = check.expected == check.predicted;
      const char* result =
          update ? (equal ? "unchanged" : "updated") : (check.holds ? "ok" : "REGRESSED");
      std::vector<std::string> row = {outcome.name,
                                      check.metric,
                                      value_text(check.expected),
                                      value_text(check.predicted),
                                      difference_text(check.expected, check.predicted),
                                      tolerance_text(check),
                                      result};
      published(outcome, check.metric, row);
      rows.push_back(std::move(row));
      if (!check.holds) regressed.push_back(outcome.name + " " + check.metric);
      rewritten += equal ? 0 : 1;
      ++expectations;
    }
    // Published figures of metrics the scenario does not expect: shown, with no expectation.
    for (const ReferenceFigure& figure : outcome.reference) {
      const auto expected = [&figure](const MetricCheck& c) { return c.metric == figure.metric; };
      if (std::any_of(outcome.checks.begin(), outcome.checks.end(), expected)) continue;
      std::vector<std::string> row = {
          outcome.name, figure.metric, "-", value_text(outcome.report.at(figure.metric)), "",
          "",           "not checked"};
      published(outcome, figure.metric, row);
      rows.push_back(std::move(row));
    }
    if (!outcome.reference.empty())
      sources += fmt::format("  {}: {}\n", outcome.name, outcome.reference_source);
  }
  std::string out = aligned(rows, {false, false, true, true, true, false, false, true, true});
  if (any_published)
    out += "\npublished figures (shown beside the predictions, never checked):\n" + sources;

  out += fmt::format("\n{} scenario{}, {} expectation{}: ", outcomes.size(),
                     outcomes.size() == 1 ? "" : "s", expectations, expectations == 1 ? "" : "s");
  if (update) {
    out += fmt::format("--update rewrote {} expected value{} with the predictions\n", rewritten,
                       rewritten == 1 ? "" : "s");
  } else if (regressed.empty()) {
    out += "all hold\n";
  } else {
    // The first few by name; the table marks every one.
    constexpr size_t kNamed = 5;
    const size_t named = std::min(regressed.size(), kNamed);
    out += fmt::format("{} REGRESSED: {}", regressed.size(),
                       fmt::join(regressed.begin(), regressed.begin() + named, ", "));
    out +=
        regressed.size() > named ? fmt::format(" and {} more\n", regressed.size() - named) : "\n";
  }
  return out;
}

std::string check_junit(const std::vector<ScenarioOutcome>& outcomes) {
  std::vector<JunitSuite> suites;
  for (const ScenarioOutcome& outcome : outcomes) {
    JunitSuite suite{outcome.name,
                     "strata check",
                     {{"file", outcome.path}, {"plan", outcome.plan_text}},
                     {},
                     ""};
    for (const ReferenceFigure& figure : outcome.reference) {
      suite.properties.emplace_back("published." + figure.metric, value_text(figure.value));
    }
    if (!outcome.reference.empty())
      suite.properties.emplace_back("published.source", outcome.reference_source);
    for (const MetricCheck& check : outcome.checks) {
      JunitCase test{outcome.name, check.metric, std::nullopt};
      if (!check.holds) {
        const std::string text = check_text(check);
        test.failure = JunitFailure{
            text, "regression",
            fmt::format("{}: {} {}; the prediction moved outside the tolerance: if the change "
                        "is intended, run strata check --update {}\n",
                        outcome.path, check.metric, text, outcome.path)};
      }
      suite.cases.push_back(std::move(test));
    }
    suite.system_out = outcome.description + "\n" + outcome.plan_text + "\n";
    suites.push_back(std::move(suite));
  }
  return junit_xml(suites, junit_run_here());
}

}  // namespace strata::cli
