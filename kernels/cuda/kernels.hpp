#pragma once
// The CUDA kernels of a transformer training step. They keep the contracts, shapes and
// semantics of the CPU references (kernels/cpu/kernels.hpp; read its conventions first), with
// these differences:
//  - T is the storage type of activations and parameters: bf16 (training) or float (the parity
//    variant). Arithmetic is fp32 whatever T is.
//  - Parameter gradients (dweight, dbias, dwte, dwpe) are fp32 and ACCUMULATE (+=), as
//    Megatron-LM's fp32 main_grad buffers; input gradients (dinp, dqkv, dlogits) are T and are
//    WRITTEN (=). Saved statistics (mean, rstd, lse) are fp32.
//  - Scalars the references take as T (dropout_scale) are float here.
//  - Every pointer is device memory; every call is queued on ctx.stream() and returns at once.
//  - Every reduction runs in a fixed order: the same inputs give the same bits, run after run.
//  - The float variants never use TF32: they match the CPU references to about 1e-6.
//  - A shape a kernel cannot run (a head size the tiled attention has no instance for, a size
//    past int32 where a kernel indexes with int) throws std::invalid_argument naming the size.

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cpu/kernels.hpp"
#include "kernels/cuda/context.hpp"

namespace strata::cuda {

using bf16 = __nv_bfloat16;

// ---- Matrix products (cuBLASLt, fp32 accumulation) ----------------------------------------

// out (N,OC) = inp (N,C) @ weight^T + bias; weight is (OC,C), bias (OC) or null. The bias is a
// cuBLASLt epilogue.
template <typename T>
void matmul_forward(Context& ctx, T* out, const T* inp, const T* weight, const T* bias, int64_t n,
                    int64_t c, int64_t oc);

// The product followed by GELU (tanh approximation), fused as cuBLASLt's GELU_AUX_BIAS epilogue:
// pre_gelu (N,OC) = inp @ weight^T + bias (saved for the backward), out (N,OC) = gelu(pre_gelu).
// Where cuBLASLt has no fused algorithm for the shape (its auxiliary output needs OC % 8 == 0),
// the product and the GELU run as two kernels, with the same results.
template <typename T>
void matmul_gelu_forward(Context& ctx, T* out, T* pre_gelu, const T* inp, const T* weight,
                         const T* bias, int64_t n, int64_t c, int64_t oc);

// dinp (N,C) = dout (N,OC) @ weight (OC,C)                 (skipped when dinp is null)
// dweight (OC,C) += dout^T @ inp (N,C), into fp32           (cuBLASLt with beta = 1)
// dbias (OC) += the column sums of dout                      (skipped when dbias is null)
// When pre_gelu is not null, this layer's input was gelu(pre_gelu) and dinp receives the
// gradient with respect to pre_gelu instead: (dout @ weight) * gelu'(pre_gelu), fused as
// cuBLASLt's DGELU epilogue where it has an algorithm, else a second kernel.
template <typename T>
void matmul_backward(Context& ctx, T* dinp, float* dweight, float* dbias, const T* dout,
                     const T* inp, const T* weight, const T* pre_gelu, int64_t n, int64_t c,
                     int64_t oc);

// Whether cuBLASLt's heuristic has an algorithm for each product of a linear layer inp (N,C) ->
// out (N,OC), set up as matmul_forward, matmul_gelu_forward and matmul_backward set it up
// (layouts, transposes, types, epilogues) for buffers aligned as cudaMalloc's; the heuristic is
// only asked, nothing runs. The three plain products have no fallback (a missing algorithm is a
// CublasError when they run); each fused epilogue falls back to a second kernel. n, c, oc > 0.
struct MatmulAlgorithms {
  bool forward = false;       // out = inp @ weight^T
  bool forward_bias = false;  // with the BIAS epilogue
  bool forward_gelu = false;  // with GELU_AUX_BIAS (bf16 only: float never fuses GELU)
  bool dinp = false;          // dinp = dout @ weight
  bool dinp_dgelu = false;    // with the DGELU epilogue (bf16 only)
  bool dweight = false;       // dweight += dout^T @ inp, into fp32
};
template <typename T>
MatmulAlgorithms matmul_algorithms(Context& ctx, int64_t n, int64_t c, int64_t oc);

// dbias (C) += the column sums of dout (N,C): the bias gradient of a linear layer or of the
// row-parallel bias added with the residual (residual_backward). Deterministic: per-block
// partial sums, then one ordered sum per column.
template <typename T>
void bias_backward(Context& ctx, float* dbias, const T* dout, int64_t n, int64_t c);

// ---- Normalization and the residual stream ------------------------------------------------

// LayerNorm over each row: out (N,C) = (inp - mean) * rstd * weight + bias; mean (N),
// rstd (N) = 1 / sqrt(var + 1e-5) (biased variance); bias (C) or null.
template <typename T>
void layernorm_forward(Context& ctx, T* out, float* mean, float* rstd, const T* inp,
                       const T* weight, const T* bias, int64_t n, int64_t c);

// As cpu::layernorm_backward: dinp (N,C) written, dweight (C) and dbias (C, or null) += into
// fp32. When dresidual (N,C) is not null, dinp = dresidual + the norm's input gradient: the
// residual stream's gradient added in the same pass (dinp may be dresidual itself).
template <typename T>
void layernorm_backward(Context& ctx, T* dinp, float* dweight, float* dbias, const T* dout,
                        const T* inp, const T* weight, const float* mean, const float* rstd,
                        const T* dresidual, int64_t n, int64_t c);

// RMSNorm (Zhang & Sennrich 2019, Llama's norm): out (N,C) = inp * rstd * weight,
// rstd (N) = 1 / sqrt(mean(inp^2) + 1e-5). As cpu::rmsnorm_forward.
template <typename T>
void rmsnorm_forward(Context& ctx, T* out, float* rstd, const T* inp, const T* weight, int64_t n,
                     int64_t c);

// As cpu::rmsnorm_backward, with dweight (C) += into fp32 and dresidual as in
// layernorm_backward.
template <typename T>
void rmsnorm_backward(Context& ctx, T* dinp, float* dweight, const T* dout, const T* inp,
                      const T* weight, const float* rstd, const T* dresidual, int64_t n, int64_t c);

// out (N,C) = residual + branch + bias (C, or null): as cpu::residual_forward. With a dropout
// mask (N,C) of 0 and 1 (dropout_mask), Megatron-LM's bias_dropout_add: out = residual +
// (branch + bias) * mask * dropout_scale, the bias added before the dropout. mask null: no
// dropout (dropout_scale ignored).
template <typename T>
void residual_forward(Context& ctx, T* out, const T* residual, const T* branch, const T* bias,
                      int64_t n, int64_t c, const T* mask = nullptr, float dropout_scale = 1.0f);

// dst (n) += src (n), in fp32 rounded to T: a residual stream's gradient picking up a branch's.
template <typename T>
void accumulate(Context& ctx, T* dst, const T* src, int64_t n);

// dst (n) = src (n) converted, To and From being float and bf16 either way: bf16 to fp32
// exactly, fp32 to bf16 rounded to nearest even (__float2bfloat16_rn). Where the executor crosses
// between a bf16 graph's tensors and its fp32 ones: the output layer's fp32 logits and their
// gradient, fp32 gradients staged in bf16 for a bf16 reduction and back.
template <typename To, typename From>
void convert(Context& ctx, To* dst, const From* src, int64_t n);

// The residual add fused with the norm after it, one pass instead of two: residual_out (N,C) =
// residual + branch + bias (as residual_forward), then out, mean and rstd as layernorm_forward
// of residual_out as stored (rounded to T). norm_bias is the LayerNorm's bias (or null).
template <typename T>
void residual_layernorm_forward(Context& ctx, T* residual_out, T* out, float* mean, float* rstd,
                                const T* residual, const T* branch, const T* bias, const T* weight,
                                const T* norm_bias, int64_t n, int64_t c);

// The same with RMSNorm: out and rstd as rmsnorm_forward of residual_out.
template <typename T>
void residual_rmsnorm_forward(Context& ctx, T* residual_out, T* out, float* rstd, const T* residual,
                              const T* branch, const T* bias, const T* weight, int64_t n,
                              int64_t c);

// ---- Activations --------------------------------------------------------------------------

// GELU, tanh approximation: as cpu::gelu_forward / cpu::gelu_backward over n elements.
template <typename T>
void gelu_forward(Context& ctx, T* out, const T* inp, int64_t n);
template <typename T>
void gelu_backward(Context& ctx, T* dinp, const T* inp, const T* dout, int64_t n);

// SwiGLU (Shazeer 2020, Llama's MLP) over rows of inp (N,2H) = [gate | up]: as
// cpu::swiglu_forward / cpu::swiglu_backward.
template <typename T>
void swiglu_forward(Context& ctx, T* out, const T* inp, int64_t n, int64_t h);
template <typename T>
void swiglu_backward(Context& ctx, T* dinp, const T* inp, const T* dout, int64_t n, int64_t h);

// GeGLU (Shazeer 2020, Gemma's MLP), the same layout as SwiGLU: rows of inp (N,2H) = [gate | up],
// out (N,H) = gelu(gate) * up with the tanh approximation of gelu_forward; dinp (N,2H) =
// [dout * up * gelu'(gate) | dout * gelu(gate)], written. As cpu::geglu_forward /
// cpu::geglu_backward.
template <typename T>
void geglu_forward(Context& ctx, T* out, const T* inp, int64_t n, int64_t h);
template <typename T>
void geglu_backward(Context& ctx, T* dinp, const T* inp, const T* dout, int64_t n, int64_t h);

// ---- Causal attention ---------------------------------------------------------------------
// qkv is (B,T,3*NH*HS) as in cpu::attention_forward: per token [q | k | v], NH heads of HS each;
// out (B,T,NH*HS). Two paths; the caller picks one per run and keeps what its backward needs.
// Grouped-query attention with a window and dropout (path 3, below) has its own layout.

// Path 1, as the CPU reference: per batch, the products over all heads as strided-batched cuBLAS
// calls, and a fused scale-mask-softmax kernel between them. att (B,NH,T,T) receives the
// probabilities (0 above the diagonal), kept for the backward.
template <typename T>
void attention_forward(Context& ctx, T* out, T* att, const T* qkv, int64_t b, int64_t t, int64_t nh,
                       int64_t hs);
// dqkv (B,T,3*NH*HS) written, from dout (B,T,NH*HS) and the saved att; (B,NH,T,T) of scratch.
template <typename T>
void attention_backward(Context& ctx, T* dqkv, const T* dout, const T* qkv, const T* att, int64_t b,
                        int64_t t, int64_t nh, int64_t hs);

// Path 2, tiled with an online softmax (Dao et al. 2022, FlashAttention-2's loop order): never
// writes the (T,T) matrix. lse (B,NH,T) = each query row's log-sum-exp of its scaled scores,
// kept for the backward. HS must be one of 32, 64, 80, 96, 128, and qkv, out, dout and dqkv
// 16-byte aligned (tiles move in 16-byte copies); needs sm_80 or newer (cp.async, bf16 wmma).
template <typename T>
void flash_attention_forward(Context& ctx, T* out, float* lse, const T* qkv, int64_t b, int64_t t,
                             int64_t nh, int64_t hs);
// dqkv written from dout, the forward's out and lse, recomputing the probabilities tile by tile.
// Deterministic: one pass over key tiles writes dK and dV, another over query tiles writes dQ
// (no atomics).
template <typename T>
void flash_attention_backward(Context& ctx, T* dqkv, const T* dout, const T* qkv, const T* out,
                              const float* lse, int64_t b, int64_t t, int64_t nh, int64_t hs);

// Path 3, general grouped-query attention, as cpu::gqa_attention_forward: NKV kv heads
// (NH % NKV == 0; query head h reads kv head h / (NH/NKV)); qkv (B,T,(NH+2*NKV)*HS) holds per
// token [q (NH*HS) | k (NKV*HS) | v (NKV*HS)]; out (B,T,NH*HS). att (B,NH,T,T) receives the
// softmax probabilities over the keys each query sees, exact zeros elsewhere: window 0, keys
// j <= i; window w > 0 (Mistral's sliding_window), keys i - w < j <= i; w >= T the same as 0.
// With dropout, keep (B,NH,T,T) is a mask of 0 and 1 (dropout_mask) and out = (att * keep *
// dropout_scale) @ v; att stays undropped, and dropped (B,NH,T,T), when not null, receives
// att * keep * dropout_scale. keep null: no dropout (dropout_scale and dropped ignored). One warp
// per (batch, head, query row), the fp32 scores recomputed rather than stored, every sum in a
// fixed order. HS at most 256 (else std::invalid_argument); no alignment needed.
template <typename T>
void gqa_attention_forward(Context& ctx, T* out, T* att, const T* qkv, int64_t b, int64_t t,
                           int64_t nh, int64_t nkv, int64_t hs, int64_t window, const T* keep,
                           float dropout_scale, T* dropped);
// As cpu::gqa_attention_backward: dqkv (B,T,(NH+2*NKV)*HS) written from dout (B,T,NH*HS), the
// forward's undropped att, keep (or null) and dropout_scale. Deterministic without atomics: one
// warp per query row writes dq; one warp per (batch, kv head, key row) writes dk and dv, summing
// over the group's query heads and then the query rows in ascending order. (B,NH,T) floats of
// scratch.
template <typename T>
void gqa_attention_backward(Context& ctx, T* dqkv, const T* dout, const T* qkv, const T* att,
                            int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hs,
                            int64_t window, const T* keep, float dropout_scale);

// ---- Rotary position embedding ------------------------------------------------------------

// As cpu::rotary_forward: rotate-half RoPE (Su et al. 2021) on rows of inp, out (B,T,W),
// W = row_stride: the heads (HS even) in columns [first_col, first_col + heads*HS) rotated, pair
// i < HS/2 of the token at position p by angle = p * theta^(-2i/HS), computed in double as the
// reference does; the other columns copied when out != inp (out == inp works in place). A shape
// outside the row, or HS odd, throws std::invalid_argument. (T, HS/2) doubles of scratch.
template <typename T>
void rotary_forward(Context& ctx, T* out, const T* inp, int64_t b, int64_t t, int64_t heads,
                    int64_t hs, int64_t row_stride, int64_t first_col, double theta);
// As cpu::rotary_backward: dinp = dout rotated by the negative angle, the other columns copied;
// written (=), in place when dinp == dout.
template <typename T>
void rotary_backward(Context& ctx, T* dinp, const T* dout, int64_t b, int64_t t, int64_t heads,
                     int64_t hs, int64_t row_stride, int64_t first_col, double theta);

// ---- Dropout ------------------------------------------------------------------------------

// As cpu::dropout_mask, bit for bit: mask (N,C) = 1 where kept, 0 where dropped, with
// x = cpu::dropout_key(cpu::dropout_key(stream, row_keys[i]), j) and the element kept when
// (x >> 11) * 2^-53 >= rate (in double). row_keys (N) is device memory. A rate outside [0, 1)
// throws std::invalid_argument.
template <typename T>
void dropout_mask(Context& ctx, T* mask, uint64_t stream, const uint64_t* row_keys, int64_t n,
                  int64_t c, double rate);
// As cpu::apply_dropout: out (n) = in * mask * dropout_scale, written, in place when out == in.
template <typename T>
void apply_dropout(Context& ctx, T* out, const T* in, const T* mask, float dropout_scale,
                   int64_t n);

// ---- Embedding ----------------------------------------------------------------------------

// As cpu::embedding_forward: out (B*T,C) = wte[token - vocab_start] (0 outside the shard)
// + wpe[t] (wpe (T,C), or null).
template <typename T>
void embedding_forward(Context& ctx, T* out, const int32_t* tokens, const T* wte, const T* wpe,
                       int64_t vocab_start, int64_t v, int64_t b, int64_t t, int64_t c);
// As cpu::embedding_backward, into fp32: dwte (V,C) += the dout rows of each token of the shard,
// added in token order (the tokens are sorted stably by value, then each row's run is summed by
// one thread per channel); dwpe (T,C) += the sum over the batch (null to skip).
template <typename T>
void embedding_backward(Context& ctx, float* dwte, float* dwpe, const T* dout,
                        const int32_t* tokens, int64_t vocab_start, int64_t v, int64_t b, int64_t t,
                        int64_t c);

// ---- Softmax cross-entropy ----------------------------------------------------------------

// The loss and its gradient in one kernel, for a whole vocabulary (tp 1): per row of logits
// (N,V), losses (N) = log(sum_j exp(logit_j)) - logit_target and dlogits (N,V) =
// scale * (softmax - onehot(target)). dlogits may be logits itself (overwritten in place).
template <typename T>
void fused_cross_entropy(Context& ctx, float* losses, T* dlogits, const T* logits,
                         const int32_t* targets, float scale, int64_t n, int64_t v);

// The vocabulary-parallel steps of cpu::row_max ... cpu::cross_entropy_backward, with maxes,
// sums, targets_logit and losses in fp32; the caller all-reduces between them.
template <typename T>
void row_max(Context& ctx, float* maxes, const T* logits, int64_t n, int64_t v);
template <typename T>
void cross_entropy_partials(Context& ctx, float* sums, float* targets_logit, const T* logits,
                            const float* maxes, const int32_t* targets, int64_t vocab_start,
                            int64_t n, int64_t v);
void cross_entropy_losses(Context& ctx, float* losses, const float* sums, const float* maxes,
                          const float* targets_logit, int64_t n);
template <typename T>
void cross_entropy_backward(Context& ctx, T* dlogits, const T* logits, const float* maxes,
                            const float* sums, const int32_t* targets, int64_t vocab_start,
                            float scale, int64_t n, int64_t v);

// ---- Communication ------------------------------------------------------------------------

// out (n) = ((inputs[0] op inputs[1]) op inputs[2]) op ... over `count` inputs of n elements
// (this device's memory, any allocation), op a sum or, with maximum, the larger: each step in
// T's arithmetic and rounded to T (float, double, bf16), the host communicators' group-order
// reduction (exec/communicator.hpp, reduce_step), bit for bit. out overlaps no input. The
// loopback communicator's reduction over the buffers of the thread-ranks on one GPU.
template <typename T>
void reduce_in_order(Context& ctx, T* out, const T* const* inputs, int count, int64_t n,
                     bool maximum);

// ---- Optimizer ----------------------------------------------------------------------------

// *total += sum of x[i]^2 over x (n), in fp64: one tensor's part of the squared global gradient
// norm (call once per gradient tensor, then all-reduce *total across ranks).
void sum_of_squares(Context& ctx, double* total, const float* x, int64_t n);

using AdamWConfig = cpu::AdamWConfig;

// AdamW as cpu::adamw_update on fp32 master weights, m and v (n each), with the fp32 gradient
// scaled by cpu::clip_factor(sqrt(*norm_squared), max_norm) read on the device (no host
// round trip); param (n, or null) receives the updated master weights rounded to T.
template <typename T>
void adamw_update(Context& ctx, T* param, float* master, const float* grad, float* m, float* v,
                  int64_t n, const AdamWConfig& config, int64_t step, const double* norm_squared,
                  double max_norm);
// The same with the clip factor computed on the host (the executor reduces the global norm
// there): g = grad * grad_scale.
template <typename T>
void adamw_update(Context& ctx, T* param, float* master, const float* grad, float* m, float* v,
                  int64_t n, const AdamWConfig& config, int64_t step, float grad_scale);

}  // namespace strata::cuda
