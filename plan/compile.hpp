#pragma once
// compile_plan: the plan compiler's entry point. (model, cluster, plan) -> the task graph of one
// training step, its validation, the memory plan and the step's FLOPs.

#include <cstdint>

#include "models/model_spec.hpp"
#include "plan/graph_validator.hpp"
#include "plan/memory_plan.hpp"
#include "plan/parallel_plan.hpp"
#include "plan/task_graph.hpp"
#include "topologies/cluster_spec.hpp"

namespace strata {

struct StepFlops {
  double model = 0;     // forward and backward (MFU's numerator; no recompute)
  double hardware = 0;  // what the kernels execute, recompute included (HFU's numerator)
};

// FLOPs of one step, summed from the graph's compute tasks over all GPUs; work that every TP rank
// repeats on the same data counts once, and the optimizer's elementwise update is not counted,
// as in Megatron-LM's accounting. The model FLOPs (OpShape::model_flops) do not depend on the
// plan. The hardware FLOPs add recompute, and count what the kernels execute: under flash
// attention the causal half of the scores and the backward's recomputed scores, so with long
// sequences they can fall below the model FLOPs, which count the full s^2.
StepFlops step_flops(const TaskGraph& graph);

struct CompiledPlan {
  ModelSpec model;
  ClusterSpec cluster;
  ParallelPlan plan;
  TaskGraph graph;
  ValidationReport validation;
  MemoryPlan memory;
  StepFlops flops;
  int64_t parameters = 0;  // the whole model's
};

// kSkip leaves `validation` empty (ok): for callers that compile many plans and validate only
// those they report (the search).
enum class GraphCheck : uint8_t { kValidate, kSkip };

// The plan must have passed validate_plan. Broken graph invariants are reported in
// `validation`, not thrown: they are bugs of the compiler, which callers assert on.
CompiledPlan compile_plan(const ModelSpec& model, const ClusterSpec& cluster,
                          const ParallelPlan& plan, GraphMode mode,
                          GraphCheck check = GraphCheck::kValidate);

}  // namespace strata
