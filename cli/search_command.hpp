#pragma once
// `strata search`: enumerate every plan of a model on one or more cluster sizes, drop those that
// are refused or do not fit, simulate the survivors on all cores (or over MPI ranks under
// mpirun) and print the best by step time or cost, the Pareto front, and every simulated plan as
// CSV or JSON; the best plan's trace on request (sim/search.hpp says how plans are pruned).

#include <functional>

#include <CLI/CLI.hpp>

namespace strata::cli {

void add_search_command(CLI::App& app, std::function<int()>& run);

}  // namespace strata::cli
