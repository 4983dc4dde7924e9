#pragma once
// Lowering: (model, plan, cluster shape) -> the task graph of one training step, at op
// granularity per layer, with the communication the plan implies (docs/design.md, "The task
// graph"):
//  - TP: all-reduce after the attention output and MLP-down products in forward and after the QKV
//    and MLP-up input gradients in backward; with sequence parallelism, all-gather before the
//    column-parallel products and reduce-scatter after the row-parallel ones (and the backward
//    re-gathers), as Megatron-LM does;
//  - PP: send/recv of activations forward and of their gradients backward between (virtual)
//    stages, in the order of the plan's schedule;
//  - DP: gradient all-reduce per layer after its last backward (ZeRO 0), reduce-scatter of
//    gradients and all-gather of updated parameters (ZeRO 1 once per step; ZeRO 2 and 3 reduce
//    every micro-batch, as DeepSpeed's partitioned gradients do), per-layer parameter all-gather
//    before each forward and backward with a two-layer prefetch window (ZeRO 3); the tied
//    embedding's gradient all-reduce between the first and last stage; the global gradient norm;
//  - recompute: the layer forward again before its backward (full) or the attention core
//    (selective);
//  - memory tasks for every buffer that lives across tasks.

#include <cstdint>

#include "models/model_spec.hpp"
#include "plan/parallel_plan.hpp"
#include "plan/task_graph.hpp"

namespace strata {

// The plan must have passed validate_plan. Folded: one rank per pipeline stage (dp 0, tp 0);
// full: every rank.
TaskGraph lower_to_task_graph(const ModelSpec& model, const ParallelPlan& plan,
                              int64_t gpus_per_node, GraphMode mode);

}  // namespace strata
