#include "plan/op_shapes.hpp"

#include <algorithm>

#include "plan/shard_sizes.hpp"

namespace strata {

namespace {

OpShapePair pair(OpShape forward, OpShape backward, bool tp_replicated = false) {
  forward.tp_replicated = tp_replicated;
  backward.tp_replicated = tp_replicated;
  return {forward, backward};
}

}  // namespace

PlanOpShapes plan_op_shapes(const ModelSpec& m, const ParallelPlan& plan) {
  const DType dt = plan.dtype;
  const int64_t b = plan.micro_batch;
  const int64_t s = plan.seq_len;
  const int64_t t = plan.tp;
  const int64_t sb = s * b;
  const int64_t h = m.hidden;
  const int64_t rows = plan.sequence_parallel ? sb / t : sb;  // rows of norms and residual adds
  const bool replicated = !plan.sequence_parallel && t > 1;   // norms and residual adds
  const int64_t f = m.ffn_hidden / t;
  const bool swiglu = m.mlp == MlpKind::kSwiGlu;
  const int64_t v = shard_sizes(m, plan).vocab_shard;
  const auto fwd = Direction::kForward;
  const auto bwd = Direction::kBackward;
  // GELU (tanh form) ~8 FLOPs per element; SwiGLU silu(gate) * up ~6; dropout + residual add 2.
  const int64_t act_flops = swiglu ? 6 : 8;
  const int64_t act_tensors = swiglu ? 3 : 2;
  const int64_t residual_tensors = m.dropout ? 4 : 3;

  PlanOpShapes ops;
  ops.norm = pair(norm_op(rows, h, fwd, dt), norm_op(rows, h, bwd, dt), replicated);
  const int64_t qkv_cols = (h + 2 * m.kv_hidden()) / t;
  ops.qkv = pair(matmul_op(sb, qkv_cols, h, fwd, dt), matmul_op(sb, qkv_cols, h, bwd, dt));
  const auto attention =
      plan.attention == AttentionKind::kFlash ? flash_attention_op : attention_op;
  ops.attention =
      pair(attention(b, s, m.heads / t, m.head_dim(), m.kv_heads / t, m.sliding_window, fwd, dt),
           attention(b, s, m.heads / t, m.head_dim(), m.kv_heads / t, m.sliding_window, bwd, dt));
  ops.attn_out = pair(matmul_op(sb, h, h / t, fwd, dt), matmul_op(sb, h, h / t, bwd, dt));
  ops.residual = pair(elementwise_op(rows * h, 2, residual_tensors, fwd, dt),
                      elementwise_op(rows * h, 2, residual_tensors, bwd, dt), replicated);
  const int64_t up_cols = (swiglu ? 2 : 1) * f;
  ops.mlp_up = pair(matmul_op(sb, up_cols, h, fwd, dt), matmul_op(sb, up_cols, h, bwd, dt));
  ops.mlp_act = pair(elementwise_op(sb * f, act_flops, act_tensors, fwd, dt),
                     elementwise_op(sb * f, act_flops, act_tensors, bwd, dt));
  ops.mlp_down = pair(matmul_op(sb, h, f, fwd, dt), matmul_op(sb, h, f, bwd, dt));
  const int64_t chunk = std::max<int64_t>(1, sb / t);
  ops.qkv_chunk =
      pair(matmul_op(chunk, qkv_cols, h, fwd, dt), matmul_op(chunk, qkv_cols, h, bwd, dt));
  ops.attn_out_chunk =
      pair(matmul_op(chunk, h, h / t, fwd, dt), matmul_op(chunk, h, h / t, bwd, dt));
  ops.mlp_up_chunk =
      pair(matmul_op(chunk, up_cols, h, fwd, dt), matmul_op(chunk, up_cols, h, bwd, dt));
  ops.mlp_down_chunk = pair(matmul_op(chunk, h, f, fwd, dt), matmul_op(chunk, h, f, bwd, dt));
  ops.embedding = pair(embedding_op(sb, h, v, fwd, dt), embedding_op(sb, h, v, bwd, dt), t > 1);
  ops.final_norm = pair(norm_op(rows, h, fwd, dt), norm_op(rows, h, bwd, dt), replicated);
  ops.lm_head = pair(matmul_op(sb, v, h, fwd, dt), matmul_op(sb, v, h, bwd, dt));
  ops.loss = pair(loss_op(sb, v, fwd), loss_op(sb, v, bwd));
  const int64_t shards = plan.zero_stage >= 1 ? plan.dp : 1;
  for (const int64_t params : stage_parameters(m, plan))
    ops.optimizer.push_back(optimizer_op((params + shards - 1) / shards, dt));
  return ops;
}

}  // namespace strata
