// Harness for scenario files as `strata check` reads them (cli/check_command.cpp): the model,
// cluster, GPUs and plan (resolve_plan_inputs with --scenario, cli/plan_options.hpp), then the
// expectations (read_expectations, cli/check_expectations.hpp) against the metrics of the
// simulated report (checkable_metrics, computed once). The file is scenario.json in the scratch
// folder, beside a copy of scenarios/models/ as the repository's scenarios lie beside theirs, so
// that their relative model paths resolve.

#include <filesystem>

#include "cli/check_expectations.hpp"
#include "cli/check_simulation.hpp"
#include "cli/plan_options.hpp"
#include "fuzz/fuzz_support.hpp"

namespace {

namespace fs = std::filesystem;

const strata::cli::MetricKinds& metrics() {
  static const strata::cli::MetricKinds kinds = strata::cli::checkable_metrics();
  return kinds;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const fs::path models = strata::fuzz::scratch().path() / "models";
  fs::create_directories(models);
  for (const fs::directory_entry& entry :
       fs::directory_iterator(fs::path(STRATA_SOURCE_DIR) / "scenarios" / "models")) {
    fs::copy_file(entry.path(), models / entry.path().filename());
  }
  metrics();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      strata::fuzz::scratch().write("scenario.json", strata::fuzz::as_text(data, size));
  return strata::fuzz::run_reader([&] {
    strata::cli::PlanFlags flags;
    flags.scenario = path;
    strata::cli::resolve_plan_inputs(flags);
    strata::cli::read_expectations(path, metrics());
  });
}
