// Harness for cli/megatron_args.hpp: a Megatron-LM launch script or argument file as
// `strata plan --megatron-args FILE` reads it: the shell reader (continuations, quotes, variables,
// arrays, arithmetic), the flags' classification, and the command line that results, parsed by
// the plan command's own flags (a ParseError there is the documented refusal of a bad flag value,
// as `main` prints it).

#include <algorithm>
#include <functional>

#include <CLI/CLI.hpp>

#include "cli/megatron_args.hpp"
#include "cli/plan_command.hpp"
#include "fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return strata::fuzz::run_reader([&] {
    const std::string path =
        strata::fuzz::scratch().write("train.sh", strata::fuzz::as_text(data, size));
    CLI::App app;
    std::function<int()> run;
    strata::cli::add_plan_command(app, run);
    std::vector<std::string> args =
        strata::cli::expand_megatron_args(app, {"plan", "--megatron-args", path});
    std::reverse(args.begin(), args.end());
    try {
      app.parse(args);
    } catch (const CLI::ParseError&) {
      // A flag value of the wrong type: main prints CLI11's message and exits 2.
    }
  });
}
