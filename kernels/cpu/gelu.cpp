// GELU (Hendrycks & Gimpel 2016) in GPT-2's tanh approximation, as llm.c's gelu_forward and
// gelu_backward. The scalar formulas, with their derivation, are in gelu_tanh.hpp.

#include "kernels/cpu/gelu_tanh.hpp"
#include "kernels/cpu/kernels.hpp"

namespace strata::cpu {

// out is (n), inp (n).
template <typename T>
void gelu_forward(T* out, const T* inp, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = detail::gelu(inp[i]);
}

// dinp is (n), inp (n), dout (n): dinp = gelu'(inp) * dout.
template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dinp[i] = detail::gelu_derivative(inp[i]) * dout[i];
}

template void gelu_forward<float>(float*, const float*, int64_t);
template void gelu_forward<double>(double*, const double*, int64_t);
template void gelu_backward<float>(float*, const float*, const float*, int64_t);
template void gelu_backward<double>(double*, const double*, const double*, int64_t);

}  // namespace strata::cpu
