#pragma once
// The CPU reference kernels of a GPT-2 training step: fp32 (float) for training, float64
// (double) for the finite-difference checks of every backward. Plain free functions over
// row-major buffers in llm.c's style; each opens with the shapes of its buffers. The CUDA kernels
// (kernels/cuda, a later issue) keep the same contracts.
//
// Conventions, the same for every kernel:
//  - N is the number of rows (tokens), C a row's width; a (B,T,C) tensor is (N = B*T, C).
//  - Parameter gradients (dweight, dbias, dwte, dwpe) ACCUMULATE (+=): micro-batches add into
//    them. Input gradients (dinp, dqkv, dlogits) are WRITTEN (=).
//  - A null bias (or dbias) means the layer has none.
//  - Tensor parallelism changes only the sizes passed in (a shard's rows or columns), never the
//    kernels: Megatron's column-parallel product is matmul_forward on a slice of the weight's
//    rows, the row-parallel one on a slice of its columns, and the caller reduces the outputs.

#include <cstdint>

namespace strata::cpu {

// Threads each BLAS call may use (OpenBLAS's own pool). Ranks that run as threads of one process
// set 1: OpenBLAS's pool is shared by the process, and one thread per rank keeps ranks apart.
void set_matmul_threads(int threads);

// out (N,OC) = inp (N,C) @ weight^T + bias; weight is (OC,C), bias (OC) or null. Through BLAS
// (cblas_sgemm / cblas_dgemm).
template <typename T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int64_t n, int64_t c,
                    int64_t oc);

// out (N,OC) += inp (N,C) @ weight^T; weight is (OC,C), no bias. The same BLAS product as
// matmul_forward with beta = 1: the second branch of a parallel block (attention and MLP on the
// same normalized input) adding into the first's partial sums. Equal to matmul_forward into a
// temporary plus an add up to rounding: BLAS may add a long row's partial sums into out one block
// of C at a time.
template <typename T>
void matmul_forward_accumulate(T* out, const T* inp, const T* weight, int64_t n, int64_t c,
                               int64_t oc);

// dinp (N,C) = dout (N,OC) @ weight (OC,C)            (skipped when dinp is null)
// dweight (OC,C) += dout^T @ inp (N,C)
// dbias (OC) += the column sums of dout                (skipped when dbias is null)
template <typename T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     int64_t n, int64_t c, int64_t oc);

// LayerNorm over each row of inp (N,C): out (N,C) = (inp - mean) * rstd * weight + bias, with
// mean (N) and rstd (N) = 1 / sqrt(var + 1e-5) saved for the backward (biased variance).
template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias,
                       int64_t n, int64_t c);

// With norm = (inp - mean) * rstd and dnorm = dout * weight, per row (means over the C channels):
// dinp (N,C) = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)); dweight (C) += the
// column sums of dout * norm; dbias (C) += the column sums of dout.
template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const T* mean, const T* rstd, int64_t n, int64_t c);

// RMSNorm (Zhang & Sennrich 2019; Llama's norm) over each row of inp (N,C):
// out (N,C) = inp * rstd * weight, rstd (N) = 1 / sqrt(mean(inp^2) + 1e-5), saved for the
// backward.
template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int64_t n, int64_t c);

// With norm = inp * rstd and dnorm = dout * weight, per row (means over the C channels):
// dinp (N,C) = rstd * (dnorm - norm * mean(dnorm * norm)); dweight (C) += the column sums of
// dout * norm.
template <typename T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight,
                      const T* rstd, int64_t n, int64_t c);

// GELU, tanh approximation (GPT-2): out (n) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <typename T>
void gelu_forward(T* out, const T* inp, int64_t n);
// dinp (n) = dout * gelu'(inp).
template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n);

// SwiGLU (Shazeer 2020; Llama's MLP), Megatron-LM's layout: each row of inp (N,2H) is
// [gate (H) | up (H)], the outputs of one fused product; out (N,H) = silu(gate) * up with
// silu(x) = x * sigmoid(x).
template <typename T>
void swiglu_forward(T* out, const T* inp, int64_t n, int64_t h);
// dinp (N,2H) = [dout * up * silu'(gate) | dout * silu(gate)], with
// silu'(x) = sigmoid(x) (1 + x (1 - sigmoid(x))).
template <typename T>
void swiglu_backward(T* dinp, const T* inp, const T* dout, int64_t n, int64_t h);

// GeGLU (Shazeer 2020; Gemma's MLP), the same layout as SwiGLU: each row of inp (N,2H) is
// [gate (H) | up (H)]; out (N,H) = gelu(gate) * up, gelu the tanh approximation of gelu_forward
// (Hugging Face's gelu_pytorch_tanh).
template <typename T>
void geglu_forward(T* out, const T* inp, int64_t n, int64_t h);
// dinp (N,2H) = [dout * up * gelu'(gate) | dout * gelu(gate)], gelu' as in gelu_backward.
template <typename T>
void geglu_backward(T* dinp, const T* inp, const T* dout, int64_t n, int64_t h);

// Causal grouped-query attention (Ainslie et al. 2023): NKV key/value heads, NH % NKV == 0, query
// head h attending with kv head h / (NH/NKV) (Megatron-LM's and Hugging Face's grouping). qkv is
// (B,T,(NH+2*NKV)*HS): per token [q (NH*HS) | k (NKV*HS) | v (NKV*HS)], heads of HS.
// att (B,NH,T,T) receives the softmax probabilities of scale * q.k (scale 1/sqrt(HS)) over the
// keys each query sees, exactly zero elsewhere; out (B,T,NH*HS) = att @ v. window 0: the query at
// position i sees keys j <= i (full causal attention). window w > 0 (Mistral's sliding_window,
// Jiang et al. 2023): keys i - w < j <= i, itself and the w - 1 before it; w >= T is the same as 0,
// bit for bit. Example, w = 3: query 5 sees keys 3, 4 and 5.
// Attention dropout (GPT-2's attn_pdrop, Megatron-LM's --attention-dropout), on the probabilities
// after the softmax: keep (B,NH,T,T) holds 1 (kept) or 0 (dropped) per probability, a mask of
// dropout_mask, and dropout_scale its 1 / (1 - rate); then att still receives the undropped
// probabilities and out = (att * keep * dropout_scale) @ v. dropped (B,NH,T,T), when not null,
// receives att * keep * dropout_scale (what an unfused dropout would store). keep null: no
// dropout (dropout_scale and dropped ignored), the same bits as before dropout existed.
template <typename T>
void gqa_attention_forward(T* out, T* att, const T* qkv, int64_t b, int64_t t, int64_t nh,
                           int64_t nkv, int64_t hs, int64_t window, const T* keep, T dropout_scale,
                           T* dropped);
// dqkv (B,T,(NH+2*NKV)*HS) = the gradient of out with respect to qkv, from dout (B,T,NH*HS) and
// the saved att (of the forward with the same window, undropped) and the forward's keep and
// dropout_scale (keep null: no dropout); written (=). A kv head's dk and dv sum over the NH/NKV
// query heads of its group.
template <typename T>
void gqa_attention_backward(T* dqkv, const T* dout, const T* qkv, const T* att, int64_t b,
                            int64_t t, int64_t nh, int64_t nkv, int64_t hs, int64_t window,
                            const T* keep, T dropout_scale);

// Causal multi-head attention: grouped-query attention with NKV = NH, the same results bit for
// bit. qkv is (B,T,3*NH*HS): per token [q | k | v], each NH heads of HS; att (B,NH,T,T),
// out (B,T,NH*HS).
template <typename T>
void attention_forward(T* out, T* att, const T* qkv, int64_t b, int64_t t, int64_t nh, int64_t hs);
// dqkv (B,T,3*NH*HS) = the gradient of out with respect to qkv, from dout (B,T,NH*HS) and the
// saved att; written (=).
template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* att, int64_t b, int64_t t,
                        int64_t nh, int64_t hs);

// Rotary position embedding (Su et al. 2021, RoFormer), rotate-half layout (Megatron-LM's
// apply_rotary_pos_emb with rotary_interleaved=False, Hugging Face Llama's rotate_half). inp and
// out are (B,T,W) with W = row_stride; the heads (HS even) in columns
// [first_col, first_col + heads*HS) are rotated, the other columns copied when out != inp
// (out == inp works in place). For the token at position p (0 <= p < T) of its sequence, pair
// i < HS/2 of each head, x its HS channels, rotates by angle = p * theta^(-2i/HS) (in double):
//   out[i] = x[i] cos - x[i + HS/2] sin,   out[i + HS/2] = x[i + HS/2] cos + x[i] sin.
// theta is the base (10000 in RoFormer and Llama 2, 500000 in Llama 3). Example, a fused QKV
// output of W = (NH + 2*NKV)*HS: the queries are heads = NH, first_col = 0; the keys
// heads = NKV, first_col = NH*HS.
template <typename T>
void rotary_forward(T* out, const T* inp, int64_t b, int64_t t, int64_t heads, int64_t hs,
                    int64_t row_stride, int64_t first_col, double theta);
// dinp (B,T,W) = dout rotated by the negative angle (a rotation's transpose), the other columns
// copied; written (=), in place when dinp == dout.
template <typename T>
void rotary_backward(T* dinp, const T* dout, int64_t b, int64_t t, int64_t heads, int64_t hs,
                     int64_t row_stride, int64_t first_col, double theta);

// out (N,C) = residual (N,C) + branch (N,C) + bias (C, or null): a residual add, with the bias of
// the row-parallel product before it (Megatron adds that bias after the reduction). With a dropout
// mask (N,C) of 0 and 1 (dropout_mask), Megatron-LM's bias_dropout_add: out = residual +
// (branch + bias) * mask * dropout_scale, the bias added before the dropout. mask null: no
// dropout (dropout_scale ignored), the same bits as before dropout existed.
template <typename T>
void residual_forward(T* out, const T* residual, const T* branch, const T* bias, int64_t n,
                      int64_t c, const T* mask, T dropout_scale);
// The input gradients of a residual add are dout itself; dbias (C) += the column sums of dout.
// With dropout, the branch's and bias's gradients are those of the dropped sum: apply_dropout
// of dout first, then residual_backward of that.
template <typename T>
void residual_backward(T* dbias, const T* dout, int64_t n, int64_t c);

// Dropout (Srivastava et al. 2014) as torch.nn.functional.dropout computes it: each element kept
// with probability 1 - rate and scaled by dropout_scale = 1 / (1 - rate), else zeroed, so the
// expectation is unchanged. The mask is counter-based (as Philox is in PyTorch's CUDA dropout,
// Salmon et al. 2011): an element's draw is a hash of (stream, its row's key, its column), with no
// generator state, so any rows of a mask can be made alone, on any rank, with the bits of the
// same rows of the whole mask; this is what lets sequence- and tensor-parallel ranks make their
// slice.

// A 64-bit mix of two values, SplitMix64's output function (Steele, Lea and Flood 2014,
// "Fast splittable pseudorandom number generators") on z = a + 0x9e3779b97f4a7c15 * (b + 1):
// z ^= z >> 30, z *= 0xbf58476d1ce4e5b9, z ^= z >> 27, z *= 0x94d049bb133111eb, z ^= z >> 31.
// Callers build row keys with it, e.g. dropout_key(dropout_key(layer, sequence), token).
uint64_t dropout_key(uint64_t a, uint64_t b);

// mask (N,C) = 1 where element (i, j) is kept, 0 where dropped: with
// x = dropout_key(dropout_key(stream, row_keys[i]), j) and u = (x >> 11) * 2^-53, uniform in
// [0, 1) on 53 bits, the element is kept when u >= rate. row_keys is (N). 0 <= rate < 1 (asserted);
// rate 0 keeps every element.
template <typename T>
void dropout_mask(T* mask, uint64_t stream, const uint64_t* row_keys, int64_t n, int64_t c,
                  double rate);
// out (n) = in * mask * dropout_scale; written (=), in place when out == in. Dropout's forward,
// and its backward (a gradient through the same mask).
template <typename T>
void apply_dropout(T* out, const T* in, const T* mask, T dropout_scale, int64_t n);

// Token (+ position) embedding over a vocabulary shard: wte (V,C) holds rows
// [vocab_start, vocab_start + V) of the full table. out (B*T,C) = wte[token - vocab_start] when
// the token falls in the shard, else 0; plus wpe[t] (wpe is (T,C), or null to skip positions).
// tokens (B*T) are byte values.
template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe,
                       int64_t vocab_start, int64_t v, int64_t b, int64_t t, int64_t c);
// dwte (V,C) += dout rows of the tokens in the shard; dwpe (T,C) += the sum over the batch
// (skipped when dwpe is null). Accumulates in token order, so the result is deterministic.
template <typename T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int64_t vocab_start,
                        int64_t v, int64_t b, int64_t t, int64_t c);

// Softmax cross-entropy over a vocabulary shard (Megatron's vocabulary-parallel loss), in three
// local steps around the reductions the caller runs over the shards:
//  1. row_max: maxes (N) = the max of each row of logits (N,V);           [all-reduce max]
//  2. cross_entropy_partials, given the global maxes: sums (N) = sum_j exp(logit_j - max);
//     targets_logit (N) = logit[target - vocab_start] when the target is in the shard, else 0;
//                                                                          [all-reduce sum, twice]
//  3. losses (N) = log(sums) + maxes - targets_logit (cross_entropy_losses);
// and the backward: dlogits (N,V) = scale * (exp(logit - max) / sum - onehot(target)), written.
// With one shard (tp 1) the reductions are identities.
template <typename T>
void row_max(T* maxes, const T* logits, int64_t n, int64_t v);
template <typename T>
void cross_entropy_partials(T* sums, T* targets_logit, const T* logits, const T* maxes,
                            const int32_t* targets, int64_t vocab_start, int64_t n, int64_t v);
template <typename T>
void cross_entropy_losses(T* losses, const T* sums, const T* maxes, const T* targets_logit,
                          int64_t n);
template <typename T>
void cross_entropy_backward(T* dlogits, const T* logits, const T* maxes, const T* sums,
                            const int32_t* targets, int64_t vocab_start, T scale, int64_t n,
                            int64_t v);

// Sum of squares of x (n), accumulated in double: a rank's part of the global gradient norm.
template <typename T>
double sum_of_squares(const T* x, int64_t n);

// AdamW (Loshchilov & Hutter 2019) as PyTorch's torch.optim.AdamW: with g = grad * grad_scale
// (the clipping factor), m = b1 m + (1-b1) g, v = b2 v + (1-b2) g^2,
// param -= lr * (m / (1-b1^step) / (sqrt(v / (1-b2^step)) + eps) + weight_decay * param).
// step counts from 1. param, grad, m, v are (n).
struct AdamWConfig {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;
};
template <typename T>
void adamw_update(T* param, const T* grad, T* m, T* v, int64_t n, const AdamWConfig& config,
                  int64_t step, double grad_scale);

// The clipping factor for a global gradient norm (PyTorch's clip_grad_norm_):
// min(1, max_norm / (norm + 1e-6)); 1 when max_norm <= 0 (clipping off).
double clip_factor(double norm, double max_norm);

}  // namespace strata::cpu
