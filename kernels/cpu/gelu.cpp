// GELU (Hendrycks & Gimpel 2016) in GPT-2's tanh approximation, as llm.c's gelu_forward and
// gelu_backward.

#include <cmath>

#include "kernels/cpu/kernels.hpp"

namespace strata::cpu {

// sqrt(2/pi) and the cubic coefficient of the tanh approximation.
constexpr double kGeluScale = 0.7978845608028654;
constexpr double kGeluCubic = 0.044715;

// 0.5 (1 + tanh u) is the logistic sigmoid of 2u, so GELU is x sigmoid(2u): one exp per
// element instead of a tanh (std::tanh costs several exps), and no cancellation for large |u|.
template <typename T>
T sigmoid_2u(T x) {
  const T u = static_cast<T>(kGeluScale) * (x + static_cast<T>(kGeluCubic) * x * x * x);
  return T(1) / (T(1) + std::exp(T(-2) * u));
}

// out is (n), inp (n).
template <typename T>
void gelu_forward(T* out, const T* inp, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = inp[i] * sigmoid_2u(inp[i]);
}

// dinp is (n), inp (n), dout (n). With u = s (x + a x^3) and g = sigmoid(2u) = 0.5 (1 + tanh u):
//   gelu'(x) = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) s (1 + 3 a x^2)
//            = g + 2 x g (1 - g) s (1 + 3 a x^2).
template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n) {
  const T s = static_cast<T>(kGeluScale);
  const T a = static_cast<T>(kGeluCubic);
  for (int64_t i = 0; i < n; ++i) {
    const T x = inp[i];
    const T g = sigmoid_2u(x);
    const T local_grad = g + T(2) * x * g * (T(1) - g) * s * (T(1) + T(3) * a * x * x);
    dinp[i] = local_grad * dout[i];
  }
}

template void gelu_forward<float>(float*, const float*, int64_t);
template void gelu_forward<double>(double*, const double*, int64_t);
template void gelu_backward<float>(float*, const float*, const float*, int64_t);
template void gelu_backward<double>(double*, const double*, const double*, int64_t);

}  // namespace strata::cpu
