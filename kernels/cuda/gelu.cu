// GELU (Hendrycks & Gimpel 2016) in GPT-2's tanh approximation on the GPU, as
// kernels/cpu/gelu.cpp, with the formulas of gelu_tanh.cuh: 0.5 (1 + tanh u) written as
// sigmoid(2u), one exp per element. Elementwise and memory-bound: each thread moves 16 bytes at a
// time (llm.c's Packed128) where the pointers allow, grid-striding over int64 indices so that n
// past 2^31 works.

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gelu_tanh.cuh"
#include "kernels/cuda/kernels.hpp"

namespace strata::cuda {
namespace {

constexpr int kBlockSize = 256;
// Enough blocks to fill any current GPU many times over; larger n grid-strides.
constexpr int64_t kMaxBlocks = int64_t{1} << 16;

// out is (n), inp (n). Thread i handles packs i, i + stride, ... of kWidth elements; with
// kWidth > 1 the last n % kWidth elements follow one by one.
template <typename T, int kWidth>
__global__ void gelu_forward_kernel(T* out, const T* inp, int64_t n) {
  const int64_t packs = n / kWidth;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t p = first; p < packs; p += stride) {
    float x[kWidth];
    load_floats(x, inp + p * kWidth);
    float y[kWidth];
    for (int k = 0; k < kWidth; ++k) y[k] = gelu_tanh::value(x[k]);
    store_floats(out + p * kWidth, y);
  }
  for (int64_t i = packs * kWidth + first; i < n; i += stride) {
    out[i] = from_float<T>(gelu_tanh::value(to_float(inp[i])));
  }
}

// dinp is (n), inp (n), dout (n): dinp = dout * gelu'(inp), packs as in gelu_forward_kernel.
template <typename T, int kWidth>
__global__ void gelu_backward_kernel(T* dinp, const T* inp, const T* dout, int64_t n) {
  const int64_t packs = n / kWidth;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t p = first; p < packs; p += stride) {
    float x[kWidth];
    float dy[kWidth];
    load_floats(x, inp + p * kWidth);
    load_floats(dy, dout + p * kWidth);
    float dx[kWidth];
    for (int k = 0; k < kWidth; ++k) dx[k] = gelu_tanh::derivative(x[k]) * dy[k];
    store_floats(dinp + p * kWidth, dx);
  }
  for (int64_t i = packs * kWidth + first; i < n; i += stride) {
    dinp[i] = from_float<T>(gelu_tanh::derivative(to_float(inp[i])) * to_float(dout[i]));
  }
}

// Blocks for n elements in packs of width: at least one, at most kMaxBlocks.
int blocks_for(int64_t n, int width) {
  return static_cast<int>(std::min(ceil_div(ceil_div(n, width), kBlockSize), kMaxBlocks));
}

}  // namespace

template <typename T>
void gelu_forward(Context& ctx, T* out, const T* inp, int64_t n) {
  if (n <= 0) return;
  constexpr int kPack = Packed128<T>::kSize;
  if (is_aligned16(out) && is_aligned16(inp)) {
    STRATA_LAUNCH(blocks_for(n, kPack), kBlockSize, 0, ctx.stream(), gelu_forward_kernel<T, kPack>)
    (out, inp, n);
  } else {
    STRATA_LAUNCH(blocks_for(n, 1), kBlockSize, 0, ctx.stream(), gelu_forward_kernel<T, 1>)
    (out, inp, n);
  }
  STRATA_CUDA_CHECK_LAUNCH();
}

template <typename T>
void gelu_backward(Context& ctx, T* dinp, const T* inp, const T* dout, int64_t n) {
  if (n <= 0) return;
  constexpr int kPack = Packed128<T>::kSize;
  if (is_aligned16(dinp) && is_aligned16(inp) && is_aligned16(dout)) {
    STRATA_LAUNCH(blocks_for(n, kPack), kBlockSize, 0, ctx.stream(), gelu_backward_kernel<T, kPack>)
    (dinp, inp, dout, n);
  } else {
    STRATA_LAUNCH(blocks_for(n, 1), kBlockSize, 0, ctx.stream(), gelu_backward_kernel<T, 1>)
    (dinp, inp, dout, n);
  }
  STRATA_CUDA_CHECK_LAUNCH();
}

template void gelu_forward<float>(Context&, float*, const float*, int64_t);
template void gelu_forward<bf16>(Context&, bf16*, const bf16*, int64_t);
template void gelu_backward<float>(Context&, float*, const float*, const float*, int64_t);
template void gelu_backward<bf16>(Context&, bf16*, const bf16*, const bf16*, int64_t);

}  // namespace strata::cuda
