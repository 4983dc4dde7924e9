#pragma once
// `strata validate`: the simulator's accuracy table, rerunnable by anyone. Reproduces every
// published run of the reference data (sim/published_runs.hpp: Korthikanti et al. 2022, NeMo
// 24.07 on H100, torchtitan on A100 and H200, llm.c), each as published with what it leaves
// unstated chosen as a tuned run would (the fastest variant that fits, listed), and prints per
// run the measured and predicted figures and the signed error, and per dataset the mean absolute
// error and the worst run; --json FILE writes the same. The reference tables are compiled into
// the binary; --reference DIR reads them from a folder instead. Runs Strata cannot model as
// published (a row that states no batch size) are listed, not scored.

#include <functional>

#include <CLI/CLI.hpp>

namespace strata::cli {

void add_validate_command(CLI::App& app, std::function<int()>& run);

}  // namespace strata::cli
