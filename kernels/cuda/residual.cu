// The residual add on the GPU (kernels/cpu/residual.cpp), alone (with hidden dropout on the
// branch: Megatron-LM's bias_dropout_add) and fused with the norm that follows it in a pre-norm
// transformer block, as llm.c's fused_residual_forward5: one pass writes residual_out and
// normalizes it, instead of a second kernel reading residual_out back. The norm reads
// residual_out as stored (rounded to T), with the device code of the plain norms (norm_rows.cuh),
// so its results are those of residual_forward followed by the norm, and the backward, which
// reads residual_out, sees the forward's input. Also the residual stream's gradient picking up a
// branch's (accumulate).

#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.hpp"
#include "kernels/cuda/norm_rows.cuh"

namespace strata::cuda {
namespace {

constexpr int kResidualThreads = 256;

// The residual add with dropout on one chunk, as cpu::residual_forward with a mask:
// out = residual + (branch + bias) * mask * dropout_scale in fp32, rounded to T. bias points at
// the chunk's channels, or is null.
template <typename T, int kW>
__device__ __forceinline__ void residual_dropout_chunk(T* out, const T* residual, const T* branch,
                                                       const T* bias, const T* mask,
                                                       float dropout_scale) {
  float r[kW], b[kW], m[kW];
  load_floats(r, residual);
  load_floats(b, branch);
  load_floats(m, mask);
  if (bias != nullptr) {
    float bb[kW];
    load_floats(bb, bias);
#pragma unroll
    for (int e = 0; e < kW; ++e) b[e] += bb[e];
  }
#pragma unroll
  for (int e = 0; e < kW; ++e) r[e] += b[e] * m[e] * dropout_scale;
  store_floats(out, r);
}

// out is (N,C), residual (N,C), branch (N,C), bias (C) or null, mask (N,C) or null: out =
// residual + branch + bias without a mask, residual + (branch + bias) * mask * dropout_scale with
// one, over the N*C elements in chunks of kW (a chunk never crosses a row: C % kW == 0).
template <typename T, bool kVec>
__global__ void residual_forward_kernel(T* out, const T* residual, const T* branch, const T* bias,
                                        const T* mask, float dropout_scale, int64_t n, int64_t c) {
  constexpr int kW = norm::kWidth<T, kVec>;
  const int64_t total = n * c;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x * kW;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kW; i < total;
       i += step) {
    const T* chunk_bias = bias != nullptr ? bias + i % c : nullptr;
    if (mask != nullptr) {
      residual_dropout_chunk<T, kW>(out + i, residual + i, branch + i, chunk_bias, mask + i,
                                    dropout_scale);
    } else {
      norm::residual_chunk<T, kW>(out + i, residual + i, branch + i, chunk_bias);
    }
  }
}

// dst (n) += src (n) in fp32, rounded to T; packs of kWidth elements, then the last n % kWidth
// one by one.
template <typename T, int kWidth>
__global__ void accumulate_kernel(T* dst, const T* src, int64_t n) {
  const int64_t packs = n / kWidth;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t p = first; p < packs; p += stride) {
    float d[kWidth];
    float x[kWidth];
    load_floats(d, dst + p * kWidth);
    load_floats(x, src + p * kWidth);
#pragma unroll
    for (int k = 0; k < kWidth; ++k) d[k] += x[k];
    store_floats(dst + p * kWidth, d);
  }
  for (int64_t i = packs * kWidth + first; i < n; i += stride) {
    dst[i] = from_float<T>(to_float(dst[i]) + to_float(src[i]));
  }
}

// residual_out is (N,C), out (N,C), mean (N), rstd (N), residual (N,C), branch (N,C), bias (C)
// or null, weight (C), norm_bias (C) or null. Per row: residual_out = residual + branch + bias,
// then out, mean and rstd = LayerNorm(residual_out as stored) * weight + norm_bias.
template <typename T, bool kVec, typename Rows>
__global__ void __launch_bounds__(norm::kMaxThreads)
    residual_layernorm_forward_kernel(T* residual_out, T* out, float* mean, float* rstd,
                                      const T* residual, const T* branch, const T* bias,
                                      const T* weight, const T* norm_bias, int64_t n, int64_t c) {
  constexpr int kW = norm::kWidth<T, kVec>;
  STRATA_SHARED(float, reduce_shared, [kWarpSize]);
  for (int64_t row = Rows::first_row(); row < n; row += Rows::row_stride()) {
    T* r_out = residual_out + row * c;
    const T* r = residual + row * c;
    const T* b = branch + row * c;
    // The same chunks per thread as layernorm_row's passes: each thread reads back only what it
    // wrote here.
    norm::for_each_chunk<kW, Rows>(c, [&](int64_t j) {
      norm::residual_chunk<T, kW>(r_out + j, r + j, b + j, bias != nullptr ? bias + j : nullptr);
    });
    norm::layernorm_row<T, kVec, Rows>(out + row * c, mean + row, rstd + row, r_out, weight,
                                       norm_bias, c, reduce_shared);
  }
}

// residual_out is (N,C), out (N,C), rstd (N), residual (N,C), branch (N,C), bias (C) or null,
// weight (C). Per row: residual_out = residual + branch + bias, then out and rstd =
// RMSNorm(residual_out as stored) * weight.
template <typename T, bool kVec, typename Rows>
__global__ void __launch_bounds__(norm::kMaxThreads)
    residual_rmsnorm_forward_kernel(T* residual_out, T* out, float* rstd, const T* residual,
                                    const T* branch, const T* bias, const T* weight, int64_t n,
                                    int64_t c) {
  constexpr int kW = norm::kWidth<T, kVec>;
  STRATA_SHARED(float, reduce_shared, [kWarpSize]);
  for (int64_t row = Rows::first_row(); row < n; row += Rows::row_stride()) {
    T* r_out = residual_out + row * c;
    const T* r = residual + row * c;
    const T* b = branch + row * c;
    // As in residual_layernorm_forward_kernel: the chunks of rmsnorm_row's passes.
    norm::for_each_chunk<kW, Rows>(c, [&](int64_t j) {
      norm::residual_chunk<T, kW>(r_out + j, r + j, b + j, bias != nullptr ? bias + j : nullptr);
    });
    norm::rmsnorm_row<T, kVec, Rows>(out + row * c, rstd + row, r_out, weight, c, reduce_shared);
  }
}

bool aligned_or_null(const void* pointer) { return pointer == nullptr || is_aligned16(pointer); }

}  // namespace

template <typename T>
void residual_forward(Context& ctx, T* out, const T* residual, const T* branch, const T* bias,
                      int64_t n, int64_t c, const T* mask, float dropout_scale) {
  norm::check_sizes("residual_forward", n, c);
  if (n == 0 || c == 0) return;
  const bool vec = c % Packed128<T>::kSize == 0 && is_aligned16(out) && is_aligned16(residual) &&
                   is_aligned16(branch) && aligned_or_null(bias) && aligned_or_null(mask);
  const int64_t width = vec ? Packed128<T>::kSize : 1;
  const unsigned blocks = static_cast<unsigned>(
      std::min(ceil_div(ceil_div(n * c, width), kResidualThreads), norm::kMaxGridBlocks));
  if (vec) {
    STRATA_LAUNCH(blocks, kResidualThreads, 0, ctx.stream(), residual_forward_kernel<T, true>)
    (out, residual, branch, bias, mask, dropout_scale, n, c);
  } else {
    STRATA_LAUNCH(blocks, kResidualThreads, 0, ctx.stream(), residual_forward_kernel<T, false>)
    (out, residual, branch, bias, mask, dropout_scale, n, c);
  }
  STRATA_CUDA_CHECK_LAUNCH();
}

template <typename T>
void accumulate(Context& ctx, T* dst, const T* src, int64_t n) {
  if (n <= 0) return;
  const bool vec = is_aligned16(dst) && is_aligned16(src);
  const int64_t width = vec ? Packed128<T>::kSize : 1;
  const unsigned blocks = static_cast<unsigned>(
      std::clamp(ceil_div(ceil_div(n, width), kResidualThreads), int64_t{1}, norm::kMaxGridBlocks));
  if (vec) {
    STRATA_LAUNCH(blocks, kResidualThreads, 0, ctx.stream(),
                  accumulate_kernel<T, Packed128<T>::kSize>)
    (dst, src, n);
  } else {
    STRATA_LAUNCH(blocks, kResidualThreads, 0, ctx.stream(), accumulate_kernel<T, 1>)
    (dst, src, n);
  }
  STRATA_CUDA_CHECK_LAUNCH();
}

template <typename T>
void residual_layernorm_forward(Context& ctx, T* residual_out, T* out, float* mean, float* rstd,
                                const T* residual, const T* branch, const T* bias, const T* weight,
                                const T* norm_bias, int64_t n, int64_t c) {
  norm::check_sizes("residual_layernorm_forward", n, c);
  if (n == 0 || c == 0) return;
  const bool aligned = is_aligned16(residual_out) && is_aligned16(out) && is_aligned16(residual) &&
                       is_aligned16(branch) && aligned_or_null(bias) && is_aligned16(weight) &&
                       aligned_or_null(norm_bias);
  norm::dispatch_rows<T>(n, c, aligned, [&](auto vec, auto rows, norm::RowLaunch shape) {
    STRATA_LAUNCH(shape.blocks, shape.threads, 0, ctx.stream(),
                  residual_layernorm_forward_kernel<T, decltype(vec)::value, decltype(rows)>)
    (residual_out, out, mean, rstd, residual, branch, bias, weight, norm_bias, n, c);
  });
  STRATA_CUDA_CHECK_LAUNCH();
}

template <typename T>
void residual_rmsnorm_forward(Context& ctx, T* residual_out, T* out, float* rstd, const T* residual,
                              const T* branch, const T* bias, const T* weight, int64_t n,
                              int64_t c) {
  norm::check_sizes("residual_rmsnorm_forward", n, c);
  if (n == 0 || c == 0) return;
  const bool aligned = is_aligned16(residual_out) && is_aligned16(out) && is_aligned16(residual) &&
                       is_aligned16(branch) && aligned_or_null(bias) && is_aligned16(weight);
  norm::dispatch_rows<T>(n, c, aligned, [&](auto vec, auto rows, norm::RowLaunch shape) {
    STRATA_LAUNCH(shape.blocks, shape.threads, 0, ctx.stream(),
                  residual_rmsnorm_forward_kernel<T, decltype(vec)::value, decltype(rows)>)
    (residual_out, out, rstd, residual, branch, bias, weight, n, c);
  });
  STRATA_CUDA_CHECK_LAUNCH();
}

template void residual_forward<float>(Context&, float*, const float*, const float*, const float*,
                                      int64_t, int64_t, const float*, float);
template void residual_forward<bf16>(Context&, bf16*, const bf16*, const bf16*, const bf16*,
                                     int64_t, int64_t, const bf16*, float);
template void accumulate<float>(Context&, float*, const float*, int64_t);
template void accumulate<bf16>(Context&, bf16*, const bf16*, int64_t);
template void residual_layernorm_forward<float>(Context&, float*, float*, float*, float*,
                                                const float*, const float*, const float*,
                                                const float*, const float*, int64_t, int64_t);
template void residual_layernorm_forward<bf16>(Context&, bf16*, bf16*, float*, float*, const bf16*,
                                               const bf16*, const bf16*, const bf16*, const bf16*,
                                               int64_t, int64_t);
template void residual_rmsnorm_forward<float>(Context&, float*, float*, float*, const float*,
                                              const float*, const float*, const float*, int64_t,
                                              int64_t);
template void residual_rmsnorm_forward<bf16>(Context&, bf16*, bf16*, float*, const bf16*,
                                             const bf16*, const bf16*, const bf16*, int64_t,
                                             int64_t);

}  // namespace strata::cuda
