// Causal multi-head attention, path 1 (kernels/cuda/kernels.hpp): the CPU reference's algorithm
// (kernels/cpu/attention.cpp) on the GPU. Per batch, each product of the NH heads runs as one
// strided-batched cuBLAS call that reads Q, K, V and dO as strided views of qkv and dout (no
// copies), and a fused kernel applies the scale, the causal mask and the softmax (or its
// backward) between the products. Memory: att (B,NH,T,T), and (NH,T,T) of scratch in the backward.
//
// Row-major through column-major. cuBLAS is column-major: a row-major (R,C) matrix with row stride
// ld is, to cuBLAS, the column-major (C,R) matrix of its transpose with leading dimension ld. So a
// row-major product X = A B is the column-major product X^T = B^T A^T: the operands swap places
// and are passed as they lie. With Q, K, V (T,HS) the row-major views of one head in qkv (ld 3C),
// dO (T,HS) its view in dout (ld C) and att, datt (T,T) row-major (ld T), the six products and the
// cuBLAS calls that compute them, as (transa, transb, m, n, k, A, B, C) for C (m,n) = op(A) op(B):
//   S    = Q K^T      S^T    = K Q^T        (T, N, T,  T, HS, A=K,  B=Q,    C=att)
//   out  = att V      out^T  = V^T att^T    (N, N, HS, T, T,  A=V,  B=att,  C=out)
//   datt = dO V^T     datt^T = V dO^T       (T, N, T,  T, HS, A=V,  B=dO,   C=datt)
//   dV   = att^T dO   dV^T   = dO^T att     (N, T, HS, T, T,  A=dO, B=att,  C=dV)
//   dQ   = dpre K     dQ^T   = K^T dpre^T   (N, N, HS, T, T,  A=K,  B=dpre, C=dQ)
//   dK   = dpre^T Q   dK^T   = Q^T dpre     (N, T, HS, T, T,  A=Q,  B=dpre, C=dK)
// where A=K is the pointer to head h's K with its row-major ld, which cuBLAS reads as K^T (HS,T).
// Worked check of the first: C(j,i) = sum_d op(A)(j,d) B(d,i) = sum_d K[j][d] Q[i][d] = S[i][j],
// stored column-major at att[i*T + j], which is S[i][j] row-major. Consecutive heads are HS
// columns apart in qkv, dout and out (batch stride HS) and T*T elements apart in att and datt.
//
// The scale 1/sqrt(HS) is applied inside the softmax kernels (every product has alpha 1): the
// forward kernel reads the raw scores Q K^T, the backward one writes scale * dpre.

#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/context.hpp"
#include "kernels/cuda/kernels.hpp"

namespace strata::cuda {
namespace {

constexpr int kSoftmaxThreads = 256;  // 8 warps, one row each
constexpr int kSoftmaxRowsPerBlock = kSoftmaxThreads / kWarpSize;

// scores (rows, T) in place, rows = the (head, query) rows of a (NH,T,T) block or several, so
// that row r is query i = r % T. Reads the raw scores s_j = q_i.k_j of columns j <= i and writes
// att_ij = exp(scale s_j - M) / Z with M the row's max of scale s_j and Z = sum_{j<=i}
// exp(scale s_j - M) (fp32), and 0 for j > i. One warp per row; each lane keeps a running max
// and sum over its columns j = lane, lane + 32, ... (llm.c's softmax_forward_kernel5), then the
// lanes' pairs are combined by butterfly reductions: a fixed order, so the result is
// reproducible.
template <typename T>
__global__ void causal_softmax_forward_kernel(T* scores, int64_t rows, int t, float scale) {
  const int64_t row = int64_t{blockIdx.x} * kSoftmaxRowsPerBlock + threadIdx.x / kWarpSize;
  if (row >= rows) return;  // the whole warp: row depends on the warp only
  const int lane = threadIdx.x % kWarpSize;
  const int i = static_cast<int>(row % t);
  T* x = scores + row * t;

  float max = -INFINITY;
  float sum = 0.0f;
  for (int j = lane; j <= i; j += kWarpSize) {
    const float v = scale * to_float(x[j]);
    const float new_max = fmaxf(max, v);
    sum = sum * expf(max - new_max) + expf(v - new_max);  // expf(-inf) = 0 on the first term
    max = new_max;
  }
  // Lane 0 always holds column 0 (j = 0 <= i), so the row max is finite; a lane without columns
  // (lane > i) contributes 0 and never forms exp(-inf - -inf).
  const float row_max = warp_max(max);
  const float row_sum = warp_sum(max == -INFINITY ? 0.0f : sum * expf(max - row_max));
  const float inv_sum = 1.0f / row_sum;
  for (int j = lane; j < t; j += kWarpSize) {
    const float p = j <= i ? expf(scale * to_float(x[j]) - row_max) * inv_sum : 0.0f;
    x[j] = from_float<T>(p);
  }
}

// datt (rows, T) in place, att (rows, T), rows as in the forward (row r is query i = r % T):
// dpre_ij = scale * att_ij (datt_ij - sum_{l<=i} att_il datt_il) for j <= i, 0 for j > i. The
// softmax backward of the reference with the scale of the score product folded in, so that the
// dQ and dK products have alpha 1. One warp per row, butterfly sum.
template <typename T>
__global__ void causal_softmax_backward_kernel(T* datt, const T* att, int64_t rows, int t,
                                               float scale) {
  const int64_t row = int64_t{blockIdx.x} * kSoftmaxRowsPerBlock + threadIdx.x / kWarpSize;
  if (row >= rows) return;
  const int lane = threadIdx.x % kWarpSize;
  const int i = static_cast<int>(row % t);
  T* d = datt + row * t;
  const T* a = att + row * t;

  float dot = 0.0f;
  for (int j = lane; j <= i; j += kWarpSize) dot += to_float(a[j]) * to_float(d[j]);
  dot = warp_sum(dot);
  for (int j = lane; j < t; j += kWarpSize) {
    const float g = j <= i ? scale * to_float(a[j]) * (to_float(d[j]) - dot) : 0.0f;
    d[j] = from_float<T>(g);
  }
}

template <typename T>
void launch_softmax_forward(Context& ctx, T* scores, int64_t rows, int t, float scale) {
  const int blocks = checked_int(ceil_div(rows, kSoftmaxRowsPerBlock), "attention softmax blocks");
  STRATA_LAUNCH(blocks, kSoftmaxThreads, 0, ctx.stream(), causal_softmax_forward_kernel)
  (scores, rows, t, scale);
  STRATA_CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_softmax_backward(Context& ctx, T* datt, const T* att, int64_t rows, int t,
                             float scale) {
  const int blocks = checked_int(ceil_div(rows, kSoftmaxRowsPerBlock), "attention softmax blocks");
  STRATA_LAUNCH(blocks, kSoftmaxThreads, 0, ctx.stream(), causal_softmax_backward_kernel)
  (datt, att, rows, t, scale);
  STRATA_CUDA_CHECK_LAUNCH();
}

template <typename T>
constexpr cudaDataType_t kDataType = std::is_same_v<T, float> ? CUDA_R_32F : CUDA_R_16BF;

// One operand of a strided-batched product: head 0's matrix as cuBLAS reads it (pointer and
// leading dimension) and the distance in elements to the next head's.
template <typename T>
struct HeadOperand {
  const T* data;
  int ld;
  long long head_stride;
};

// For each of the heads h: c_h (m,n) = op(a_h) op(b_h), column-major, fp32 accumulation
// (CUBLAS_COMPUTE_32F: bf16 data on the tensor cores; float data in plain fp32, since the
// handle's math mode is left at its default and TF32 is never enabled). beta = 0: c is written.
template <typename T>
void gemm_heads(Context& ctx, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                int k, HeadOperand<T> a, HeadOperand<T> b, T* c, int ldc, long long c_head_stride,
                int heads) {
  const float alpha = 1.0f;
  const float beta = 0.0f;
  STRATA_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      ctx.cublas(), transa, transb, m, n, k, &alpha, a.data, kDataType<T>, a.ld, a.head_stride,
      b.data, kDataType<T>, b.ld, b.head_stride, &beta, c, kDataType<T>, ldc, c_head_stride, heads,
      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// The sizes as cuBLAS and the kernels take them, checked to fit an int.
struct Sizes {
  int t, nh, hs, c, c3;
  long long tt;  // T*T, the elements of one head's att
  float scale;   // 1/sqrt(HS)
};

Sizes checked_sizes(int64_t t, int64_t nh, int64_t hs) {
  Sizes s{};
  s.t = checked_int(t, "attention T");
  s.nh = checked_int(nh, "attention NH");
  s.hs = checked_int(hs, "attention HS");
  s.c = checked_int(nh * hs, "attention NH*HS");
  s.c3 = checked_int(3 * nh * hs, "attention 3*NH*HS");
  s.tt = static_cast<long long>(t) * t;
  s.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hs)));
  return s;
}

}  // namespace

// out (B,T,C), att (B,NH,T,T), qkv (B,T,3C), C = NH*HS.
template <typename T>
void attention_forward(Context& ctx, T* out, T* att, const T* qkv, int64_t b, int64_t t, int64_t nh,
                       int64_t hs) {
  if (b <= 0 || t <= 0 || nh <= 0 || hs <= 0) return;
  const Sizes s = checked_sizes(t, nh, hs);
  for (int64_t bi = 0; bi < b; ++bi) {
    const T* q = qkv + bi * t * s.c3;
    const T* k = q + s.c;
    // att[h] = Q K^T (raw scores): S^T = K Q^T column-major.
    gemm_heads<T>(ctx, CUBLAS_OP_T, CUBLAS_OP_N, s.t, s.t, s.hs, {k, s.c3, s.hs}, {q, s.c3, s.hs},
                  att + bi * nh * s.tt, s.t, s.tt, s.nh);
  }
  launch_softmax_forward(ctx, att, b * nh * t, s.t, s.scale);
  for (int64_t bi = 0; bi < b; ++bi) {
    const T* v = qkv + bi * t * s.c3 + 2 * s.c;
    // out[h] = att[h] V: out^T = V^T att^T column-major.
    gemm_heads<T>(ctx, CUBLAS_OP_N, CUBLAS_OP_N, s.hs, s.t, s.t, {v, s.c3, s.hs},
                  {att + bi * nh * s.tt, s.t, s.tt}, out + bi * t * s.c, s.c, s.hs, s.nh);
  }
}

// dqkv (B,T,3C), dout (B,T,C), qkv (B,T,3C), att (B,NH,T,T). Per batch, datt and then dpre live
// in an (NH,T,T) scratch, reused by the next batch (the same stream orders the uses).
template <typename T>
void attention_backward(Context& ctx, T* dqkv, const T* dout, const T* qkv, const T* att, int64_t b,
                        int64_t t, int64_t nh, int64_t hs) {
  if (b <= 0 || t <= 0 || nh <= 0 || hs <= 0) return;
  const Sizes s = checked_sizes(t, nh, hs);
  T* datt = reinterpret_cast<T*>(ctx.scratch(static_cast<size_t>(nh * s.tt) * sizeof(T)));
  for (int64_t bi = 0; bi < b; ++bi) {
    const T* q = qkv + bi * t * s.c3;
    const T* k = q + s.c;
    const T* v = q + 2 * s.c;
    const T* dy = dout + bi * t * s.c;
    const T* a = att + bi * nh * s.tt;
    T* dq = dqkv + bi * t * s.c3;
    T* dk = dq + s.c;
    T* dv = dq + 2 * s.c;
    // datt = dO V^T: datt^T = V dO^T.
    gemm_heads<T>(ctx, CUBLAS_OP_T, CUBLAS_OP_N, s.t, s.t, s.hs, {v, s.c3, s.hs}, {dy, s.c, s.hs},
                  datt, s.t, s.tt, s.nh);
    // dV = att^T dO: dV^T = dO^T att.
    gemm_heads<T>(ctx, CUBLAS_OP_N, CUBLAS_OP_T, s.hs, s.t, s.t, {dy, s.c, s.hs}, {a, s.t, s.tt},
                  dv, s.c3, s.hs, s.nh);
    // datt -> dpre = scale * att * (datt - rowsum(att * datt)), 0 above the diagonal.
    launch_softmax_backward(ctx, datt, a, nh * t, s.t, s.scale);
    // dQ = dpre K: dQ^T = K^T dpre^T.
    gemm_heads<T>(ctx, CUBLAS_OP_N, CUBLAS_OP_N, s.hs, s.t, s.t, {k, s.c3, s.hs}, {datt, s.t, s.tt},
                  dq, s.c3, s.hs, s.nh);
    // dK = dpre^T Q: dK^T = Q^T dpre.
    gemm_heads<T>(ctx, CUBLAS_OP_N, CUBLAS_OP_T, s.hs, s.t, s.t, {q, s.c3, s.hs}, {datt, s.t, s.tt},
                  dk, s.c3, s.hs, s.nh);
  }
}

template void attention_forward<float>(Context&, float*, float*, const float*, int64_t, int64_t,
                                       int64_t, int64_t);
template void attention_forward<bf16>(Context&, bf16*, bf16*, const bf16*, int64_t, int64_t,
                                      int64_t, int64_t);
template void attention_backward<float>(Context&, float*, const float*, const float*, const float*,
                                        int64_t, int64_t, int64_t, int64_t);
template void attention_backward<bf16>(Context&, bf16*, const bf16*, const bf16*, const bf16*,
                                       int64_t, int64_t, int64_t, int64_t);

}  // namespace strata::cuda
