// Data-parallel communication and the optimizer step: ZeRO stages 0-3 (Rajbhandari et al. 2020)
// as Megatron-LM's distributed optimizer and DeepSpeed run them.

#include "plan/lowering_context.hpp"

namespace strata {

namespace {

bool gathers_parameters(const LoweringContext& ctx) {
  return ctx.plan.zero_stage == 3 && ctx.plan.dp > 1;
}

}  // namespace

TaskId gather_params(const LoweringContext& ctx, RankState& state, int64_t bytes) {
  if (!gathers_parameters(ctx)) return kNoTask;
  RankProgram& p = state.program;
  const TaskId buffer =
      p.alloc(Stream::kDpComm, BufferClass::kGatheredParams, bytes, {state.last_gathered_free});
  return p.collective(TaskRole::kParamGather, Stream::kDpComm, CollectiveKind::kAllGather,
                      state.groups.dp, bytes, {buffer});
}

void release_params(const LoweringContext& ctx, RankState& state, int64_t bytes, TaskId after) {
  if (!gathers_parameters(ctx)) return;
  state.last_gathered_free =
      state.program.release(Stream::kCompute, BufferClass::kGatheredParams, bytes, {after});
}

// ZeRO 0 all-reduces and ZeRO 1 reduce-scatters each block once, after its last micro-batch;
// ZeRO 2 and 3 keep only a gradient shard, so they reduce-scatter after every micro-batch.
void sync_gradients(const LoweringContext& ctx, RankState& state, int64_t bytes, bool last_pass,
                    TaskId after) {
  if (ctx.plan.dp == 1 || bytes == 0) return;
  const int64_t zero = ctx.plan.zero_stage;
  if (zero < 2 && !last_pass) return;
  const CollectiveKind kind =
      zero == 0 ? CollectiveKind::kAllReduce : CollectiveKind::kReduceScatter;
  state.grad_syncs.push_back(state.program.collective(TaskRole::kGradSync, Stream::kDpComm, kind,
                                                      state.groups.dp, bytes, {after}));
}

void lower_optimizer_step(const LoweringContext& ctx, RankState& state, TaskId embedding_grads) {
  RankProgram& p = state.program;
  const int64_t e = bytes_per_element(ctx.plan.dtype);
  p.label(Phase::kOptimizer, -1, -1, 0);
  // The first and last stage each hold a copy of a tied embedding; their gradients are summed
  // (Megatron-LM's embedding group).
  if (state.groups.embedding >= 0) {
    state.grad_syncs.push_back(p.collective(
        TaskRole::kEmbeddingGradSync, Stream::kDpComm, CollectiveKind::kAllReduce,
        state.groups.embedding, ctx.sizes.vocab_shard * ctx.model.hidden * e, {embedding_grads}));
  }
  // Sequence parallelism leaves each TP rank with the norm and bias gradients of its own
  // sequence shard: they are summed over the TP group before the step (Megatron-LM's
  // _allreduce_layernorm_grads): two norms (weight and bias) and the two row-parallel biases per
  // layer, and the final norm on the last stage.
  if (ctx.plan.sequence_parallel && ctx.plan.tp > 1) {
    const int64_t h = ctx.model.hidden;
    const int64_t norm = ctx.model.norm == NormKind::kLayerNorm ? 2 * h : h;
    const int64_t biases = ctx.model.linear_bias ? 2 * h : 0;
    int64_t elements = ctx.stage_layers[static_cast<size_t>(state.stage)] * (2 * norm + biases);
    if (state.stage == ctx.plan.pp - 1) elements += norm;
    std::vector<TaskId> after = state.grad_syncs;
    after.push_back(p.last_compute());
    state.grad_syncs.push_back(p.collective(TaskRole::kSequenceParallelGradSync, Stream::kTpComm,
                                            CollectiveKind::kAllReduce, state.groups.tp,
                                            elements * e, after));
  }
  // Gradient clipping needs the global norm: a scalar all-reduce over the ranks holding distinct
  // gradient shards.
  TaskId ready = kNoTask;
  if (state.groups.grad_norm >= 0) {
    ready = p.collective(TaskRole::kGradNorm, Stream::kDpComm, CollectiveKind::kAllReduce,
                         state.groups.grad_norm, 4, state.grad_syncs);
  }
  const int32_t optimizer_op = ctx.ops.optimizer[static_cast<size_t>(state.stage)];
  const TaskId step = ready != kNoTask
                          ? p.compute(TaskRole::kOptimizer, optimizer_op, {ready})
                          : p.compute(TaskRole::kOptimizer, optimizer_op, state.grad_syncs);
  // ZeRO 1 and 2: each rank updated its shard; gather the updated parameters, one block per
  // layer and one for the embedding or head.
  if ((ctx.plan.zero_stage == 1 || ctx.plan.zero_stage == 2) && ctx.plan.dp > 1) {
    for (int64_t chunk = 0; chunk < ctx.plan.vpp; ++chunk) {
      const int64_t first = ctx.first_layer(state.stage, chunk);
      for (int64_t layer = first; layer < first + ctx.chunk_layers(state.stage); ++layer) {
        p.set_layer(static_cast<int32_t>(layer));
        p.collective(TaskRole::kParamGather, Stream::kDpComm, CollectiveKind::kAllGather,
                     state.groups.dp, ctx.layer_param_bytes, {step});
      }
    }
    p.set_layer(-1);
    const int64_t edge_bytes = (state.stage == 0 ? ctx.embedding_param_bytes : 0) +
                               (state.stage == ctx.plan.pp - 1 ? ctx.head_param_bytes : 0);
    p.collective(TaskRole::kParamGather, Stream::kDpComm, CollectiveKind::kAllGather,
                 state.groups.dp, edge_bytes, {step});
  }
}

}  // namespace strata
