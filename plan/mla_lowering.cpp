// Multi-head latent attention's projections in the task graph (ModelSpec::kv_lora_rank;
// DeepSeek-V2, DeepSeek-AI 2024, Sec. 2.1), forward and backward, as Megatron-Core's
// MLASelfAttention runs them (megatron/core/transformer/multi_latent_attention.py,
// get_query_key_value_tensors, with the Transformer Engine layer spec of gpt_layer_specs.py):
//
//   x = norm1(layer input)                                      rows x h (s b / t rows under SP)
//   q_latent  = linear_q_down_proj(x)                           rows x q_lora_rank   (duplicated)
//   kv_latent = linear_kv_down_proj(x)    rows x (kv_lora_rank + rope) (duplicated): latent, k_pe
//   q_up_in   = q_layernorm(q_latent)                           rows x q_lora_rank
//   kv_up_in  = kv_layernorm(kv_latent[:kv_lora_rank])          rows x kv_lora_rank
//   (SP: q_up_in, kv_up_in and k_pe all-gathered over TP to the whole sequence)
//   q   = linear_q_up_proj(q_up_in)                             n x H (nope + rope)  (column)
//   kv  = linear_kv_up_proj(kv_up_in)                           n x H (nope + v)     (column)
//   K, V = keys [k_nope, rotary(k_pe) for each head] and values from kv and k_pe (one kernel)
//   Q   = q with its rotary part turned (LayerOps::forward's rotary op, in place)
//
// where n = s b, H = heads / t. With q_lora_rank 0 (DeepSeek-V2-Lite) the query comes from
// linear_q_proj, column-parallel over x, gathered under sequence parallelism as a dense layer's
// QKV input. The down projections are TELinear with parallel_mode "duplicated": whole on every TP
// rank, each running them on its own rows, so that under sequence parallelism only the latents
// cross the TP group (1536 + 512 + 64 values a token for DeepSeek-V3 rather than its 7168-wide
// input), and the attention, the output projection and the MLP are a dense layer's. The backward
// runs the same way back: the up projections' input gradients are partial sums over TP,
// reduce-scattered to the rank's rows under sequence parallelism (their column-parallel backward)
// or all-reduced; the rotary key's gradient, summed over the rank's heads, is reduce-scattered as
// the backward of gather_from_sequence_parallel_region, or without sequence parallelism
// all-reduced: every rank's duplicated down projection then takes its gradient from the whole sum,
// which the TP ranks' identical weight gradients need (an all-reduce we have not found in
// Megatron-Core's code for that case; its MoE models, DeepSeek's among them, require sequence
// parallelism at tp > 1).
// Under sequence parallelism the down projections' and the latents' norms' weight gradients cover
// the rank's rows and are summed over TP at the step's end (step_lowering.cpp), as TELinear marks
// the duplicated weights sequence_parallel.
// Under context parallelism n is the rank's S / cp tokens' s b, and the attention runs on these
// Q, K and V as a dense layer's (plan/cp_attention.cpp).

#include "plan/layer_ops.hpp"

namespace strata {

void LayerOps::mla_forward(TaskId input, TensorId qkv) {
  const auto fwd = Direction::kForward;
  const bool sp = ctx_.plan.sequence_parallel;
  const bool q_latent = m_.q_lora_rank > 0;
  const int64_t e = bytes_per_element(ctx_.plan.dtype);
  const int64_t n = ctx_.plan.local_seq_len() * ctx_.plan.micro_batch;
  const TensorId x = at(Slot::kQkvIn);
  // The down projections and the latents' norms, on the rank's rows.
  const auto down = [&](int32_t op, int weight_index, int bias_index, TensorId out) {
    TaskUses uses{read(x)};
    gemm_weight(uses, weight_index);
    weight(uses, bias_index);
    uses.push_back(write(out));
    return p_.compute(TaskRole::kQkv, op, {input}, uses);
  };
  const auto latent_norm = [&](int32_t op, TensorId in, int weight_index, TensorId out) {
    TaskUses uses{read(in)};
    weight(uses, weight_index);
    uses.push_back(write(out));
    return p_.compute(TaskRole::kQkv, op, {}, uses);
  };
  TaskId q_normed = kNoTask;
  if (q_latent) {
    down(op_.q_down.forward, lp_.q_down_w, lp_.q_down_b, at(Slot::kQLatent));
  }
  const TaskId kv_projected =
      down(op_.kv_down.forward, lp_.kv_down_w, lp_.kv_down_b, at(Slot::kKvLatent));
  if (q_latent) {
    q_normed = latent_norm(op_.q_latent_norm.forward, at(Slot::kQLatent), lp_.q_layernorm_w,
                           at(Slot::kQUpIn));
  }
  const TaskId kv_normed = latent_norm(op_.kv_latent_norm.forward, at(Slot::kKvLatent),
                                       lp_.kv_layernorm_w, at(Slot::kKvUpIn));
  // The rotary key of every token of the sequence (gather_from_sequence_parallel_region).
  const TensorId k_pe = sp ? at(Slot::kKPeGathered) : at(Slot::kKvLatent);
  const TaskId k_pe_ready =
      sp ? tp_collective(ctx_, state_, TaskRole::kQkv, CollectiveKind::kAllGather,
                         e * n * m_.qk_rope_head_dim, kv_projected,
                         {read(at(Slot::kKvLatent)), write(k_pe)})
         : kNoTask;
  // The up projections (or the plain query projection), column-parallel: each gathers its input
  // under sequence parallelism.
  if (q_latent) {
    TpGemm q{TaskRole::kQkv, op_.q_up, op_.q_up, fwd, true, false, -1, e * n * m_.q_lora_rank};
    q.in = at(Slot::kQUpIn);
    q.gathered = at(Slot::kQUpGathered);
    q.out = qkv;
    gemm_weight(q.weights, lp_.q_up_w);
    tp_gemm(ctx_, state_, q, q_normed);
  } else {
    TpGemm q{TaskRole::kQkv, op_.q_up, op_.q_up, fwd, true, false, -1, column_input_bytes(ctx_)};
    q.in = x;
    q.gathered = at(Slot::kGathered);
    q.out = qkv;
    gemm_weight(q.weights, lp_.q_w);
    tp_gemm(ctx_, state_, q, input);
  }
  TpGemm kv{TaskRole::kQkv, op_.kv_up, op_.kv_up, fwd, true, false, -1, e * n * m_.kv_lora_rank};
  kv.in = at(Slot::kKvUpIn);
  kv.gathered = at(Slot::kKvUpGathered);
  kv.out = at(Slot::kKvUpOut);
  gemm_weight(kv.weights, lp_.kv_up_w);
  tp_gemm(ctx_, state_, kv, kv_normed);
  // The keys and values beside the queries: the tensor the attention reads.
  p_.compute(TaskRole::kRotary, op_.latent_key_value.forward, {k_pe_ready},
             {read(at(Slot::kKvUpOut)), read(k_pe), update(qkv)});
}

GemmResult LayerOps::mla_backward(TaskId grad) {
  const auto bwd = Direction::kBackward;
  const bool q_latent = m_.q_lora_rank > 0;
  const int64_t e = bytes_per_element(ctx_.plan.dtype);
  const int64_t n = ctx_.plan.local_seq_len() * ctx_.plan.micro_batch;
  const TensorId x = at(Slot::kQkvIn);
  const TensorId dqkv = at(Slot::kDQkv);
  // The keys' and values' gradients back to the key-value up projection's output and the rotary
  // key's, summed over the rank's heads, then over TP.
  const TaskId assembled =
      p_.compute(TaskRole::kRotary, op_.latent_key_value.backward, {grad},
                 {read(dqkv), write(at(Slot::kDKvUpOut)), write(at(Slot::kDKPe))});
  const auto [k_pe_reduced, dk_pe] =
      tp_reduce(ctx_, state_, TaskRole::kQkv, e * n * m_.qk_rope_head_dim, assembled,
                at(Slot::kDKPe), at(Slot::kDKPeRows));
  // A column-parallel up projection's backward from `dout`: it gathers its saved input again
  // under sequence parallelism for the weight gradient and reduces its input gradient.
  const auto up_backward = [&](const OpPair& op, TensorId dout, TensorId saved_in,
                               TensorId gathered, int weight_index, int64_t width, Slot partial,
                               Slot rows, TaskId after) {
    TpGemm up{TaskRole::kQkv, op, op, bwd, true, true, -1, e * n * width};
    up.in = dout;
    up.saved_in = saved_in;
    up.gather_saved = true;
    up.gathered = gathered;
    up.out = at(partial);
    up.reduced = at(rows);
    up.reduce_bytes = e * n * width;
    gemm_weight(up.weights, weight_index);
    add_grad(up.weights, weight_index);
    return tp_gemm(ctx_, state_, up, after);
  };
  // A latent's norm backward into the down projection's output gradient.
  const auto latent_norm_backward = [&](int32_t op, std::initializer_list<TensorUse> reads,
                                        int weight_index, TensorId out,
                                        std::initializer_list<TaskId> after) {
    TaskUses uses(reads);
    weight(uses, weight_index);
    uses.push_back(write(out));
    add_grad(uses, weight_index);
    return p_.compute(TaskRole::kQkv, op, after, uses);
  };
  // A down projection's backward: its input gradient into `dx`, written or added to.
  const auto down_backward = [&](int32_t op, TensorId dout, int weight_index, int bias_index,
                                 TensorUse dx, TaskId after) {
    TaskUses uses{read(dout), read(x)};
    gemm_weight(uses, weight_index);
    uses.push_back(dx);
    add_grad(uses, weight_index);
    add_grad(uses, bias_index);
    return p_.compute(TaskRole::kQkv, op, {after}, uses);
  };
  // The query's path: through its latent, or the plain projection's reduced input gradient.
  GemmResult input_grad;
  TaskId q_done = kNoTask;
  if (q_latent) {
    const GemmResult dq_up =
        up_backward(op_.q_up, dqkv, at(Slot::kQUpIn), at(Slot::kQUpGathered), lp_.q_up_w,
                    m_.q_lora_rank, Slot::kDQUpIn, Slot::kDQUpRows, assembled);
    q_done = latent_norm_backward(op_.q_latent_norm.backward,
                                  {read(dq_up.out), read(at(Slot::kQLatent))}, lp_.q_layernorm_w,
                                  at(Slot::kDQLatent), {dq_up.task});
  } else {
    input_grad = norm_input_backward(TaskRole::kQkv, op_.q_up, dqkv, x, lp_.q_w, assembled);
  }
  const GemmResult dkv_up =
      up_backward(op_.kv_up, at(Slot::kDKvUpOut), at(Slot::kKvUpIn), at(Slot::kKvUpGathered),
                  lp_.kv_up_w, m_.kv_lora_rank, Slot::kDKvUpIn, Slot::kDKvUpRows, kNoTask);
  // kv_layernorm's backward writes the latent's gradient beside the rotary key's (the split's).
  latent_norm_backward(op_.kv_latent_norm.backward,
                       {read(dkv_up.out), read(at(Slot::kKvLatent)), read(dk_pe)},
                       lp_.kv_layernorm_w, at(Slot::kDKvLatent), {dkv_up.task, k_pe_reduced});
  // The down projections' input gradients sum into the norm's output gradient.
  if (q_latent) {
    input_grad.out = at(Slot::kDNormRows);
    input_grad.task = down_backward(op_.q_down.backward, at(Slot::kDQLatent), lp_.q_down_w,
                                    lp_.q_down_b, write(input_grad.out), q_done);
  }
  input_grad.task = down_backward(op_.kv_down.backward, at(Slot::kDKvLatent), lp_.kv_down_w,
                                  lp_.kv_down_b, update(input_grad.out), input_grad.task);
  return input_grad;
}

}  // namespace strata
