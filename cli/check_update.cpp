#include "cli/check_update.hpp"

#include "cli/check_scenario_file.hpp"

namespace strata::cli {

namespace {

// A number of the report (nlohmann::json) as the file's JSON type, keeping whole numbers whole.
nlohmann::ordered_json number_value(const nlohmann::json& number) {
  if (number.is_number_unsigned()) return number.get<uint64_t>();
  if (number.is_number_integer()) return number.get<int64_t>();
  return number.get<double>();
}

}  // namespace

std::optional<std::string> updated_scenario_text(const std::string& path,
                                                 const std::vector<MetricCheck>& checks) {
  nlohmann::ordered_json scenario = read_scenario_json(path);
  nlohmann::ordered_json& expect = scenario.at("expect");
  bool changed = false;
  for (const MetricCheck& check : checks) {
    if (check.expected == check.predicted) continue;
    changed = true;
    nlohmann::ordered_json& entry = expect.at(check.metric);
    if (entry.is_boolean()) {
      entry = check.predicted.get<bool>();
    } else {
      entry["value"] = number_value(check.predicted);
    }
  }
  if (!changed) return std::nullopt;
  return scenario.dump(2) + "\n";
}

}  // namespace strata::cli
