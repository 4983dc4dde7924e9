// strata: plan, predict and run distributed training of large transformer models.
// Only this file decides exit codes: 0 success, 2 a user's mistake (InputError or bad flags),
// else what the command's run function returns (`strata check`: 1 when a prediction regressed).

#include <algorithm>
#include <cstdio>
#include <functional>
#include <new>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/calibrate_command.hpp"
#include "cli/check_command.hpp"
#include "cli/compare_command.hpp"
#include "cli/megatron_args.hpp"
#include "cli/plan_command.hpp"
#include "cli/search_command.hpp"
#include "cli/simulate_command.hpp"
#include "cli/train_command.hpp"
#include "cli/validate_command.hpp"
#include "cli/view_command.hpp"
#include "common/error.hpp"

int main(int argc, char** argv) {
  CLI::App app{"strata: plan, simulate and run distributed training of transformer models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "strata 0.1.0");
  std::function<int()> run;
  strata::cli::add_plan_command(app, run);
  strata::cli::add_simulate_command(app, run);
  strata::cli::add_check_command(app, run);
  strata::cli::add_search_command(app, run);
  strata::cli::add_train_command(app, run);
  strata::cli::add_calibrate_command(app, run);
  strata::cli::add_validate_command(app, run);
  strata::cli::add_view_command(app, run);
  strata::cli::add_compare_command(app, run);
  // An empty value ("--gpus ''") is refused rather than read as no value.
  const CLI::Validator non_empty(
      [](std::string& value) { return value.empty() ? std::string("an empty value") : ""; }, "");
  for (CLI::App* command : app.get_subcommands({})) {
    for (CLI::Option* option : command->get_options()) {
      if (option->get_items_expected_min() > 0) option->check(non_empty);
    }
  }
  // --megatron-args FILE: the file's flags join the command line before it is parsed.
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    args = strata::cli::expand_megatron_args(app, std::move(args));
  } catch (const strata::InputError& error) {
    std::fprintf(stderr, "strata: error: %s\n", error.what());
    return 2;
  }
  try {
    std::reverse(args.begin(), args.end());  // CLI11 parses a vector from its back
    app.parse(args);
  } catch (const CLI::Success& done) {
    return app.exit(done);  // --help, --version
  } catch (const CLI::ParseError& error) {
    // The help of the subcommand being parsed, when there is one.
    const auto parsed = app.get_subcommands();
    const std::string help =
        parsed.empty() ? "'strata --help'"
                       : "'strata --help' and 'strata " + parsed.front()->get_name() + " --help'";
    std::fprintf(stderr, "strata: error: command line: %s. Fix: see %s\n", error.what(),
                 help.c_str());
    return 2;
  }
  try {
    return run();
  } catch (const strata::InputError& error) {
    std::fprintf(stderr, "strata: error: %s\n", error.what());
    return 2;
  } catch (const std::bad_alloc&) {
    // Sizes within their bounds can still ask for more than this machine holds (a full graph of
    // millions of ranks' tasks).
    std::fprintf(stderr,
                 "strata: error: out of memory: the inputs ask for more than this machine holds. "
                 "Fix: smaller sizes, or the folded graph (--graph folded)\n");
    return 2;
  }
}
