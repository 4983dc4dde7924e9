#pragma once
// The memory plan: per pipeline stage, the bytes one GPU holds at its peak.
//  - Model states by ZeRO stage, dtype and the framework's precision (Rajbhandari et al. 2020,
//    Sec. 3.1 and 5): with mixed precision as DeepSpeed keeps it, 2 bytes of 16-bit parameters, 2
//    of 16-bit gradients and K = 12 of optimizer states (fp32 master weights, Adam momentum and
//    variance) per parameter; Megatron-LM keeps fp32 main gradients under bf16, 2 + 4 + 12 = 18
//    (data/reference/optimizer_bytes_per_param.csv); AMP and FSDP2 keep fp32 parameters as their
//    own master copy, 4 + 4 + 8; fp32 training 4 + 4 + 8. ZeRO 1 shards the optimizer states over
//    dp, ZeRO 2 the gradients too, ZeRO 3 the parameters too: e.g. Pos+g = 2 + 14/Nd bytes per
//    parameter.
//  - Activations and buffers from the task graph's memory tasks, replayed in each rank's program
//    order: the micro-batches in flight under the schedule, recompute, TP and SP all show there.
//    The peak is the largest sum of live activations and buffers; the breakdown is at that peak.

#include <cstdint>
#include <vector>

#include "models/model_spec.hpp"
#include "models/ops.hpp"
#include "plan/parallel_plan.hpp"
#include "plan/task_graph.hpp"

namespace strata {

struct ModelStateBytes {
  int64_t params = 0;
  int64_t grads = 0;
  int64_t optimizer = 0;

  int64_t total() const { return params + grads + optimizer; }
  ModelStateBytes operator+(const ModelStateBytes& o) const {
    return {params + o.params, grads + o.grads, optimizer + o.optimizer};
  }
};

// Bytes per parameter of each model state, before sharding.
struct StateBytesPerParameter {
  int64_t params = 0;
  int64_t grads = 0;
  int64_t optimizer = 0;  // master weights (when kept apart from the parameters) and Adam's m, v
};
StateBytesPerParameter state_bytes_per_parameter(DType dtype, const Precision& precision);

// One rank's share of `count` (bytes or elements) split over `shards` ZeRO ranks, rounded up.
inline int64_t sharded(int64_t count, int64_t shards) { return (count + shards - 1) / shards; }

// Bytes of model states one GPU holds for `parameters` (its share before ZeRO sharding).
ModelStateBytes model_state_bytes(int64_t parameters, int64_t dp, int64_t zero_stage, DType dtype,
                                  const Precision& precision);
// The same on the GPU under the plan, without what --offload-optimizer and --offload-param keep
// in host memory: of `parameters`, the `expert_parameters` kept apart (stage_expert_parameters)
// sharded over the expert-data-parallel ranks, the rest over the data-parallel ones (dp x cp).
ModelStateBytes model_state_bytes(int64_t parameters, int64_t expert_parameters,
                                  const ParallelPlan& plan);
// What offload keeps in host memory for one GPU: the optimizer states and an fp32 gradient shard
// (--offload-optimizer), the 16-bit parameter shard (--offload-param); 0 without offload.
int64_t host_state_bytes(int64_t parameters, int64_t expert_parameters, const ParallelPlan& plan);

struct MemoryBreakdown {
  int64_t params = 0;
  int64_t grads = 0;
  int64_t optimizer = 0;
  int64_t activations = 0;
  int64_t buffers = 0;

  int64_t total() const { return params + grads + optimizer + activations + buffers; }
};

struct StageMemory {
  int64_t stage = 0;
  int64_t layers = 0;
  int64_t parameters = 0;         // held by one GPU of the stage before ZeRO sharding
  int64_t expert_parameters = 0;  // of which sharded over the expert-data-parallel ranks
  MemoryBreakdown at_peak;        // the breakdown at the moment of the peak
  int64_t peak_bytes = 0;         // at_peak.total()
  int64_t host_bytes = 0;         // host memory offload uses for one GPU (host_state_bytes)
};

struct MemoryPlan {
  std::vector<StageMemory> stages;
  int64_t peak_bytes = 0;    // the largest stage peak
  int64_t device_bytes = 0;  // the device's memory
  bool fits = false;
  int64_t shortfall_bytes = 0;  // how much the largest stage misses by (0 when it fits)
  int64_t host_bytes = 0;       // the largest stage's host memory per GPU under offload
};

MemoryPlan plan_memory(const TaskGraph& graph, const ModelSpec& model, const ParallelPlan& plan,
                       int64_t device_bytes);

// A lower bound on MemoryPlan::peak_bytes without building the graph, for a search to drop plans
// that cannot fit: per stage, the model states plus the activations its layers store for the
// micro-batches in flight when its first backward starts (Narayanan et al. 2021: m under GPipe;
// min(pp - s, m) under 1F1B, and at least as many layer-passes under the interleaved schedule,
// whose warm-up is longer). Buffers and transient activations are not counted.
int64_t peak_memory_lower_bound_bytes(const ModelSpec& model, const ParallelPlan& plan);

}  // namespace strata
