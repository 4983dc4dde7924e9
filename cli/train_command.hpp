#pragma once
// `strata train`: run a plan for real (exec/), training a GPT-2- or Llama-style model on byte-level
// text.

#include <functional>

#include <CLI/CLI.hpp>

namespace strata::cli {

void add_train_command(CLI::App& app, std::function<int()>& run);

}  // namespace strata::cli
