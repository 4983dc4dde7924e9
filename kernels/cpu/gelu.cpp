// GELU (Hendrycks & Gimpel 2016) in GPT-2's tanh approximation, as llm.c's gelu_forward and
// gelu_backward.

#include <cmath>

#include "kernels/cpu/kernels.hpp"

namespace strata::cpu {

// sqrt(2/pi) and the cubic coefficient of the tanh approximation.
constexpr double kGeluScale = 0.7978845608028654;
constexpr double kGeluCubic = 0.044715;

// out is (n), inp (n).
template <typename T>
void gelu_forward(T* out, const T* inp, int64_t n) {
  const T s = static_cast<T>(kGeluScale);
  const T a = static_cast<T>(kGeluCubic);
  for (int64_t i = 0; i < n; ++i) {
    const T x = inp[i];
    out[i] = T(0.5) * x * (T(1) + std::tanh(s * (x + a * x * x * x)));
  }
}

// dinp is (n), inp (n), dout (n). With u = s (x + a x^3):
//   gelu'(x) = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) s (1 + 3 a x^2).
template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n) {
  const T s = static_cast<T>(kGeluScale);
  const T a = static_cast<T>(kGeluCubic);
  for (int64_t i = 0; i < n; ++i) {
    const T x = inp[i];
    const T tanh_u = std::tanh(s * (x + a * x * x * x));
    const T local_grad = T(0.5) * (T(1) + tanh_u) +
                         T(0.5) * x * (T(1) - tanh_u * tanh_u) * s * (T(1) + T(3) * a * x * x);
    dinp[i] = local_grad * dout[i];
  }
}

template void gelu_forward<float>(float*, const float*, int64_t);
template void gelu_forward<double>(double*, const double*, int64_t);
template void gelu_backward<float>(float*, const float*, const float*, int64_t);
template void gelu_backward<double>(double*, const double*, const double*, int64_t);

}  // namespace strata::cpu
