// One transformer layer's forward, backward and recompute tasks (Megatron-LM's tensor and
// sequence parallelism; Shoeybi et al. 2019 Fig. 3, Korthikanti et al. 2022 Fig. 5), and the
// memory tasks of what the layer stores for its backward.

#include <algorithm>
#include <map>
#include <span>
#include <vector>

#include "common/error.hpp"
#include "plan/activation_memory.hpp"
#include "plan/layer_ops.hpp"

namespace strata {

namespace {

// The attention of `layer`: the windowed op, or the global one on a windowed model's global layers.
const OpPair& attention_of(const LoweringContext& ctx, int64_t layer) {
  const bool global = ctx.model.global_every > 0 && ctx.model.window_of(layer) == 0;
  return global ? ctx.ops.attention_global : ctx.ops.attention;
}

// What a layer that does not recompute in full keeps for its backward: everything, or under
// selective recompute all but the scores (the plan's stored bytes, unless the plan recomputes
// only some layers in full and this is one of the others).
int64_t kept_bytes(const LoweringContext& ctx, int64_t layer) {
  const LayerKindSpec& kind = ctx.kind_of(layer);
  return ctx.plan.recompute == RecomputeKind::kFull ? kind.full_layer_bytes : kind.stored_bytes;
}

bool scores_slot(int slot) {
  return slot == static_cast<int>(Slot::kScores) || slot == static_cast<int>(Slot::kScoresMask) ||
         slot == static_cast<int>(Slot::kScoresDropped);
}

// The forward ops alone, in the program's current phase (forward or recompute), from the layer
// input `layer_in`. A sequential block reduces the attention output and the MLP output each (two
// TP reductions); a parallel block (GPT-J, Falcon, GPT-NeoX's parallel residual) sums both
// branches' partial outputs and reduces once, and its MLP reads the input the attention read
// (gathered once under sequence parallelism when the two share a norm). The layer's first op
// writes the stored copy of the layer input (the first norm's input, or the QKV input).
}  // namespace

TaskId LayerOps::forward(TaskId input, TaskId params, TensorId layer_in) {
  const auto fwd = Direction::kForward;
  const int64_t column_in = column_input_bytes(ctx_);
  const bool parallel = m_.parallel_block();
  const bool sp = ctx_.plan.sequence_parallel;
  const TensorId gathered = at(Slot::kGathered);

  TaskId attn_in = input;
  TaskId first_params = params;
  TensorId qkv_src = layer_in;
  boost::container::small_vector<TensorId, 4> qkv_copy = saved(TaskRole::kQkv);
  if (norm_before(m_)) {
    TaskUses uses{read(layer_in)};
    weight(uses, lp_.norm1_w);
    weight(uses, lp_.norm1_b);
    uses.push_back(write(at(Slot::kQkvIn)));
    uses.push_back(write(at(Slot::kNorm1In)));
    attn_in = p_.compute(TaskRole::kNorm1, op_.norm.forward, {input, params}, uses);
    first_params = kNoTask;
    qkv_src = at(Slot::kQkvIn);
  } else {
    qkv_copy.insert(qkv_copy.begin(), at(Slot::kQkvIn));
  }
  TpGemm qkv{TaskRole::kQkv, op_.qkv, op_.qkv_chunk, fwd, true, false, -1, column_in, first_params};
  qkv.in = qkv_src;
  qkv.gathered = gathered;
  // Context parallelism's a2a moves Q, K and V to heads / cp after the product (and its norms
  // and rotary embedding): the kernel's stored inputs.
  const bool heads_split = ctx_.plan.cp > 1 && ctx_.plan.cp_comm == CpComm::kAllToAll;
  const TensorId qkv_out = heads_split ? at(Slot::kQkvLocal) : at(Slot::kQkv);
  qkv.out = qkv_out;
  gemm_weight(qkv.weights, lp_.qkv_w);
  weight(qkv.weights, lp_.qkv_b);
  qkv.save_copy = qkv_copy;
  if (m_.latent_attention()) {
    mla_forward(attn_in, qkv_out);  // its projections write the same Q, K, V (mla_lowering.cpp)
  } else {
    tp_gemm(ctx_, state_, qkv, attn_in);
  }
  if (op_.qk_norm.forward >= 0) {
    TaskUses uses{update(qkv_out)};
    weight(uses, lp_.q_norm_w);
    weight(uses, lp_.k_norm_w);
    uses.push_back(write(at(Slot::kQkNormIn)));
    p_.compute(TaskRole::kQkNorm, op_.qk_norm.forward, {}, uses);
  }
  if (op_.rotary.forward >= 0)
    p_.compute(TaskRole::kRotary, op_.rotary.forward, {}, {update(qkv_out)});
  TaskId attended = kNoTask;  // the attention's output is in kOutIn
  if (ctx_.plan.cp > 1) {
    attended = cp_attention_forward(attention_of(ctx_, layer_), qkv_out);
  } else {
    TaskUses uses{read(at(Slot::kQkv)), write(at(Slot::kOutIn))};
    attention_state(uses, Access::kWrite);
    attended = draws(p_.compute(TaskRole::kAttention, attention_of(ctx_, layer_).forward, {}, uses),
                     DropSite::kProbabilities);
  }
  TpGemm out{TaskRole::kAttnOut,      op_.attn_out, op_.attn_out_chunk, fwd, false, !parallel,
             op_.fp8_cast_attn_out_in};
  out.in = at(Slot::kOutIn);
  out.cast_out = at(Slot::kOutInFp8);
  out.out = at(Slot::kProj);
  out.reduced = at(Slot::kProjRows);
  gemm_weight(out.weights, lp_.out_w);
  out.save_copy = saved(TaskRole::kAttnOut);
  const GemmResult attn = tp_gemm(ctx_, state_, out, attended);
  // The branch's output with the residual add's other inputs (the overlap's last chunk).
  const TensorId mid = at(Slot::kMid);
  TaskId mid_ready = kNoTask;
  if (!parallel) {
    const GemmResult branch =
        post_norm(attn, lp_.post_attn_norm_w, lp_.post_attn_norm_b, Slot::kPostAttnNormIn);
    TaskUses uses{read(layer_in)};
    branch_reads(uses, branch);
    weight(uses, lp_.out_b);
    uses.push_back(write(mid));
    if (m_.dropout) uses.push_back(write(at(Slot::kAttnMask)));
    mid_ready = draws(p_.compute(TaskRole::kAttnResidual, op_.residual.forward, {attn.task}, uses),
                      DropSite::kAttentionBranch);
  }
  TaskId mlp_in = kNoTask;
  TensorId mlp_src = mid;
  boost::container::small_vector<TensorId, 4> up_copy = saved(TaskRole::kMlpUp);
  if (norm_before_mlp(m_)) {
    TaskUses uses{read(parallel ? layer_in : mid)};
    weight(uses, lp_.norm2_w);
    weight(uses, lp_.norm2_b);
    uses.push_back(write(at(Slot::kUpIn)));
    uses.push_back(write(at(Slot::kNorm2In)));
    mlp_in = p_.compute(TaskRole::kNorm2, op_.norm.forward, {parallel ? input : kNoTask}, uses);
    mlp_src = at(Slot::kUpIn);
    if (m_.is_moe_layer(layer_)) return moe_forward(mlp_in, mid);
  } else if (m_.block == LayerBlock::kParallel) {
    mlp_src = sp ? gathered : at(Slot::kQkvIn);  // the shared norm's output, gathered once
  } else {
    up_copy.insert(up_copy.begin(), at(Slot::kUpIn));  // post-norm: the MLP input is mid
    mlp_in = mid_ready;
  }
  // The MLP gathers its own input unless it shares the attention's norm (and so its gather).
  const bool gathers_mlp_in = m_.block != LayerBlock::kParallel;
  TpGemm up{TaskRole::kMlpUp, op_.mlp_up, op_.mlp_up_chunk, fwd, gathers_mlp_in, false, -1,
            column_in};
  up.in = mlp_src;
  up.gathered = gathered;
  up.out = at(Slot::kActIn);
  gemm_weight(up.weights, lp_.up_w);
  weight(up.weights, lp_.up_b);
  up.save_copy = up_copy;
  tp_gemm(ctx_, state_, up, mlp_in);
  const bool fp8 = op_.fp8_cast_mlp_down_in >= 0;
  // Under FP8 the activation's 16-bit output is cast to the stored FP8 MLP-down input.
  const TensorId act_out = fp8 ? at(Slot::kActOut) : at(Slot::kDownIn);
  p_.compute(TaskRole::kMlpAct, op_.mlp_act.forward, {}, {read(at(Slot::kActIn)), write(act_out)});
  TpGemm down{TaskRole::kMlpDown,      op_.mlp_down, op_.mlp_down_chunk, fwd, false, true,
              op_.fp8_cast_mlp_down_in};
  down.in = act_out;
  down.cast_out = at(Slot::kDownIn);
  down.out = at(Slot::kProj);
  down.accumulate = parallel;  // a parallel block sums both branches before one reduction
  down.reduced = at(Slot::kProjRows);
  gemm_weight(down.weights, lp_.down_w);
  down.save_copy = saved(TaskRole::kMlpDown);
  const GemmResult mlp = tp_gemm(ctx_, state_, down, kNoTask);
  const GemmResult branch =
      post_norm(mlp, lp_.post_mlp_norm_w, lp_.post_mlp_norm_b, Slot::kPostMlpNormIn);
  TaskUses uses{read(parallel ? layer_in : mid)};
  branch_reads(uses, branch);
  if (parallel) weight(uses, lp_.out_b);
  weight(uses, lp_.down_b);
  return mlp_residual(uses, {mlp.task});  // a parallel block's one mask
}

GemmResult LayerOps::norm_input_backward(TaskRole role, const OpPair& op, TensorId dout_of,
                                         TensorId saved_in, int weight_index, TaskId after) {
  TpGemm gemm{role, op, op, Direction::kBackward, true, true, -1, column_input_bytes(ctx_)};
  gemm.in = dout_of;
  gemm.saved_in = saved_in;
  gemm.gather_saved = true;
  gemm.gathered = at(Slot::kGathered);
  gemm.out = at(Slot::kDNormOut);
  gemm.reduced = at(Slot::kDNormRows);
  gemm_weight(gemm.weights, weight_index);
  add_grad(gemm.weights, weight_index);
  return tp_gemm(ctx_, state_, gemm, after);
}

TaskId LayerOps::mlp_residual(TaskUses& uses, std::initializer_list<TaskId> deps) {
  // The layer's output is the next layer's input; a recompute's is thrown away.
  const TensorId stream = at(Slot::kStream);
  uses.push_back(write(stream));
  if (m_.dropout) uses.push_back(write(at(Slot::kMlpMask)));
  const TaskId output = draws(p_.compute(TaskRole::kMlpResidual, op_.residual.forward, deps, uses),
                              DropSite::kMlpBranch);
  if (p_.phase() != Phase::kRecompute) state_.stream = stream;
  return output;
}

// torchtitan's selective-op recompute before the block's backward: from its input, the norms, the
// products whose outputs the policy did not save (K, O and SwiGLU's up, or a GELU MLP's down),
// the QK-norm and rotary embedding, the residual adds and the activation, in forward order; no TP
// communication (the policy saves reduce-scatter outputs). They read what the policy saved and
// write the rebuilt buffer.
void LayerOps::recompute_unsaved(TaskId params, TensorId rebuilt) {
  const std::vector<BlockProduct> products = block_products(m_);
  TaskId needs = params;  // the first op waits for the layer's (gathered) weights
  TaskUses saved_reads;
  for (const TensorId t : entry_.kept) saved_reads.push_back(read(t));
  const auto run = [&](TaskRole role, int32_t forward_op, std::initializer_list<int> params_read) {
    TaskUses uses = saved_reads;
    for (const int i : params_read) weight(uses, i);
    uses.push_back(write(rebuilt));
    p_.compute(role, forward_op, {needs}, uses);
    needs = kNoTask;
  };
  const auto recompute = [&](BlockProduct product, TaskRole role, int32_t forward_op,
                             std::initializer_list<int> params_read) {
    const auto at = std::find(products.begin(), products.end(), product) - products.begin();
    if (!op_selective_saves(static_cast<size_t>(at))) run(role, forward_op, params_read);
  };
  if (norm_before(m_)) run(TaskRole::kNorm1, op_.norm.forward, {lp_.norm1_w, lp_.norm1_b});
  recompute(BlockProduct::kK, TaskRole::kQkv, op_.k_product, {lp_.qkv_w, lp_.qkv_b});
  if (op_.qk_norm.forward >= 0)
    run(TaskRole::kQkNorm, op_.qk_norm.forward, {lp_.q_norm_w, lp_.k_norm_w});
  if (op_.rotary.forward >= 0) run(TaskRole::kRotary, op_.rotary.forward, {});
  recompute(BlockProduct::kO, TaskRole::kAttnOut, op_.attn_out.forward, {lp_.out_w});
  if (norm_after(m_))
    run(TaskRole::kPostNorm, op_.norm.forward, {lp_.post_attn_norm_w, lp_.post_attn_norm_b});
  if (!m_.parallel_block()) run(TaskRole::kAttnResidual, op_.residual.forward, {lp_.out_b});
  if (norm_before_mlp(m_)) run(TaskRole::kNorm2, op_.norm.forward, {lp_.norm2_w, lp_.norm2_b});
  recompute(BlockProduct::kUp, TaskRole::kMlpUp, op_.mlp_up_half, {lp_.up_w, lp_.up_b});
  run(TaskRole::kMlpAct, op_.mlp_act.forward, {});
  recompute(BlockProduct::kDown, TaskRole::kMlpDown, op_.mlp_down.forward, {lp_.down_w});
  if (norm_after(m_))
    run(TaskRole::kPostNorm, op_.norm.forward, {lp_.post_mlp_norm_w, lp_.post_mlp_norm_b});
}

// The backward ops, from the output gradient in RankState::dstream, which they leave holding the
// layer input's gradient. Sequence parallel: the output gradient is gathered for each
// row-parallel product's backward (once for both branches of a parallel block), and each norm's
// output again for the column-parallel weight gradients.
TaskId LayerOps::backward(TaskId grad, TaskId params) {
  const auto bwd = Direction::kBackward;
  const bool parallel = m_.parallel_block();
  const bool shared_norm = m_.block == LayerBlock::kParallel;
  const bool sp = ctx_.plan.sequence_parallel;
  const int64_t column_in = column_input_bytes(ctx_);
  const int64_t msg = ctx_.tp_message_bytes;
  const TensorId dstream = state_.dstream;
  const TensorId gathered = at(Slot::kGathered);
  const TensorId dgathered = at(Slot::kDGathered);
  const TensorId dbranch = at(Slot::kDBranch);

  // The branch's output gradient: the stream's, or under dropout the stream's through the mask
  // (which the branch's biases, added before the dropout, take theirs from).
  TaskUses residual_uses{read(dstream)};
  TensorId dout_mlp = dropped_gradient(residual_uses, Slot::kMlpMask);
  if (parallel) add_grad(residual_uses, lp_.out_b);
  add_grad(residual_uses, lp_.down_b);
  TaskId grad_in =
      p_.compute(TaskRole::kMlpResidual, op_.residual.backward, {grad, params}, residual_uses);
  const TensorId dout_parallel = dout_mlp;  // a parallel block's, for both branches
  GemmResult up_result;
  if (m_.is_moe_layer(layer_)) {
    moe_backward(dout_mlp, grad_in);
  } else {
    up_result = dense_mlp_backward(dout_mlp, grad_in);
  }
  TaskId attn_grad = kNoTask;
  TensorId dout_attn = sp ? dgathered : dout_parallel;  // a parallel block's: gathered once
  if (!parallel) {
    TaskUses uses{read(dstream)};
    TaskId joined = kNoTask;
    if (!norm_before_mlp(m_)) {
      // A post-norm block's MLP reads the stream itself: its input gradient joins the stream's,
      // once reduced.
      uses.push_back(read(up_result.out));
      uses.push_back(update(dstream));
      joined = up_result.task;
    }
    dout_attn = dropped_gradient(uses, Slot::kAttnMask);
    add_grad(uses, lp_.out_b);
    attn_grad = p_.compute(TaskRole::kAttnResidual, op_.residual.backward, {joined}, uses);
    if (norm_after(m_)) {
      attn_grad = post_norm_backward(dout_attn, lp_.post_attn_norm_w, lp_.post_attn_norm_b,
                                     Slot::kPostAttnNormIn);
      dout_attn = dbranch;
    }
  }
  TpGemm out{TaskRole::kAttnOut, op_.attn_out, op_.attn_out_chunk,    bwd,
             !parallel,          false,        op_.fp8_grad_attn_out, msg};
  out.in = dout_attn;
  out.cast_out = at(Slot::kDProjFp8);
  out.gathered = dgathered;
  out.saved_in = at(Slot::kOutIn);
  out.out = at(Slot::kDOutIn);
  gemm_weight(out.weights, lp_.out_w);
  add_grad(out.weights, lp_.out_w);
  tp_gemm(ctx_, state_, out, attn_grad);
  const OpPair& attention_op = attention_of(ctx_, layer_);
  const bool rebuild_scores = recomputes_attention_scores(ctx_.plan);
  TensorIds scores;
  if (rebuild_scores) {
    // Rebuild the softmax and dropout outputs (5as^2b/t bytes) from the stored Q, K and V; the
    // attention output, kept already, goes to scratch.
    p_.set_phase(Phase::kRecompute);
    for (int s = 0; s < kStoredSlotCount; ++s) {
      if (!ctx_.slots.stored[static_cast<size_t>(s)] || !scores_slot(s)) continue;
      scores.push_back(tensor(ctx_.slots.name[static_cast<size_t>(s)],
                              ctx_.slots.shape[static_cast<size_t>(s)]));
      state_.current[static_cast<size_t>(s)] = scores.back();
    }
    p_.alloc(Stream::kCompute, BufferClass::kAttentionScores, scores);
    TaskUses uses{read(at(Slot::kQkv)), write(state_.scratch_of(ctx_.slots, Slot::kOutIn))};
    attention_state(uses, Access::kWrite);
    draws(p_.compute(TaskRole::kAttention, attention_op.forward, {}, uses),
          DropSite::kProbabilities);
    p_.set_phase(Phase::kBackward);
  }
  TaskId attention = kNoTask;  // dQ, dK and dV are in kDQkv after it
  if (ctx_.plan.cp > 1) {
    attention = cp_attention_backward(attention_op);
  } else {
    TaskUses attention_uses{read(at(Slot::kDOutIn)), read(at(Slot::kQkv)), read(at(Slot::kOutIn))};
    attention_state(attention_uses, Access::kRead);
    attention_uses.push_back(write(at(Slot::kDQkv)));
    attention = p_.compute(TaskRole::kAttention, attention_op.backward, {}, attention_uses);
    // Flash attention's backward draws the probabilities' mask again; the unfused one reads it.
    if (ctx_.plan.attention == AttentionKind::kFlash) draws(attention, DropSite::kProbabilities);
  }
  if (rebuild_scores) p_.release(Stream::kCompute, BufferClass::kAttentionScores, scores);
  if (op_.rotary.backward >= 0) {
    attention =
        p_.compute(TaskRole::kRotary, op_.rotary.backward, {attention}, {update(at(Slot::kDQkv))});
  }
  if (op_.qk_norm.backward >= 0) {
    TaskUses uses{read(at(Slot::kQkNormIn))};
    weight(uses, lp_.q_norm_w);
    weight(uses, lp_.k_norm_w);
    uses.push_back(update(at(Slot::kDQkv)));
    add_grad(uses, lp_.q_norm_w);
    add_grad(uses, lp_.k_norm_w);
    attention = p_.compute(TaskRole::kQkNorm, op_.qk_norm.backward, {attention}, uses);
  }
  TpGemm qkv{TaskRole::kQkv, op_.qkv, op_.qkv_chunk,    bwd,
             !shared_norm,   true,    op_.fp8_grad_qkv, column_in};
  qkv.in = at(Slot::kDQkv);
  qkv.cast_out = at(Slot::kDQkvFp8);
  // A shared norm's output was gathered for the MLP's weight gradient already.
  qkv.saved_in = shared_norm && sp ? gathered : at(Slot::kQkvIn);
  qkv.gather_saved = true;
  qkv.gathered = gathered;
  qkv.out = at(Slot::kDNormOut);
  qkv.accumulate = shared_norm;  // both branches' input gradients, reduced once
  qkv.reduced = at(Slot::kDNormRows);
  gemm_weight(qkv.weights, lp_.qkv_w);
  add_grad(qkv.weights, lp_.qkv_w);
  add_grad(qkv.weights, lp_.qkv_b);
  const GemmResult qkv_result =
      m_.latent_attention() ? mla_backward(attention) : tp_gemm(ctx_, state_, qkv, attention);
  if (!norm_before(m_)) {
    // A post-norm block's attention reads the layer input itself: its input gradient joins the
    // stream's (autograd's sum of a tensor's two uses).
    return p_.compute(TaskRole::kAttnResidual, op_.residual.backward, {qkv_result.task},
                      {read(qkv_result.out), update(dstream)});
  }
  TaskUses uses{read(qkv_result.out), read(at(Slot::kNorm1In))};
  weight(uses, lp_.norm1_w);
  if (m_.block == LayerBlock::kParallelTwoNorms) uses.push_back(read(dbranch));
  uses.push_back(update(dstream));
  add_grad(uses, lp_.norm1_w);
  add_grad(uses, lp_.norm1_b);
  return p_.compute(TaskRole::kNorm1, op_.norm.backward, {qkv_result.task}, uses);
}

GemmResult LayerOps::dense_mlp_backward(TensorId dout_mlp, TaskId grad_in) {
  const auto bwd = Direction::kBackward;
  const bool parallel = m_.parallel_block();
  const bool shared_norm = m_.block == LayerBlock::kParallel;
  const TensorId dbranch = at(Slot::kDBranch);
  const TensorId gathered = at(Slot::kGathered);
  const TensorId dgathered = at(Slot::kDGathered);
  const TensorId dstream = state_.dstream;
  const int64_t msg = ctx_.tp_message_bytes;
  const int64_t column_in = column_input_bytes(ctx_);
  if (norm_after(m_)) {
    grad_in = post_norm_backward(dout_mlp, lp_.post_mlp_norm_w, lp_.post_mlp_norm_b,
                                 Slot::kPostMlpNormIn);
    dout_mlp = dbranch;
  }
  TpGemm down{TaskRole::kMlpDown,    op_.mlp_down, op_.mlp_down_chunk, bwd, true, false,
              op_.fp8_grad_mlp_down, msg};
  down.in = dout_mlp;
  down.cast_out = at(Slot::kDProjFp8);
  down.gathered = dgathered;
  down.saved_in = at(Slot::kDownIn);
  down.out = at(Slot::kDDownIn);
  gemm_weight(down.weights, lp_.down_w);
  add_grad(down.weights, lp_.down_w);
  tp_gemm(ctx_, state_, down, grad_in);
  const TaskId act =
      p_.compute(TaskRole::kMlpAct, op_.mlp_act.backward, {},
                 {read(at(Slot::kDDownIn)), read(at(Slot::kActIn)), write(at(Slot::kDActIn))});
  // A parallel block's two branches sum their input gradients before one reduction, unless each
  // has a norm of its own to take its gradient.
  TpGemm up{TaskRole::kMlpUp, op_.mlp_up,          op_.mlp_up_chunk, bwd, true,
            !shared_norm,     op_.fp8_grad_mlp_up, column_in};
  up.in = at(Slot::kDActIn);
  up.cast_out = at(Slot::kDActInFp8);
  up.saved_in = shared_norm ? at(Slot::kQkvIn) : at(Slot::kUpIn);
  up.gather_saved = true;
  up.gathered = gathered;
  up.out = at(Slot::kDNormOut);
  up.reduced = at(Slot::kDNormRows);
  gemm_weight(up.weights, lp_.up_w);
  add_grad(up.weights, lp_.up_w);
  add_grad(up.weights, lp_.up_b);
  const GemmResult up_result = tp_gemm(ctx_, state_, up, act);
  if (norm_before_mlp(m_)) {
    // The norm adds its input gradient into the stream's; a parallel block's second norm into
    // the attention branch's scratch, which the first norm adds in (the attention branch still
    // reads the output gradient).
    TaskUses uses{read(up_result.out), read(at(Slot::kNorm2In))};
    weight(uses, lp_.norm2_w);
    uses.push_back(parallel ? write(dbranch) : update(dstream));
    add_grad(uses, lp_.norm2_w);
    add_grad(uses, lp_.norm2_b);
    p_.compute(TaskRole::kNorm2, op_.norm.backward, {up_result.task}, uses);
  }
  return up_result;
}

namespace {

bool keeps_all(const LoweringContext&, int) { return true; }
// Selective recompute keeps all but the scores it rebuilds.
bool keeps_unless_rebuilt(const LoweringContext& ctx, int slot) {
  return !(recomputes_attention_scores(ctx.plan) && scores_slot(slot));
}

}  // namespace

TaskId lower_layer_forward(const LoweringContext& ctx, RankState& state, int64_t layer,
                           TaskId input, TaskId params) {
  RankProgram& p = state.program;
  p.set_layer(static_cast<int32_t>(layer));
  const RankState::HostBlock issued(state);
  RankState::StoredLayer& entry = state.begin_store(layer);
  LayerOps ops(ctx, state, layer, entry);
  state.current.fill(kNoTensor);
  if (ctx.recomputes(state.stage, p.chunk(), layer)) {
    // Full recompute keeps the layer input alone: its first op's stored copy.
    const TensorId checkpoint = ops.tensor(ctx.slots.name[static_cast<size_t>(Slot::kCheckpoint)],
                                           ctx.slots.shape[static_cast<size_t>(Slot::kCheckpoint)]);
    entry.slots[static_cast<size_t>(Slot::kCheckpoint)] = checkpoint;
    const Slot first_copy =
        ctx.model.block != LayerBlock::kPostNorm ? Slot::kNorm1In : Slot::kQkvIn;
    state.current[static_cast<size_t>(first_copy)] = checkpoint;
    entry.kept = {checkpoint};
    p.alloc(Stream::kCompute, BufferClass::kLayerInput, std::span<const TensorId>(&checkpoint, 1));
  } else if (ctx.plan.recompute == RecomputeKind::kSelectiveOp) {
    // torchtitan's op-level policy: the layer input, the saved products' outputs and the
    // attention's output and log-sum-exp (op_selective_tensors, in that order).
    TensorIds kept;
    SlotTensors& mine = entry.slots;
    for (const auto& [name, shape] : ctx.slots.op_saved) kept.push_back(ops.tensor(name, shape));
    const std::vector<BlockProduct> products = block_products(ctx.model);
    size_t next = 1;
    for (size_t i = 0; i < products.size(); ++i) {
      if (!op_selective_saves(i)) continue;
      const BlockProduct product = products[i];
      const TaskRole role =
          product == BlockProduct::kQ || product == BlockProduct::kK || product == BlockProduct::kV
              ? TaskRole::kQkv
          : product == BlockProduct::kO    ? TaskRole::kAttnOut
          : product == BlockProduct::kDown ? TaskRole::kMlpDown
                                           : TaskRole::kMlpUp;
      ops.saved_products[role].push_back(kept[next++]);
    }
    const auto keep = [&](Slot slot, TensorId t) {
      mine[static_cast<size_t>(slot)] = t;
      state.current[static_cast<size_t>(slot)] = t;
    };
    keep(Slot::kNorm1In, kept.front());
    keep(Slot::kOutIn, kept[next]);
    if (next + 1 < kept.size()) keep(Slot::kLse, kept[next + 1]);
    p.alloc(Stream::kCompute, BufferClass::kActivations, kept);
    entry.kept = std::move(kept);
  } else {
    entry.kept =
        ops.store(ctx.plan.recompute == RecomputeKind::kFull ? keeps_all : keeps_unless_rebuilt);
    p.alloc(Stream::kCompute, BufferClass::kActivations, entry.kept);
  }
  STRATA_ASSERT(p.graph().task(p.graph().size() - 1).bytes ==
                    (ctx.recomputes(state.stage, p.chunk(), layer) ? ctx.layer_input_bytes
                                                                   : kept_bytes(ctx, layer)),
                "a layer's stored tensors hold the bytes activation_memory counts");
  // FP8: Transformer Engine casts (and transposes) the layer's weights once per step, in the first
  // micro-batch (is_first_microbatch), unless they are kept in FP8.
  if (ctx.ops.fp8_weight_cast >= 0 && p.micro_batch() == 0) {
    const BlockTensors& block = state.layer_blocks[static_cast<size_t>(layer)];
    TaskUses uses;
    const LayerParams& lp = ctx.dense.params;  // FP8 runs dense models alone
    for (const int i : {lp.qkv_w, lp.out_w, lp.up_w, lp.down_w}) {
      uses.push_back(read(block.readable()[static_cast<size_t>(i)]));
    }
    uses.push_back(write(block.fp8_weights));
    params = p.compute(TaskRole::kFp8Cast, ctx.ops.fp8_weight_cast, {params}, uses);
  }
  return ops.forward(input, params, state.stream);
}

TaskId lower_layer_backward(const LoweringContext& ctx, RankState& state, int64_t layer,
                            TaskId grad, TaskId params) {
  RankProgram& p = state.program;
  p.set_layer(static_cast<int32_t>(layer));
  const RankState::HostBlock issued(state);
  RankState::StoredLayer& entry = state.stored_for_backward(layer);
  LayerOps ops(ctx, state, layer, entry);
  state.current.fill(kNoTensor);
  const bool full = ctx.recomputes(state.stage, p.chunk(), layer);
  const TensorId checkpoint = entry.slots[static_cast<size_t>(Slot::kCheckpoint)];
  TensorIds recomputed;
  if (full) {
    // Run the layer forward again from its checkpoint, keeping every activation this time.
    p.set_phase(Phase::kRecompute);
    recomputed = ops.store(keeps_all);
    p.alloc(Stream::kCompute, BufferClass::kActivations, recomputed);
    // Needs no gradient: may run before it arrives.
    ops.forward(kNoTask, params, checkpoint);
    p.set_phase(Phase::kBackward);
  } else {
    ops.use_stored();
  }
  // Selective-op: what the policy did not save, rebuilt for the backward and freed after it; the
  // backward reads the rebuilt buffer for every tensor but the saved input, attention output and
  // log-sum-exp.
  const bool op_selective = ctx.plan.recompute == RecomputeKind::kSelectiveOp && !full;
  TensorId rebuilt = kNoTensor;
  if (op_selective) {
    p.set_phase(Phase::kRecompute);
    rebuilt =
        ops.tensor(ctx.slots.name[static_cast<size_t>(Slot::kRebuilt)], ctx.slots.rebuilt_shape);
    p.alloc(Stream::kCompute, BufferClass::kActivations, std::span<const TensorId>(&rebuilt, 1));
    ops.recompute_unsaved(params, rebuilt);
    for (int s = 0; s < kStoredSlotCount; ++s) {
      if (state.current[static_cast<size_t>(s)] == kNoTensor)
        state.current[static_cast<size_t>(s)] = rebuilt;
    }
    p.set_phase(Phase::kBackward);
  }
  const TaskId input_grad = ops.backward(grad, params);
  const TensorIds& kept = entry.kept;
  if (full) {
    p.release(Stream::kCompute, BufferClass::kActivations, recomputed);
    p.release(Stream::kCompute, BufferClass::kLayerInput, kept);
  } else {
    p.release(Stream::kCompute, BufferClass::kActivations, kept);
  }
  if (op_selective) {
    p.release(Stream::kCompute, BufferClass::kActivations, std::span<const TensorId>(&rebuilt, 1));
  }
  state.stored[static_cast<size_t>(layer)].pop_front();
  return input_grad;
}

}  // namespace strata
