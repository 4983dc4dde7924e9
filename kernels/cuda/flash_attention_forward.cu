// Causal attention, path 2, forward (kernels/cuda/kernels.hpp): FlashAttention-2's loop order
// (Dao 2023, Algorithm 1). One block per (head, batch, 64-query tile) walks the key tiles from
// the first to the diagonal one (the tiles above the diagonal are all masked and skipped) and
// keeps, per query row, the running max m, the running sum l and the (16,D) output accumulator
// of each warp in fp32; the (T,T) scores never reach global memory. Tiling and the strip
// products: flash_attention.cuh.
//
// K and V tiles are double-buffered: the next key tile is copied (cp.async) while the current
// one is used.
//
// Throughput (bf16, HS 128, T 8192; expected, not measured: this was written without a GPU).
// Per key tile a warp reads the whole K and V tiles from shared memory as wmma fragments
// (2 x 64 x 128 x 2 B = 32 KB) and moves its scores and probabilities through shared memory
// (about 16 KB) for 2 x 2 x 16 x 64 x 128 = 0.5 MFLOP: about 11 FLOP per byte. At 128 B per clock
// per SM that caps the kernel near 1400 FLOP/clock/SM, about 370 TFLOP/s on 132 SMs at 1.98 GHz,
// under the rate of mma.sync (what wmma compiles to; wgmma, Hopper's faster path, is not
// reachable through wmma). The softmax's exponentials, the barriers and 2 blocks per SM at HS 128
// (registers) come on top: expect 150-220 TFLOP/s of causal work, 20-28% of cuBLAS's bf16 rate on
// H200 (about 790 TFLOP/s). 40% needs the scores and probabilities kept in registers (mma.sync
// with the documented m16n8k16 fragment layouts, as FlashAttention-2 does, so that only K and V
// cross shared memory) and 32-row strips per warp to halve that traffic, or wgmma. HS 64 has
// about 8 FLOP per byte and should run at about 3/4 of the HS 128 rate.

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/context.hpp"
#include "kernels/cuda/flash_attention.cuh"
#include "kernels/cuda/kernels.hpp"

namespace strata::cuda {
namespace flash {
namespace {

// The online softmax of one key tile for the warp's 16 query rows (Dao 2023, Algorithm 1, lines
// 9-10), in base 2: with x_j = scale * log2(e) * q.k_j, m the running max of x and l the running
// sum of 2^(x - m),
//   m_new = max(m, max_j x_j),   p_j = 2^(x_j - m_new),   l = 2^(m - m_new) l + sum_j p_j,
// and factor[r] = 2^(m - m_new), by which the caller rescales row r's output accumulator. Keys
// past the row's own position (the causal mask) or past T are left out: p_j = 0. scores: the
// warp's (16,64) strip, row stride kScoreLd; probs: the warp's (16,64) strip of T, kProbLd; row
// r of the strip is query first_query + r, column jj key first_key + jj.
// Two lanes per row, r = lane / 2, each over 32 of the 64 columns, interleaved (column 2c +
// lane % 2), so that a lane's addresses are compile-time offsets from its own base; rows r and
// r + 8 share banks (row stride 68 = 4 mod 32): a 2-way conflict on these reads. The scores are
// read twice (max, then exponentials) rather than held in 32 registers, and the loops unrolled
// by 8, not 32: a full unroll keeps dozens of exponentials in flight and cost about 70 registers
// at HS 128 (ptxas -v). Both lanes of a row end with the same m and l.
template <typename T>
__device__ __forceinline__ void online_softmax_tile(const float* scores, T* probs, float* factor,
                                                    float& m, float& l, int first_query,
                                                    int first_key, int t, float scale_log2) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int r = lane / 2;
  const int half = lane % 2;
  // Columns jj <= last are kept: key <= query (causal) and key < T. Rows past T (padding) keep
  // the keys < T, which gives them finite values that are never stored.
  const int last = min(first_query + r, t - 1) - first_key;
  const float* row_scores = scores + r * kScoreLd + half;
  T* row_probs = probs + r * kProbLd<T> + half;
  float tile_max = -INFINITY;
#pragma unroll 8
  for (int c = 0; c < kTile / 2; ++c) {
    const int jj = 2 * c + half;
    if (jj <= last) tile_max = fmaxf(tile_max, scale_log2 * row_scores[2 * c]);
  }
  tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
  const float m_new = fmaxf(m, tile_max);
  // m_new = -inf only while the row has met no kept key, and then l and the accumulator are 0:
  // rescale by 1 rather than form 2^(-inf - -inf). (It does not happen here: a row's first tile
  // holds key 0, which every row keeps.)
  const float rescale = m_new == -INFINITY ? 1.0f : exp2f(m - m_new);
  float sum = 0.0f;
#pragma unroll 8
  for (int c = 0; c < kTile / 2; ++c) {
    const int jj = 2 * c + half;
    // A kept score is finite and m_new >= it: the exponent is finite and <= 0.
    const float p = jj <= last ? exp2f(scale_log2 * row_scores[2 * c] - m_new) : 0.0f;
    sum += p;
    row_probs[2 * c] = from_float<T>(p);
  }
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);  // a + b = b + a: both lanes get the same bits
  l = rescale * l + sum;
  m = m_new;
  if (half == 0) factor[r] = rescale;
}

// Shared memory of the forward, in bytes from the start. bf16 keeps Q in registers after the
// first load, so its Q tile lies under the score strips. K and V have two buffers each: the next
// key tile is copied into one while the other is used.
template <typename T, int D>
struct ForwardLayout {
  static constexpr bool kQInRegisters = kOperandsInRegisters<T>;
  static_assert(!kQInRegisters || kTileBytes<T, D> <= kScoreBytes);
  static constexpr int kQ = 0;                                          // (64,D) T
  static constexpr int kScores = kQInRegisters ? 0 : kTileBytes<T, D>;  // (64,64) fp32
  static constexpr int kProbs = kScores + kScoreBytes;                  // (64,64) T
  static constexpr int kK = kProbs + kProbBytes<T>;                     // 2 x (64,D) T
  static constexpr int kV = kK + 2 * kTileBytes<T, D>;                  // 2 x (64,D) T
  static constexpr int kFactors = kV + 2 * kTileBytes<T, D>;            // (64) fp32
  static constexpr int kBytes = kFactors + kRowValueBytes;
};

// The blocks per SM the bf16 forward is compiled for (__launch_bounds__), which caps registers
// at 65536 / (128 * blocks): as many as the shared memory allows (94, 78, 70, 62 and 46 KB per
// block at HS 128, 96, 80, 64, 32 give 2, 2, 3, 3, 4 blocks), and ptxas -v then shows no spills
// (216, 170, 160, 140, 109 registers). Float, the parity variant, needs up to 199 KB of shared
// memory (HS 128) and is given one block.
template <typename T, int D>
constexpr int forward_blocks_per_sm() {
  if (!std::is_same_v<T, bf16>) return 1;
  if (D > 80) return 2;
  if (D > 32) return 3;
  return 4;
}

// out (B,T,NH*D), lse (B,NH,T), qkv (B,T,3*NH*D). Grid (NH, B, ceil(T/64)), 128 threads: block
// (h, b, query tile), warp w owns queries q0 + 16w .. q0 + 16w + 15. The query tiles run from
// the last (the most key tiles) to the first, so the longest blocks start first.
template <typename T, int D>
__global__ void __launch_bounds__(kThreads, forward_blocks_per_sm<T, D>())
    flash_attention_forward_kernel(T* out, float* lse, const T* qkv, int t, int nh,
                                   float scale_log2) {
  using Layout = ForwardLayout<T, D>;
  STRATA_DYNAMIC_SHARED(unsigned char, shared, 128);
  T* s_q = reinterpret_cast<T*>(shared + Layout::kQ);
  float* s_scores = reinterpret_cast<float*>(shared + Layout::kScores);
  T* s_probs = reinterpret_cast<T*>(shared + Layout::kProbs);
  T* s_k = reinterpret_cast<T*>(shared + Layout::kK);  // buffer 1 is kBufferElements further
  T* s_v = reinterpret_cast<T*>(shared + Layout::kV);
  constexpr int kBufferElements = kTileBytes<T, D> / static_cast<int>(sizeof(T));
  float* s_factors = reinterpret_cast<float*>(shared + Layout::kFactors);

  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int h = static_cast<int>(blockIdx.x);
  const int b = static_cast<int>(blockIdx.y);
  const int q_tile = static_cast<int>(gridDim.z - 1 - blockIdx.z);
  const int q0 = q_tile * kTile;
  const int c = nh * D;
  const int64_t c3 = 3 * int64_t{c};
  const T* q_head = qkv + int64_t{b} * t * c3 + h * D;  // row 0 of head h's Q in batch b
  const T* k_head = q_head + c;
  const T* v_head = q_head + 2 * c;

  load_tile<T, D>(s_q, q_head + q0 * c3, c3, t - q0);
  load_tile<T, D>(s_k, k_head, c3, t);  // key tile 0 into buffer 0, waited for with Q
  load_tile<T, D>(s_v, v_head, c3, t);
  wait_for_tiles();
  __syncthreads();
  StripOperand<T, D> q;
  q.load(s_q + warp * kStripRows * kTileLd<T, D>);
  __syncthreads();  // bf16: every warp holds its Q fragments before the strips over s_q change

  float* scores = s_scores + warp * kStripRows * kScoreLd;
  T* probs = s_probs + warp * kStripRows * kProbLd<T>;
  float* factor = s_factors + warp * kStripRows;
  const int first_query = q0 + warp * kStripRows;
  StripAccumulator<T, D> acc;
  acc.zero();
  acc.map_rows(scores);
  float m = -INFINITY;  // of row lane / 2 of the strip, in base 2
  float l = 0.0f;

  for (int k_tile = 0; k_tile <= q_tile; ++k_tile) {
    const int k0 = k_tile * kTile;
    const int buffer = k_tile % 2;
    const T* k_now = s_k + buffer * kBufferElements;
    const T* v_now = s_v + buffer * kBufferElements;
    // Key tile k_tile is in buffer k_tile % 2: its copies are the only ones in flight. After the
    // barrier they have landed for every thread, and every warp is done with tile k_tile - 1,
    // whose buffers then receive tile k_tile + 1 while this one is used.
    wait_for_tiles();
    __syncthreads();
    if (k_tile < q_tile) {
      const int next = (1 - buffer) * kBufferElements;
      load_tile<T, D>(s_k + next, k_head + (k0 + kTile) * c3, c3, t - k0 - kTile);
      load_tile<T, D>(s_v + next, v_head + (k0 + kTile) * c3, c3, t - k0 - kTile);
    }
    strip_scores<D>(scores, q, k_now);  // S (16,64) = Q_strip K^T, unscaled
    __syncwarp();
    online_softmax_tile(scores, probs, factor, m, l, first_query, k0, t, scale_log2);
    __syncwarp();
    acc.scale_rows(factor);         // O = 2^(m - m_new) O
    acc.add_product(probs, v_now);  // O += P V
  }

  // out = O / l; lse = ln(2^m l) = m ln 2 + ln l, the natural log-sum-exp of the scaled scores.
  // Every row keeps key 0, so l >= 2^(x_0 - m) > 0.
  __syncwarp();  // every lane has read factor (scale_rows) before it changes
  if (lane % 2 == 0) {
    const int r = lane / 2;
    factor[r] = 1.0f / l;
    const int i = first_query + r;
    if (i < t) lse[(int64_t{b} * nh + h) * t + i] = m * kLn2 + logf(l);
  }
  __syncwarp();
  acc.scale_rows(factor);
  __syncthreads();  // every warp is done reading s_k (no copies are in flight), which stages out
  acc.store(scores, s_k + warp * kStripRows * kTileLd<T, D>,
            out + (int64_t{b} * t + first_query) * c + h * D, c, t - first_query);
}

template <typename T, int D>
void launch_forward(Context& ctx, T* out, float* lse, const T* qkv, const GridSizes& s,
                    float scale_log2) {
  constexpr int kBytes = ForwardLayout<T, D>::kBytes;
  static_assert(kBytes <= kMaxSharedBytes);
  STRATA_CUDA_CHECK(cudaFuncSetAttribute(flash_attention_forward_kernel<T, D>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes));
  const dim3 grid(s.nh, s.b, s.tiles);
  STRATA_LAUNCH(grid, kThreads, kBytes, ctx.stream(), flash_attention_forward_kernel<T, D>)
  (out, lse, qkv, s.t, s.nh, scale_log2);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace
}  // namespace flash

template <typename T>
void flash_attention_forward(Context& ctx, T* out, float* lse, const T* qkv, int64_t b, int64_t t,
                             int64_t nh, int64_t hs) {
  flash::dispatch_head_size(hs, [](auto) {});  // an unsupported head size throws, even if empty
  if (b <= 0 || t <= 0 || nh <= 0) return;
  const flash::GridSizes sizes = flash::checked_grid_sizes(b, t, nh, hs);
  flash::check_aligned(qkv, "qkv");
  flash::check_aligned(out, "out");
  const float scale_log2 = flash::softmax_scale_log2(hs);
  flash::dispatch_head_size(hs, [&](auto d) {
    flash::launch_forward<T, decltype(d)::value>(ctx, out, lse, qkv, sizes, scale_log2);
  });
}

template void flash_attention_forward<float>(Context&, float*, float*, const float*, int64_t,
                                             int64_t, int64_t, int64_t);
template void flash_attention_forward<bf16>(Context&, bf16*, float*, const bf16*, int64_t, int64_t,
                                            int64_t, int64_t);

}  // namespace strata::cuda
