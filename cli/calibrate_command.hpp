#pragma once
// `strata calibrate`: measure this machine as an executor backend runs it, into a calibration
// file that `strata simulate --calibration` reads (exec/cpu_calibration.hpp).

#include <functional>

#include <CLI/CLI.hpp>

namespace strata::cli {

void add_calibrate_command(CLI::App& app, std::function<int()>& run);

}  // namespace strata::cli
