#pragma once
// The backward of LayerNorm and RMSNorm (layernorm.cu, rmsnorm.cu): one kernel template for both,
// since RMSNorm's backward is LayerNorm's with mean = 0, no mean(dnorm) term and no bias.
//
// Determinism without float atomics, in two kernels:
//  1. norm_backward_kernel: block b takes rows b, b + B, b + 2B, ... (B blocks, a number that
//     depends only on N and C). For each row the whole block reduces the row's two means, writes
//     dinp, and adds the row's dweight (and dbias) terms into the block's accumulators, one
//     float per channel, each owned by one thread (the chunk assignment of for_each_chunk), in
//     row order. The accumulators live in shared memory when they fit in kMaxSharedBytes, else in
//     the block's row of the partial array itself; the arithmetic is the same either way. The
//     block's accumulators end up as row b of partial (B, C) (and of a second (B, C) for dbias).
//  2. sum_partials_kernel: one thread per channel adds the B partials in block order, then adds
//     (+=) the sum into dweight (and dbias).

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/context.hpp"
#include "kernels/cuda/norm_rows.cuh"

namespace strata::cuda::norm {

// Blocks of the backward at most; fewer when N is smaller, or when B * C partial sums would pass
// kMaxPartialFloats (64 MiB for dweight and dbias together).
constexpr int64_t kMaxBackwardBlocks = 1024;
constexpr int64_t kMaxPartialFloats = int64_t{1} << 24;
// Accumulators in shared memory up to this size (under the 48 KiB a block may use without
// opting in), else in global memory.
constexpr int64_t kMaxSharedBytes = 32 * 1024;

// acc[0, kW) += v. On the vector path (kW a multiple of 4, acc then 16-byte aligned, as C and
// the chunk start are multiples of kW) with 16-byte accesses: a warp's scalar accesses at a
// stride of kW floats would hit the same shared-memory banks kW/4 times as often.
template <int kW>
__device__ __forceinline__ void accumulate(float* acc, const float (&v)[kW]) {
  if constexpr (kW % 4 == 0) {
#pragma unroll
    for (int q = 0; q < kW; q += 4) {
      Packed128<float> a = load128(acc + q);
#pragma unroll
      for (int e = 0; e < 4; ++e) a.values[e] += v[q + e];
      store128(acc + q, a);
    }
  } else {
#pragma unroll
    for (int e = 0; e < kW; ++e) acc[e] += v[e];
  }
}

// dinp is (N,C), partial (B, P) with P = 2C when with_dbias (the dweight then the dbias
// partials of a block) else C, dout (N,C), inp (N,C), weight (C), mean (N) (unused when kRms),
// rstd (N), dresidual (N,C) or null; B = gridDim.x.
// With norm = (inp - mean) * rstd and dnorm = dout * weight, per row (cpu::layernorm_backward,
// cpu::rmsnorm_backward):
//   dinp = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)) [+ dresidual]
//          (RMSNorm: mean = 0 and no mean(dnorm) term),
//   the block's dweight partial += dout * norm, its dbias partial += dout.
// dinp may be dresidual: each element is read, then written, by the same thread.
// Dynamic shared memory: P floats when shared_accumulators, else none.
template <typename T, bool kVec, bool kRms>
__global__ void __launch_bounds__(kMaxThreads)
    norm_backward_kernel(T* dinp, float* partial, const T* dout, const T* inp, const T* weight,
                         const float* mean, const float* rstd, const T* dresidual, int64_t n,
                         int64_t c, bool with_dbias, bool shared_accumulators) {
  constexpr int kW = kWidth<T, kVec>;
  STRATA_DYNAMIC_SHARED(float, shared_partial, 16);  // 16: accumulate's vector accesses
  STRATA_SHARED(float, reduce_shared, [kWarpSize]);
  const int64_t partial_width = with_dbias ? 2 * c : c;
  float* block_partial = partial + blockIdx.x * partial_width;
  float* acc_weight = shared_accumulators ? shared_partial : block_partial;
  float* acc_bias = acc_weight + c;  // used only with_dbias
  for_each_chunk<kW, BlockRows>(c, [&](int64_t j) {
#pragma unroll
    for (int e = 0; e < kW; ++e) {
      acc_weight[j + e] = 0.0f;
      if (with_dbias) acc_bias[j + e] = 0.0f;
    }
  });
  for (int64_t row = BlockRows::first_row(); row < n; row += BlockRows::row_stride()) {
    const T* x = inp + row * c;
    const T* dy = dout + row * c;
    const T* dr = dresidual != nullptr ? dresidual + row * c : nullptr;
    T* dx = dinp + row * c;
    const float m = kRms ? 0.0f : mean[row];
    const float s = rstd[row];
    float sum_dnorm = 0.0f;
    float sum_dnorm_norm = 0.0f;
    for_each_chunk<kW, BlockRows>(c, [&](int64_t j) {
      float xv[kW], dyv[kW], wv[kW];
      load_floats(xv, x + j);
      load_floats(dyv, dy + j);
      load_floats(wv, weight + j);
#pragma unroll
      for (int e = 0; e < kW; ++e) {
        const float norm = (xv[e] - m) * s;
        const float dnorm = wv[e] * dyv[e];
        sum_dnorm += dnorm;
        sum_dnorm_norm += dnorm * norm;
      }
    });
    float mean_dnorm = 0.0f;
    if constexpr (!kRms) mean_dnorm = block_sum(sum_dnorm, reduce_shared) / static_cast<float>(c);
    const float mean_dnorm_norm = block_sum(sum_dnorm_norm, reduce_shared) / static_cast<float>(c);
    for_each_chunk<kW, BlockRows>(c, [&](int64_t j) {
      float xv[kW], dyv[kW], wv[kW], dxv[kW], dwv[kW];
      load_floats(xv, x + j);
      load_floats(dyv, dy + j);
      load_floats(wv, weight + j);
#pragma unroll
      for (int e = 0; e < kW; ++e) {
        const float norm = (xv[e] - m) * s;
        const float dnorm = wv[e] * dyv[e];
        dwv[e] = norm * dyv[e];
        dxv[e] = (dnorm - mean_dnorm - norm * mean_dnorm_norm) * s;
      }
      accumulate(acc_weight + j, dwv);
      if (with_dbias) accumulate(acc_bias + j, dyv);
      if (dr != nullptr) {
        float drv[kW];
        load_floats(drv, dr + j);  // before the store below: dx may be dr
#pragma unroll
        for (int e = 0; e < kW; ++e) dxv[e] += drv[e];
      }
      store_floats(dx + j, dxv);
    });
  }
  if (shared_accumulators) {
    for_each_chunk<kW, BlockRows>(c, [&](int64_t j) {
#pragma unroll
      for (int e = 0; e < kW; ++e) {
        block_partial[j + e] = acc_weight[j + e];
        if (with_dbias) block_partial[c + j + e] = acc_bias[j + e];
      }
    });
  }
}

// dweight (C) += sum over b of partial[b][0, C), in the order b = 0, 1, ..., blocks - 1;
// with kWithBias also dbias (C) += sum over b of partial[b][C, 2C). partial is
// (blocks, C) or (blocks, 2C). One thread per channel: the loads of a warp are contiguous.
template <bool kWithBias>
__global__ void sum_partials_kernel(float* dweight, float* dbias, const float* partial,
                                    int64_t blocks, int64_t c) {
  const int64_t partial_width = kWithBias ? 2 * c : c;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < c;
       j += stride) {
    float sum_weight = 0.0f;
    float sum_bias = 0.0f;
    for (int64_t b = 0; b < blocks; ++b) {
      sum_weight += partial[b * partial_width + j];
      if constexpr (kWithBias) sum_bias += partial[b * partial_width + c + j];
    }
    dweight[j] += sum_weight;
    if constexpr (kWithBias) dbias[j] += sum_bias;
  }
}

// The host side of layernorm_backward (kRms false) and rmsnorm_backward (kRms true, dbias and
// mean null): the two kernels above on ctx's stream, the partials in ctx.scratch.
template <typename T, bool kRms>
void norm_backward(Context& ctx, const char* kernel, T* dinp, float* dweight, float* dbias,
                   const T* dout, const T* inp, const T* weight, const float* mean,
                   const float* rstd, const T* dresidual, int64_t n, int64_t c) {
  check_sizes(kernel, n, c);
  if (n == 0 || c == 0) return;
  const bool with_dbias = dbias != nullptr;
  const int64_t partial_width = with_dbias ? 2 * c : c;
  // The block count depends on N and C only (LayerNorm counts room for dbias whether or not it
  // is asked for), so dweight has the same bits on every GPU and with or without dbias.
  const int64_t budget_width = kRms ? c : 2 * c;
  const int64_t blocks =
      std::min({n, kMaxBackwardBlocks, std::max<int64_t>(1, kMaxPartialFloats / budget_width)});
  float* partial = reinterpret_cast<float*>(
      ctx.scratch(static_cast<size_t>(blocks * partial_width) * sizeof(float)));
  const bool shared_accumulators =
      partial_width * static_cast<int64_t>(sizeof(float)) <= kMaxSharedBytes;
  const size_t shared_bytes =
      shared_accumulators ? static_cast<size_t>(partial_width) * sizeof(float) : 0;
  const bool vec = c % Packed128<T>::kSize == 0 && is_aligned16(dinp) && is_aligned16(dout) &&
                   is_aligned16(inp) && is_aligned16(weight) &&
                   (dresidual == nullptr || is_aligned16(dresidual));
  const int64_t width = vec ? Packed128<T>::kSize : 1;
  const unsigned threads = static_cast<unsigned>(block_threads(ceil_div(c, width)));
  if (vec) {
    STRATA_LAUNCH(static_cast<unsigned>(blocks), threads, shared_bytes, ctx.stream(),
                  norm_backward_kernel<T, true, kRms>)
    (dinp, partial, dout, inp, weight, mean, rstd, dresidual, n, c, with_dbias,
     shared_accumulators);
  } else {
    STRATA_LAUNCH(static_cast<unsigned>(blocks), threads, shared_bytes, ctx.stream(),
                  norm_backward_kernel<T, false, kRms>)
    (dinp, partial, dout, inp, weight, mean, rstd, dresidual, n, c, with_dbias,
     shared_accumulators);
  }
  STRATA_CUDA_CHECK_LAUNCH();
  constexpr int kSumThreads = 256;
  const unsigned sum_blocks =
      static_cast<unsigned>(std::min(ceil_div(c, kSumThreads), kMaxGridBlocks));
  if (with_dbias) {
    STRATA_LAUNCH(sum_blocks, kSumThreads, 0, ctx.stream(), sum_partials_kernel<true>)
    (dweight, dbias, partial, blocks, c);
  } else {
    STRATA_LAUNCH(sum_blocks, kSumThreads, 0, ctx.stream(), sum_partials_kernel<false>)
    (dweight, dbias, partial, blocks, c);
  }
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda::norm
