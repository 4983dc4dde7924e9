#include "plan/memory_plan.hpp"

#include <algorithm>
#include <map>

#include "plan/activation_memory.hpp"
#include "plan/shard_sizes.hpp"

namespace strata {

namespace {

// Transformer Engine's FP8 copy of each layer GEMM weight and its transpose (1 + 1 bytes), kept
// beside the 16-bit weights across micro-batches; --fp8-param-gather keeps the weights in FP8
// instead, with no 16-bit copy: the same 2 bytes as the 16-bit weights (so nothing is added).
// ZeRO 3 casts the gathered weights as it uses them.
int64_t fp8_weight_copy_bytes(const ModelSpec& model, const ParallelPlan& plan, int64_t layers) {
  if (plan.fp8 == Fp8Format::kNone || plan.fp8_param_gather || plan.zero_stage == 3) return 0;
  return 2 * layers * shard_sizes(model, plan).layer_gemm_weights;
}

struct LiveMemory {
  int64_t activations = 0;
  int64_t buffers = 0;
  int64_t peak = -1;
  MemoryBreakdown at_peak;
};

}  // namespace

StateBytesPerParameter state_bytes_per_parameter(DType dtype, const Precision& precision) {
  if (dtype == DType::kFp32) return {4, 4, 8};
  const int64_t e = bytes_per_element(dtype);
  StateBytesPerParameter bytes;
  bytes.params = precision.fp32_params ? 4 : e;
  bytes.grads = precision.fp32_grads ? 4 : e;
  const bool separate_master = precision.fp32_master_weights && !precision.fp32_params;
  bytes.optimizer = (separate_master ? 4 : 0) + (precision.fp32_optimizer_states ? 8 : 2 * e);
  return bytes;
}

namespace {

// The model states of `parameters` split as ZeRO shards them: the experts' apart.
ModelStateBytes sharded_states(int64_t parameters, int64_t expert_parameters,
                               const ParallelPlan& plan) {
  const auto states = [&](int64_t count, int64_t shards) {
    return model_state_bytes(count, shards, plan.zero_stage, plan.dtype, plan.precision);
  };
  ModelStateBytes bytes = states(parameters - expert_parameters, plan.data_shards());
  if (expert_parameters > 0) bytes = bytes + states(expert_parameters, plan.expert_data_shards());
  return bytes;
}

}  // namespace

ModelStateBytes model_state_bytes(int64_t parameters, int64_t expert_parameters,
                                  const ParallelPlan& plan) {
  ModelStateBytes states = sharded_states(parameters, expert_parameters, plan);
  if (plan.offload.optimizer) {
    states.optimizer = 0;
    if (plan.zero_stage >= 2) states.grads = 0;  // the gradient shard is kept on the host
  }
  if (plan.offload.params) states.params = 0;
  return states;
}

int64_t host_state_bytes(int64_t parameters, int64_t expert_parameters, const ParallelPlan& plan) {
  const ModelStateBytes states = sharded_states(parameters, expert_parameters, plan);
  int64_t bytes = 0;
  // ZeRO-Offload keeps the optimizer states and an fp32 gradient shard the step reads (DeepSpeed
  // stage_1_and_2.py's single_partition_of_fp32_groups and their grads).
  if (plan.offload.optimizer) {
    bytes += states.optimizer + sharded(4 * (parameters - expert_parameters), plan.data_shards()) +
             sharded(4 * expert_parameters, plan.expert_data_shards());
  }
  if (plan.offload.params) bytes += states.params;
  return bytes;
}

ModelStateBytes model_state_bytes(int64_t parameters, int64_t dp, int64_t zero_stage, DType dtype,
                                  const Precision& precision) {
  const StateBytesPerParameter per_parameter = state_bytes_per_parameter(dtype, precision);
  ModelStateBytes states;
  states.params = parameters * per_parameter.params;
  states.grads = parameters * per_parameter.grads;
  states.optimizer = parameters * per_parameter.optimizer;
  if (zero_stage >= 1) states.optimizer = sharded(states.optimizer, dp);
  if (zero_stage >= 2) states.grads = sharded(states.grads, dp);
  if (zero_stage >= 3) states.params = sharded(states.params, dp);
  return states;
}

MemoryPlan plan_memory(const TaskGraph& graph, const ModelSpec& model, const ParallelPlan& plan,
                       int64_t device_bytes) {
  // Replay each rank's memory tasks in program (id) order.
  std::map<int32_t, LiveMemory> live;
  for (const Task& t : graph.tasks()) {
    if (t.kind != TaskKind::kMemory) continue;
    LiveMemory& m = live[t.rank];
    const int64_t delta = t.memory == MemoryAction::kAlloc ? t.bytes : -t.bytes;
    (counts_as_activations(t.buffer) ? m.activations : m.buffers) += delta;
    if (m.activations + m.buffers > m.peak) {
      m.peak = m.activations + m.buffers;
      m.at_peak.activations = m.activations;
      m.at_peak.buffers = m.buffers;
    }
  }
  const std::vector<int64_t> stage_layers = layers_per_stage(plan, model);
  const std::vector<int64_t> parameters = stage_parameters(model, plan);
  const std::vector<int64_t> experts = stage_expert_parameters(model, plan);
  MemoryPlan memory;
  memory.device_bytes = device_bytes;
  for (size_t s = 0; s < stage_layers.size(); ++s) {
    StageMemory stage;
    stage.stage = static_cast<int64_t>(s);
    stage.layers = stage_layers[s];
    stage.parameters = parameters[s];
    stage.expert_parameters = experts[s];
    const ModelStateBytes states =
        model_state_bytes(stage.parameters, stage.expert_parameters, plan);
    stage.at_peak.params = states.params + fp8_weight_copy_bytes(model, plan, stage.layers);
    stage.at_peak.grads = states.grads;
    stage.at_peak.optimizer = states.optimizer;
    stage.host_bytes = host_state_bytes(stage.parameters, stage.expert_parameters, plan);
    memory.host_bytes = std::max(memory.host_bytes, stage.host_bytes);
    memory.stages.push_back(stage);
  }
  for (const GraphRank& rank : graph.ranks()) {
    StageMemory& stage = memory.stages[static_cast<size_t>(rank.stage)];
    const LiveMemory& m = live[rank.rank];
    if (m.at_peak.activations + m.at_peak.buffers >
        stage.at_peak.activations + stage.at_peak.buffers) {
      stage.at_peak.activations = m.at_peak.activations;
      stage.at_peak.buffers = m.at_peak.buffers;
    }
  }
  for (StageMemory& stage : memory.stages) {
    stage.peak_bytes = stage.at_peak.total();
    memory.peak_bytes = std::max(memory.peak_bytes, stage.peak_bytes);
  }
  memory.fits = memory.peak_bytes <= device_bytes;
  memory.shortfall_bytes = memory.fits ? 0 : memory.peak_bytes - device_bytes;
  return memory;
}

int64_t peak_memory_lower_bound_bytes(const ModelSpec& model, const ParallelPlan& plan) {
  const std::vector<int64_t> stage_layers = layers_per_stage(plan, model);
  const std::vector<int64_t> parameters = stage_parameters(model, plan);
  const std::vector<int64_t> experts = stage_expert_parameters(model, plan);
  // What one micro-batch leaves stored on each stage: its layers', dense and MoE.
  const int64_t dense = stored_layer_activation_bytes(model, plan, false);
  const int64_t moe = model.moe() ? stored_layer_activation_bytes(model, plan, true) : 0;
  const std::vector<int64_t> stored = sum_over_stage_layers(
      plan, model, [&](int64_t l) { return model.is_moe_layer(l) ? moe : dense; });
  const int64_t micro_batches = plan.micro_batches();
  int64_t peak = 0;
  for (int64_t s = 0; s < plan.pp; ++s) {
    const int64_t in_flight = plan.schedule == ScheduleKind::kGpipe
                                  ? micro_batches
                                  : std::min(plan.pp - s, micro_batches);
    const auto i = static_cast<size_t>(s);
    const int64_t states = model_state_bytes(parameters[i], experts[i], plan).total() +
                           fp8_weight_copy_bytes(model, plan, stage_layers[i]);
    peak = std::max(peak, states + in_flight * stored[i]);
  }
  return peak;
}

}  // namespace strata
