#pragma once
// A scenario file as JSON with its keys in the file's order, for `strata check`: the order in
// which it reports a scenario's expectations, and the order `strata check --update` keeps when it
// rewrites the file (nlohmann::json sorts keys; nlohmann::ordered_json keeps them as written).

#include <string>

#include <nlohmann/json.hpp>

namespace strata::cli {

// Throws InputError when the file cannot be read or is malformed (naming the line and column).
nlohmann::ordered_json read_scenario_json(const std::string& path);

}  // namespace strata::cli
