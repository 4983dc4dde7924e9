#pragma once
// `strata check --update`: a scenario's expectations rewritten with the current predictions. Only
// the expected values change: "value" of a number metric, the bare true/false of a boolean one;
// tolerances, every other key and the key order stay as they were. The file is written back as
// JSON indented by 2 spaces (as the shipped scenarios are), all files or none (the caller writes
// them with write_files_atomically).

#include <optional>
#include <string>
#include <vector>

#include "cli/check_expectations.hpp"

namespace strata::cli {

// The new text of the scenario file at `path`, or nullopt when every expected value already
// equals its prediction (the file is left as it is).
std::optional<std::string> updated_scenario_text(const std::string& path,
                                                 const std::vector<MetricCheck>& checks);

}  // namespace strata::cli
