#pragma once
// `strata simulate`: compile a plan (the same model, cluster and plan flags as `strata plan`),
// simulate one training step on a model of the cluster, print the predicted step time,
// throughput, MFU, bubbles, communication, memory and cost, and write the JSON report (--json)
// and the Chrome trace (--trace). Stragglers (--slow-rank) and mixed devices (--rank-device)
// need the full task graph, which they select unless --graph folded says otherwise (refused).
// Outputs are written only after everything has been computed, all or none.

#include <functional>

#include <CLI/CLI.hpp>

namespace strata::cli {

// Registers the subcommand; `run` is set to what to execute when it is chosen.
void add_simulate_command(CLI::App& app, std::function<int()>& run);

}  // namespace strata::cli
