#include "cli/plan_command.hpp"

#include <cstdio>
#include <memory>

#include "cli/plan_options.hpp"
#include "cli/plan_report.hpp"
#include "common/atomic_file.hpp"
#include "common/error.hpp"
#include "plan/graph_export.hpp"

namespace strata::cli {

namespace {

struct PlanCommandOptions {
  PlanFlags flags;
  std::string graph_mode = "folded";
  bool layout = false;
  std::string json_path;
  std::string graph_path;
  std::string dot_path;
};

int run_plan(const PlanCommandOptions& options) {
  const PlanInputs inputs = resolve_plan_inputs(options.flags);
  const GraphMode mode = options.graph_mode == "full" ? GraphMode::kFull : GraphMode::kFolded;
  const CompiledPlan compiled = compile_plan(inputs.model, inputs.cluster, inputs.plan, mode);
  if (!compiled.validation.ok()) {
    std::string errors;
    for (const auto& error : compiled.validation.errors) errors += "\n  " + error;
    STRATA_ASSERT(false, "the compiled task graph breaks its invariants:" + errors);
  }
  // Render every output, then write them all or none, then report.
  std::vector<OutputFile> outputs;
  if (!options.json_path.empty()) {
    outputs.push_back({options.json_path, plan_report_json(compiled).dump(2) + "\n"});
  }
  if (!options.graph_path.empty())
    outputs.push_back({options.graph_path, graph_to_json(compiled.graph)});
  if (!options.dot_path.empty()) {
    outputs.push_back({options.dot_path, graph_to_dot(compiled.graph, options.dot_path)});
  }
  write_files_atomically(outputs);
  std::fputs(plan_summary(compiled).c_str(), stdout);
  if (options.layout) std::fputs(("\n" + layout_table(compiled)).c_str(), stdout);
  return 0;
}

}  // namespace

void add_plan_command(CLI::App& app, std::function<int()>& run) {
  auto options = std::make_shared<PlanCommandOptions>();
  CLI::App* command = app.add_subcommand(
      "plan",
      "Compile a model, cluster and parallel plan into a validated task graph and memory plan");
  add_plan_flags(*command, options->flags);
  command
      ->add_option("--graph", options->graph_mode,
                   "Task graph: folded (one rank per stage) or full")
      ->check(CLI::IsMember({"folded", "full"}));
  command->add_flag("--layout", options->layout,
                    "Print which rank is which (dp, pp, tp), node and GPU");
  command->add_option("--json", options->json_path, "Write the plan summary as JSON");
  command->add_option("--emit-graph", options->graph_path, "Write the task graph as JSON");
  command->add_option("--dot", options->dot_path,
                      "Write the task graph as Graphviz DOT (small graphs)");
  command->callback([options, &run] { run = [options] { return run_plan(*options); }; });
}

}  // namespace strata::cli
