// Token and position embeddings over a vocabulary shard on the GPU, as
// kernels/cpu/embedding.cpp (Megatron's vocabulary-parallel embedding: the caller sums the
// shards' outputs).
//
// The backward is deterministic without atomics. The scatter-add dwte[token] += dout row would
// race where a token repeats, so instead (as llm.c's encoder_backward, with a sort in place of
// its host-side bucketing):
//  1. key each row i = b*T + t by its shard row (V for a token outside the shard) and sort the
//     (key, i) pairs with CUB's radix sort, which is stable: equal keys keep i ascending;
//  2. mark where each run of equal keys starts and compact the starts (cub::DeviceSelect);
//  3. one block per run (grid-striding over runs), one thread per channel (or 16-byte pack of
//     channels), sums the run's dout rows in i order in fp32 and adds the sum to dwte once.
// dwpe needs no sort: one thread per (t, channel) sums over b in order.

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_select.cuh>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.hpp"

namespace strata::cuda {
namespace {

constexpr int kBlockSize = 256;
// Enough blocks to fill any current GPU many times over; larger sizes grid-stride.
constexpr int64_t kMaxBlocks = int64_t{1} << 16;
// The carving of one scratch allocation into arrays keeps each on its own 256-byte boundary
// (what cudaMalloc guarantees, and what CUB expects of its temporary storage).
constexpr size_t kScratchAlignment = 256;

// out is (N,C) with N = B*T, tokens (N), wte (V,C), wpe (T,C) or null. Pack p covers kWidth
// channels of row i = p / (C / kWidth); C is a multiple of kWidth. The sum is taken in fp32 and
// rounded to T once.
template <typename T, int kWidth>
__global__ void embedding_forward_kernel(T* out, const int32_t* tokens, const T* wte, const T* wpe,
                                         int64_t vocab_start, int64_t v, int64_t n, int64_t t,
                                         int64_t c) {
  const int64_t row_packs = c / kWidth;
  const int64_t packs = n * row_packs;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < packs;
       p += stride) {
    const int64_t i = p / row_packs;
    const int64_t j = (p - i * row_packs) * kWidth;
    const int64_t row = static_cast<int64_t>(tokens[i]) - vocab_start;
    float y[kWidth] = {};
    if (row >= 0 && row < v) load_floats(y, wte + row * c + j);
    if (wpe != nullptr) {
      float position[kWidth];
      load_floats(position, wpe + (i % t) * c + j);
      for (int k = 0; k < kWidth; ++k) y[k] += position[k];
    }
    store_floats(out + i * c + j, y);
  }
}

// Step 1 of the backward. tokens (N) in, keys (N) and indices (N) out: keys[i] = the shard row
// of tokens[i], or V outside the shard (so those sort last, as one run); indices[i] = i.
__global__ void embedding_sort_keys_kernel(uint32_t* keys, int32_t* indices, const int32_t* tokens,
                                           int64_t vocab_start, int64_t v, int n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const int64_t row = static_cast<int64_t>(tokens[i]) - vocab_start;
    keys[i] = static_cast<uint32_t>(row >= 0 && row < v ? row : v);
    indices[i] = static_cast<int32_t>(i);
  }
}

// Step 2. sorted_keys (N) in, is_start (N) out: 1 where a run of equal keys begins.
__global__ void embedding_run_starts_kernel(uint8_t* is_start, const uint32_t* sorted_keys, int n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    is_start[i] = i == 0 || sorted_keys[i] != sorted_keys[i - 1] ? 1 : 0;
  }
}

// Step 3. dwte is (V,C) fp32, dout (N,C); sorted_keys (N) and sorted_rows (N) are the sorted
// pairs (shard row, dout row); run_starts (*num_runs) index the first pair of each run. Block b
// takes runs b, b + gridDim.x, ...; its threads take packs of kWidth channels (C a multiple of
// kWidth). Each channel's sum runs over the run's dout rows in ascending order (the sort is
// stable), so the bits do not depend on scheduling. The run keyed V (tokens outside the shard)
// is skipped.
template <typename T, int kWidth>
__global__ void embedding_backward_wte_kernel(float* dwte, const T* dout,
                                              const uint32_t* sorted_keys,
                                              const int32_t* sorted_rows, const int32_t* run_starts,
                                              const int32_t* num_runs, int n, int64_t v,
                                              int64_t c) {
  const int runs = *num_runs;
  const int64_t row_packs = c / kWidth;
  for (int64_t run = blockIdx.x; run < runs; run += gridDim.x) {
    const int begin = run_starts[run];
    const int end = run + 1 < runs ? run_starts[run + 1] : n;
    const int64_t key = sorted_keys[begin];
    if (key == v) continue;
    for (int64_t q = threadIdx.x; q < row_packs; q += blockDim.x) {
      const int64_t j = q * kWidth;
      float sum[kWidth] = {};
      for (int k = begin; k < end; ++k) {
        float dy[kWidth];
        load_floats(dy, dout + static_cast<int64_t>(sorted_rows[k]) * c + j);
        for (int w = 0; w < kWidth; ++w) sum[w] += dy[w];
      }
      float* dw = dwte + key * c + j;
      for (int w = 0; w < kWidth; ++w) dw[w] += sum[w];
    }
  }
}

// dwpe is (T,C) fp32, dout (B,T,C). Pack p covers kWidth channels of position
// t = p / (C / kWidth); the sum over b runs in order, then is added to dwpe once.
template <typename T, int kWidth>
__global__ void embedding_backward_wpe_kernel(float* dwpe, const T* dout, int64_t b, int64_t t,
                                              int64_t c) {
  const int64_t row_packs = c / kWidth;
  const int64_t packs = t * row_packs;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < packs;
       p += stride) {
    const int64_t ti = p / row_packs;
    const int64_t j = (p - ti * row_packs) * kWidth;
    float sum[kWidth] = {};
    for (int64_t bi = 0; bi < b; ++bi) {
      float dy[kWidth];
      load_floats(dy, dout + (bi * t + ti) * c + j);
      for (int w = 0; w < kWidth; ++w) sum[w] += dy[w];
    }
    float* dw = dwpe + ti * c + j;
    for (int w = 0; w < kWidth; ++w) dw[w] += sum[w];
  }
}

// Blocks for count work items of kBlockSize threads: at least one, at most kMaxBlocks.
int blocks_for(int64_t count) {
  return static_cast<int>(std::clamp(ceil_div(count, kBlockSize), int64_t{1}, kMaxBlocks));
}

size_t align_up(size_t bytes) {
  return (bytes + kScratchAlignment - 1) / kScratchAlignment * kScratchAlignment;
}

// The bits a radix sort needs for keys in [0, max_key]: at least 1.
int key_bits(int64_t max_key) {
  int bits = 1;
  while ((int64_t{1} << bits) <= max_key) ++bits;
  return bits;
}

// The backward's arrays in one scratch allocation, each start 256-byte aligned.
struct SortScratch {
  uint32_t* keys = nullptr;         // (N) shard rows by dout row, V outside the shard
  uint32_t* sorted_keys = nullptr;  // (N)
  int32_t* indices = nullptr;       // (N) 0 .. N-1: the dout rows, and positions in the sort
  int32_t* sorted_rows = nullptr;   // (N) dout rows in key order, ascending within a key
  uint8_t* is_start = nullptr;      // (N)
  int32_t* run_starts = nullptr;    // (runs)
  int32_t* num_runs = nullptr;      // (1)
  void* cub_temp = nullptr;         // shared by the sort and the selection, which run in turn
  size_t cub_temp_bytes = 0;
};

SortScratch carve_scratch(Context& ctx, int n, int end_bit) {
  // The sizes CUB needs: with null temporary storage the calls only compute them.
  size_t sort_bytes = 0;
  STRATA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, sort_bytes, static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), n, 0, end_bit,
      ctx.stream()));
  size_t select_bytes = 0;
  STRATA_CUDA_CHECK(cub::DeviceSelect::Flagged(
      nullptr, select_bytes, static_cast<const int32_t*>(nullptr),
      static_cast<const uint8_t*>(nullptr), static_cast<int32_t*>(nullptr),
      static_cast<int32_t*>(nullptr), n, ctx.stream()));

  const size_t count = static_cast<size_t>(n);
  const size_t keys_bytes = align_up(count * sizeof(uint32_t));
  const size_t rows_bytes = align_up(count * sizeof(int32_t));
  const size_t flags_bytes = align_up(count * sizeof(uint8_t));
  const size_t num_runs_bytes = align_up(sizeof(int32_t));
  const size_t temp_bytes = align_up(std::max(sort_bytes, select_bytes));
  std::byte* base =
      ctx.scratch(2 * keys_bytes + 3 * rows_bytes + flags_bytes + num_runs_bytes + temp_bytes);

  SortScratch s;
  const auto take = [&base](size_t bytes) {
    std::byte* start = base;
    base += bytes;
    return start;
  };
  s.keys = reinterpret_cast<uint32_t*>(take(keys_bytes));
  s.sorted_keys = reinterpret_cast<uint32_t*>(take(keys_bytes));
  s.indices = reinterpret_cast<int32_t*>(take(rows_bytes));
  s.sorted_rows = reinterpret_cast<int32_t*>(take(rows_bytes));
  s.run_starts = reinterpret_cast<int32_t*>(take(rows_bytes));
  s.is_start = reinterpret_cast<uint8_t*>(take(flags_bytes));
  s.num_runs = reinterpret_cast<int32_t*>(take(num_runs_bytes));
  s.cub_temp = take(temp_bytes);
  s.cub_temp_bytes = temp_bytes;
  return s;
}

// Threads per block for the per-run sums: one per pack of channels, in whole warps, at most
// kBlockSize (wider rows loop).
int run_block_size(int64_t row_packs) {
  return static_cast<int>(
      std::min<int64_t>(ceil_div(row_packs, kWarpSize) * kWarpSize, kBlockSize));
}

template <typename T>
void embedding_backward_wte(Context& ctx, float* dwte, const T* dout, const int32_t* tokens,
                            int64_t vocab_start, int64_t v, int64_t n, int64_t c) {
  const int count = checked_int(n, "B*T (tokens in the embedding backward)");
  checked_int(v, "V (the vocabulary shard of the embedding backward)");
  const int end_bit = key_bits(v);
  SortScratch s = carve_scratch(ctx, count, end_bit);

  STRATA_LAUNCH(blocks_for(count), kBlockSize, 0, ctx.stream(), embedding_sort_keys_kernel)
  (s.keys, s.indices, tokens, vocab_start, v, count);
  STRATA_CUDA_CHECK_LAUNCH();
  size_t sort_bytes = s.cub_temp_bytes;
  STRATA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(s.cub_temp, sort_bytes, s.keys, s.sorted_keys,
                                                    s.indices, s.sorted_rows, count, 0, end_bit,
                                                    ctx.stream()));
  STRATA_LAUNCH(blocks_for(count), kBlockSize, 0, ctx.stream(), embedding_run_starts_kernel)
  (s.is_start, s.sorted_keys, count);
  STRATA_CUDA_CHECK_LAUNCH();
  // The positions i with is_start[i] set, in order: indices is still 0 .. N-1 (the sort reads
  // its inputs without changing them).
  size_t select_bytes = s.cub_temp_bytes;
  STRATA_CUDA_CHECK(cub::DeviceSelect::Flagged(s.cub_temp, select_bytes, s.indices, s.is_start,
                                               s.run_starts, s.num_runs, count, ctx.stream()));

  // At most min(N, V + 1) runs: keys take V + 1 values.
  const int64_t max_runs = std::min<int64_t>(n, v + 1);
  const int grid = static_cast<int>(std::min(max_runs, kMaxBlocks));
  constexpr int kPack = Packed128<T>::kSize;
  if (c % kPack == 0 && is_aligned16(dout)) {
    STRATA_LAUNCH(grid, run_block_size(c / kPack), 0, ctx.stream(),
                  embedding_backward_wte_kernel<T, kPack>)
    (dwte, dout, s.sorted_keys, s.sorted_rows, s.run_starts, s.num_runs, count, v, c);
  } else {
    STRATA_LAUNCH(grid, run_block_size(c), 0, ctx.stream(), embedding_backward_wte_kernel<T, 1>)
    (dwte, dout, s.sorted_keys, s.sorted_rows, s.run_starts, s.num_runs, count, v, c);
  }
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <typename T>
void embedding_forward(Context& ctx, T* out, const int32_t* tokens, const T* wte, const T* wpe,
                       int64_t vocab_start, int64_t v, int64_t b, int64_t t, int64_t c) {
  if (b <= 0 || t <= 0 || c <= 0) return;
  const int64_t n = b * t;
  constexpr int kPack = Packed128<T>::kSize;
  if (c % kPack == 0 && is_aligned16(out) && is_aligned16(wte) &&
      (wpe == nullptr || is_aligned16(wpe))) {
    STRATA_LAUNCH(blocks_for(n * c / kPack), kBlockSize, 0, ctx.stream(),
                  embedding_forward_kernel<T, kPack>)
    (out, tokens, wte, wpe, vocab_start, v, n, t, c);
  } else {
    STRATA_LAUNCH(blocks_for(n * c), kBlockSize, 0, ctx.stream(), embedding_forward_kernel<T, 1>)
    (out, tokens, wte, wpe, vocab_start, v, n, t, c);
  }
  STRATA_CUDA_CHECK_LAUNCH();
}

template <typename T>
void embedding_backward(Context& ctx, float* dwte, float* dwpe, const T* dout,
                        const int32_t* tokens, int64_t vocab_start, int64_t v, int64_t b, int64_t t,
                        int64_t c) {
  if (b <= 0 || t <= 0 || c <= 0) return;
  const int64_t n = b * t;
  if (v > 0) embedding_backward_wte(ctx, dwte, dout, tokens, vocab_start, v, n, c);
  if (dwpe != nullptr) {
    constexpr int kPack = Packed128<T>::kSize;
    if (c % kPack == 0 && is_aligned16(dout)) {
      STRATA_LAUNCH(blocks_for(t * c / kPack), kBlockSize, 0, ctx.stream(),
                    embedding_backward_wpe_kernel<T, kPack>)
      (dwpe, dout, b, t, c);
    } else {
      STRATA_LAUNCH(blocks_for(t * c), kBlockSize, 0, ctx.stream(),
                    embedding_backward_wpe_kernel<T, 1>)
      (dwpe, dout, b, t, c);
    }
    STRATA_CUDA_CHECK_LAUNCH();
  }
}

template void embedding_forward<float>(Context&, float*, const int32_t*, const float*, const float*,
                                       int64_t, int64_t, int64_t, int64_t, int64_t);
template void embedding_forward<bf16>(Context&, bf16*, const int32_t*, const bf16*, const bf16*,
                                      int64_t, int64_t, int64_t, int64_t, int64_t);
template void embedding_backward<float>(Context&, float*, float*, const float*, const int32_t*,
                                        int64_t, int64_t, int64_t, int64_t, int64_t);
template void embedding_backward<bf16>(Context&, float*, float*, const bf16*, const int32_t*,
                                       int64_t, int64_t, int64_t, int64_t, int64_t);

}  // namespace strata::cuda
