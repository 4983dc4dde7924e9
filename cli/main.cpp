// strata: plan, predict and run distributed training of large transformer models.
// Only this file decides exit codes: 0 success, 2 a user's mistake (InputError or bad flags),
// else what the command's run function returns (`strata check`: 1 when a prediction regressed).

#include <cstdio>
#include <functional>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/calibrate_command.hpp"
#include "cli/check_command.hpp"
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
  try {
    app.parse(argc, argv);
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
  }
}
