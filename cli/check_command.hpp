#pragma once
// `strata check SCENARIOS...`: CI regression of predicted throughput. Simulates every scenario
// (each *.json directly in a folder argument, in name order, and each file argument) exactly as
// `strata simulate --scenario FILE` does, on --jobs threads, compares each prediction with the
// scenario's "expect" object (cli/check_expectations.hpp), prints a table of expected, predicted,
// difference and tolerance with the published figures of its "reference" object beside, and
// writes JUnit XML (--junit FILE). The run function returns 0 when every expectation holds and 1
// when one regressed; a bad scenario is an InputError (main exits 2) and nothing is written.
// --update rewrites the expected values with the predictions instead (all files or none) and
// returns 0.

#include <functional>

#include <CLI/CLI.hpp>

namespace strata::cli {

// Registers the subcommand; `run` is set to what to execute when it is chosen.
void add_check_command(CLI::App& app, std::function<int()>& run);

}  // namespace strata::cli
