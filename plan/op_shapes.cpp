#include "plan/op_shapes.hpp"

#include <algorithm>

#include "plan/memory_plan.hpp"
#include "plan/moe_dims.hpp"
#include "plan/shard_sizes.hpp"

namespace strata {

namespace {

OpShapePair pair(OpShape forward, OpShape backward, bool tp_replicated = false) {
  forward.tp_replicated = tp_replicated;
  backward.tp_replicated = tp_replicated;
  return {forward, backward};
}

OpShapePair with_function(OpShapePair ops, OpFunction function) {
  ops.forward.function = function;
  ops.backward.function = function;
  return ops;
}

// A memory-bound FP8 cast or transpose over `elements`, moving `bytes_per_element` each (no
// model FLOPs: the step's FLOPs do not depend on the plan).
OpShape fp8_cast(int64_t elements, int64_t bytes_per_element, Direction direction) {
  OpShape op = elementwise_op(elements, 0, bytes_per_element, direction, DType::kFp8);
  op.function = OpFunction::kFp8Cast;
  return op;
}

// The width of each value head where it differs from the query and key heads' (latent
// attention's v_head_dim, as its attention op carries it), 0 where the same.
int64_t attention_value_dim(const ModelSpec& m) { return m.latent_attention() ? m.v_head_dim : 0; }

// Context parallelism's attention blocks (op_shapes.hpp has the layout), with the model's key and
// value head widths (latent attention's K of nope + rope and V of v_head_dim per head, as
// Megatron-Core's MLA hands Transformer Engine k_channels and v_channels). The plan passed
// validate_plan: flash attention, no window but under a2a, S divisible by 2 cp.
void add_cp_attention(const ModelSpec& m, const ParallelPlan& plan, PlanOpShapes& ops) {
  const DType dt = plan.dtype;
  const int64_t b = plan.micro_batch;
  const int64_t big_s = plan.seq_len;
  const int64_t s = plan.local_seq_len();
  const int64_t heads = m.heads / plan.tp;
  const int64_t kv_heads = m.kv_heads / plan.tp;
  const int64_t d = m.head_dim();
  const int64_t dv = m.value_head_dim();
  const int64_t value_dim = attention_value_dim(m);
  const auto fwd = Direction::kForward;
  const auto bwd = Direction::kBackward;
  switch (plan.cp_comm) {
    case CpComm::kP2p: {
      // Step 0 is flash_attention_op's causal block over s (ops.attention already). A later step:
      // the second half of the queries (s/2) over the whole received block (s keys), s^2/2
      // pairs; Megatron's count gives each step the rank's s queries over the block's s keys.
      const auto block = [&](Direction dir) {
        OpShape op = flash_attention_block_op(b, s / 2, s, s * s / 2, heads, d, kv_heads, dir, dt,
                                              value_dim);
        op.model_flops *= 2;
        return op;
      };
      ops.cp_block = pair(block(fwd), block(bwd));
      // dkv += the step's dK and dV: 1 FLOP per element; reads both, writes the sum. No model
      // FLOPs: the step's do not depend on the plan.
      ops.cp_dkv_add = elementwise_op(b * s * kv_heads * (d + dv), 1, 3, bwd, dt);
      ops.cp_dkv_add.model_flops = 0;
      break;
    }
    case CpComm::kAllGather: {
      // Chunk j (s/2 tokens from j s/2) attends causally over the keys up to it:
      // (s/2)^2 j + (s/2)(s/2 + 1)/2 pairs; the rank's chunks i and 2cp - 1 - i together
      // (s/2)^2 (2cp - 1) + (s/2)(s/2 + 1) = (s/2)(S + 1), the same on every rank.
      const auto gathered = [&](Direction dir) {
        OpShape op = flash_attention_block_op(b, s, big_s, s * (big_s + 1) / 2, heads, d, kv_heads,
                                              dir, dt, value_dim);
        op.kernels = 2;  // one per chunk
        return op;
      };
      ops.attention = pair(gathered(fwd), gathered(bwd));
      break;
    }
    case CpComm::kAllToAll:
      break;  // attention_pair's, over S on heads / cp
  }
}

// Latent attention's ops (op_shapes.hpp), per rank: n = s b tokens (s = S / cp, the rank's), `rows`
// of them on the rank (n / t under sequence parallelism), H = heads / t. Megatron-Core's
// MLASelfAttention (megatron/core/transformer/multi_latent_attention.py): the down projections are
// TELinear with parallel_mode "duplicated", run by every TP rank on its own input: the whole
// sequence (counted once per TP group in the model FLOPs, as the norms are), or its rows under
// sequence parallelism; the up projections are column-parallel over the gathered latents. The keys
// and values come from one kernel (apply_rope_fusion: fused_apply_mla_rope_for_kv): it reads the
// key-value up projection's output (n H (nope + v)) and the rotary key (n rope), turns the rotary
// key (3 FLOPs per value, as rotary_op) and writes each head's key (nope + rope) and its value,
// contiguous for the attention kernel; its backward reads the keys' and values' gradients, writes
// the up projection's output gradient and sums the rotary key's gradient over the heads (1 FLOP per
// value) before turning it back (every TP rank turns the whole rotary key: a few FLOPs a token,
// counted on each). Eager PyTorch (no fused kernels) runs it as the rotary chain, the broadcast
// and the concatenation, and the contiguous copy of the values: 4 kernels, the same traffic.
void add_latent_attention(const ModelSpec& m, const ParallelPlan& plan, PlanOpShapes& ops) {
  const DType dt = plan.dtype;
  const int64_t t = plan.tp;
  const int64_t n = plan.local_seq_len() * plan.micro_batch;
  const int64_t h = m.hidden;
  const int64_t rows = plan.sequence_parallel ? n / t : n;
  const bool replicated = !plan.sequence_parallel && t > 1;
  const bool fused = runs_fused_kernels(plan);
  const int64_t heads = m.heads / t;
  const int64_t nope = m.qk_nope_head_dim;
  const int64_t rope = m.qk_rope_head_dim;
  const int64_t v = m.v_head_dim;
  const auto both = [](auto make, bool tp_replicated = false) {
    return pair(make(Direction::kForward), make(Direction::kBackward), tp_replicated);
  };
  const auto matmul = [&](int64_t m_rows, int64_t cols, int64_t k, bool tp_replicated = false) {
    return both([&](Direction dir) { return matmul_op(m_rows, cols, k, dir, dt); }, tp_replicated);
  };
  const auto latent_norm = [&](int64_t width) {
    return with_function(both(
                             [&](Direction dir) {
                               return fused ? norm_op(rows, width, dir, dt)
                                            : eager_rms_norm_op(rows, width, dir, dt);
                             },
                             replicated),
                         OpFunction::kRmsNorm);
  };
  ops.qkv = {};
  if (m.q_lora_rank > 0) {
    ops.q_down = matmul(rows, m.q_lora_rank, h, replicated);
    ops.q_latent_norm = latent_norm(m.q_lora_rank);
    ops.q_up = matmul(n, heads * (nope + rope), m.q_lora_rank);
  } else {
    ops.q_up = matmul(n, heads * (nope + rope), h);
  }
  ops.kv_down = matmul(rows, m.kv_lora_rank + rope, h, replicated);
  ops.kv_latent_norm = latent_norm(m.kv_lora_rank);
  ops.kv_up = matmul(n, heads * (nope + v), m.kv_lora_rank);
  const int64_t e = bytes_per_element(dt);
  const auto key_value = [&](Direction dir) {
    const bool forward = dir == Direction::kForward;
    OpShape op = elementwise_op(n * rope, 3, 0, dir, dt);
    op.flops = op.model_flops = 3 * n * rope + (forward ? 0 : n * heads * rope);
    // The up projection's output and the rotary key; the keys and the values.
    op.bytes = e * (n * heads * (nope + v) + n * rope + n * heads * (nope + rope) + n * heads * v);
    op.kernels = fused ? 1 : 4;
    op.function = OpFunction::kLatentKeyValue;
    return op;
  };
  ops.latent_key_value = both(key_value);
  // The queries' rotary part, in place (fused_apply_mla_rope_for_q).
  const int64_t rotated = n * heads * rope;
  ops.rotary = with_function(
      both([&](Direction dir) { return rotary_op(rotated, fused, dir, dt); }), OpFunction::kRotary);
  // The attention is plan_op_shapes' (v_head_dim wide values; context parallelism's blocks too).
  // FP8 and the TP overlap are refused with latent attention (validate_plan): their casts and
  // chunks keep the dense shapes.
  ops.attn_out = matmul(n, h, heads * v);
}

}  // namespace

PlanOpShapes plan_op_shapes(const ModelSpec& m, const ParallelPlan& plan) {
  const DType dt = plan.dtype;
  const bool fp8 = plan.fp8 != Fp8Format::kNone;
  const DType gemm = fp8 ? DType::kFp8 : dt;  // the transformer layers' four GEMMs
  const int64_t b = plan.micro_batch;
  const int64_t s = plan.local_seq_len();
  const int64_t t = plan.tp;
  const int64_t sb = s * b;
  const int64_t h = m.hidden;
  const int64_t q = m.q_hidden() / t;  // the rank's query (and attention-output) width
  const int64_t rows = plan.sequence_parallel ? sb / t : sb;  // rows of norms and residual adds
  const bool replicated = !plan.sequence_parallel && t > 1;   // norms and residual adds
  const int64_t f = m.ffn_hidden / t;
  const bool gated = m.gated_mlp();
  const int64_t v = shard_sizes(m, plan).vocab_shard;
  const auto fwd = Direction::kForward;
  const auto bwd = Direction::kBackward;
  // GELU (tanh form) ~8 FLOPs per element; SwiGLU silu(gate) * up ~6; GeGLU gelu(gate) * up ~9;
  // dropout + residual add 2.
  const int64_t act_flops = m.mlp == MlpKind::kSwiGlu ? 6 : m.mlp == MlpKind::kGeGlu ? 9 : 8;
  const int64_t act_tensors = gated ? 3 : 2;
  // A parallel block adds both branches' outputs to the residual in one pass.
  const int64_t residual_tensors = (m.dropout ? 4 : 3) + (m.parallel_block() ? 1 : 0);

  // Eager PyTorch modules run an RMSNorm and SwiGLU as chains of kernels; PyTorch's LayerNorm is
  // one kernel either way.
  const bool fused = runs_fused_kernels(plan);
  const auto norm = [&](Direction direction) {
    return fused || m.norm != NormKind::kRmsNorm ? norm_op(rows, h, direction, dt)
                                                 : eager_rms_norm_op(rows, h, direction, dt);
  };

  const OpFunction norm_function =
      m.norm == NormKind::kRmsNorm ? OpFunction::kRmsNorm : OpFunction::kLayerNorm;
  PlanOpShapes ops;
  ops.norm = with_function(pair(norm(fwd), norm(bwd), replicated), norm_function);
  const int64_t qkv_cols = q + 2 * m.kv_hidden() / t;
  ops.qkv = pair(matmul_op(sb, qkv_cols, h, fwd, gemm), matmul_op(sb, qkv_cols, h, bwd, gemm));
  const auto attention = plan.attention == AttentionKind::kFlash ? flash_attention_op_with_value_dim
                                                                 : attention_op_with_value_dim;
  // a2a attends over the whole sequence on the rank's heads / cp.
  const int64_t heads_split = plan.cp_comm == CpComm::kAllToAll ? plan.cp : 1;
  const int64_t attended = heads_split > 1 ? plan.seq_len : s;
  const auto attention_pair = [&](int64_t window) {
    const int64_t heads = m.heads / t / heads_split;
    const int64_t kv_heads = m.kv_heads / t / heads_split;
    const int64_t value_dim = attention_value_dim(m);
    return pair(attention(b, attended, heads, m.head_dim(), kv_heads, window, fwd, dt, value_dim),
                attention(b, attended, heads, m.head_dim(), kv_heads, window, bwd, dt, value_dim));
  };
  ops.attention = attention_pair(m.sliding_window);
  if (m.global_every > 0) ops.attention_global = attention_pair(0);
  if (plan.cp > 1) add_cp_attention(m, plan, ops);
  // QK-norm: an RMSNorm over each query and key head (per head) or over the rank's slice of all
  // of them (whole width: its per-token sum of squares would also cross the TP group, a scalar
  // per token that is left out).
  if (m.qk_norm != QkNorm::kNone) {
    const int64_t qk_rows = sb * (m.heads + m.kv_heads) / t;
    ops.qk_norm = with_function(
        fused
            ? pair(norm_op(qk_rows, m.head_dim(), fwd, dt), norm_op(qk_rows, m.head_dim(), bwd, dt))
            : pair(eager_rms_norm_op(qk_rows, m.head_dim(), fwd, dt),
                   eager_rms_norm_op(qk_rows, m.head_dim(), bwd, dt)),
        m.qk_norm == QkNorm::kPerHead ? OpFunction::kQkNorm : OpFunction::kQkNormWhole);
  }
  ops.attn_out = pair(matmul_op(sb, h, q, fwd, gemm), matmul_op(sb, h, q, bwd, gemm));
  ops.residual =
      with_function(pair(elementwise_op(rows * h, 2, residual_tensors, fwd, dt),
                         elementwise_op(rows * h, 2, residual_tensors, bwd, dt), replicated),
                    OpFunction::kResidualAdd);
  const int64_t up_cols = (gated ? 2 : 1) * f;
  ops.mlp_up = pair(matmul_op(sb, up_cols, h, fwd, gemm), matmul_op(sb, up_cols, h, bwd, gemm));
  const OpFunction act_function = m.mlp == MlpKind::kSwiGlu  ? OpFunction::kSwiglu
                                  : m.mlp == MlpKind::kGeGlu ? OpFunction::kGeglu
                                                             : OpFunction::kGelu;
  // The activation over `elements` of an MLP's inner width (the dense MLP's, the experts').
  const auto activation = [&](int64_t elements) {
    return with_function(
        gated && !fused
            ? pair(eager_swiglu_op(elements, fwd, dt), eager_swiglu_op(elements, bwd, dt))
            : pair(elementwise_op(elements, act_flops, act_tensors, fwd, dt),
                   elementwise_op(elements, act_flops, act_tensors, bwd, dt)),
        act_function);
  };
  ops.mlp_act = activation(sb * f);
  if (m.position == PositionKind::kRotary) {
    const int64_t rotated = sb * (q + m.kv_hidden() / t);  // the rank's query and key values
    ops.rotary =
        with_function(pair(rotary_op(rotated, fused, fwd, dt), rotary_op(rotated, fused, bwd, dt)),
                      OpFunction::kRotary);
  }
  ops.mlp_down = pair(matmul_op(sb, h, f, fwd, gemm), matmul_op(sb, h, f, bwd, gemm));
  if (m.latent_attention()) add_latent_attention(m, plan, ops);
  ops.k_product = matmul_op(sb, m.kv_hidden() / t, h, fwd, gemm);
  ops.mlp_up_half = matmul_op(sb, f, h, fwd, gemm);
  const int64_t chunk = std::max<int64_t>(1, sb / t);
  ops.qkv_chunk =
      pair(matmul_op(chunk, qkv_cols, h, fwd, gemm), matmul_op(chunk, qkv_cols, h, bwd, gemm));
  ops.attn_out_chunk = pair(matmul_op(chunk, h, q, fwd, gemm), matmul_op(chunk, h, q, bwd, gemm));
  ops.mlp_up_chunk =
      pair(matmul_op(chunk, up_cols, h, fwd, gemm), matmul_op(chunk, up_cols, h, bwd, gemm));
  ops.mlp_down_chunk = pair(matmul_op(chunk, h, f, fwd, gemm), matmul_op(chunk, h, f, bwd, gemm));
  ops.fp8_cast_attn_out_in = fp8_cast(sb * q, 3, fwd);
  ops.fp8_cast_mlp_down_in = fp8_cast(sb * f, 3, fwd);
  const auto grad_casts = [&](int64_t in_cols, int64_t out_cols) {
    OpShape op = fp8_cast(sb * out_cols, 4, bwd);
    op.bytes += 2 * sb * in_cols;  // the saved input's transpose
    return op;
  };
  ops.fp8_grad_qkv = grad_casts(h, qkv_cols);
  ops.fp8_grad_attn_out = grad_casts(q, h);
  ops.fp8_grad_mlp_up = grad_casts(h, up_cols);
  ops.fp8_grad_mlp_down = grad_casts(f, h);
  ops.fp8_weight_cast = fp8_cast(shard_sizes(m, plan).layer_gemm_weights, 4, fwd);
  ops.embedding = pair(embedding_op(sb, h, v, fwd, dt), embedding_op(sb, h, v, bwd, dt), t > 1);
  // The embedding's dropout, on the reduced output's rows: reads them and writes them and the mask
  // (1 FLOP per element); the backward reads the gradient and the mask, and writes the gradient.
  ops.embedding_dropout = with_function(pair(elementwise_op(rows * h, 1, 3, fwd, dt),
                                             elementwise_op(rows * h, 1, 3, bwd, dt), replicated),
                                        OpFunction::kDropout);
  ops.final_norm = with_function(pair(norm(fwd), norm(bwd), replicated), norm_function);
  ops.lm_head = pair(matmul_op(sb, v, h, fwd, dt), matmul_op(sb, v, h, bwd, dt));
  ops.loss = pair(loss_op(sb, v, fwd), loss_op(sb, v, bwd));
  ops.loss_max = loss_max_op(sb, v);
  ops.loss_partials = loss_partials_op(sb, v);
  if (m.moe()) {
    const MoeDims d = moe_dims(m, plan);
    const int64_t e = m.experts;
    const int64_t k = m.experts_per_token;
    const auto both = [](auto make) { return pair(make(fwd), make(bwd)); };
    ops.router = both([&](Direction dir) { return matmul_op(d.tokens, e, h, dir, dt); });
    // Softmax (or sigmoid) and the top k over each token's E logits, fp32: ~5 FLOPs per logit;
    // reads the logits, writes the probabilities.
    ops.routing =
        both([&](Direction dir) { return elementwise_op(d.tokens * e, 5, 2, dir, DType::kFp32); });
    // Every rank computes the busiest rank's expert rows (the combine waits for it, so the step
    // pays for them); the model FLOPs count the balanced rows, each token's k active experts.
    ParallelPlan even = plan;
    even.moe_imbalance = 1;
    const MoeDims balanced = moe_dims(m, even);
    const auto counted_as = [](OpShapePair executed, const OpShapePair& model) {
      executed.forward.model_flops = model.forward.model_flops;
      executed.backward.model_flops = model.backward.model_flops;
      return executed;
    };
    // The all-to-all dispatcher permutes the rank's T x k token slots before sending them; the
    // all-gather dispatcher picks its experts' rows out of the gathered tokens. A copy each way.
    const bool all_to_all = plan.moe_dispatcher == MoeDispatcher::kAllToAll;
    const int64_t permuted = all_to_all ? d.tokens * k : d.expert_rows;
    ops.permute = both([&](Direction dir) { return elementwise_op(permuted * h, 0, 2, dir, dt); });
    // The inverse: each row times its probability, added into its token's output. The model
    // counts the rank's T x k slots (the all-gather dispatcher's expert-TP ranks each weigh
    // every gathered row's partial output).
    const auto unpermute = [&](int64_t rows) {
      return both([&](Direction dir) { return elementwise_op(rows * h, 2, 2, dir, dt); });
    };
    ops.unpermute = counted_as(unpermute(permuted), unpermute(d.tokens * k));
    const int64_t local = d.local_experts;
    const auto experts = [&](int64_t rows, int64_t n, int64_t kk) {
      return both([&](Direction dir) {
        return plan.grouped_gemm ? grouped_matmul_op(local, rows, n, kk, dir, dt)
                                 : matmul_op(std::max<int64_t>(1, rows / local), n, kk, dir, dt);
      });
    };
    ops.experts_up = counted_as(experts(d.expert_rows, d.expert_up, h),
                                experts(balanced.expert_rows, d.expert_up, h));
    ops.experts_down = counted_as(experts(d.expert_rows, h, d.expert_ffn),
                                  experts(balanced.expert_rows, h, d.expert_ffn));
    ops.experts_act = counted_as(activation(d.expert_rows * d.expert_ffn),
                                 activation(balanced.expert_rows * d.expert_ffn));
    if (d.shared_ffn > 0) {
      ops.shared_up = both([&](Direction dir) { return matmul_op(sb, d.shared_up, h, dir, dt); });
      ops.shared_down =
          both([&](Direction dir) { return matmul_op(sb, h, d.shared_ffn, dir, dt); });
      ops.shared_act = activation(sb * d.shared_ffn);
      // sigmoid(x . w) per token times the shared output: the h-wide product (2h FLOPs) and the
      // scale (1 per element); reads the input and the output, writes the gated output.
      ops.shared_gate =
          both([&](Direction dir) { return elementwise_op(d.tokens * h, 3, 3, dir, dt); });
    }
  }
  // Each rank steps its ZeRO shard: of the dense parameters over dp x cp, of the experts' kept
  // apart over their data-parallel ranks.
  const bool shards = plan.zero_stage >= 1;
  const std::vector<int64_t> params = stage_parameters(m, plan);
  const std::vector<int64_t> experts = stage_expert_parameters(m, plan);
  for (size_t stage = 0; stage < params.size(); ++stage) {
    const int64_t dense = sharded(params[stage] - experts[stage], shards ? plan.data_shards() : 1);
    const int64_t expert = sharded(experts[stage], shards ? plan.expert_data_shards() : 1);
    ops.optimizer.push_back(optimizer_op(dense + expert, dt));
  }
  return ops;
}

}  // namespace strata
