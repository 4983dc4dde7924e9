// Dropout (Srivastava et al. 2014) on the GPU, as kernels/cpu/dropout.cpp: the counter-based mask
// and a tensor through a mask. An element's draw is SplitMix64's output function (Steele, Lea and
// Flood 2014) applied twice, dropout_key(dropout_key(stream, row_keys[i]), j), the same uint64
// arithmetic as cpu::dropout_key, and its top 53 bits make a double u in [0, 1) (exact: an integer
// under 2^53 times 2^-53) compared with the rate in double: the mask has the reference's bits.
// Both kernels are elementwise and grid-stride over int64 indices; apply_dropout moves 16 bytes
// at a time (llm.c's Packed128) where the pointers allow.

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.hpp"

namespace strata::cuda {
namespace {

constexpr int kBlockSize = 256;
// Enough blocks to fill any current GPU many times over; larger sizes grid-stride.
constexpr int64_t kMaxBlocks = int64_t{1} << 16;

// cpu::dropout_key on the device: SplitMix64's output function on
// z = a + 0x9e3779b97f4a7c15 * (b + 1), in wrapping uint64 arithmetic.
__device__ __forceinline__ uint64_t dropout_key(uint64_t a, uint64_t b) {
  uint64_t z = a + 0x9e3779b97f4a7c15ULL * (b + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// mask is (N,C), row_keys (N). Element k = i * C + j is 1 where u >= rate, else 0, with
// u = (dropout_key(dropout_key(stream, row_keys[i]), j) >> 11) * 2^-53.
template <typename T>
__global__ void dropout_mask_kernel(T* mask, uint64_t stream, const uint64_t* row_keys, int64_t n,
                                    int64_t c, double rate) {
  constexpr double kUnit = 0x1.0p-53;
  const int64_t total = n * c;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < total;
       k += stride) {
    const int64_t i = k / c;
    const int64_t j = k - i * c;
    const uint64_t row = dropout_key(stream, row_keys[i]);
    const double u = static_cast<double>(dropout_key(row, static_cast<uint64_t>(j)) >> 11) * kUnit;
    mask[k] = from_float<T>(u >= rate ? 1.0f : 0.0f);
  }
}

// out, in and mask are (n): out = in * mask * dropout_scale in fp32. Thread i handles packs i,
// i + stride, ... of kWidth elements; with kWidth > 1 the last n % kWidth follow one by one.
template <typename T, int kWidth>
__global__ void apply_dropout_kernel(T* out, const T* in, const T* mask, float dropout_scale,
                                     int64_t n) {
  const int64_t packs = n / kWidth;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t p = first; p < packs; p += stride) {
    float x[kWidth];
    float m[kWidth];
    load_floats(x, in + p * kWidth);
    load_floats(m, mask + p * kWidth);
    float y[kWidth];
    for (int k = 0; k < kWidth; ++k) y[k] = x[k] * m[k] * dropout_scale;
    store_floats(out + p * kWidth, y);
  }
  for (int64_t i = packs * kWidth + first; i < n; i += stride) {
    out[i] = from_float<T>(to_float(in[i]) * to_float(mask[i]) * dropout_scale);
  }
}

// Blocks for n elements in packs of width: at least one, at most kMaxBlocks.
int blocks_for(int64_t n, int width) {
  return static_cast<int>(
      std::clamp(ceil_div(ceil_div(n, width), kBlockSize), int64_t{1}, kMaxBlocks));
}

}  // namespace

template <typename T>
void dropout_mask(Context& ctx, T* mask, uint64_t stream, const uint64_t* row_keys, int64_t n,
                  int64_t c, double rate) {
  if (!(rate >= 0.0 && rate < 1.0)) {
    throw std::invalid_argument("dropout_mask: rate = " + std::to_string(rate) +
                                " is not a probability in [0, 1)");
  }
  if (n <= 0 || c <= 0) return;
  STRATA_LAUNCH(blocks_for(n * c, 1), kBlockSize, 0, ctx.stream(), dropout_mask_kernel<T>)
  (mask, stream, row_keys, n, c, rate);
  STRATA_CUDA_CHECK_LAUNCH();
}

template <typename T>
void apply_dropout(Context& ctx, T* out, const T* in, const T* mask, float dropout_scale,
                   int64_t n) {
  if (n <= 0) return;
  constexpr int kPack = Packed128<T>::kSize;
  if (is_aligned16(out) && is_aligned16(in) && is_aligned16(mask)) {
    STRATA_LAUNCH(blocks_for(n, kPack), kBlockSize, 0, ctx.stream(), apply_dropout_kernel<T, kPack>)
    (out, in, mask, dropout_scale, n);
  } else {
    STRATA_LAUNCH(blocks_for(n, 1), kBlockSize, 0, ctx.stream(), apply_dropout_kernel<T, 1>)
    (out, in, mask, dropout_scale, n);
  }
  STRATA_CUDA_CHECK_LAUNCH();
}

template void dropout_mask<float>(Context&, float*, uint64_t, const uint64_t*, int64_t, int64_t,
                                  double);
template void dropout_mask<bf16>(Context&, bf16*, uint64_t, const uint64_t*, int64_t, int64_t,
                                 double);
template void apply_dropout<float>(Context&, float*, const float*, const float*, float, int64_t);
template void apply_dropout<bf16>(Context&, bf16*, const bf16*, const bf16*, float, int64_t);

}  // namespace strata::cuda
