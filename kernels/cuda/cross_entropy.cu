// Softmax cross-entropy on the GPU: the fused loss-and-gradient kernel for a whole vocabulary
// (tp 1), and the vocabulary-parallel steps of kernels/cpu/cross_entropy.cpp around the
// all-reduces the caller runs over the shards.
//
// Every kernel gives one block to a row of logits (grid-stride over the rows), reads the row in
// 16-byte vectors when every row is 16-byte aligned (V a multiple of 16 / sizeof(T) and the
// pointers aligned) and element by element otherwise, and reduces in a fixed order: each thread
// over its own elements in index order, then the block's butterfly. The same inputs give the
// same bits.

#include <algorithm>
#include <cfloat>
#include <stdexcept>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.hpp"

namespace strata::cuda {
namespace {

constexpr int kBlockSize = 512;
// More blocks than a GPU keeps resident; rows past it are taken by the grid-stride loop.
constexpr int64_t kMaxBlocks = 65536;

// ---- Reading a row ------------------------------------------------------------------------

// Calls f(j, x) with x = row[j] in fp32 for the elements j of a row (v) that this thread owns:
// j = threadIdx.x, threadIdx.x + blockDim.x, ... or, with kVector, the 16-byte packs starting
// at kSize * threadIdx.x, kSize * (threadIdx.x + blockDim.x), ... (row 16-byte aligned,
// v % kSize == 0, so a pack never crosses the row's end).
template <bool kVector, typename T, typename F>
__device__ __forceinline__ void for_each_in_row(const T* row, int64_t v, F&& f) {
  if constexpr (kVector) {
    constexpr int kSize = Packed128<T>::kSize;
    for (int64_t j = int64_t{threadIdx.x} * kSize; j < v; j += int64_t{blockDim.x} * kSize) {
      const Packed128<T> packed = load128(row + j);
#pragma unroll
      for (int e = 0; e < kSize; ++e) f(j + e, to_float(packed.values[e]));
    }
  } else {
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x) f(j, to_float(row[j]));
  }
}

// drow (v) = scale * (exp(row - max) * inv_sum - onehot(column)), with column -1 when the target
// is not in the row. Each thread reads its elements, then writes the same ones, so drow may be
// row itself.
template <bool kVector, typename T>
__device__ __forceinline__ void write_row_gradient(T* drow, const T* row, int64_t v, float max,
                                                   float inv_sum, int64_t column, float scale) {
  if constexpr (kVector) {
    constexpr int kSize = Packed128<T>::kSize;
    for (int64_t j = int64_t{threadIdx.x} * kSize; j < v; j += int64_t{blockDim.x} * kSize) {
      const Packed128<T> packed = load128(row + j);
      Packed128<T> out;
#pragma unroll
      for (int e = 0; e < kSize; ++e) {
        const float prob = expf(to_float(packed.values[e]) - max) * inv_sum;
        const float onehot = j + e == column ? 1.0f : 0.0f;
        out.values[e] = from_float<T>(scale * (prob - onehot));
      }
      store128(drow + j, out);
    }
  } else {
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
      const float prob = expf(to_float(row[j]) - max) * inv_sum;
      const float onehot = j == column ? 1.0f : 0.0f;
      drow[j] = from_float<T>(scale * (prob - onehot));
    }
  }
}

// The column of the shard [vocab_start, vocab_start + v) holding target, or -1 outside it (as
// shard_column in kernels/cpu/cross_entropy.cpp).
__device__ __forceinline__ int64_t shard_column(int32_t target, int64_t vocab_start, int64_t v) {
  const int64_t column = static_cast<int64_t>(target) - vocab_start;
  return column >= 0 && column < v ? column : -1;
}

// ---- The online softmax normalizer (Milakov & Gimelshein 2018, "Online normalizer calculation
// for softmax", algorithm 3) ----------------------------------------------------------------

// A running max and sum of exp(x - max) over the elements seen. The empty state is
// {-FLT_MAX, 0} rather than {-inf, 0}: every exponent below is then finite minus finite (or
// -inf, whose exp is 0), never -inf - -inf, so neither an empty state nor a -inf logit gives NaN.
struct MaxSum {
  float max;
  float sum;
};

// Adds x: when it raises the max, the sum so far is rescaled by exp(old max - new max).
__device__ __forceinline__ void max_sum_add(MaxSum& state, float x) {
  if (x > state.max) {
    state.sum = state.sum * expf(state.max - x) + 1.0f;
    state.max = x;
  } else {
    state.sum += expf(x - state.max);
  }
}

// The union of two states: max = max(a, b), sum = a.sum e^(a.max - max) + b.sum e^(b.max - max).
// Symmetric to the bit (fmaxf and float addition are commutative), so both lanes of a butterfly
// step get the same value.
__device__ __forceinline__ MaxSum max_sum_combine(MaxSum a, MaxSum b) {
  const float max = fmaxf(a.max, b.max);
  return {max, a.sum * expf(a.max - max) + b.sum * expf(b.max - max)};
}

__device__ __forceinline__ MaxSum warp_max_sum(MaxSum x) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    const MaxSum other{__shfl_xor_sync(0xffffffffu, x.max, offset),
                       __shfl_xor_sync(0xffffffffu, x.sum, offset)};
    x = max_sum_combine(x, other);
  }
  return x;
}

// The union of every thread's state, returned to every thread; as block_sum in common.cuh
// (blockDim.x a multiple of 32, every thread calls it, synchronizes before it returns).
// shared holds 2 * 32 floats.
__device__ __forceinline__ MaxSum block_max_sum(MaxSum x, float* shared) {
  float* shared_max = shared;
  float* shared_sum = shared + kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  x = warp_max_sum(x);
  if (lane == 0) {
    shared_max[warp] = x.max;
    shared_sum[warp] = x.sum;
  }
  __syncthreads();
  x = lane < warps ? MaxSum{shared_max[lane], shared_sum[lane]} : MaxSum{-FLT_MAX, 0.0f};
  x = warp_max_sum(x);
  __syncthreads();
  return x;
}

// ---- Kernels ------------------------------------------------------------------------------

// losses is (N), dlogits (N,V), logits (N,V), targets (N); dlogits may be logits. Per row:
// pass 1 reads the row once for the max m and s = sum_j exp(logit_j - m) (online, then the
// block's union), loss = log(s) + m - logit[target]; pass 2 reads the row again and writes
// dlogits = scale * (exp(logit - m) / s - onehot(target)). A target outside [0, V) contributes
// 0 to the loss and no onehot, as the CPU steps with vocab_start 0.
template <bool kVector, typename T>
__global__ void fused_cross_entropy_kernel(float* losses, T* dlogits, const T* logits,
                                           const int32_t* targets, float scale, int64_t n,
                                           int64_t v) {
  STRATA_SHARED(float, shared, [2 * kWarpSize]);
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const T* row = logits + i * v;
    T* drow = dlogits + i * v;
    const int64_t column = shard_column(targets[i], 0, v);
    // Read before the barriers of block_max_sum, so before any thread writes the row.
    const float target_logit = threadIdx.x == 0 && column >= 0 ? to_float(row[column]) : 0.0f;
    MaxSum state{-FLT_MAX, 0.0f};
    for_each_in_row<kVector>(row, v, [&](int64_t, float x) { max_sum_add(state, x); });
    state = block_max_sum(state, shared);
    if (threadIdx.x == 0) losses[i] = logf(state.sum) + state.max - target_logit;
    // block_max_sum ends with a barrier; this one keeps pass 1's reads before pass 2's writes
    // on its own, whatever the reduction does.
    __syncthreads();
    write_row_gradient<kVector>(drow, row, v, state.max, 1.0f / state.sum, column, scale);
  }
}

// maxes is (N), logits (N,V).
template <bool kVector, typename T>
__global__ void row_max_kernel(float* maxes, const T* logits, int64_t n, int64_t v) {
  STRATA_SHARED(float, shared, [kWarpSize]);
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    float max = -INFINITY;
    for_each_in_row<kVector>(logits + i * v, v, [&](int64_t, float x) { max = fmaxf(max, x); });
    max = block_max(max, shared);
    if (threadIdx.x == 0) maxes[i] = max;
  }
}

// sums is (N), targets_logit (N), logits (N,V), maxes (N, the max over all shards), targets (N):
// sums = sum_j exp(logit_j - max); targets_logit = logit[target - vocab_start] in the shard, else
// 0.
template <bool kVector, typename T>
__global__ void cross_entropy_partials_kernel(float* sums, float* targets_logit, const T* logits,
                                              const float* maxes, const int32_t* targets,
                                              int64_t vocab_start, int64_t n, int64_t v) {
  STRATA_SHARED(float, shared, [kWarpSize]);
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const T* row = logits + i * v;
    const float max = maxes[i];
    float sum = 0.0f;
    for_each_in_row<kVector>(row, v, [&](int64_t, float x) { sum += expf(x - max); });
    sum = block_sum(sum, shared);
    if (threadIdx.x == 0) {
      sums[i] = sum;
      const int64_t column = shard_column(targets[i], vocab_start, v);
      targets_logit[i] = column >= 0 ? to_float(row[column]) : 0.0f;
    }
  }
}

// losses, sums, maxes, targets_logit are (N): losses = log(sums) + maxes - targets_logit.
__global__ void cross_entropy_losses_kernel(float* losses, const float* sums, const float* maxes,
                                            const float* targets_logit, int64_t n) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    losses[i] = logf(sums[i]) + maxes[i] - targets_logit[i];
  }
}

// dlogits is (N,V), logits (N,V), maxes (N), sums (N), targets (N); dlogits may be logits.
// dlogits = scale * (exp(logit - max) / sum - onehot(target - vocab_start)).
template <bool kVector, typename T>
__global__ void cross_entropy_backward_kernel(T* dlogits, const T* logits, const float* maxes,
                                              const float* sums, const int32_t* targets,
                                              int64_t vocab_start, float scale, int64_t n,
                                              int64_t v) {
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const int64_t column = shard_column(targets[i], vocab_start, v);
    write_row_gradient<kVector>(dlogits + i * v, logits + i * v, v, maxes[i], 1.0f / sums[i],
                                column, scale);
  }
}

// ---- Launch helpers -------------------------------------------------------------------------

// Rows of v elements starting at each pointer are all 16-byte aligned.
template <typename T>
bool rows_aligned16(int64_t v, const void* a, const void* b = nullptr) {
  return v % Packed128<T>::kSize == 0 && is_aligned16(a) && (b == nullptr || is_aligned16(b));
}

int row_blocks(int64_t n) { return static_cast<int>(std::min(n, kMaxBlocks)); }

void check_sizes(int64_t n, int64_t v) {
  checked_int(n, "n (rows of logits)");
  checked_int(v, "v (vocabulary shard)");
}

}  // namespace

template <typename T>
void fused_cross_entropy(Context& ctx, float* losses, T* dlogits, const T* logits,
                         const int32_t* targets, float scale, int64_t n, int64_t v) {
  check_sizes(n, v);
  if (v == 0) throw std::invalid_argument("v = 0: a row of logits needs at least one element");
  if (n == 0) return;
  if (rows_aligned16<T>(v, logits, dlogits)) {
    STRATA_LAUNCH(row_blocks(n), kBlockSize, 0, ctx.stream(), fused_cross_entropy_kernel<true>)
    (losses, dlogits, logits, targets, scale, n, v);
  } else {
    STRATA_LAUNCH(row_blocks(n), kBlockSize, 0, ctx.stream(), fused_cross_entropy_kernel<false>)
    (losses, dlogits, logits, targets, scale, n, v);
  }
  STRATA_CUDA_CHECK_LAUNCH();
}

template <typename T>
void row_max(Context& ctx, float* maxes, const T* logits, int64_t n, int64_t v) {
  check_sizes(n, v);
  if (n == 0) return;
  if (rows_aligned16<T>(v, logits)) {
    STRATA_LAUNCH(row_blocks(n), kBlockSize, 0, ctx.stream(), row_max_kernel<true>)
    (maxes, logits, n, v);
  } else {
    STRATA_LAUNCH(row_blocks(n), kBlockSize, 0, ctx.stream(), row_max_kernel<false>)
    (maxes, logits, n, v);
  }
  STRATA_CUDA_CHECK_LAUNCH();
}

template <typename T>
void cross_entropy_partials(Context& ctx, float* sums, float* targets_logit, const T* logits,
                            const float* maxes, const int32_t* targets, int64_t vocab_start,
                            int64_t n, int64_t v) {
  check_sizes(n, v);
  if (n == 0) return;
  if (rows_aligned16<T>(v, logits)) {
    STRATA_LAUNCH(row_blocks(n), kBlockSize, 0, ctx.stream(), cross_entropy_partials_kernel<true>)
    (sums, targets_logit, logits, maxes, targets, vocab_start, n, v);
  } else {
    STRATA_LAUNCH(row_blocks(n), kBlockSize, 0, ctx.stream(), cross_entropy_partials_kernel<false>)
    (sums, targets_logit, logits, maxes, targets, vocab_start, n, v);
  }
  STRATA_CUDA_CHECK_LAUNCH();
}

void cross_entropy_losses(Context& ctx, float* losses, const float* sums, const float* maxes,
                          const float* targets_logit, int64_t n) {
  checked_int(n, "n (rows of logits)");
  if (n == 0) return;
  const int blocks = static_cast<int>(std::min(ceil_div(n, kBlockSize), kMaxBlocks));
  STRATA_LAUNCH(blocks, kBlockSize, 0, ctx.stream(), cross_entropy_losses_kernel)
  (losses, sums, maxes, targets_logit, n);
  STRATA_CUDA_CHECK_LAUNCH();
}

template <typename T>
void cross_entropy_backward(Context& ctx, T* dlogits, const T* logits, const float* maxes,
                            const float* sums, const int32_t* targets, int64_t vocab_start,
                            float scale, int64_t n, int64_t v) {
  check_sizes(n, v);
  if (n == 0 || v == 0) return;
  if (rows_aligned16<T>(v, logits, dlogits)) {
    STRATA_LAUNCH(row_blocks(n), kBlockSize, 0, ctx.stream(), cross_entropy_backward_kernel<true>)
    (dlogits, logits, maxes, sums, targets, vocab_start, scale, n, v);
  } else {
    STRATA_LAUNCH(row_blocks(n), kBlockSize, 0, ctx.stream(), cross_entropy_backward_kernel<false>)
    (dlogits, logits, maxes, sums, targets, vocab_start, scale, n, v);
  }
  STRATA_CUDA_CHECK_LAUNCH();
}

#define STRATA_INSTANTIATE(T)                                                                 \
  template void fused_cross_entropy<T>(Context&, float*, T*, const T*, const int32_t*, float, \
                                       int64_t, int64_t);                                     \
  template void row_max<T>(Context&, float*, const T*, int64_t, int64_t);                     \
  template void cross_entropy_partials<T>(Context&, float*, float*, const T*, const float*,   \
                                          const int32_t*, int64_t, int64_t, int64_t);         \
  template void cross_entropy_backward<T>(Context&, T*, const T*, const float*, const float*, \
                                          const int32_t*, int64_t, float, int64_t, int64_t);
STRATA_INSTANTIATE(float)
STRATA_INSTANTIATE(bf16)
#undef STRATA_INSTANTIATE

}  // namespace strata::cuda
