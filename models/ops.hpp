#pragma once
// The operations of a transformer training step, with FLOP and byte counts derived from concrete
// shapes. The plan compiler attaches an OpShape to every compute task; the simulator's compute
// model prices it; the executor runs it.
//
// Two FLOP counts per op:
//  - `model_flops`, the step's model FLOPs (MFU's numerator), follow Megatron-LM (Narayanan et
//    al. 2021, Korthikanti et al. 2022): a (m x k) @ (k x n) product is 2mnk FLOPs; attention
//    scores and context are counted in full (no halving for the causal mask); a backward op costs
//    twice its forward (input and weight gradients). Elementwise and norm ops are counted too (a
//    few FLOPs per element) but are negligible next to the products. See
//    data/reference/stated_facts.csv. They do not depend on how an op is implemented.
//  - `flops`, what the kernel executes, which the compute model prices: the same for every op but
//    fused (flash) attention, which skips the causally masked tiles and recomputes the scores in
//    its backward (Dao 2023, FlashAttention-2, Algorithm 2).

#include <array>
#include <cstdint>

namespace strata {

// kFp8: an FP8 GEMM (Transformer Engine): 1-byte inputs, 16-bit output; not a training dtype.
// kU8: one byte per element, a dropout mask's (a tensor's dtype, never an op's).
enum class DType : uint8_t { kBf16, kFp16, kFp32, kFp8, kU8 };

int64_t bytes_per_element(DType dtype);
const char* to_string(DType dtype);

enum class OpKind : uint8_t {
  // dims {m, n, k, groups}: (m x k) @ (k x n); groups > 1: a grouped GEMM, `groups` products of
  // m / groups rows each with weights of their own (an MoE layer's local experts) in one kernel.
  kMatmul,
  // dims {b, s, heads, head_dim}: QK^T, scale-mask-softmax, dropout, scores @ V; V and the output
  // are OpShape::value_dim wide per head when it is set (latent attention).
  kAttention,
  kFlashAttention,  // dims as kAttention's: the same in one fused kernel (FlashAttention)
  kNorm,            // dims {rows, width}: LayerNorm or RMSNorm
  kElementwise,     // dims {elements, flops_per_element}: residual add, dropout, GELU, SwiGLU
  kEmbedding,       // dims {tokens, width, vocab_rows}: table lookup (and position add)
  kLoss,            // dims {tokens, vocab_cols}: softmax cross-entropy over a vocabulary shard
  kOptimizer,       // dims {parameters}: AdamW on the local shard (fp32 master, m, v)
  // dims {kernels, calls, ns per kernel, ns per call}: the host thread issuing a block of work
  // (framework code and launches of its kernels and communication calls); no device work.
  kHost,
};

const char* to_string(OpKind kind);

// What an op computes where its kind leaves it open: the kernel the executor runs for a norm or
// an elementwise op (the simulator prices the kind). kDefault: the kind says it all (products,
// attention, the embedding, the loss, the optimizer, host work).
enum class OpFunction : uint8_t {
  kDefault,
  kLayerNorm,
  kRmsNorm,
  kResidualAdd,  // a residual add with the bias of the product before it (and its dropout)
  kGelu,
  kSwiglu,
  kGeglu,
  kRotary,
  kFp8Cast,
  // The vocabulary-parallel loss (tp > 1) in two passes over the logits, around the all-reduce of
  // the max: each token's max logit of the shard, then with the global max the sum of
  // exponentials and the target's logit. kDefault: both in one pass (tp == 1).
  kLossMax,
  kLossPartials,
  // QK-norm: an RMSNorm in place on the queries and keys of a fused QKV output, per head (weights
  // of head_dim shared by the heads) or over the rank's queries and keys each (weights as wide).
  kQkNorm,
  kQkNormWhole,
  // Dropout alone, in place: the embedding's output (a branch's is its residual add's).
  kDropout,
  // Latent attention's keys and values from the key-value up-projection's output and the shared
  // rotary key (Megatron-Core's fused_apply_mla_rope_for_kv): the rotary key turned, broadcast to
  // each head and joined to its positionless key; the values copied out contiguous.
  kLatentKeyValue,
};

const char* to_string(OpFunction function);

enum class Direction : uint8_t { kForward, kBackward };

// One op with concrete, per-rank shapes: what a compute task runs.
struct OpShape {
  OpKind kind = OpKind::kMatmul;
  Direction direction = Direction::kForward;
  DType dtype = DType::kBf16;
  std::array<int64_t, 4> dims{};
  int64_t flops = 0;        // floating-point operations the kernel executes
  int64_t bytes = 0;        // bytes read from and written to device memory
  int64_t model_flops = 0;  // what the step's model FLOPs count for it (see above)
  // The same op runs on every tensor-parallel rank on the same data (norms and residual adds
  // without sequence parallelism, the vocabulary-parallel embedding's lookup): the step's model
  // FLOPs count it once per TP group, though each rank spends the time.
  bool tp_replicated = false;
  // Kernels the op launches: eager PyTorch runs some ops (an RMSNorm, rotary embeddings) as a
  // chain of elementwise kernels, each paying a launch and its own pass through memory.
  int64_t kernels = 1;
  OpFunction function = OpFunction::kDefault;
  // Attention: the sliding window each query attends through (keys from position i - window + 1
  // to i), 0 for the whole causal prefix. The executor's kernel needs it; the cost has it already.
  int64_t window = 0;
  // Attention: the width of each value head and of the output's, when it differs from the query
  // and key heads' dims[3] (latent attention: 128 against 192 in DeepSeek-V3); 0 when the same.
  int64_t value_dim = 0;

  bool operator==(const OpShape&) const = default;
};

// Constructors that derive flops and bytes from the shape (see op_shape.cpp for each formula).
OpShape matmul_op(int64_t m, int64_t n, int64_t k, Direction direction, DType dtype);
// `groups` products of (m / groups x k) @ (k x n), each with its own weights (Megatron's
// --moe-grouped-gemm over a rank's local experts): one kernel; FLOPs and activation bytes as
// matmul_op's of m rows, weight bytes `groups` times.
OpShape grouped_matmul_op(int64_t groups, int64_t m, int64_t n, int64_t k, Direction direction,
                          DType dtype);
// `window`: the sliding-window span (Mistral's sliding_window) or 0 for full causal attention.
OpShape attention_op(int64_t b, int64_t s, int64_t heads, int64_t head_dim, int64_t kv_heads,
                     int64_t window, Direction direction, DType dtype);
OpShape flash_attention_op(int64_t b, int64_t s, int64_t heads, int64_t head_dim, int64_t kv_heads,
                           int64_t window, Direction direction, DType dtype);
// A block of attention as context parallelism splits it (plan/op_shapes.cpp): `queries` queries
// against `keys` keys in one fused kernel, of which it evaluates `pairs` query-key pairs (the
// ones its causal mask keeps). FLOPs and bytes as flash_attention_op's with `pairs` for the
// causal pairs and `queries` and `keys` for the tensors it reads and writes; the model FLOPs are
// Megatron's count of the block, every query against every key: 4 b queries keys heads d. The
// value heads (and so the output's) are `value_dim` wide (0: head_dim), as
// flash_attention_op_with_value_dim's: latent attention's blocks.
OpShape flash_attention_block_op(int64_t b, int64_t queries, int64_t keys, int64_t pairs,
                                 int64_t heads, int64_t head_dim, int64_t kv_heads,
                                 Direction direction, DType dtype, int64_t value_dim);
// The same with value heads (and so the output's) `value_dim` wide, where they differ from the
// query and key heads' `head_dim` (latent attention: 128 against 192 in DeepSeek-V3); 0 gives the
// ops above.
OpShape attention_op_with_value_dim(int64_t b, int64_t s, int64_t heads, int64_t head_dim,
                                    int64_t kv_heads, int64_t window, Direction direction,
                                    DType dtype, int64_t value_dim);
OpShape flash_attention_op_with_value_dim(int64_t b, int64_t s, int64_t heads, int64_t head_dim,
                                          int64_t kv_heads, int64_t window, Direction direction,
                                          DType dtype, int64_t value_dim);
// Query-key pairs a causal attention over `s` tokens evaluates, each query seeing at most
// `window` keys (0: no window): s(s+1)/2, or w(w+1)/2 + (s-w)w when a window w < s.
int64_t causal_pairs(int64_t s, int64_t window);
OpShape norm_op(int64_t rows, int64_t width, Direction direction, DType dtype);
OpShape elementwise_op(int64_t elements, int64_t flops_per_element, int64_t tensors_touched,
                       Direction direction, DType dtype);
OpShape embedding_op(int64_t tokens, int64_t width, int64_t vocab_rows, Direction direction,
                     DType dtype);
// Rotary position embedding on `elements` query and key values: one fused kernel (Transformer
// Engine's, Megatron-Core's) or eager PyTorch's chain (torchtitan's apply_rotary_emb).
OpShape rotary_op(int64_t elements, bool fused, Direction direction, DType dtype);
// RMSNorm as eager PyTorch runs it (torchtitan's and Hugging Face's RMSNorm modules), a chain of
// kernels; norm_op is the fused kernel.
OpShape eager_rms_norm_op(int64_t rows, int64_t width, Direction direction, DType dtype);
// SwiGLU's silu(gate) * up as eager PyTorch runs it: silu, then the product.
OpShape eager_swiglu_op(int64_t elements, Direction direction, DType dtype);
OpShape loss_op(int64_t tokens, int64_t vocab_cols, Direction direction);
// The forward of the vocabulary-parallel loss as two passes (OpFunction kLossMax, kLossPartials):
// each reads the fp32 logits once; their FLOPs add up to loss_op's.
OpShape loss_max_op(int64_t tokens, int64_t vocab_cols);
OpShape loss_partials_op(int64_t tokens, int64_t vocab_cols);
OpShape optimizer_op(int64_t parameters, DType dtype);
OpShape host_dispatch_op(int64_t kernels, int64_t calls, int64_t ns_per_kernel,
                         int64_t ns_per_call);

}  // namespace strata
