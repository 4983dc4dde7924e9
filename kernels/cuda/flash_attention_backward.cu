// Causal attention, path 2, backward (kernels/cuda/kernels.hpp): FlashAttention-2's backward
// (Dao 2023, Algorithm 2) split into two passes so that every gradient element is written by
// exactly one block, in a fixed order, without atomics:
//   0. D_i = sum_d dO_id O_id per query row (= sum_j P_ij dP_ij), fp32, (B,NH,T) in scratch.
//   1. one block per (head, batch, 64-key tile) walks the query tiles from the diagonal one to
//      the last and accumulates dV = P^T dO and dK = scale dS^T Q for its keys;
//   2. one block per (head, batch, 64-query tile) walks the key tiles from the first to the
//      diagonal one and accumulates dQ = scale dS K for its queries;
// both recomputing, tile by tile, S = Q K^T (unscaled), P = exp(scale S - lse) from the
// forward's lse, dP = dO V^T and dS = P (dP - D). Masked entries (key > query, or past T) have
// P = 0, hence dS = 0. Tiling and the strip products: flash_attention.cuh.

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/context.hpp"
#include "kernels/cuda/flash_attention.cuh"
#include "kernels/cuda/kernels.hpp"

namespace strata::cuda {
namespace flash {
namespace {

constexpr int kDotThreads = 256;  // 8 warps, one (b, i, h) row each
constexpr int kDotRowsPerBlock = kDotThreads / kWarpSize;

// dvec (B,NH,T) = sum_d dout[b,i,h,d] out[b,i,h,d]; dout and out (B,T,NH*HS). One warp per
// (b, i, h), taken in memory order (h fastest) so that consecutive warps read consecutive
// memory; butterfly sum (fixed order).
template <typename T>
__global__ void flash_attention_backward_dot_kernel(float* dvec, const T* dout, const T* out,
                                                    int64_t rows, int t, int nh, int hs) {
  const int64_t row = int64_t{blockIdx.x} * kDotRowsPerBlock + threadIdx.x / kWarpSize;
  if (row >= rows) return;  // the whole warp: row depends on the warp only
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int h = static_cast<int>(row % nh);
  const int64_t bt = row / nh;  // b * T + i
  const T* y = out + bt * nh * hs + h * hs;
  const T* dy = dout + bt * nh * hs + h * hs;
  float sum = 0.0f;
  for (int d = lane; d < hs; d += kWarpSize) sum += to_float(dy[d]) * to_float(y[d]);
  sum = warp_sum(sum);
  if (lane == 0) {
    const int64_t b = bt / t;
    const int64_t i = bt % t;
    dvec[(b * nh + h) * t + i] = sum;
  }
}

// Shared memory of pass 1 (dK, dV), in bytes from the start.
template <typename T, int D>
struct KeyPassLayout {
  static constexpr int kK = 0;                              // (64,D) T, this block's keys
  static constexpr int kV = kK + kTileBytes<T, D>;          // (64,D) T
  static constexpr int kQ = kV + kTileBytes<T, D>;          // (64,D) T, the query tile
  static constexpr int kDout = kQ + kTileBytes<T, D>;       // (64,D) T
  static constexpr int kScores = kDout + kTileBytes<T, D>;  // (64,64) fp32: S^T, then P^T
  static constexpr int kDprobs = kScores + kScoreBytes;     // (64,64) fp32: dP^T
  static constexpr int kProbs = kDprobs + kScoreBytes;      // (64,64) T: P^T, then dS^T
  static constexpr int kLse = kProbs + kProbBytes<T>;       // (64) fp32, lse * log2(e)
  static constexpr int kDvec = kLse + kRowValueBytes;       // (64) fp32, D
  static constexpr int kBytes = kDvec + kRowValueBytes;
};

// Shared memory of pass 2 (dQ). bf16 keeps the Q and dO strips in registers after the first
// load, so those tiles lie under the score strips.
template <typename T, int D>
struct QueryPassLayout {
  static constexpr bool kInRegisters = kOperandsInRegisters<T>;
  static_assert(!kInRegisters || kTileBytes<T, D> <= kScoreBytes);
  static constexpr int kK = 0;                           // (64,D) T, the key tile
  static constexpr int kV = kK + kTileBytes<T, D>;       // (64,D) T
  static constexpr int kScores = kV + kTileBytes<T, D>;  // (64,64) fp32: S
  static constexpr int kDprobs = kScores + kScoreBytes;  // (64,64) fp32: dP
  static constexpr int kEnd = kDprobs + kScoreBytes;
  static constexpr int kQ = kInRegisters ? kScores : kEnd;  // (64,D) T, this block's queries
  static constexpr int kDout = kInRegisters ? kDprobs : kEnd + kTileBytes<T, D>;    // (64,D) T
  static constexpr int kProbs = kInRegisters ? kEnd : kEnd + 2 * kTileBytes<T, D>;  // (64,64) T
  static constexpr int kLse = kProbs + kProbBytes<T>;  // (64) fp32, lse * log2(e)
  static constexpr int kDvec = kLse + kRowValueBytes;  // (64) fp32, D
  static constexpr int kBytes = kDvec + kRowValueBytes;
};

// The blocks per SM each pass is compiled for (__launch_bounds__, a cap of 65536 / (128 *
// blocks) registers): as many as its shared memory allows. Pass 1 (112, 96, 88, 80, 64 KB per
// block at HS 128, 96, 80, 64, 32) fits 2 blocks, 3 at HS 32; pass 2 (78, 70, 66, 62, 54 KB)
// fits 2 at HS 128, 3 at HS 64-96 and 4 at HS 32, but its bf16 Q and dO strips and dQ
// accumulator need more than 168 registers above HS 64. ptxas -v, HS 128, 96, 80, 64, 32: pass 1
// uses 251, 229, 212, 182, 127 registers, pass 2 217, 175, 168, 151, 100; no spills.
template <typename T, int D>
constexpr int key_pass_blocks_per_sm() {
  if (!std::is_same_v<T, bf16>) return 1;
  return D > 32 ? 2 : 3;
}
template <typename T, int D>
constexpr int query_pass_blocks_per_sm() {
  if (!std::is_same_v<T, bf16>) return 1;
  if (D > 64) return 2;
  return D > 32 ? 3 : 4;
}

// The shared-memory regions of a backward pass, at the byte offsets its Layout gives.
template <typename T, typename Layout>
struct BackwardShared {
  T* k;
  T* v;
  T* q;
  T* dout;
  float* scores;
  float* dprobs;
  T* probs;
  float* lse;
  float* dvec;
  __device__ explicit BackwardShared(unsigned char* shared)
      : k(reinterpret_cast<T*>(shared + Layout::kK)),
        v(reinterpret_cast<T*>(shared + Layout::kV)),
        q(reinterpret_cast<T*>(shared + Layout::kQ)),
        dout(reinterpret_cast<T*>(shared + Layout::kDout)),
        scores(reinterpret_cast<float*>(shared + Layout::kScores)),
        dprobs(reinterpret_cast<float*>(shared + Layout::kDprobs)),
        probs(reinterpret_cast<T*>(shared + Layout::kProbs)),
        lse(reinterpret_cast<float*>(shared + Layout::kLse)),
        dvec(reinterpret_cast<float*>(shared + Layout::kDvec)) {}
};

// Head h of batch b in the backward's inputs: row 0 of its Q, K and V in qkv (row stride
// 3*NH*HS), of its dO in dout (row stride NH*HS), and its lse and D rows (T each).
template <typename T>
struct BackwardHead {
  const T* q;
  const T* k;
  const T* v;
  const T* dout;
  const float* lse;
  const float* dvec;
  __device__ BackwardHead(const T* qkv, const T* dout_all, const float* lse_all,
                          const float* dvec_all, int t, int nh, int hs, int b, int h)
      : q(qkv + int64_t{b} * t * 3 * nh * hs + h * hs),
        k(q + nh * hs),
        v(q + 2 * nh * hs),
        dout(dout_all + int64_t{b} * t * nh * hs + h * hs),
        lse(lse_all + (int64_t{b} * nh + h) * t),
        dvec(dvec_all + (int64_t{b} * nh + h) * t) {}
};

// Pass 1. dqkv (B,T,3*NH*D): writes the dK and dV column blocks of head h; dout (B,T,NH*D),
// qkv (B,T,3*NH*D), lse and dvec (B,NH,T). Grid (NH, B, ceil(T/64)), 128 threads: block
// (h, b, key tile), warp w owns keys k0 + 16w .. k0 + 16w + 15. Key tile 0 meets every query
// tile, so the tiles run in order: the longest blocks start first.
template <typename T, int D>
__global__ void __launch_bounds__(kThreads, key_pass_blocks_per_sm<T, D>())
    flash_attention_backward_key_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse,
                                        const float* dvec, int t, int nh, float scale,
                                        float scale_log2) {
  using Layout = KeyPassLayout<T, D>;
  STRATA_DYNAMIC_SHARED(unsigned char, shared, 128);
  const BackwardShared<T, Layout> s(shared);

  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int h = static_cast<int>(blockIdx.x);
  const int b = static_cast<int>(blockIdx.y);
  const int k_tile = static_cast<int>(blockIdx.z);
  const int n_tiles = static_cast<int>(gridDim.z);
  const int k0 = k_tile * kTile;
  const int c = nh * D;
  const int64_t c3 = 3 * int64_t{c};
  const BackwardHead<T> head(qkv, dout, lse, dvec, t, nh, D, b, h);

  load_tile<T, D>(s.k, head.k + k0 * c3, c3, t - k0);
  load_tile<T, D>(s.v, head.v + k0 * c3, c3, t - k0);  // waited for with the first query tile

  const T* k_strip = s.k + warp * kStripRows * kTileLd<T, D>;
  const T* v_strip = s.v + warp * kStripRows * kTileLd<T, D>;
  float* scores = s.scores + warp * kStripRows * kScoreLd;
  float* dprobs = s.dprobs + warp * kStripRows * kScoreLd;
  T* probs = s.probs + warp * kStripRows * kProbLd<T>;
  const int first_key = k0 + warp * kStripRows;
  StripAccumulator<T, D> dk;
  StripAccumulator<T, D> dv;
  dk.zero();
  dv.zero();

  for (int q_tile = k_tile; q_tile < n_tiles; ++q_tile) {
    const int q0 = q_tile * kTile;
    __syncthreads();  // every warp is done with the previous Q and dO tiles, lse and D
    load_tile<T, D>(s.q, head.q + q0 * c3, c3, t - q0);
    load_tile<T, D>(s.dout, head.dout + q0 * int64_t{c}, c, t - q0);
    load_row_values(s.lse, head.lse + q0, t - q0, kLog2e);
    load_row_values(s.dvec, head.dvec + q0, t - q0, 1.0f);
    wait_for_tiles();
    __syncthreads();

    // S^T (16 keys, 64 queries) = K_strip Q^T; then P^T = 2^(scale log2(e) S^T - lse log2(e))
    // where query >= key and query < T (key < T follows), else 0: kept in fp32 for dS and as T
    // for the product. Element (jr, ic): key first_key + jr, query q0 + ic; step e of the loop
    // covers row e / 2, column lane + 32 (e % 2), so a warp's accesses are consecutive.
    strip_scores<D>(scores, k_strip, s.q);
    __syncwarp();
#pragma unroll 4
    for (int e = 0; e < kStripRows * 2; ++e) {
      const int jr = e / 2;
      const int ic = lane + kWarpSize * (e % 2);
      const int j = first_key + jr;
      const int i = q0 + ic;
      float* score = scores + jr * kScoreLd + ic;
      const float p = (j <= i && i < t) ? exp2f(scale_log2 * *score - s.lse[ic]) : 0.0f;
      *score = p;
      probs[jr * kProbLd<T> + ic] = from_float<T>(p);
    }
    __syncwarp();
    dv.add_product(probs, s.dout);             // dV (16 keys, D) += P^T dO
    strip_scores<D>(dprobs, v_strip, s.dout);  // dP^T (16 keys, 64 queries) = V_strip dO^T
    __syncwarp();  // every lane is done reading probs (P^T) and has stored its dP^T
    // dS^T = scale P^T (dP^T - D_query), as T: the scale of dK = scale dS^T Q folded in.
#pragma unroll 4
    for (int e = 0; e < kStripRows * 2; ++e) {
      const int jr = e / 2;
      const int ic = lane + kWarpSize * (e % 2);
      const float p = scores[jr * kScoreLd + ic];
      const float ds = scale * p * (dprobs[jr * kScoreLd + ic] - s.dvec[ic]);
      probs[jr * kProbLd<T> + ic] = from_float<T>(ds);
    }
    __syncwarp();
    dk.add_product(probs, s.q);  // dK (16 keys, D) += scale dS^T Q
  }

  // Only this warp reads its own strips of s.k and s.v (k_strip, v_strip), which now stage dK
  // and dV on their way out; scores is its own too.
  __syncwarp();
  T* dk_rows = dqkv + (int64_t{b} * t + first_key) * c3 + c + h * D;
  dk.store(scores, s.k + warp * kStripRows * kTileLd<T, D>, dk_rows, c3, t - first_key);
  dv.store(scores, s.v + warp * kStripRows * kTileLd<T, D>, dk_rows + c, c3, t - first_key);
}

// Pass 2. dqkv (B,T,3*NH*D): writes the dQ column block of head h; dout, qkv, lse, dvec as in
// pass 1. Grid (NH, B, ceil(T/64)), 128 threads: block (h, b, query tile), warp w owns queries
// q0 + 16w .. q0 + 16w + 15. The query tiles run from the last (the most key tiles) to the
// first.
template <typename T, int D>
__global__ void __launch_bounds__(kThreads, query_pass_blocks_per_sm<T, D>())
    flash_attention_backward_query_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse,
                                          const float* dvec, int t, int nh, float scale,
                                          float scale_log2) {
  using Layout = QueryPassLayout<T, D>;
  STRATA_DYNAMIC_SHARED(unsigned char, shared, 128);
  const BackwardShared<T, Layout> s(shared);

  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int h = static_cast<int>(blockIdx.x);
  const int b = static_cast<int>(blockIdx.y);
  const int q_tile = static_cast<int>(gridDim.z - 1 - blockIdx.z);
  const int q0 = q_tile * kTile;
  const int c = nh * D;
  const int64_t c3 = 3 * int64_t{c};
  const BackwardHead<T> head(qkv, dout, lse, dvec, t, nh, D, b, h);

  load_tile<T, D>(s.q, head.q + q0 * c3, c3, t - q0);
  load_tile<T, D>(s.dout, head.dout + q0 * int64_t{c}, c, t - q0);
  load_row_values(s.lse, head.lse + q0, t - q0, kLog2e);
  load_row_values(s.dvec, head.dvec + q0, t - q0, 1.0f);
  wait_for_tiles();
  __syncthreads();
  StripOperand<T, D> q;
  StripOperand<T, D> dy;
  q.load(s.q + warp * kStripRows * kTileLd<T, D>);
  dy.load(s.dout + warp * kStripRows * kTileLd<T, D>);
  __syncthreads();  // bf16: every warp holds its Q and dO fragments before the strips over them

  float* scores = s.scores + warp * kStripRows * kScoreLd;
  float* dprobs = s.dprobs + warp * kStripRows * kScoreLd;
  T* probs = s.probs + warp * kStripRows * kProbLd<T>;
  const float* lse_strip = s.lse + warp * kStripRows;
  const float* dvec_strip = s.dvec + warp * kStripRows;
  const int first_query = q0 + warp * kStripRows;
  StripAccumulator<T, D> dq;
  dq.zero();

  for (int k_tile = 0; k_tile <= q_tile; ++k_tile) {
    const int k0 = k_tile * kTile;
    __syncthreads();  // every warp is done with the previous K and V tiles
    load_tile<T, D>(s.k, head.k + k0 * c3, c3, t - k0);
    load_tile<T, D>(s.v, head.v + k0 * c3, c3, t - k0);
    wait_for_tiles();
    __syncthreads();

    strip_scores<D>(scores, q, s.k);   // S (16 queries, 64 keys) = Q_strip K^T
    strip_scores<D>(dprobs, dy, s.v);  // dP (16 queries, 64 keys) = dO_strip V^T
    __syncwarp();
    // dS = scale P (dP - D_query) with P = 2^(scale log2(e) S - lse log2(e)) where key <= query
    // and query < T, else 0; as T, the scale of dQ = scale dS K folded in. Element (ir, jc):
    // query first_query + ir, key k0 + jc.
#pragma unroll 4
    for (int e = 0; e < kStripRows * 2; ++e) {
      const int ir = e / 2;
      const int jc = lane + kWarpSize * (e % 2);
      const int i = first_query + ir;
      const int j = k0 + jc;
      const float p =
          (j <= i && i < t) ? exp2f(scale_log2 * scores[ir * kScoreLd + jc] - lse_strip[ir]) : 0.0f;
      const float ds = scale * p * (dprobs[ir * kScoreLd + jc] - dvec_strip[ir]);
      probs[ir * kProbLd<T> + jc] = from_float<T>(ds);
    }
    __syncwarp();
    dq.add_product(probs, s.k);  // dQ (16 queries, D) += scale dS K
  }

  __syncthreads();  // every warp is done reading s.k, whose strips stage dQ
  dq.store(scores, s.k + warp * kStripRows * kTileLd<T, D>,
           dqkv + (int64_t{b} * t + first_query) * c3 + h * D, c3, t - first_query);
}

template <typename T, int D>
void launch_backward(Context& ctx, T* dqkv, const T* dout, const T* qkv, const float* lse,
                     const float* dvec, const GridSizes& s, float scale, float scale_log2) {
  const dim3 grid(s.nh, s.b, s.tiles);
  constexpr int kKeyBytes = KeyPassLayout<T, D>::kBytes;
  constexpr int kQueryBytes = QueryPassLayout<T, D>::kBytes;
  static_assert(kKeyBytes <= kMaxSharedBytes && kQueryBytes <= kMaxSharedBytes);
  STRATA_CUDA_CHECK(cudaFuncSetAttribute(flash_attention_backward_key_kernel<T, D>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, kKeyBytes));
  STRATA_LAUNCH(grid, kThreads, kKeyBytes, ctx.stream(), flash_attention_backward_key_kernel<T, D>)
  (dqkv, dout, qkv, lse, dvec, s.t, s.nh, scale, scale_log2);
  STRATA_CUDA_CHECK_LAUNCH();
  STRATA_CUDA_CHECK(cudaFuncSetAttribute(flash_attention_backward_query_kernel<T, D>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, kQueryBytes));
  STRATA_LAUNCH(grid, kThreads, kQueryBytes, ctx.stream(),
                flash_attention_backward_query_kernel<T, D>)
  (dqkv, dout, qkv, lse, dvec, s.t, s.nh, scale, scale_log2);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace
}  // namespace flash

template <typename T>
void flash_attention_backward(Context& ctx, T* dqkv, const T* dout, const T* qkv, const T* out,
                              const float* lse, int64_t b, int64_t t, int64_t nh, int64_t hs) {
  flash::dispatch_head_size(hs, [](auto) {});  // an unsupported head size throws, even if empty
  if (b <= 0 || t <= 0 || nh <= 0) return;
  const flash::GridSizes sizes = flash::checked_grid_sizes(b, t, nh, hs);
  flash::check_aligned(qkv, "qkv");
  flash::check_aligned(dout, "dout");
  flash::check_aligned(dqkv, "dqkv");

  float* dvec = reinterpret_cast<float*>(ctx.scratch(static_cast<size_t>(b * nh * t) * 4));
  const int64_t rows = b * t * nh;
  const int blocks = checked_int(ceil_div(rows, flash::kDotRowsPerBlock), "flash attention rows");
  STRATA_LAUNCH(blocks, flash::kDotThreads, 0, ctx.stream(),
                flash::flash_attention_backward_dot_kernel)
  (dvec, dout, out, rows, sizes.t, sizes.nh, static_cast<int>(hs));
  STRATA_CUDA_CHECK_LAUNCH();

  const float scale = flash::softmax_scale(hs);
  const float scale_log2 = flash::softmax_scale_log2(hs);
  flash::dispatch_head_size(hs, [&](auto d) {
    flash::launch_backward<T, decltype(d)::value>(ctx, dqkv, dout, qkv, lse, dvec, sizes, scale,
                                                  scale_log2);
  });
}

template void flash_attention_backward<float>(Context&, float*, const float*, const float*,
                                              const float*, const float*, int64_t, int64_t, int64_t,
                                              int64_t);
template void flash_attention_backward<bf16>(Context&, bf16*, const bf16*, const bf16*, const bf16*,
                                             const float*, int64_t, int64_t, int64_t, int64_t);

}  // namespace strata::cuda
