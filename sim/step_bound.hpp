#pragma once
// A lower bound on the step time simulate() predicts for a plan, computed without building the
// task graph, so that a search can skip plans that cannot beat the best ones found.
//
// What it counts is work the simulated step cannot avoid on one pipeline stage's compute stream,
// which runs its tasks one at a time in program order:
//  - every compute task at its uncontended time (compute_time_ns; communication sharing the GPU
//    only slows compute down);
//  - every TP collective that sits between two consecutive compute tasks (the next compute waits
//    for it: Megatron-LM's blocking all-reduce, reduce-scatter and all-gather), at its time alone
//    on an idle cluster (flows that share links only go slower); none with --tp-comm-overlap,
//    whose chunks may hide them; an MoE layer's token dispatcher's collectives too (its
//    all-to-alls balanced: skewed routing only loads the busiest rank's links more);
//  - the pipeline's fill and drain: stage s cannot start before the first micro-batch's forward
//    of model chunk 0 has run on stages 0..s-1, and after stage s's last backward (chunk 0 of
//    the last micro-batch) stages s-1..0 still run theirs.
//  - after stage 0's last backward, the optimizer step of every stage (the global gradient norm
//    waits for every stage's gradients) and, under ZeRO 1 and 2 without --overlap-param-gather,
//    the all-gather of its layers' updated parameters, which follow it on the data-parallel
//    stream (counted as one collective of them all, no longer than its buckets' several).
// So, with F_j and B_j one micro-batch's forward and backward chain on stage j (layers, TP
// collectives, recompute; the embedding on the first stage, the head and loss on the last),
// m micro-batches, v model chunks per stage, and O_s stage s's optimizer step and gathers:
//   step >= max_s [ sum_{j<s} F_j / v  +  m (F_s + B_s)  +  sum_{j<s} B_j / v ]  +  max_s O_s.
// The data-parallel stream also runs its collectives one at a time, each at least its time alone:
//   step >= max_s (sum of stage s's gradient reductions and parameter gathers: the stage's
//   gradients as one collective once per step under ZeRO 0 and 1 and per micro-batch under
//   ZeRO 2 and 3 (with ep > 1 the experts' weights as one more over their own group), its
//   parameters gathered once under ZeRO 1 and 2, and under ZeRO 3 each layer before each
//   forward and each backward). Without --overlap-grad-reduce each reduction also holds the
//   stage's compute: step >= max_s [ sum_{j<s} F_j / v + m (F_s + B_s) + its reductions + O_s ].
// The host thread issues a stage's work one block after another (plan/host_dispatch.hpp):
//   step >= max_s (m x stage s's layers x the host's time for a layer's forward and backward
//   compute tasks, at least ten each (and ten more under full recompute), and its TP collectives).
// Pipeline messages and the overlap of communication with compute are not counted, so the bound
// is below the simulated step by about them; tests check bound <= step over a grid of plans.

#include <cstdint>
#include <map>
#include <optional>
#include <tuple>
#include <vector>

#include "models/model_spec.hpp"
#include "models/ops.hpp"
#include "plan/parallel_plan.hpp"
#include "plan/rank_layout.hpp"
#include "plan/task_graph.hpp"
#include "sim/compute_model.hpp"
#include "topologies/cluster_spec.hpp"

namespace strata {

class StepBoundModel {
 public:
  StepBoundModel(ModelSpec model, ClusterSpec cluster,
                 const std::optional<Calibration>& calibration);

  // The plan must have passed validate_plan.
  TimeNs step_lower_bound_ns(const ParallelPlan& plan);

 private:
  // A collective of `bytes` over `group` (GPU indices) of an idle cluster of `gpus` (memoized).
  TimeNs collective_ns(CollectiveKind kind, const std::vector<int64_t>& group, int64_t gpus,
                       int64_t bytes);
  // An MoE layer's token-dispatcher collectives of one pass (forward or backward).
  TimeNs moe_dispatch_ns(const ParallelPlan& plan, const RankLayout& layout);

  ModelSpec model_;
  ClusterSpec cluster_;
  DeviceEfficiency efficiency_;
  std::map<std::tuple<CollectiveKind, std::vector<int64_t>, int64_t, int64_t>, TimeNs> times_;
};

}  // namespace strata
