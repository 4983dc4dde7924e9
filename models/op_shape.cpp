#include "models/ops.hpp"

#include <algorithm>

#include "common/error.hpp"

namespace strata {

int64_t bytes_per_element(DType dtype) {
  switch (dtype) {
    case DType::kFp32:
      return 4;
    case DType::kFp8:
    case DType::kU8:
      return 1;
    case DType::kBf16:
    case DType::kFp16:
      return 2;
  }
  return 2;
}

const char* to_string(DType dtype) {
  switch (dtype) {
    case DType::kBf16:
      return "bf16";
    case DType::kFp16:
      return "fp16";
    case DType::kFp32:
      return "fp32";
    case DType::kFp8:
      return "fp8";
    case DType::kU8:
      return "u8";
  }
  return "?";
}

const char* to_string(OpFunction function) {
  switch (function) {
    case OpFunction::kDefault:
      return "default";
    case OpFunction::kLayerNorm:
      return "layernorm";
    case OpFunction::kRmsNorm:
      return "rmsnorm";
    case OpFunction::kResidualAdd:
      return "residual_add";
    case OpFunction::kGelu:
      return "gelu";
    case OpFunction::kSwiglu:
      return "swiglu";
    case OpFunction::kGeglu:
      return "geglu";
    case OpFunction::kRotary:
      return "rotary";
    case OpFunction::kFp8Cast:
      return "fp8_cast";
    case OpFunction::kDropout:
      return "dropout";
    case OpFunction::kLossMax:
      return "loss_max";
    case OpFunction::kLossPartials:
      return "loss_partials";
    case OpFunction::kQkNorm:
      return "qk_norm";
    case OpFunction::kQkNormWhole:
      return "qk_norm_whole";
    case OpFunction::kLatentKeyValue:
      return "latent_key_value";
  }
  return "?";
}

const char* to_string(OpKind kind) {
  switch (kind) {
    case OpKind::kMatmul:
      return "matmul";
    case OpKind::kAttention:
      return "attention";
    case OpKind::kFlashAttention:
      return "flash_attention";
    case OpKind::kNorm:
      return "norm";
    case OpKind::kElementwise:
      return "elementwise";
    case OpKind::kEmbedding:
      return "embedding";
    case OpKind::kLoss:
      return "loss";
    case OpKind::kOptimizer:
      return "optimizer";
    case OpKind::kHost:
      return "host";
  }
  return "?";
}

namespace {

int64_t backward_factor(Direction direction) { return direction == Direction::kForward ? 1 : 2; }

// Every op but flash attention executes the FLOPs the model counts.
OpShape counted_as_executed(OpShape op) {
  op.model_flops = op.flops;
  return op;
}

// Keys each query attends to in the model's FLOP count: the whole sequence, or the window.
int64_t attended_span(int64_t s, int64_t window) { return window > 0 ? std::min(s, window) : s; }

}  // namespace

// Forward: out (m,n) = inp (m,k) @ w (k,n): 2mnk FLOPs; reads inp and w, writes out.
// Backward: dinp = dout @ w^T and dw = inp^T @ dout: 4mnk FLOPs; reads dout, inp, w; writes dinp
// and dw. An FP8 GEMM reads 1-byte operands and writes 16-bit results.
OpShape matmul_op(int64_t m, int64_t n, int64_t k, Direction direction, DType dtype) {
  STRATA_ASSERT(m > 0 && n > 0 && k > 0, "matmul dimensions must be positive");
  const int64_t in = bytes_per_element(dtype);
  const int64_t out = dtype == DType::kFp8 ? 2 : in;
  OpShape op{OpKind::kMatmul, direction, dtype, {m, n, k, 0}, 0, 0, 0};
  op.flops = 2 * m * n * k * backward_factor(direction);
  op.bytes = direction == Direction::kForward
                 ? in * (m * k + k * n) + out * m * n
                 : in * (m * n + m * k + k * n) + out * (m * k + k * n);
  return counted_as_executed(op);
}

OpShape grouped_matmul_op(int64_t groups, int64_t m, int64_t n, int64_t k, Direction direction,
                          DType dtype) {
  STRATA_ASSERT(groups > 0, "a grouped GEMM has at least one group");
  OpShape op = matmul_op(m, n, k, direction, dtype);
  // Each further group's weights: read (in), and in the backward their gradient written (out).
  const int64_t in = bytes_per_element(dtype);
  const int64_t out = dtype == DType::kFp8 ? 2 : in;
  op.bytes += (groups - 1) * k * n * (direction == Direction::kForward ? in : in + out);
  op.dims[3] = groups;
  return op;
}

int64_t causal_pairs(int64_t s, int64_t window) {
  if (window <= 0 || window >= s) return s * (s + 1) / 2;
  return window * (window + 1) / 2 + (s - window) * window;
}

// q is (b, heads, s, d) and k (b, kv_heads, s, d); v is (b, kv_heads, s, dv) and the output (b,
// heads, s, dv), where dv = value_dim, or d when it is 0. Forward: scores = q k^T (2 b s^2 heads d
// FLOPs), softmax, context = scores v (2 b s^2 heads dv): 2 b s^2 heads (d + dv), which is
// 4 b s^2 heads d when dv = d. Backward: twice that.
// Bytes, for the attention core as Megatron-LM ran it unfused (Korthikanti et al. 2022): q, k, v
// and the output, plus the (b, heads, s, s) scores crossing HBM once per pass. Forward: 6 passes
// (the QK^T product writes them; softmax reads and writes; dropout reads and writes; the product
// with V reads). Backward: 8 (the V product's gradient reads the probabilities and writes their
// gradient; dropout's backward reads and writes; softmax's backward reads the probabilities and
// the gradient and writes; the QK^T gradients read it) and q, k, v, output and their gradients.
// q and k with the output and v come to e b s (d + dv)(heads + kv_heads) bytes.
// A sliding window only masks more of the full (s, s) scores: the kernels compute and move them
// all, so it changes the model FLOPs (s x window per head) and nothing else.
OpShape attention_op(int64_t b, int64_t s, int64_t heads, int64_t head_dim, int64_t kv_heads,
                     int64_t window, Direction direction, DType dtype) {
  return attention_op_with_value_dim(b, s, heads, head_dim, kv_heads, window, direction, dtype, 0);
}

OpShape attention_op_with_value_dim(int64_t b, int64_t s, int64_t heads, int64_t head_dim,
                                    int64_t kv_heads, int64_t window, Direction direction,
                                    DType dtype, int64_t value_dim) {
  STRATA_ASSERT(b > 0 && s > 0 && heads > 0 && head_dim > 0 && kv_heads > 0 && value_dim >= 0,
                "attention dimensions must be positive");
  const int64_t e = bytes_per_element(dtype);
  const int64_t widths = head_dim + (value_dim > 0 ? value_dim : head_dim);  // d + dv
  OpShape op{OpKind::kAttention, direction, dtype, {b, s, heads, head_dim}, 0, 0, 0};
  op.flops = 2 * b * s * s * heads * widths * backward_factor(direction);
  op.model_flops =
      2 * b * s * attended_span(s, window) * heads * widths * backward_factor(direction);
  const int64_t qkv_out = e * b * s * widths * (heads + kv_heads);
  const int64_t scores = e * b * heads * s * s;
  op.bytes = direction == Direction::kForward ? qkv_out + 6 * scores : 2 * qkv_out + 8 * scores;
  op.window = window;
  op.value_dim = value_dim;
  return op;
}

// FlashAttention (Dao et al. 2022; Dao 2023, FlashAttention-2), as Transformer Engine's fused
// attention and PyTorch's scaled_dot_product_attention run it: the scores live in on-chip memory
// tile by tile and never reach HBM. Executed FLOPs count the causal (and windowed) query-key
// pairs P = causal_pairs(s, window) only, since masked tiles are skipped: forward 2 products
// (q k^T over d and scores v over dv) = 2 P b heads (d + dv); backward 5 (q k^T again, as the
// scores were not kept, dQ and dK over d; dV and dP over dv) = 2 P b heads (3d + 2dv). With
// dv = d: 4 P b heads d and 10 P b heads d. The model FLOPs stay Megatron's full-sequence count,
// so the recomputed scores are hardware FLOPs only. Bytes are O(s h) per pass: the forward reads
// q, k, v and writes the output and the fp32 log-sum-exp (b, heads, s); the backward reads q, k,
// v, the output, its gradient and the log-sum-exp, computes D = rowsum(dO * O) (fp32), and writes
// dq, dk, dv.
OpShape flash_attention_op(int64_t b, int64_t s, int64_t heads, int64_t head_dim, int64_t kv_heads,
                           int64_t window, Direction direction, DType dtype) {
  return flash_attention_op_with_value_dim(b, s, heads, head_dim, kv_heads, window, direction,
                                           dtype, 0);
}

OpShape flash_attention_op_with_value_dim(int64_t b, int64_t s, int64_t heads, int64_t head_dim,
                                          int64_t kv_heads, int64_t window, Direction direction,
                                          DType dtype, int64_t value_dim) {
  STRATA_ASSERT(b > 0 && s > 0 && heads > 0 && head_dim > 0 && kv_heads > 0 && value_dim >= 0,
                "attention dimensions must be positive");
  const int64_t e = bytes_per_element(dtype);
  const bool forward = direction == Direction::kForward;
  const int64_t dv = value_dim > 0 ? value_dim : head_dim;
  OpShape op{OpKind::kFlashAttention, direction, dtype, {b, s, heads, head_dim}, 0, 0, 0};
  const int64_t pairs = causal_pairs(s, window);
  op.flops = 2 * pairs * b * heads * (forward ? head_dim + dv : 3 * head_dim + 2 * dv);
  op.model_flops =
      2 * b * s * attended_span(s, window) * heads * (head_dim + dv) * backward_factor(direction);
  const int64_t lse = 4 * b * heads * s;
  // q and k (d wide), v and the output (dv wide); backward, each with its gradient.
  const int64_t tensors = e * b * s * (head_dim + dv) * (heads + kv_heads);
  op.bytes = forward ? tensors + lse : 2 * tensors + 2 * lse;
  op.window = window;
  op.value_dim = value_dim;
  return op;
}

// The same kernel on a block: q (b, heads, queries, d) against k (b, kv_heads, keys, d) and v
// (b, kv_heads, keys, dv), dv = value_dim or d. With queries = keys = s and pairs =
// causal_pairs(s, 0) it is flash_attention_op_with_value_dim's op: executed FLOPs 2 pairs b heads
// (d + dv) forward and 2 pairs b heads (3d + 2dv) backward; Megatron's count of the block 2 b
// queries keys heads (d + dv) forward; q and the output (d + dv wide) over the queries, k and v
// over the keys, each with its gradient backward. With dv = d: 4 and 10 pairs b heads d, and
// 4 b queries keys heads d.
OpShape flash_attention_block_op(int64_t b, int64_t queries, int64_t keys, int64_t pairs,
                                 int64_t heads, int64_t head_dim, int64_t kv_heads,
                                 Direction direction, DType dtype, int64_t value_dim) {
  STRATA_ASSERT(b > 0 && queries > 0 && keys > 0 && heads > 0 && head_dim > 0 && kv_heads > 0 &&
                    value_dim >= 0,
                "attention dimensions must be positive");
  STRATA_ASSERT(pairs > 0 && pairs <= queries * keys,
                "a block evaluates at most every query against every key");
  const int64_t e = bytes_per_element(dtype);
  const bool forward = direction == Direction::kForward;
  const int64_t dv = value_dim > 0 ? value_dim : head_dim;
  OpShape op{OpKind::kFlashAttention, direction, dtype, {b, queries, heads, head_dim}, 0, 0, 0};
  op.flops = 2 * pairs * b * heads * (forward ? head_dim + dv : 3 * head_dim + 2 * dv);
  op.model_flops = 2 * b * queries * keys * heads * (head_dim + dv) * backward_factor(direction);
  const int64_t lse = 4 * b * heads * queries;
  const int64_t q_out = e * b * queries * heads * (head_dim + dv);  // q and the output
  const int64_t kv = e * b * keys * kv_heads * (head_dim + dv);     // k and v
  op.bytes = forward ? q_out + kv + lse : 2 * q_out + 2 * kv + 2 * lse;
  op.value_dim = value_dim;
  return op;
}

// LayerNorm/RMSNorm over `width`: about 8 FLOPs per element forward (mean, variance, scale,
// shift); reads the input and writes the output; backward reads input and output gradient and
// writes the input gradient.
OpShape norm_op(int64_t rows, int64_t width, Direction direction, DType dtype) {
  const int64_t e = bytes_per_element(dtype);
  const int64_t elements = rows * width;
  OpShape op{OpKind::kNorm, direction, dtype, {rows, width, 0, 0}, 0, 0, 0};
  op.flops = 8 * elements * backward_factor(direction);
  op.bytes = e * elements * (direction == Direction::kForward ? 2 : 3);
  return counted_as_executed(op);
}

// Fused: read and write each value once, a complex multiply (6 FLOPs per pair, 3 per value).
// Eager (torchtitan's apply_rotary_emb on q and k): to fp32 (e + 4 bytes per value), a complex
// multiply by the fp32 frequencies (4 + 4 read, 4 written), back to the training dtype (4 + e):
// 20 + 2e bytes per value and 3 kernels per tensor. The backward runs the same chain (a multiply
// by the conjugate frequencies).
OpShape rotary_op(int64_t elements, bool fused, Direction direction, DType dtype) {
  const int64_t e = bytes_per_element(dtype);
  OpShape op{OpKind::kElementwise, direction, dtype, {elements, 3, 0, 0}, 0, 0, 0};
  op.flops = 3 * elements;
  op.bytes = elements * (fused ? 2 * e : 20 + 2 * e);
  op.kernels = fused ? 1 : 6;
  return counted_as_executed(op);
}

// torchtitan's RMSNorm forward: x.float() (e + 4 bytes per value), pow (4 + 4), mean (4),
// x * rsqrt (4 + 4 read and written), type_as (4 + e), * weight (e + e): 28 + 4e bytes per value
// in 6 kernels (the rsqrt of the per-row means is negligible). Autograd's backward runs each
// kernel's gradient, reading its saved inputs and the incoming gradient: twice the forward's
// traffic and kernels.
OpShape eager_rms_norm_op(int64_t rows, int64_t width, Direction direction, DType dtype) {
  const int64_t e = bytes_per_element(dtype);
  const int64_t elements = rows * width;
  const int64_t factor = backward_factor(direction);
  OpShape op{OpKind::kNorm, direction, dtype, {rows, width, 0, 0}, 0, 0, 0};
  op.flops = 8 * elements * factor;
  op.bytes = (28 + 4 * e) * elements * factor;
  op.kernels = 6 * factor;
  return counted_as_executed(op);
}

// Eager silu(gate) * up over `elements` values of each: silu reads and writes (2e), the product
// reads two and writes one (3e); the backward: silu's gradient (3e) and the product's (read the
// gradient and both inputs, write two: 5e), in 3 kernels. Fused: one kernel, 3e each way.
OpShape eager_swiglu_op(int64_t elements, Direction direction, DType dtype) {
  const int64_t e = bytes_per_element(dtype);
  const bool forward = direction == Direction::kForward;
  OpShape op{OpKind::kElementwise, direction, dtype, {elements, 6, 0, 0}, 0, 0, 0};
  op.flops = 6 * elements * backward_factor(direction);
  op.bytes = elements * (forward ? 5 * e : 8 * e);
  op.kernels = forward ? 2 : 3;
  return counted_as_executed(op);
}

// `tensors_touched` tensors of `elements` each are read or written (a residual add: 3).
OpShape elementwise_op(int64_t elements, int64_t flops_per_element, int64_t tensors_touched,
                       Direction direction, DType dtype) {
  OpShape op{OpKind::kElementwise, direction, dtype, {elements, flops_per_element, 0, 0}, 0, 0, 0};
  op.flops = elements * flops_per_element * backward_factor(direction);
  op.bytes = bytes_per_element(dtype) * elements * tensors_touched;
  return counted_as_executed(op);
}

// Forward gathers `tokens` rows of `width` from a table of `vocab_rows`; backward scatters the
// gradient rows back into the table's gradient (no FLOPs beyond the adds).
OpShape embedding_op(int64_t tokens, int64_t width, int64_t vocab_rows, Direction direction,
                     DType dtype) {
  const int64_t e = bytes_per_element(dtype);
  OpShape op{OpKind::kEmbedding, direction, dtype, {tokens, width, vocab_rows, 0}, 0, 0, 0};
  op.flops = direction == Direction::kForward ? 0 : tokens * width;
  op.bytes = 2 * e * tokens * width;
  return counted_as_executed(op);
}

// Softmax cross-entropy on fp32 logits (tokens, vocab_cols): about 5 FLOPs per logit (max,
// subtract, exp, sum, divide); forward reads the logits, backward writes their gradient.
OpShape loss_op(int64_t tokens, int64_t vocab_cols, Direction direction) {
  OpShape op{OpKind::kLoss, direction, DType::kFp32, {tokens, vocab_cols, 0, 0}, 0, 0, 0};
  op.flops = 5 * tokens * vocab_cols;
  op.bytes = 4 * tokens * vocab_cols * (direction == Direction::kForward ? 1 : 2);
  return counted_as_executed(op);
}

// Megatron-LM's vocab_parallel_cross_entropy: the max over the shard (one compare per logit),
// then, after the max is all-reduced, exp(logit - max) summed and the target's logit picked (four
// FLOPs per logit). Each pass reads the logits.
OpShape loss_max_op(int64_t tokens, int64_t vocab_cols) {
  OpShape op = loss_op(tokens, vocab_cols, Direction::kForward);
  op.flops = op.model_flops = tokens * vocab_cols;
  op.function = OpFunction::kLossMax;
  return op;
}

OpShape loss_partials_op(int64_t tokens, int64_t vocab_cols) {
  OpShape op = loss_op(tokens, vocab_cols, Direction::kForward);
  op.flops = op.model_flops = 4 * tokens * vocab_cols;
  op.function = OpFunction::kLossPartials;
  return op;
}

// AdamW with fp32 master weights: per parameter reads the gradient, master weight, m and v
// (dtype + 12 bytes), writes master, m, v and the working-precision weight (12 + dtype bytes);
// about 12 FLOPs. With fp32 training there is no separate master copy.
OpShape optimizer_op(int64_t parameters, DType dtype) {
  const int64_t e = bytes_per_element(dtype);
  OpShape op{OpKind::kOptimizer, Direction::kForward, dtype, {parameters, 0, 0, 0}, 0, 0, 0};
  op.flops = 12 * parameters;
  op.bytes = dtype == DType::kFp32 ? parameters * (4 * 4 + 3 * 4) : parameters * (2 * e + 24);
  return counted_as_executed(op);
}

// The host's time to issue `kernels` kernels and `calls` communication calls: no FLOPs, no bytes.
OpShape host_dispatch_op(int64_t kernels, int64_t calls, int64_t ns_per_kernel,
                         int64_t ns_per_call) {
  return {OpKind::kHost,
          Direction::kForward,
          DType::kFp32,
          {kernels, calls, ns_per_kernel, ns_per_call},
          0,
          0,
          0};
}

}  // namespace strata
