#pragma once
// GELU (Hendrycks & Gimpel 2016) in GPT-2's tanh approximation, one element at a time: the scalar
// formulas behind gelu_forward and gelu_backward (gelu.cpp) and GeGLU (geglu.cpp). Internal to
// kernels/cpu. Hugging Face calls this approximation gelu_pytorch_tanh (Gemma's activation).

#include <cmath>

namespace strata::cpu::detail {

// sqrt(2/pi) and the cubic coefficient of the tanh approximation.
constexpr double kGeluScale = 0.7978845608028654;
constexpr double kGeluCubic = 0.044715;

// 0.5 (1 + tanh u) with u = sqrt(2/pi) (x + 0.044715 x^3) is the logistic sigmoid of 2u, so GELU
// is x sigmoid(2u): one exp per element instead of a tanh (std::tanh costs several exps), and no
// cancellation for large |u|. For x very negative the exp overflows to inf and the result is 0
// (no NaN).
template <typename T>
T gelu_sigmoid_2u(T x) {
  const T u = static_cast<T>(kGeluScale) * (x + static_cast<T>(kGeluCubic) * x * x * x);
  return T(1) / (T(1) + std::exp(T(-2) * u));
}

// gelu(x) = 0.5 x (1 + tanh u) = x sigmoid(2u).
template <typename T>
T gelu(T x) {
  return x * gelu_sigmoid_2u(x);
}

// With s = sqrt(2/pi), a = 0.044715, u = s (x + a x^3) and g = sigmoid(2u) = 0.5 (1 + tanh u):
//   gelu'(x) = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) s (1 + 3 a x^2)
//            = g + 2 x g (1 - g) s (1 + 3 a x^2).
template <typename T>
T gelu_derivative(T x) {
  const T s = static_cast<T>(kGeluScale);
  const T a = static_cast<T>(kGeluCubic);
  const T g = gelu_sigmoid_2u(x);
  return g + T(2) * x * g * (T(1) - g) * s * (T(1) + T(3) * a * x * x);
}

}  // namespace strata::cpu::detail
