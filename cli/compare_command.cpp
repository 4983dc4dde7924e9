#include "cli/compare_command.hpp"

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/atomic_file.hpp"
#include "viewer/trace_model.hpp"
#include "viewer/trace_summary.hpp"

namespace strata::cli {

namespace {

struct CompareOptions {
  std::string predicted;
  std::string measured;
  std::string json_path;
};

double seconds(int64_t ns) { return static_cast<double>(ns) * 1e-9; }

std::string stage_text(int32_t stage) { return stage < 0 ? "step" : fmt::format("{}", stage); }

std::string report_text(const CompareOptions& options,
                        const std::vector<viewer::ComparisonRow>& rows) {
  std::string out =
      fmt::format("predicted {}\nmeasured  {}\n\n", options.predicted, options.measured);
  out += fmt::format("{:>5}  {:<14} {:>14} {:>14} {:>9}\n", "stage", "part", "predicted ms",
                     "measured ms", "error");
  for (const viewer::ComparisonRow& row : rows) {
    const std::optional<double> error = row.error();
    out += fmt::format("{:>5}  {:<14} {:>14.3f} {:>14.3f} {:>9}\n", stage_text(row.stage),
                       row.quantity, seconds(row.first_ns) * 1e3, seconds(row.second_ns) * 1e3,
                       error ? fmt::format("{:+.1f}%", 100 * *error) : "-");
  }
  out += "\nerror = predicted / measured - 1; exposed: communication the compute stream waits on\n";
  return out;
}

nlohmann::json report_json(const CompareOptions& options,
                           const std::vector<viewer::ComparisonRow>& rows) {
  nlohmann::json out;
  out["predicted"] = options.predicted;
  out["measured"] = options.measured;
  out["rows"] = nlohmann::json::array();
  for (const viewer::ComparisonRow& row : rows) {
    const std::optional<double> error = row.error();
    out["rows"].push_back({{"stage", row.stage},
                           {"part", row.quantity},
                           {"predicted_s", seconds(row.first_ns)},
                           {"measured_s", seconds(row.second_ns)},
                           {"error", error ? nlohmann::json(*error) : nlohmann::json(nullptr)}});
  }
  return out;
}

int run_compare(const CompareOptions& options) {
  // Both traces are read and checked before anything is written.
  const viewer::TraceSummary predicted = viewer::summarize(viewer::load_trace(options.predicted));
  const viewer::TraceSummary measured = viewer::summarize(viewer::load_trace(options.measured));
  const std::vector<viewer::ComparisonRow> rows = viewer::compare(predicted, measured);
  const std::string text = report_text(options, rows);
  if (!options.json_path.empty()) {
    write_files_atomically({{options.json_path, report_json(options, rows).dump(2) + "\n"}});
  }
  std::fputs(text.c_str(), stdout);
  return 0;
}

}  // namespace

void add_compare_command(CLI::App& app, std::function<int()>& run) {
  auto options = std::make_shared<CompareOptions>();
  CLI::App* command = app.add_subcommand(
      "compare",
      "A predicted step's trace against a measured one, part by part: compute by phase, busy, "
      "bubble and exposed communication per axis, per pipeline stage, with the error");
  command
      ->add_option("PREDICTED", options->predicted, "The predicted trace (strata simulate --trace)")
      ->required()
      ->type_name("TRACE.json");
  command->add_option("MEASURED", options->measured, "The measured trace (strata train --trace)")
      ->required()
      ->type_name("TRACE.json");
  command->add_option("--json", options->json_path, "Write the rows as JSON")->type_name("FILE");
  command->callback([options, &run] { run = [options] { return run_compare(*options); }; });
}

}  // namespace strata::cli
