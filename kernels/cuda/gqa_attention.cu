// General grouped-query attention (Ainslie et al. 2023) with a sliding window (Mistral's
// sliding_window, Jiang et al. 2023) and attention dropout on the GPU, as
// kernels/cpu/attention.cpp's gqa_attention_forward and gqa_attention_backward. Simple warp
// kernels that favor a fixed order of every sum over speed (the tiled kernels of
// flash_attention_*.cu cover the fast path):
//  - forward: one warp per (batch, query head h, query row i). Lane l takes the keys
//    j = first + l, first + l + 32, ... that query i sees ([first_key(i), i]) and computes the
//    scaled scores q_i.k_j / sqrt(HS) in fp32; a first pass keeps a running max and sum per lane,
//    combined by butterfly reductions (as attention.cu's causal softmax); a second pass recomputes
//    each score, writes att (and dropped), and the warp adds p'_ij v_j into out_i in ascending j,
//    each lane owning channels d = l, l + 32, ... of the head, the probabilities broadcast from
//    the lane that computed them (__shfl_sync). No (T,T) scratch; the scores are never rounded.
//  - backward, as the reference with D_i = sum_j att_ij datt'_ij and
//    datt'_ij = (dout_i . v_j) * keep_ij * dropout_scale (keep_ij * dropout_scale = 1 without
//    dropout), dpre_ij = att_ij (datt'_ij - D_i):
//    1. one warp per (batch, query head, query row i): D_i (kept in (B,NH,T) floats of scratch),
//       then dq_i = scale * sum_j dpre_ij k_j, j ascending;
//    2. one warp per (batch, kv head g, key row j): dk_j = scale * sum dpre_ij q_{h,i} and
//       dv_j = sum att_ij keep_ij dropout_scale dout_{h,i}, over the group's query heads h in
//       order, then the queries i that see key j ([j, last_query(j)]) ascending.
//    Every element of dqkv is written once, by one warp: no atomics, the same bits every run.
// Scores and the products are fp32 whatever T is; att, dropped and the gradients are rounded to
// T once. out uses the unrounded fp32 probabilities; the backward reads att as stored.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.hpp"

namespace strata::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kThreads = kWarpsPerBlock * kWarpSize;
// The head sizes the kernels take: each lane holds HS / 32 channels of a row in registers.
constexpr int kMaxHeadSize = 256;
constexpr int kChannelsPerLane = kMaxHeadSize / kWarpSize;
constexpr unsigned kFullMask = 0xffffffffu;

// The sizes the kernels index with, all int64.
struct Sizes {
  int64_t t = 0;
  int64_t nh = 0;
  int64_t nkv = 0;
  int64_t hs = 0;
  int64_t window = 0;
  int64_t row = 0;    // (NH + 2*NKV) * HS: a token's row in qkv and dqkv
  int64_t c = 0;      // NH * HS: a token's row in out and dout
  int64_t group = 0;  // NH / NKV: query heads per kv head
  float scale = 0;    // 1 / sqrt(HS)
};

// The first key the query at position i sees: 0 without a window, else i - window + 1 clamped
// at 0 (cpu's first_key). Example: window 3, i = 5 gives 3 (keys 3, 4, 5).
__device__ __forceinline__ int64_t first_key(int64_t i, int64_t window) {
  return window > 0 && i >= window ? i - window + 1 : 0;
}

// The last query that sees key j: query i sees j when j <= i < j + window, so T - 1 without a
// window, else min(T - 1, j + window - 1). Example: window 3, j = 3 gives 5 (queries 3, 4, 5).
__device__ __forceinline__ int64_t last_query(int64_t j, int64_t window, int64_t t) {
  return window > 0 && window < t - j ? j + window - 1 : t - 1;
}

// a . b over hs channels in fp32, channels in ascending order.
template <typename T>
__device__ __forceinline__ float dot(const T* a, const T* b, int64_t hs) {
  float sum = 0.0f;
  for (int64_t d = 0; d < hs; ++d) sum += to_float(a[d]) * to_float(b[d]);
  return sum;
}

// acc[e] += p * x[lane + 32 e] for the channels of the head (HS of them) that the lane owns.
template <typename T>
__device__ __forceinline__ void add_scaled(float (&acc)[kChannelsPerLane], float p, const T* x,
                                           int lane, int64_t hs) {
#pragma unroll
  for (int e = 0; e < kChannelsPerLane; ++e) {
    const int64_t d = lane + e * kWarpSize;
    if (d < hs) acc[e] += p * to_float(x[d]);
  }
}

// y[lane + 32 e] = scale * acc[e] rounded to T, for the channels the lane owns.
template <typename T>
__device__ __forceinline__ void store_scaled(T* y, const float (&acc)[kChannelsPerLane],
                                             float scale, int lane, int64_t hs) {
#pragma unroll
  for (int e = 0; e < kChannelsPerLane; ++e) {
    const int64_t d = lane + e * kWarpSize;
    if (d < hs) y[d] = from_float<T>(scale * acc[e]);
  }
}

// out (B,T,NH*HS), att (B,NH,T,T), qkv (B,T,(NH+2*NKV)*HS), keep and dropped (B,NH,T,T) or null.
// Warp w of the grid takes att row r = (b*NH + h)*T + i; rows = B*NH*T.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    gqa_forward_kernel(T* out, T* att, const T* qkv, const T* keep, float dropout_scale, T* dropped,
                       int64_t rows, Sizes s) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (r >= rows) return;  // the whole warp: r depends on the warp only
  const int lane = threadIdx.x % kWarpSize;
  const int64_t i = r % s.t;
  const int64_t h = (r / s.t) % s.nh;
  const int64_t b = r / (s.t * s.nh);
  const int64_t kv = h / s.group;
  const T* q = qkv + (b * s.t + i) * s.row + h * s.hs;
  const T* keys = qkv + b * s.t * s.row + (s.nh + kv) * s.hs;            // key j at j * row
  const T* values = qkv + b * s.t * s.row + (s.nh + s.nkv + kv) * s.hs;  // value j at j * row
  T* a = att + r * s.t;
  const T* kept = keep != nullptr ? keep + r * s.t : nullptr;
  T* drop = keep != nullptr && dropped != nullptr ? dropped + r * s.t : nullptr;
  const int64_t first = first_key(i, s.window);

  // Pass 1: the row's max M and Z = sum_j exp(score_j - M), per lane then across the warp. Lane
  // 0 always holds key `first`, so M is finite; a lane without keys contributes 0.
  float max = -INFINITY;
  float sum = 0.0f;
  for (int64_t j = first + lane; j <= i; j += kWarpSize) {
    const float score = s.scale * dot(q, keys + j * s.row, s.hs);
    const float new_max = fmaxf(max, score);
    sum = sum * expf(max - new_max) + expf(score - new_max);  // expf(-inf) = 0 the first time
    max = new_max;
  }
  const float row_max = warp_max(max);
  const float row_sum = warp_sum(max == -INFINITY ? 0.0f : sum * expf(max - row_max));
  const float inv_sum = 1.0f / row_sum;

  // Pass 2, 32 columns at a time: lane l writes column j0 + l of att (0 outside [first, i]), and
  // the chunk's probabilities (dropped ones where there is a mask) are added into out in order.
  float acc[kChannelsPerLane] = {};
  for (int64_t j0 = 0; j0 < s.t; j0 += kWarpSize) {
    const int64_t j = j0 + lane;
    float p = 0.0f;
    if (j >= first && j <= i) {
      p = expf(s.scale * dot(q, keys + j * s.row, s.hs) - row_max) * inv_sum;
    }
    if (j < s.t) {
      a[j] = from_float<T>(p);
      if (kept != nullptr) {
        p = p * to_float(kept[j]) * dropout_scale;
        if (drop != nullptr) drop[j] = from_float<T>(p);
      }
    }
    if (j0 > i || j0 + kWarpSize <= first) continue;  // no key of the chunk seen: warp-uniform
    for (int src = 0; src < kWarpSize; ++src) {
      const float pj = __shfl_sync(kFullMask, p, src);
      const int64_t key = j0 + src;
      if (key >= first && key <= i) add_scaled(acc, pj, values + key * s.row, lane, s.hs);
    }
  }
  store_scaled(out + (b * s.t + i) * s.c + h * s.hs, acc, 1.0f, lane, s.hs);
}

// datt'_ij = (dout_i . v_j) * keep_ij * dropout_scale, or dout_i . v_j without a mask (keep_ij
// points at the mask's element, or is null).
template <typename T>
__device__ __forceinline__ float dropped_grad(const T* dy, const T* v, const T* keep_ij,
                                              float dropout_scale, int64_t hs) {
  const float g = dot(dy, v, hs);
  return keep_ij != nullptr ? g * to_float(*keep_ij) * dropout_scale : g;
}

// Step 1 of the backward. dqkv's q part, row_dots (B,NH,T) = D, dout (B,T,NH*HS), qkv, att and
// keep as in the forward; warp w takes row r = (b*NH + h)*T + i.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    gqa_backward_query_kernel(T* dqkv, float* row_dots, const T* dout, const T* qkv, const T* att,
                              const T* keep, float dropout_scale, int64_t rows, Sizes s) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (r >= rows) return;  // the whole warp
  const int lane = threadIdx.x % kWarpSize;
  const int64_t i = r % s.t;
  const int64_t h = (r / s.t) % s.nh;
  const int64_t b = r / (s.t * s.nh);
  const int64_t kv = h / s.group;
  const T* dy = dout + (b * s.t + i) * s.c + h * s.hs;
  const T* keys = qkv + b * s.t * s.row + (s.nh + kv) * s.hs;
  const T* values = qkv + b * s.t * s.row + (s.nh + s.nkv + kv) * s.hs;
  const T* a = att + r * s.t;
  const T* kept = keep != nullptr ? keep + r * s.t : nullptr;
  const int64_t first = first_key(i, s.window);

  // D_i = sum_j att_ij datt'_ij over the keys the query sees.
  float partial = 0.0f;
  for (int64_t j = first + lane; j <= i; j += kWarpSize) {
    const float g = dropped_grad(dy, values + j * s.row, kept != nullptr ? kept + j : nullptr,
                                 dropout_scale, s.hs);
    partial += to_float(a[j]) * g;
  }
  const float row_dot = warp_sum(partial);
  if (lane == 0) row_dots[r] = row_dot;

  // dq_i = scale * sum_j dpre_ij k_j, 32 keys at a time from `first`, ascending.
  float acc[kChannelsPerLane] = {};
  for (int64_t j0 = first; j0 <= i; j0 += kWarpSize) {
    const int64_t j = j0 + lane;
    float dpre = 0.0f;
    if (j <= i) {
      const float g = dropped_grad(dy, values + j * s.row, kept != nullptr ? kept + j : nullptr,
                                   dropout_scale, s.hs);
      dpre = to_float(a[j]) * (g - row_dot);
    }
    for (int src = 0; src < kWarpSize; ++src) {
      const float ds = __shfl_sync(kFullMask, dpre, src);
      const int64_t key = j0 + src;
      if (key <= i) add_scaled(acc, ds, keys + key * s.row, lane, s.hs);
    }
  }
  store_scaled(dqkv + (b * s.t + i) * s.row + h * s.hs, acc, s.scale, lane, s.hs);
}

// Step 2 of the backward. dqkv's k and v parts; warp w takes key row r = (b*NKV + g)*T + j;
// rows = B*NKV*T. row_dots from step 1.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    gqa_backward_key_kernel(T* dqkv, const float* row_dots, const T* dout, const T* qkv,
                            const T* att, const T* keep, float dropout_scale, int64_t rows,
                            Sizes s) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (r >= rows) return;  // the whole warp
  const int lane = threadIdx.x % kWarpSize;
  const int64_t j = r % s.t;
  const int64_t kv = (r / s.t) % s.nkv;
  const int64_t b = r / (s.t * s.nkv);
  const T* v = qkv + (b * s.t + j) * s.row + (s.nh + s.nkv + kv) * s.hs;
  const int64_t last = last_query(j, s.window, s.t);

  float dk[kChannelsPerLane] = {};
  float dv[kChannelsPerLane] = {};
  for (int64_t h = kv * s.group; h < (kv + 1) * s.group; ++h) {
    const int64_t head_row = (b * s.nh + h) * s.t;  // att row of query 0 of head h
    for (int64_t i0 = j; i0 <= last; i0 += kWarpSize) {
      const int64_t i = i0 + lane;
      float dropped_p = 0.0f;  // att_ij keep_ij dropout_scale
      float dpre = 0.0f;       // att_ij (datt'_ij - D_i)
      if (i <= last) {
        const int64_t element = (head_row + i) * s.t + j;
        const float p = to_float(att[element]);
        const T* keep_ij = keep != nullptr ? keep + element : nullptr;
        const float g =
            dropped_grad(dout + (b * s.t + i) * s.c + h * s.hs, v, keep_ij, dropout_scale, s.hs);
        dropped_p = keep_ij != nullptr ? p * to_float(*keep_ij) * dropout_scale : p;
        dpre = p * (g - row_dots[head_row + i]);
      }
      for (int src = 0; src < kWarpSize; ++src) {
        const float pj = __shfl_sync(kFullMask, dropped_p, src);
        const float ds = __shfl_sync(kFullMask, dpre, src);
        const int64_t query = i0 + src;
        if (query > last) continue;  // warp-uniform
        add_scaled(dv, pj, dout + (b * s.t + query) * s.c + h * s.hs, lane, s.hs);
        add_scaled(dk, ds, qkv + (b * s.t + query) * s.row + h * s.hs, lane, s.hs);
      }
    }
  }
  T* dkv_row = dqkv + (b * s.t + j) * s.row;
  store_scaled(dkv_row + (s.nh + kv) * s.hs, dk, s.scale, lane, s.hs);
  store_scaled(dkv_row + (s.nh + s.nkv + kv) * s.hs, dv, 1.0f, lane, s.hs);
}

// The sizes, after the checks the reference asserts (as std::invalid_argument) and the head size
// limit of the kernels.
Sizes checked_sizes(int64_t t, int64_t nh, int64_t nkv, int64_t hs, int64_t window) {
  if (nkv <= 0 || nh % nkv != 0) {
    throw std::invalid_argument("grouped-query attention: NH = " + std::to_string(nh) +
                                " must be a multiple of NKV = " + std::to_string(nkv) +
                                " (Ainslie et al. 2023)");
  }
  if (window < 0) {
    throw std::invalid_argument("grouped-query attention: window = " + std::to_string(window) +
                                " must be >= 0 (0: no window)");
  }
  if (hs > kMaxHeadSize) {
    throw std::invalid_argument("grouped-query attention: HS = " + std::to_string(hs) +
                                " is over the " + std::to_string(kMaxHeadSize) +
                                " these kernels hold in registers");
  }
  Sizes s;
  s.t = t;
  s.nh = nh;
  s.nkv = nkv;
  s.hs = hs;
  s.window = window;
  s.row = (nh + 2 * nkv) * hs;
  s.c = nh * hs;
  s.group = nh / nkv;
  s.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hs)));
  return s;
}

// Blocks for one warp per row.
int blocks_for(int64_t rows, const char* what) {
  return checked_int(ceil_div(rows, kWarpsPerBlock), what);
}

}  // namespace

template <typename T>
void gqa_attention_forward(Context& ctx, T* out, T* att, const T* qkv, int64_t b, int64_t t,
                           int64_t nh, int64_t nkv, int64_t hs, int64_t window, const T* keep,
                           float dropout_scale, T* dropped) {
  if (b <= 0 || t <= 0 || nh <= 0 || hs <= 0) return;
  const Sizes s = checked_sizes(t, nh, nkv, hs, window);
  const int64_t rows = b * nh * t;
  STRATA_LAUNCH(blocks_for(rows, "gqa_attention_forward blocks"), kThreads, 0, ctx.stream(),
                gqa_forward_kernel<T>)
  (out, att, qkv, keep, dropout_scale, dropped, rows, s);
  STRATA_CUDA_CHECK_LAUNCH();
}

template <typename T>
void gqa_attention_backward(Context& ctx, T* dqkv, const T* dout, const T* qkv, const T* att,
                            int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hs,
                            int64_t window, const T* keep, float dropout_scale) {
  if (b <= 0 || t <= 0 || nh <= 0 || hs <= 0) return;
  const Sizes s = checked_sizes(t, nh, nkv, hs, window);
  const int64_t query_rows = b * nh * t;
  const int64_t key_rows = b * nkv * t;
  float* row_dots = reinterpret_cast<float*>(ctx.scratch(query_rows * sizeof(float)));
  STRATA_LAUNCH(blocks_for(query_rows, "gqa_attention_backward blocks"), kThreads, 0, ctx.stream(),
                gqa_backward_query_kernel<T>)
  (dqkv, row_dots, dout, qkv, att, keep, dropout_scale, query_rows, s);
  STRATA_CUDA_CHECK_LAUNCH();
  STRATA_LAUNCH(blocks_for(key_rows, "gqa_attention_backward blocks"), kThreads, 0, ctx.stream(),
                gqa_backward_key_kernel<T>)
  (dqkv, row_dots, dout, qkv, att, keep, dropout_scale, key_rows, s);
  STRATA_CUDA_CHECK_LAUNCH();
}

template void gqa_attention_forward<float>(Context&, float*, float*, const float*, int64_t, int64_t,
                                           int64_t, int64_t, int64_t, int64_t, const float*, float,
                                           float*);
template void gqa_attention_forward<bf16>(Context&, bf16*, bf16*, const bf16*, int64_t, int64_t,
                                          int64_t, int64_t, int64_t, int64_t, const bf16*, float,
                                          bf16*);
template void gqa_attention_backward<float>(Context&, float*, const float*, const float*,
                                            const float*, int64_t, int64_t, int64_t, int64_t,
                                            int64_t, int64_t, const float*, float);
template void gqa_attention_backward<bf16>(Context&, bf16*, const bf16*, const bf16*, const bf16*,
                                           int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                                           const bf16*, float);

}  // namespace strata::cuda
