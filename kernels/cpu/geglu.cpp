// GeGLU (Shazeer 2020, "GLU Variants Improve Transformer"), Gemma's MLP activation, in
// Megatron-LM's layout: one fused product gives each row [gate | up], and
// out = gelu(gate) * up with gelu in GPT-2's tanh approximation (gelu_tanh.hpp, the kernel of
// gelu.cpp; Hugging Face's gelu_pytorch_tanh, which Gemma's configs name).

#include "kernels/cpu/gelu_tanh.hpp"
#include "kernels/cpu/kernels.hpp"

namespace strata::cpu {

// out is (N,H), inp (N,2H): row r of inp is [gate (H) | up (H)].
template <typename T>
void geglu_forward(T* out, const T* inp, int64_t n, int64_t h) {
  for (int64_t r = 0; r < n; ++r) {
    const T* gate = inp + r * 2 * h;
    const T* up = gate + h;
    T* y = out + r * h;
    for (int64_t j = 0; j < h; ++j) y[j] = detail::gelu(gate[j]) * up[j];
  }
}

// dinp is (N,2H), inp (N,2H), dout (N,H):
//   d out / d up   = gelu(g)
//   d out / d gate = up gelu'(g)   (gelu' as derived in gelu_tanh.hpp).
template <typename T>
void geglu_backward(T* dinp, const T* inp, const T* dout, int64_t n, int64_t h) {
  for (int64_t r = 0; r < n; ++r) {
    const T* gate = inp + r * 2 * h;
    const T* up = gate + h;
    const T* dy = dout + r * h;
    T* dgate = dinp + r * 2 * h;
    T* dup = dgate + h;
    for (int64_t j = 0; j < h; ++j) {
      const T g = gate[j];
      dgate[j] = dy[j] * up[j] * detail::gelu_derivative(g);
      dup[j] = dy[j] * detail::gelu(g);
    }
  }
}

template void geglu_forward<float>(float*, const float*, int64_t, int64_t);
template void geglu_forward<double>(double*, const double*, int64_t, int64_t);
template void geglu_backward<float>(float*, const float*, const float*, int64_t, int64_t);
template void geglu_backward<double>(double*, const double*, const double*, int64_t, int64_t);

}  // namespace strata::cpu
