#pragma once
// The per-row device code of the normalization kernels, shared by the plain norms
// (layernorm.cu, rmsnorm.cu) and the residual add fused with a norm (residual.cu), so that the
// fused forward computes exactly what the residual add followed by the norm computes.
//
// A row of C channels is handled by a group of threads: one warp (WarpRows, rows of up to
// kWarpRowsMaxC channels) or one whole block (BlockRows, wider rows). The row is cut into chunks
// of kW elements: 16 bytes (Packed128: 8 bf16s or 4 floats) where every row start is 16-byte
// aligned, else single elements. Thread `rank` of a group of `size` threads takes the chunks
// starting at j = rank*kW, (rank + size)*kW, ... (for_each_chunk); every pass over a row uses
// this same assignment, so a thread only ever reads back row elements that it wrote itself and
// no barrier is needed between a pass that writes a row and one that reads it. Sums over a row
// are fp32, reduced by warp_sum / block_sum in a fixed order: the same inputs give the same bits.

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda/common.cuh"

namespace strata::cuda::norm {

// The epsilon inside the square root, GPT-2's and Llama 3's (kernels/cpu/layernorm.cpp,
// kernels/cpu/rmsnorm.cpp).
constexpr float kEps = 1e-5f;

// The most threads of a block: every norm kernel is compiled for it (__launch_bounds__).
constexpr int kMaxThreads = 512;
// Rows this wide or narrower take one warp each (at most 32 elements per lane), wider rows a
// block each.
constexpr int64_t kWarpRowsMaxC = 1024;
// Grid-stride loops cover what a grid of this many blocks does not.
constexpr int64_t kMaxGridBlocks = 65536;

// Elements per chunk: 16 bytes of T on the vector path, 1 on the scalar path.
template <typename T, bool kVec>
constexpr int kWidth = kVec ? Packed128<T>::kSize : 1;

// One warp per row: the 8 warps of a 256-thread block take 8 consecutive rows, then stride by
// the grid's 8 * gridDim.x rows.
struct WarpRows {
  static constexpr int kThreads = 256;
  static constexpr int kRowsPerBlock = kThreads / kWarpSize;
  __device__ static int rank() { return threadIdx.x % kWarpSize; }
  __device__ static int size() { return kWarpSize; }
  __device__ static int64_t first_row() {
    return static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  }
  __device__ static int64_t row_stride() { return static_cast<int64_t>(gridDim.x) * kRowsPerBlock; }
  // The sum over the warp's lanes; every lane of the warp must call it.
  __device__ static float sum(float x, float* /*shared*/) { return warp_sum(x); }
};

// One block per row (blockDim.x a multiple of 32, at most kMaxThreads), striding by gridDim.x.
struct BlockRows {
  __device__ static int rank() { return threadIdx.x; }
  __device__ static int size() { return blockDim.x; }
  __device__ static int64_t first_row() { return blockIdx.x; }
  __device__ static int64_t row_stride() { return gridDim.x; }
  // The sum over the block's threads; every thread of the block must call it (shared: 32 floats).
  __device__ static float sum(float x, float* shared) { return block_sum(x, shared); }
};

// Calls f(j) for the chunks [j, j + kW) of a row of c elements that this thread of Rows handles.
// c is a multiple of kW (the vector path is taken only then).
template <int kW, typename Rows, typename F>
__device__ __forceinline__ void for_each_chunk(int64_t c, F&& f) {
  const int64_t step = static_cast<int64_t>(Rows::size()) * kW;
  for (int64_t j = static_cast<int64_t>(Rows::rank()) * kW; j < c; j += step) f(j);
}

// The residual add on one chunk, as cpu::residual_forward: out = (residual + branch) + bias in
// fp32, rounded to T. bias points at the chunk's channels, or is null.
template <typename T, int kW>
__device__ __forceinline__ void residual_chunk(T* out, const T* residual, const T* branch,
                                               const T* bias) {
  float r[kW], b[kW];
  load_floats(r, residual);
  load_floats(b, branch);
#pragma unroll
  for (int e = 0; e < kW; ++e) r[e] += b[e];
  if (bias != nullptr) {
    float bb[kW];
    load_floats(bb, bias);
#pragma unroll
    for (int e = 0; e < kW; ++e) r[e] += bb[e];
  }
  store_floats(out, r);
}

// LayerNorm of one row, as cpu::layernorm_forward: x and out are the row (C), weight (C),
// bias (C) or null; *mean and *rstd receive the row's statistics. Two passes for the variance
// (mean first, then the mean of squared deviations), as the reference. shared: 32 floats for
// BlockRows' reductions. Every thread of the group must call it.
template <typename T, bool kVec, typename Rows>
__device__ void layernorm_row(T* out, float* mean, float* rstd, const T* x, const T* weight,
                              const T* bias, int64_t c, float* shared) {
  constexpr int kW = kWidth<T, kVec>;
  float sum = 0.0f;
  for_each_chunk<kW, Rows>(c, [&](int64_t j) {
    float v[kW];
    load_floats(v, x + j);
#pragma unroll
    for (int e = 0; e < kW; ++e) sum += v[e];
  });
  const float m = Rows::sum(sum, shared) / static_cast<float>(c);
  float sum_squares = 0.0f;
  for_each_chunk<kW, Rows>(c, [&](int64_t j) {
    float v[kW];
    load_floats(v, x + j);
#pragma unroll
    for (int e = 0; e < kW; ++e) sum_squares += (v[e] - m) * (v[e] - m);
  });
  const float var = Rows::sum(sum_squares, shared) / static_cast<float>(c);
  const float s = 1.0f / sqrtf(var + kEps);
  for_each_chunk<kW, Rows>(c, [&](int64_t j) {
    float v[kW], w[kW];
    load_floats(v, x + j);
    load_floats(w, weight + j);
#pragma unroll
    for (int e = 0; e < kW; ++e) v[e] = (v[e] - m) * s * w[e];
    if (bias != nullptr) {
      float b[kW];
      load_floats(b, bias + j);
#pragma unroll
      for (int e = 0; e < kW; ++e) v[e] += b[e];
    }
    store_floats(out + j, v);
  });
  if (Rows::rank() == 0) {
    *mean = m;
    *rstd = s;
  }
}

// RMSNorm of one row, as cpu::rmsnorm_forward: out = x * rstd * weight with
// rstd = 1 / sqrt(mean(x^2) + eps); x and out are the row (C), weight (C); *rstd receives the
// row's rstd. shared and the calling rule as layernorm_row.
template <typename T, bool kVec, typename Rows>
__device__ void rmsnorm_row(T* out, float* rstd, const T* x, const T* weight, int64_t c,
                            float* shared) {
  constexpr int kW = kWidth<T, kVec>;
  float sum_squares = 0.0f;
  for_each_chunk<kW, Rows>(c, [&](int64_t j) {
    float v[kW];
    load_floats(v, x + j);
#pragma unroll
    for (int e = 0; e < kW; ++e) sum_squares += v[e] * v[e];
  });
  const float s = 1.0f / sqrtf(Rows::sum(sum_squares, shared) / static_cast<float>(c) + kEps);
  for_each_chunk<kW, Rows>(c, [&](int64_t j) {
    float v[kW], w[kW];
    load_floats(v, x + j);
    load_floats(w, weight + j);
#pragma unroll
    for (int e = 0; e < kW; ++e) v[e] = v[e] * s * w[e];
    store_floats(out + j, v);
  });
  if (Rows::rank() == 0) *rstd = s;
}

// ---- Host side ----------------------------------------------------------------------------

// Throws std::invalid_argument naming a negative size.
inline void check_sizes(const char* kernel, int64_t n, int64_t c) {
  if (n < 0 || c < 0) {
    throw std::invalid_argument(std::string(kernel) + ": n = " + std::to_string(n) +
                                ", c = " + std::to_string(c) + ": sizes must be >= 0");
  }
}

// Threads of a block that gives each of `chunks` chunks of a row its own thread: a multiple of
// 32 in [32, kMaxThreads] (wider rows loop).
inline int block_threads(int64_t chunks) {
  return static_cast<int>(
      std::clamp<int64_t>(ceil_div(chunks, kWarpSize) * kWarpSize, kWarpSize, kMaxThreads));
}

// The launch of a per-row forward kernel over (N,C); depends only on N, C and the chunk width,
// never on the device.
struct RowLaunch {
  unsigned blocks = 0;
  unsigned threads = 0;
};

// Calls launch(vec, rows, shape) with vec a std::bool_constant (true for 16-byte chunks, taken
// when the buffers are aligned and C is a multiple of 16 bytes of T), rows WarpRows{} or
// BlockRows{} by C, and shape the grid. N and C must be positive.
template <typename T, typename Launch>
void dispatch_rows(int64_t n, int64_t c, bool aligned, Launch&& launch) {
  const bool vec = aligned && c % Packed128<T>::kSize == 0;
  const auto with_rows = [&](auto vec_constant) {
    if (c <= kWarpRowsMaxC) {
      const RowLaunch shape{
          static_cast<unsigned>(std::min(ceil_div(n, WarpRows::kRowsPerBlock), kMaxGridBlocks)),
          WarpRows::kThreads};
      launch(vec_constant, WarpRows{}, shape);
    } else {
      const int width = decltype(vec_constant)::value ? Packed128<T>::kSize : 1;
      const RowLaunch shape{static_cast<unsigned>(std::min(n, kMaxGridBlocks)),
                            static_cast<unsigned>(block_threads(ceil_div(c, width)))};
      launch(vec_constant, BlockRows{}, shape);
    }
  };
  if (vec) {
    with_rows(std::true_type{});
  } else {
    with_rows(std::false_type{});
  }
}

}  // namespace strata::cuda::norm
