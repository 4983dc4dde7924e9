#pragma once
// `strata plan`: compile a plan, print its summary (and layout), write its JSON, task graph and
// DOT. Outputs are written only after everything has been computed, each atomically.

#include <CLI/CLI.hpp>

namespace strata::cli {

// Registers the subcommand; `run` is set to what to execute when it is chosen.
void add_plan_command(CLI::App& app, std::function<int()>& run);

}  // namespace strata::cli
