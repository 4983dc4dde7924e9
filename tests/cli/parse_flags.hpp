#pragma once
// Parses a command line into the flags of `strata plan` (or of `strata search`'s stack) as main
// does, a --megatron-args file expanded first, without resolving them: a test checks what the
// flags set in the plan and the model before validate_plan, which refuses what the compiler does
// not lower yet (ep and cp above 1).

#include <algorithm>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/megatron_args.hpp"
#include "cli/plan_options.hpp"

namespace strata::test {

inline cli::PlanFlags parse_plan_flags(std::vector<std::string> args) {
  CLI::App app;
  cli::PlanFlags flags;
  cli::add_plan_flags(*app.add_subcommand("plan"), flags);
  args.insert(args.begin(), "plan");
  args = cli::expand_megatron_args(app, std::move(args));
  std::reverse(args.begin(), args.end());  // CLI11 parses a vector from its back
  app.parse(args);
  return flags;
}

// The stack flags alone, as `strata search` takes them.
inline cli::PlanFlags parse_stack_flags(std::vector<std::string> args) {
  CLI::App app;
  cli::PlanFlags flags;
  cli::add_stack_flags(*app.add_subcommand("search"), flags);
  args.insert(args.begin(), "search");
  std::reverse(args.begin(), args.end());
  app.parse(args);
  return flags;
}

}  // namespace strata::test
