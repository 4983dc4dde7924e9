#include "cli/check_command.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "cli/check_expectations.hpp"
#include "cli/check_report.hpp"
#include "cli/check_simulation.hpp"
#include "cli/check_update.hpp"
#include "cli/plan_options.hpp"
#include "cli/plan_report.hpp"
#include "common/atomic_file.hpp"
#include "common/error.hpp"

namespace strata::cli {

namespace {

namespace fs = std::filesystem;

struct CheckCommandOptions {
  std::vector<std::string> paths;  // scenario files and folders of them
  std::optional<int64_t> jobs;     // default: the machine's hardware threads
  std::string junit_path;
  bool update = false;
};

// Every *.json directly in a folder (not its subfolders: scenarios/models/ holds model files),
// sorted by name; files as given; each file once, at its first mention.
std::vector<std::string> scenario_files(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  std::set<fs::path> seen;
  const auto add = [&](const fs::path& file) {
    std::error_code error;
    const fs::path canonical = fs::weakly_canonical(file, error);
    if (seen.insert(error ? file : canonical).second) files.push_back(file.string());
  };
  for (const std::string& path : paths) {
    std::error_code error;
    if (fs::is_regular_file(path, error)) {
      add(path);
      continue;
    }
    if (!fs::is_directory(path, error)) {
      throw InputError(path, "", "no such file or folder",
                       "give scenario files (*.json) or folders holding them, e.g. scenarios/");
    }
    std::vector<fs::path> in_folder;
    for (const fs::directory_entry& entry : fs::directory_iterator(path, error)) {
      if (entry.is_regular_file(error) && entry.path().extension() == ".json")
        in_folder.push_back(entry.path());
    }
    if (error) {
      throw InputError(path, "", "cannot list the folder: " + error.message(),
                       "check the permissions");
    }
    if (in_folder.empty()) {
      throw InputError(path, "", "the folder holds no scenario file (*.json)",
                       "give a folder with scenario files, e.g. scenarios/");
    }
    std::sort(in_folder.begin(), in_folder.end());
    for (const fs::path& file : in_folder) add(file);
  }
  return files;
}

// "llama3-70b on 64 GPUs of dgx-h100: dp 2 x tp 8 x pp 4, zero 1, ..."
std::string plan_text(const PlanInputs& inputs) {
  return fmt::format("{} on {} GPUs of {}: {}", inputs.model.name, inputs.plan.gpus(),
                     inputs.cluster.name, plan_line(inputs.plan));
}

int64_t thread_count(const CheckCommandOptions& options) {
  if (!options.jobs) return std::max<int64_t>(1, std::thread::hardware_concurrency());
  if (*options.jobs < 1) {
    throw InputError("command line", "--jobs",
                     fmt::format("must be at least 1, found {}", *options.jobs),
                     "give how many scenarios to simulate at once, e.g. --jobs 2");
  }
  return *options.jobs;
}

int run_check(const CheckCommandOptions& options) {
  // Read and check every scenario before simulating any: a mistake is refused at once.
  const int64_t jobs = thread_count(options);
  const std::vector<std::string> files = scenario_files(options.paths);
  const MetricKinds metrics = checkable_metrics();
  std::vector<PlanInputs> inputs;
  std::vector<ScenarioExpectations> expectations;
  for (const std::string& file : files) {
    PlanFlags flags;
    flags.scenario = file;
    inputs.push_back(resolve_plan_inputs(flags));
    expectations.push_back(read_expectations(file, metrics));
  }
  const std::vector<nlohmann::json> reports = simulated_reports(inputs, jobs);

  std::vector<ScenarioOutcome> outcomes;
  for (size_t i = 0; i < files.size(); ++i) {
    ScenarioExpectations& e = expectations[i];
    outcomes.push_back({fs::path(files[i]).stem().string(), files[i], std::move(e.description),
                        plan_text(inputs[i]), check_expectations(e, reports[i]),
                        std::move(e.reference), std::move(e.reference_source), reports[i]});
  }

  // Render every output, then write them all or none, then report.
  std::vector<OutputFile> outputs;
  if (!options.junit_path.empty()) outputs.push_back({options.junit_path, check_junit(outcomes)});
  std::vector<std::string> updated;
  if (options.update) {
    for (const ScenarioOutcome& outcome : outcomes) {
      std::optional<std::string> text = updated_scenario_text(outcome.path, outcome.checks);
      if (!text) continue;
      outputs.push_back({outcome.path, std::move(*text)});
      updated.push_back(outcome.path);
    }
  }
  write_files_atomically(outputs);
  std::fputs(check_table(outcomes, options.update).c_str(), stdout);
  if (!options.update) return regression_count(outcomes) == 0 ? 0 : 1;
  const std::string rewritten =
      updated.empty() ? "no file rewritten: every expected value equals its prediction\n"
                      : fmt::format("rewrote {}\n", fmt::join(updated, ", "));
  std::fputs(rewritten.c_str(), stdout);
  return 0;
}

}  // namespace

void add_check_command(CLI::App& app, std::function<int()>& run) {
  auto options = std::make_shared<CheckCommandOptions>();
  CLI::App* command = app.add_subcommand(
      "check",
      "Simulate every scenario and compare the predictions with its expectations (CI "
      "regression of predicted throughput): exit 0 when all hold, 1 when one regressed");
  command
      ->add_option("scenarios", options->paths,
                   "Scenario files, or folders whose *.json files are scenarios (e.g. scenarios/)")
      ->required()
      ->type_name("PATH");
  command
      ->add_option("--jobs,-j", options->jobs,
                   "Scenarios simulated at once (default: the machine's hardware threads)")
      ->type_name("N");
  CLI::Option* junit =
      command->add_option("--junit", options->junit_path, "Write the checks as JUnit XML")
          ->type_name("FILE");
  command
      ->add_flag("--update", options->update,
                 "Rewrite the expected values with the predictions (tolerances and other keys "
                 "kept; all files or none) and exit 0")
      ->excludes(junit);
  command->callback([options, &run] { run = [options] { return run_check(*options); }; });
}

}  // namespace strata::cli
