// SwiGLU (Shazeer 2020, "GLU Variants Improve Transformer"), Llama's MLP activation, in
// Megatron-LM's layout: one fused product gives each row [gate | up], and
// out = silu(gate) * up with silu(x) = x sigmoid(x) (Ramachandran et al. 2017's Swish, beta 1).

#include <cmath>

#include "kernels/cpu/kernels.hpp"

namespace strata::cpu {
namespace {

// The logistic sigmoid 1 / (1 + e^-x): for x very negative e^-x overflows to inf and the
// sigmoid is 0, as it should be (no NaN).
template <typename T>
T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

}  // namespace

// out is (N,H), inp (N,2H): row r of inp is [gate (H) | up (H)].
template <typename T>
void swiglu_forward(T* out, const T* inp, int64_t n, int64_t h) {
  for (int64_t r = 0; r < n; ++r) {
    const T* gate = inp + r * 2 * h;
    const T* up = gate + h;
    T* y = out + r * h;
    for (int64_t j = 0; j < h; ++j) y[j] = gate[j] * sigmoid(gate[j]) * up[j];
  }
}

// dinp is (N,2H), inp (N,2H), dout (N,H). With s = sigmoid(g):
//   d out / d up   = silu(g) = g s
//   d out / d gate = up silu'(g),  silu'(g) = s + g s (1 - s) = s (1 + g (1 - s))
// (using sigmoid' = s (1 - s)).
template <typename T>
void swiglu_backward(T* dinp, const T* inp, const T* dout, int64_t n, int64_t h) {
  for (int64_t r = 0; r < n; ++r) {
    const T* gate = inp + r * 2 * h;
    const T* up = gate + h;
    const T* dy = dout + r * h;
    T* dgate = dinp + r * 2 * h;
    T* dup = dgate + h;
    for (int64_t j = 0; j < h; ++j) {
      const T g = gate[j];
      const T s = sigmoid(g);
      dgate[j] = dy[j] * up[j] * s * (T(1) + g * (T(1) - s));
      dup[j] = dy[j] * g * s;
    }
  }
}

template void swiglu_forward<float>(float*, const float*, int64_t, int64_t);
template void swiglu_forward<double>(double*, const double*, int64_t, int64_t);
template void swiglu_backward<float>(float*, const float*, const float*, int64_t, int64_t);
template void swiglu_backward<double>(double*, const double*, const double*, int64_t, int64_t);

}  // namespace strata::cpu
