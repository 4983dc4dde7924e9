// One transformer layer's forward, backward and recompute tasks (Megatron-LM's tensor and
// sequence parallelism; Shoeybi et al. 2019 Fig. 3, Korthikanti et al. 2022 Fig. 5), and the
// memory tasks of what the layer stores for its backward.

#include <algorithm>
#include <vector>

#include "plan/activation_memory.hpp"
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

// One tensor-parallel product with the TP communication around it: the sequence-parallel
// all-gather of its input (`gather_in`, of `gather_bytes`) and the reduction of its output
// (`reduce_out`); under FP8 first the cast of its input (`cast`, an op, or -1). Returns the task
// the next op waits for.
//
// With --tp-comm-overlap (Transformer Engine's userbuffers, Megatron-LM's tp_comm_overlap) the
// product runs as t chunks of s b / t rows and the collective as t - 1 ring-exchange steps of one
// chunk each on the tp-comm stream: gathering, chunk 0 is the rank's own and chunk k waits only
// for exchange step k, which started with the input; reducing, step k carries the partial sum of
// chunk k - 1 while chunk k computes, and the next op waits for the last step. Only what a chunk's
// GEMM does not cover is exposed, and the chunks pay the smaller GEMMs' efficiency and the
// compute slowdown of the transfers beside them (the engine's comm_slowdown).
struct TpGemm {
  TaskRole role;
  const OpPair& whole;
  const OpPair& chunk;
  Direction direction;
  bool gather_in = false;
  bool reduce_out = false;
  int32_t cast = -1;
  int64_t gather_bytes = 0;
  TaskId params = kNoTask;  // when the product is the layer's first op: the gathered weights
};

TaskId tp_gemm(const LoweringContext& ctx, RankState& state, const TpGemm& g, TaskId input) {
  RankProgram& p = state.program;
  const bool forward = g.direction == Direction::kForward;
  const CollectiveKind reduce = row_parallel_reduction(ctx.plan);
  if (g.cast >= 0) input = p.compute(TaskRole::kFp8Cast, g.cast, {input});
  const bool gathers = g.gather_in && ctx.plan.sequence_parallel;
  if (!ctx.plan.overlap.tp_comm) {
    const TaskId in = gathers ? tp_collective(ctx, state, g.role, CollectiveKind::kAllGather,
                                              g.gather_bytes, input)
                              : input;
    const TaskId gemm =
        p.compute(g.role, forward ? g.whole.forward : g.whole.backward, {in, g.params});
    return g.reduce_out ? tp_collective(ctx, state, g.role, reduce, ctx.tp_message_bytes, gemm)
                        : gemm;
  }
  const int64_t chunks = ctx.plan.tp;
  const int32_t chunk_op = forward ? g.chunk.forward : g.chunk.backward;
  const auto exchange = [&](TaskId after, int64_t bytes) {
    return p.collective(g.role, Stream::kTpComm, CollectiveKind::kRingExchange, state.groups.tp,
                        bytes / chunks, {after});
  };
  // The gathering exchanges start with the input, one after another; the reducing ones follow
  // each chunk's GEMM, behind them on the stream.
  std::vector<TaskId> arrived(static_cast<size_t>(chunks), input);
  if (gathers) {
    for (int64_t k = 1; k < chunks; ++k)
      arrived[static_cast<size_t>(k)] = exchange(k == 1 ? input : kNoTask, g.gather_bytes);
  }
  TaskId gemm = kNoTask;
  TaskId reduced = kNoTask;
  for (int64_t k = 0; k < chunks; ++k) {
    gemm = p.compute(g.role, chunk_op, {arrived[static_cast<size_t>(k)], g.params});
    if (g.reduce_out && k + 1 < chunks) reduced = exchange(gemm, ctx.tp_message_bytes);
  }
  return g.reduce_out ? reduced : gemm;
}

// Under FP8, Transformer Engine gathers the inputs of column-parallel GEMMs in FP8 (the norm
// writes them cast): half the bytes.
int64_t column_input_bytes(const LoweringContext& ctx) {
  return ctx.plan.fp8 != Fp8Format::kNone ? ctx.tp_message_bytes / 2 : ctx.tp_message_bytes;
}

// Where a block's norms sit (ModelSpec::block).
bool norm_before(const ModelSpec& m) { return m.block != LayerBlock::kPostNorm; }
bool norm_after(const ModelSpec& m) {
  return m.block == LayerBlock::kPostNorm || m.block == LayerBlock::kSandwich;
}
// A norm of the MLP's own before it: pre-norm, sandwich, and a parallel block with two norms.
bool norm_before_mlp(const ModelSpec& m) {
  return m.block != LayerBlock::kPostNorm && m.block != LayerBlock::kParallel;
}

// The attention of `layer`: the windowed op, or the global one on a windowed model's global layers.
const OpPair& attention_of(const LoweringContext& ctx, int64_t layer) {
  const bool global = ctx.model.global_every > 0 && ctx.model.window_of(layer) == 0;
  return global ? ctx.ops.attention_global : ctx.ops.attention;
}

// The forward ops alone, in the program's current phase (forward or recompute). A sequential block
// reduces the attention output and the MLP output each (two TP reductions); a parallel block
// (GPT-J, Falcon, GPT-NeoX's parallel residual) sums both branches' partial outputs and reduces
// once, and its MLP reads the input the attention read (gathered once under sequence parallelism
// when the two share a norm).
TaskId layer_forward_ops(const LoweringContext& ctx, RankState& state, int64_t layer, TaskId input,
                         TaskId params) {
  RankProgram& p = state.program;
  const OpTable& op = ctx.ops;
  const ModelSpec& m = ctx.model;
  const auto fwd = Direction::kForward;
  const int64_t column_in = column_input_bytes(ctx);
  const bool parallel = m.parallel_block();

  TaskId attn_in = input;
  TaskId first_params = params;
  if (norm_before(m)) {
    attn_in = p.compute(TaskRole::kNorm1, op.norm.forward, {input, params});
    first_params = kNoTask;
  }
  tp_gemm(ctx, state,
          {TaskRole::kQkv, op.qkv, op.qkv_chunk, fwd, true, false, -1, column_in, first_params},
          attn_in);
  if (op.qk_norm.forward >= 0) p.compute(TaskRole::kQkNorm, op.qk_norm.forward);
  if (op.rotary.forward >= 0) p.compute(TaskRole::kRotary, op.rotary.forward);
  p.compute(TaskRole::kAttention, attention_of(ctx, layer).forward);
  const TaskId attn_reduced = tp_gemm(ctx, state,
                                      {TaskRole::kAttnOut, op.attn_out, op.attn_out_chunk, fwd,
                                       false, !parallel, op.fp8_cast_attn_out_in},
                                      kNoTask);
  if (!parallel) {
    if (norm_after(m)) p.compute(TaskRole::kPostNorm, op.norm.forward, {attn_reduced});
    p.compute(TaskRole::kAttnResidual, op.residual.forward, {attn_reduced});
  }
  TaskId mlp_in = kNoTask;
  if (norm_before_mlp(m)) {
    mlp_in = p.compute(TaskRole::kNorm2, op.norm.forward, {parallel ? input : kNoTask});
  }
  // The MLP gathers its own input unless it shares the attention's norm (and so its gather).
  const bool gathers_mlp_in = m.block != LayerBlock::kParallel;
  tp_gemm(ctx, state,
          {TaskRole::kMlpUp, op.mlp_up, op.mlp_up_chunk, fwd, gathers_mlp_in, false, -1, column_in},
          mlp_in);
  p.compute(TaskRole::kMlpAct, op.mlp_act.forward);
  const TaskId mlp_reduced = tp_gemm(ctx, state,
                                     {TaskRole::kMlpDown, op.mlp_down, op.mlp_down_chunk, fwd,
                                      false, true, op.fp8_cast_mlp_down_in},
                                     kNoTask);
  if (norm_after(m)) p.compute(TaskRole::kPostNorm, op.norm.forward, {mlp_reduced});
  return p.compute(TaskRole::kMlpResidual, op.residual.forward, {mlp_reduced});
}

// torchtitan's selective-op recompute before the block's backward: from its input, the norms, the
// products whose outputs the policy did not save (K, O and SwiGLU's up, or a GELU MLP's down),
// the QK-norm and rotary embedding, the residual adds and the activation, in forward order; no TP
// communication (the policy saves reduce-scatter outputs).
void recompute_unsaved_ops(const LoweringContext& ctx, RankState& state, TaskId params) {
  RankProgram& p = state.program;
  const OpTable& op = ctx.ops;
  const ModelSpec& m = ctx.model;
  const std::vector<BlockProduct> products = block_products(m);
  TaskId needs = params;  // the first op waits for the layer's (gathered) weights
  const auto run = [&](TaskRole role, int32_t forward_op) {
    p.compute(role, forward_op, {needs});
    needs = kNoTask;
  };
  const auto recompute = [&](BlockProduct product, TaskRole role, int32_t forward_op) {
    const auto at = std::find(products.begin(), products.end(), product) - products.begin();
    if (!op_selective_saves(static_cast<size_t>(at))) run(role, forward_op);
  };
  if (norm_before(m)) run(TaskRole::kNorm1, op.norm.forward);
  recompute(BlockProduct::kK, TaskRole::kQkv, op.k_product);
  if (op.qk_norm.forward >= 0) run(TaskRole::kQkNorm, op.qk_norm.forward);
  if (op.rotary.forward >= 0) run(TaskRole::kRotary, op.rotary.forward);
  recompute(BlockProduct::kO, TaskRole::kAttnOut, op.attn_out.forward);
  if (norm_after(m)) run(TaskRole::kPostNorm, op.norm.forward);
  if (!m.parallel_block()) run(TaskRole::kAttnResidual, op.residual.forward);
  if (norm_before_mlp(m)) run(TaskRole::kNorm2, op.norm.forward);
  recompute(BlockProduct::kUp, TaskRole::kMlpUp, op.mlp_up_half);
  run(TaskRole::kMlpAct, op.mlp_act.forward);
  recompute(BlockProduct::kDown, TaskRole::kMlpDown, op.mlp_down.forward);
  if (norm_after(m)) run(TaskRole::kPostNorm, op.norm.forward);
}

// What a layer that does not recompute in full keeps for its backward: everything, or under
// selective recompute all but the scores (the plan's stored bytes, unless the plan recomputes
// only some layers in full and this is one of the others).
int64_t kept_bytes(const LoweringContext& ctx) {
  return ctx.plan.recompute == RecomputeKind::kFull ? ctx.full_layer_bytes : ctx.stored_bytes;
}

}  // namespace

TaskId lower_layer_forward(const LoweringContext& ctx, RankState& state, int64_t layer,
                           TaskId input, TaskId params) {
  RankProgram& p = state.program;
  p.set_layer(static_cast<int32_t>(layer));
  const RankState::HostBlock issued(state);
  if (ctx.recomputes(state.stage, p.chunk(), layer)) {
    p.alloc(Stream::kCompute, BufferClass::kLayerInput, ctx.layer_input_bytes);
  } else {
    p.alloc(Stream::kCompute, BufferClass::kActivations, kept_bytes(ctx));
  }
  // FP8: Transformer Engine casts (and transposes) the layer's weights once per step, in the first
  // micro-batch (is_first_microbatch), unless they are kept in FP8.
  if (ctx.ops.fp8_weight_cast >= 0 && p.micro_batch() == 0) {
    params = p.compute(TaskRole::kFp8Cast, ctx.ops.fp8_weight_cast, {params});
  }
  return layer_forward_ops(ctx, state, layer, input, params);
}

TaskId lower_layer_backward(const LoweringContext& ctx, RankState& state, int64_t layer,
                            TaskId grad, TaskId params) {
  RankProgram& p = state.program;
  const OpTable& op = ctx.ops;
  p.set_layer(static_cast<int32_t>(layer));
  const RankState::HostBlock issued(state);
  const bool full = ctx.recomputes(state.stage, p.chunk(), layer);

  if (full) {
    // Run the layer forward again from its checkpoint, keeping every activation this time.
    p.set_phase(Phase::kRecompute);
    p.alloc(Stream::kCompute, BufferClass::kActivations, ctx.full_layer_bytes);
    // Needs no gradient: may run before it arrives.
    layer_forward_ops(ctx, state, layer, kNoTask, params);
    p.set_phase(Phase::kBackward);
  }
  // Selective-op: what the policy did not save, rebuilt for the backward and freed after it.
  const bool op_selective = ctx.plan.recompute == RecomputeKind::kSelectiveOp;
  const int64_t rebuilt = ctx.full_layer_bytes - ctx.stored_bytes;
  if (op_selective) {
    p.set_phase(Phase::kRecompute);
    p.alloc(Stream::kCompute, BufferClass::kActivations, rebuilt);
    recompute_unsaved_ops(ctx, state, params);
    p.set_phase(Phase::kBackward);
  }
  const auto bwd = Direction::kBackward;
  const ModelSpec& m = ctx.model;
  const bool parallel = m.parallel_block();
  const bool shared_norm = m.block == LayerBlock::kParallel;
  const int64_t column_in = column_input_bytes(ctx);
  const int64_t msg = ctx.tp_message_bytes;
  // Sequence parallel: the output gradient is gathered for each row-parallel product's backward
  // (once for both branches of a parallel block), and each norm's output again for the
  // column-parallel weight gradients.
  TaskId grad_in = p.compute(TaskRole::kMlpResidual, op.residual.backward, {grad, params});
  if (norm_after(m)) grad_in = p.compute(TaskRole::kPostNorm, op.norm.backward);
  tp_gemm(ctx, state,
          {TaskRole::kMlpDown, op.mlp_down, op.mlp_down_chunk, bwd, true, false,
           op.fp8_grad_mlp_down, msg},
          grad_in);
  const TaskId act = p.compute(TaskRole::kMlpAct, op.mlp_act.backward);
  // A parallel block's two branches sum their input gradients before one reduction, unless each
  // has a norm of its own to take its gradient.
  const TaskId up_reduced = tp_gemm(ctx, state,
                                    {TaskRole::kMlpUp, op.mlp_up, op.mlp_up_chunk, bwd, true,
                                     !shared_norm, op.fp8_grad_mlp_up, column_in},
                                    act);
  if (norm_before_mlp(m)) p.compute(TaskRole::kNorm2, op.norm.backward, {up_reduced});
  TaskId attn_grad = kNoTask;
  if (!parallel) {
    attn_grad = p.compute(TaskRole::kAttnResidual, op.residual.backward);
    if (norm_after(m)) attn_grad = p.compute(TaskRole::kPostNorm, op.norm.backward);
  }
  tp_gemm(ctx, state,
          {TaskRole::kAttnOut, op.attn_out, op.attn_out_chunk, bwd, !parallel, false,
           op.fp8_grad_attn_out, msg},
          attn_grad);
  const OpPair& attention_op = attention_of(ctx, layer);
  const bool rebuild_scores = recomputes_attention_scores(ctx.plan);
  if (rebuild_scores) {
    // Rebuild the softmax and dropout outputs (5as^2b/t bytes) from the stored Q, K and V.
    p.set_phase(Phase::kRecompute);
    p.alloc(Stream::kCompute, BufferClass::kAttentionScores, ctx.scores_bytes);
    p.compute(TaskRole::kAttention, attention_op.forward);
    p.set_phase(Phase::kBackward);
  }
  TaskId attention = p.compute(TaskRole::kAttention, attention_op.backward);
  if (rebuild_scores) {
    p.release(Stream::kCompute, BufferClass::kAttentionScores, ctx.scores_bytes);
  }
  if (op.rotary.backward >= 0) attention = p.compute(TaskRole::kRotary, op.rotary.backward);
  if (op.qk_norm.backward >= 0) attention = p.compute(TaskRole::kQkNorm, op.qk_norm.backward);
  const TaskId qkv_reduced = tp_gemm(
      ctx, state,
      {TaskRole::kQkv, op.qkv, op.qkv_chunk, bwd, !shared_norm, true, op.fp8_grad_qkv, column_in},
      attention);
  const TaskId input_grad =
      norm_before(m) ? p.compute(TaskRole::kNorm1, op.norm.backward, {qkv_reduced}) : qkv_reduced;
  if (full) {
    p.release(Stream::kCompute, BufferClass::kActivations, ctx.full_layer_bytes);
    p.release(Stream::kCompute, BufferClass::kLayerInput, ctx.layer_input_bytes);
  } else {
    p.release(Stream::kCompute, BufferClass::kActivations, kept_bytes(ctx));
  }
  if (op_selective) p.release(Stream::kCompute, BufferClass::kActivations, rebuilt);
  return input_grad;
}

}  // namespace strata
