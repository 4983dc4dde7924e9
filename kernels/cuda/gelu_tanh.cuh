#pragma once
// GELU (Hendrycks & Gimpel 2016) in GPT-2's tanh approximation, one element at a time in fp32: the
// device formulas behind gelu_forward and gelu_backward (gelu.cu) and GeGLU (geglu.cu), as
// kernels/cpu/gelu_tanh.hpp is for the CPU references. 0.5 (1 + tanh u) is written as
// sigmoid(2u), one exp per element.

#include "kernels/cuda/common.cuh"

namespace strata::cuda::gelu_tanh {

// sqrt(2/pi) and the cubic coefficient of the tanh approximation (kernels/cpu/gelu_tanh.hpp).
constexpr float kScale = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

// sigmoid(2u) = 0.5 (1 + tanh u) with u = sqrt(2/pi) (x + 0.044715 x^3). For x very negative,
// expf overflows to inf and the result is 0 (no NaN).
__device__ __forceinline__ float sigmoid_2u(float x) {
  const float u = kScale * (x + kCubic * x * x * x);
  return 1.0f / (1.0f + expf(-2.0f * u));
}

// gelu(x) = 0.5 x (1 + tanh u) = x sigmoid(2u).
__device__ __forceinline__ float value(float x) { return x * sigmoid_2u(x); }

// gelu'(x) = g + 2 x g (1 - g) s (1 + 3 a x^2) with g = sigmoid(2u), s = sqrt(2/pi),
// a = 0.044715 (derived in kernels/cpu/gelu_tanh.hpp).
__device__ __forceinline__ float derivative(float x) {
  const float g = sigmoid_2u(x);
  return g + 2.0f * x * g * (1.0f - g) * kScale * (1.0f + 3.0f * kCubic * x * x);
}

}  // namespace strata::cuda::gelu_tanh
