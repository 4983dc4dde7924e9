#include "plan/compile.hpp"

#include "plan/lowering.hpp"

namespace strata {

StepFlops step_flops(const TaskGraph& graph) {
  StepFlops flops;
  const auto replicas = static_cast<double>(graph.replicas_per_rank());
  const auto tp = static_cast<double>(graph.axes().tp());
  for (const Task& t : graph.tasks()) {
    if (t.kind != TaskKind::kCompute || t.phase == Phase::kOptimizer) continue;
    const OpShape& op = graph.op(t.op);
    const double copies = replicas / (op.tp_replicated ? tp : 1);
    if (t.phase != Phase::kRecompute) flops.model += static_cast<double>(op.model_flops) * copies;
    flops.hardware += static_cast<double>(op.flops) * copies;
  }
  return flops;
}

CompiledPlan compile_plan(const ModelSpec& model, const ClusterSpec& cluster,
                          const ParallelPlan& plan, GraphMode mode, GraphCheck check) {
  TaskGraph graph = lower_to_task_graph(model, plan, cluster.gpus_per_node, mode);
  ValidationReport validation =
      check == GraphCheck::kValidate ? validate_graph(graph) : ValidationReport{};
  MemoryPlan memory = plan_memory(graph, model, plan, cluster.device.hbm_bytes);
  const StepFlops flops = step_flops(graph);
  return CompiledPlan{model,
                      cluster,
                      plan,
                      std::move(graph),
                      std::move(validation),
                      std::move(memory),
                      flops,
                      count_parameters(model).total};
}

}  // namespace strata
