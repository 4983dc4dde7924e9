// One transformer layer's forward, backward and recompute tasks (Megatron-LM's tensor and
// sequence parallelism; Shoeybi et al. 2019 Fig. 3, Korthikanti et al. 2022 Fig. 5), and the
// memory tasks of what the layer stores for its backward.

#include "plan/lowering_context.hpp"

namespace strata {

TaskId tp_collective(const LoweringContext& ctx, RankState& state, TaskRole role,
                     CollectiveKind kind, int64_t bytes, TaskId dep) {
  if (ctx.plan.tp == 1) return dep;
  return state.program.collective(role, Stream::kTpComm, kind, state.groups.tp, bytes, {dep});
}

namespace {

// Row-parallel products end with an all-reduce, or with sequence parallelism a reduce-scatter
// back to sequence shards.
CollectiveKind row_parallel_reduction(const ParallelPlan& plan) {
  return plan.sequence_parallel ? CollectiveKind::kReduceScatter : CollectiveKind::kAllReduce;
}

// With sequence parallelism, a column-parallel product first gathers its sequence-sharded input.
TaskId sequence_gather(const LoweringContext& ctx, RankState& state, TaskRole role, TaskId dep) {
  if (!ctx.plan.sequence_parallel) return dep;
  return tp_collective(ctx, state, role, CollectiveKind::kAllGather, ctx.tp_message_bytes, dep);
}

// The forward ops alone, in the program's current phase (forward or recompute).
TaskId layer_forward_ops(const LoweringContext& ctx, RankState& state, TaskId input,
                         TaskId params) {
  RankProgram& p = state.program;
  const OpTable& op = ctx.ops;
  const int64_t msg = ctx.tp_message_bytes;
  const CollectiveKind reduce = row_parallel_reduction(ctx.plan);

  const TaskId norm1 = p.compute(TaskRole::kNorm1, op.norm.forward, {input, params});
  const TaskId qkv_in = sequence_gather(ctx, state, TaskRole::kQkv, norm1);
  p.compute(TaskRole::kQkv, op.qkv.forward, {qkv_in});
  p.compute(TaskRole::kAttention, op.attention.forward);
  const TaskId attn_out = p.compute(TaskRole::kAttnOut, op.attn_out.forward);
  const TaskId attn_reduced = tp_collective(ctx, state, TaskRole::kAttnOut, reduce, msg, attn_out);
  p.compute(TaskRole::kAttnResidual, op.residual.forward, {attn_reduced});
  const TaskId norm2 = p.compute(TaskRole::kNorm2, op.norm.forward);
  const TaskId up_in = sequence_gather(ctx, state, TaskRole::kMlpUp, norm2);
  p.compute(TaskRole::kMlpUp, op.mlp_up.forward, {up_in});
  p.compute(TaskRole::kMlpAct, op.mlp_act.forward);
  const TaskId down = p.compute(TaskRole::kMlpDown, op.mlp_down.forward);
  const TaskId mlp_reduced = tp_collective(ctx, state, TaskRole::kMlpDown, reduce, msg, down);
  return p.compute(TaskRole::kMlpResidual, op.residual.forward, {mlp_reduced});
}

}  // namespace

TaskId lower_layer_forward(const LoweringContext& ctx, RankState& state, int64_t layer,
                           TaskId input, TaskId params) {
  RankProgram& p = state.program;
  p.set_layer(static_cast<int32_t>(layer));
  if (ctx.plan.recompute == RecomputeKind::kFull) {
    p.alloc(Stream::kCompute, BufferClass::kLayerInput, ctx.layer_input_bytes);
  } else {
    p.alloc(Stream::kCompute, BufferClass::kActivations, ctx.stored_bytes);
  }
  return layer_forward_ops(ctx, state, input, params);
}

TaskId lower_layer_backward(const LoweringContext& ctx, RankState& state, int64_t layer,
                            TaskId grad, TaskId params) {
  RankProgram& p = state.program;
  const OpTable& op = ctx.ops;
  const int64_t msg = ctx.tp_message_bytes;
  const CollectiveKind reduce = row_parallel_reduction(ctx.plan);
  const RecomputeKind recompute = ctx.plan.recompute;
  p.set_layer(static_cast<int32_t>(layer));

  if (recompute == RecomputeKind::kFull) {
    // Run the layer forward again from its checkpoint, keeping every activation this time.
    p.set_phase(Phase::kRecompute);
    p.alloc(Stream::kCompute, BufferClass::kActivations, ctx.full_layer_bytes);
    layer_forward_ops(ctx, state, kNoTask, params);  // needs no gradient: may run before it arrives
    p.set_phase(Phase::kBackward);
  }
  const TaskId mlp_residual =
      p.compute(TaskRole::kMlpResidual, op.residual.backward, {grad, params});
  const TaskId down_grad_in = sequence_gather(ctx, state, TaskRole::kMlpDown, mlp_residual);
  p.compute(TaskRole::kMlpDown, op.mlp_down.backward, {down_grad_in});
  const TaskId act = p.compute(TaskRole::kMlpAct, op.mlp_act.backward);
  // Sequence parallel: gather norm2's output again for the MLP-up weight gradient.
  const TaskId up_in = sequence_gather(ctx, state, TaskRole::kMlpUp, act);
  const TaskId up = p.compute(TaskRole::kMlpUp, op.mlp_up.backward, {up_in});
  const TaskId up_reduced = tp_collective(ctx, state, TaskRole::kMlpUp, reduce, msg, up);
  p.compute(TaskRole::kNorm2, op.norm.backward, {up_reduced});
  const TaskId attn_residual = p.compute(TaskRole::kAttnResidual, op.residual.backward);
  const TaskId out_grad_in = sequence_gather(ctx, state, TaskRole::kAttnOut, attn_residual);
  p.compute(TaskRole::kAttnOut, op.attn_out.backward, {out_grad_in});
  const bool rebuild_scores = recomputes_attention_scores(ctx.plan);
  if (rebuild_scores) {
    // Rebuild the softmax and dropout outputs (5as^2b/t bytes) from the stored Q, K and V.
    p.set_phase(Phase::kRecompute);
    p.alloc(Stream::kCompute, BufferClass::kAttentionScores, ctx.scores_bytes);
    p.compute(TaskRole::kAttention, op.attention.forward);
    p.set_phase(Phase::kBackward);
  }
  const TaskId attention = p.compute(TaskRole::kAttention, op.attention.backward);
  if (rebuild_scores) {
    p.release(Stream::kCompute, BufferClass::kAttentionScores, ctx.scores_bytes);
  }
  const TaskId qkv_in = sequence_gather(ctx, state, TaskRole::kQkv, attention);
  const TaskId qkv = p.compute(TaskRole::kQkv, op.qkv.backward, {qkv_in});
  const TaskId qkv_reduced = tp_collective(ctx, state, TaskRole::kQkv, reduce, msg, qkv);
  const TaskId input_grad = p.compute(TaskRole::kNorm1, op.norm.backward, {qkv_reduced});
  if (recompute == RecomputeKind::kFull) {
    p.release(Stream::kCompute, BufferClass::kActivations, ctx.full_layer_bytes);
    p.release(Stream::kCompute, BufferClass::kLayerInput, ctx.layer_input_bytes);
  } else {
    p.release(Stream::kCompute, BufferClass::kActivations, ctx.stored_bytes);
  }
  return input_grad;
}

}  // namespace strata
