// Rotary position embedding (Su et al. 2021, "RoFormer") on the GPU in the rotate-half layout,
// as kernels/cpu/rotary.cpp (Megatron-LM's apply_rotary_pos_emb with rotary_interleaved=False,
// Hugging Face Llama's rotate_half): a head's pair i rotates channels i and i + HS/2 by the angle
// pos * theta^(-2i/HS).
//
// The angles are computed as the reference computes them, in double: a first kernel fills a
// (T, HS/2) table of cos and sign * sin from 1 / pow(theta, 2i / HS) (Hugging Face's inv_freq),
// and the rotation reads each pair as doubles, rotates in double and rounds once to T, so that
// the float variant matches the reference to about 1e-7. Elementwise and memory-bound: one thread
// per (row, pair) rotates that pair in every head of the row (the angle depends only on the
// position and the pair); a second loop of the same kernel copies the other columns when out is
// not inp. Each pair is read before it is written, by the thread that writes it, so out may be
// inp.

#include <algorithm>
#include <cmath>
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

// cos_table and sin_table are (T, HS/2): entry (pos, i) = cos and sign * sin of
// pos * theta^(-2i/HS), in double as kernels/cpu/rotary.cpp computes them.
__global__ void rotary_table_kernel(double* cos_table, double* sin_table, int64_t t, int64_t hs,
                                    double theta, double sign) {
  const int64_t half = hs / 2;
  const int64_t entries = t * half;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < entries;
       p += stride) {
    const int64_t pos = p / half;
    const int64_t i = p - pos * half;
    const double inv_freq = 1.0 / pow(theta, static_cast<double>(2 * i) / static_cast<double>(hs));
    const double angle = static_cast<double>(pos) * inv_freq;
    cos_table[p] = cos(angle);
    sin_table[p] = sign * sin(angle);
  }
}

// out and inp are (rows, W) with rows = B*T and W = row_stride; the tables (T, HS/2). Pair
// p = row * HS/2 + i rotates channels (i, i + HS/2) of each of the heads starting at first_col,
// at the position row % T. When out != inp, item q = row * others + k copies the k-th column of
// the row outside [first_col, first_col + heads*HS), others = W - heads*HS of them.
template <typename T>
__global__ void rotary_kernel(T* out, const T* inp, const double* cos_table,
                              const double* sin_table, int64_t rows, int64_t t, int64_t heads,
                              int64_t hs, int64_t row_stride, int64_t first_col) {
  const int64_t half = hs / 2;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t pairs = heads > 0 ? rows * half : 0;
  for (int64_t p = first; p < pairs; p += stride) {
    const int64_t row = p / half;
    const int64_t i = p - row * half;
    const int64_t entry = (row % t) * half + i;
    const double c = cos_table[entry];
    const double s = sin_table[entry];
    const T* x = inp + row * row_stride + first_col;
    T* y = out + row * row_stride + first_col;
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t col = h * hs + i;
      const double x1 = static_cast<double>(to_float(x[col]));
      const double x2 = static_cast<double>(to_float(x[col + half]));
      y[col] = from_float<T>(static_cast<float>(x1 * c - x2 * s));
      y[col + half] = from_float<T>(static_cast<float>(x2 * c + x1 * s));
    }
  }
  if (out == inp) return;
  const int64_t rotated = heads * hs;
  const int64_t others = row_stride - rotated;
  const int64_t copies = others > 0 ? rows * others : 0;
  for (int64_t q = first; q < copies; q += stride) {
    const int64_t row = q / others;
    const int64_t k = q - row * others;
    const int64_t col = k < first_col ? k : k + rotated;
    out[row * row_stride + col] = inp[row * row_stride + col];
  }
}

void check_shape(int64_t heads, int64_t hs, int64_t row_stride, int64_t first_col) {
  if (hs <= 0 || hs % 2 != 0) {
    throw std::invalid_argument("rotary embedding: HS = " + std::to_string(hs) +
                                " must be even and positive (pairs i and i + HS/2)");
  }
  if (heads < 0 || first_col < 0 || first_col + heads * hs > row_stride) {
    throw std::invalid_argument(
        "rotary embedding: the rotated heads [" + std::to_string(first_col) + ", " +
        std::to_string(first_col + heads * hs) + ") must lie within a row of " +
        std::to_string(row_stride) + " columns");
  }
}

// The table, then the rotation by sign * the angle (+1 forward, -1 backward).
template <typename T>
void rotate(Context& ctx, T* out, const T* inp, int64_t b, int64_t t, int64_t heads, int64_t hs,
            int64_t row_stride, int64_t first_col, double theta, double sign) {
  if (b <= 0 || t <= 0) return;
  check_shape(heads, hs, row_stride, first_col);
  const int64_t half = hs / 2;
  const int64_t entries = t * half;
  double* cos_table = reinterpret_cast<double*>(ctx.scratch(2 * entries * sizeof(double)));
  double* sin_table = cos_table + entries;
  STRATA_LAUNCH(static_cast<int>(std::min(ceil_div(entries, kBlockSize), kMaxBlocks)), kBlockSize,
                0, ctx.stream(), rotary_table_kernel)
  (cos_table, sin_table, t, hs, theta, sign);
  STRATA_CUDA_CHECK_LAUNCH();
  const int64_t rows = b * t;
  const int64_t items = std::max(rows * half, rows * (row_stride - heads * hs));
  const int blocks =
      static_cast<int>(std::clamp(ceil_div(items, kBlockSize), int64_t{1}, kMaxBlocks));
  STRATA_LAUNCH(blocks, kBlockSize, 0, ctx.stream(), rotary_kernel<T>)
  (out, inp, cos_table, sin_table, rows, t, heads, hs, row_stride, first_col);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <typename T>
void rotary_forward(Context& ctx, T* out, const T* inp, int64_t b, int64_t t, int64_t heads,
                    int64_t hs, int64_t row_stride, int64_t first_col, double theta) {
  rotate(ctx, out, inp, b, t, heads, hs, row_stride, first_col, theta, 1.0);
}

template <typename T>
void rotary_backward(Context& ctx, T* dinp, const T* dout, int64_t b, int64_t t, int64_t heads,
                     int64_t hs, int64_t row_stride, int64_t first_col, double theta) {
  rotate(ctx, dinp, dout, b, t, heads, hs, row_stride, first_col, theta, -1.0);
}

template void rotary_forward<float>(Context&, float*, const float*, int64_t, int64_t, int64_t,
                                    int64_t, int64_t, int64_t, double);
template void rotary_forward<bf16>(Context&, bf16*, const bf16*, int64_t, int64_t, int64_t, int64_t,
                                   int64_t, int64_t, double);
template void rotary_backward<float>(Context&, float*, const float*, int64_t, int64_t, int64_t,
                                     int64_t, int64_t, int64_t, double);
template void rotary_backward<bf16>(Context&, bf16*, const bf16*, int64_t, int64_t, int64_t,
                                    int64_t, int64_t, int64_t, double);

}  // namespace strata::cuda
