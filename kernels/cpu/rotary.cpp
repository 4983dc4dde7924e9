// Rotary position embedding (Su et al. 2021, "RoFormer") in the rotate-half layout of
// Megatron-LM's apply_rotary_pos_emb (rotary_interleaved=False) and Hugging Face Llama's
// rotate_half: a head's pair i rotates channels i and i + HS/2 (not 2i and 2i+1 as in the
// paper), by the angle pos * theta^(-2i/HS).

#include <cmath>
#include <vector>

#include "common/error.hpp"
#include "kernels/cpu/kernels.hpp"

namespace strata::cpu {
namespace {

// out (B,T,W) = inp with heads * hs columns from first_col rotated by sign * the rotary angle of
// the token's position p = row % T; the other columns copied when out != inp. sign is +1 for the
// forward and -1 for the backward (the transpose of a rotation is the rotation by the negative
// angle). Each pair is read before it is written, so out may be inp.
template <typename T>
void rotate(T* out, const T* inp, int64_t b, int64_t t, int64_t heads, int64_t hs,
            int64_t row_stride, int64_t first_col, double theta, double sign) {
  if (b <= 0 || t <= 0) return;
  STRATA_ASSERT(hs > 0 && hs % 2 == 0, "rotary embedding needs an even head size");
  STRATA_ASSERT(heads >= 0 && first_col >= 0 && first_col + heads * hs <= row_stride,
                "the rotated heads must lie within a row");
  const int64_t half = hs / 2;
  // cos and sin of pos * theta^(-2i/HS) for every position and pair, (T, HS/2), in double.
  // inv_freq is Hugging Face's 1 / theta^(2i/HS).
  std::vector<double> cos_table(static_cast<size_t>(t * half));
  std::vector<double> sin_table(static_cast<size_t>(t * half));
  for (int64_t i = 0; i < half; ++i) {
    const double inv_freq =
        1.0 / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(hs));
    for (int64_t pos = 0; pos < t; ++pos) {
      const double angle = static_cast<double>(pos) * inv_freq;
      cos_table[pos * half + i] = std::cos(angle);
      sin_table[pos * half + i] = sign * std::sin(angle);
    }
  }
  const int64_t end_col = first_col + heads * hs;
  for (int64_t r = 0; r < b * t; ++r) {
    const T* x = inp + r * row_stride;
    T* y = out + r * row_stride;
    if (out != inp) {
      for (int64_t j = 0; j < first_col; ++j) y[j] = x[j];
      for (int64_t j = end_col; j < row_stride; ++j) y[j] = x[j];
    }
    const double* cos_row = cos_table.data() + (r % t) * half;
    const double* sin_row = sin_table.data() + (r % t) * half;
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t col = first_col + h * hs;
      for (int64_t i = 0; i < half; ++i) {
        const double x1 = static_cast<double>(x[col + i]);
        const double x2 = static_cast<double>(x[col + i + half]);
        y[col + i] = static_cast<T>(x1 * cos_row[i] - x2 * sin_row[i]);
        y[col + i + half] = static_cast<T>(x2 * cos_row[i] + x1 * sin_row[i]);
      }
    }
  }
}

}  // namespace

template <typename T>
void rotary_forward(T* out, const T* inp, int64_t b, int64_t t, int64_t heads, int64_t hs,
                    int64_t row_stride, int64_t first_col, double theta) {
  rotate(out, inp, b, t, heads, hs, row_stride, first_col, theta, 1.0);
}

template <typename T>
void rotary_backward(T* dinp, const T* dout, int64_t b, int64_t t, int64_t heads, int64_t hs,
                     int64_t row_stride, int64_t first_col, double theta) {
  rotate(dinp, dout, b, t, heads, hs, row_stride, first_col, theta, -1.0);
}

template void rotary_forward<float>(float*, const float*, int64_t, int64_t, int64_t, int64_t,
                                    int64_t, int64_t, double);
template void rotary_forward<double>(double*, const double*, int64_t, int64_t, int64_t, int64_t,
                                     int64_t, int64_t, double);
template void rotary_backward<float>(float*, const float*, int64_t, int64_t, int64_t, int64_t,
                                     int64_t, int64_t, double);
template void rotary_backward<double>(double*, const double*, int64_t, int64_t, int64_t, int64_t,
                                      int64_t, int64_t, double);

}  // namespace strata::cpu
