// The residual add, with the bias of the row-parallel product before it, and with hidden dropout
// on the branch (Megatron-LM's bias_dropout_add).

#include "kernels/cpu/kernels.hpp"

namespace strata::cpu {

// out is (N,C), residual (N,C), branch (N,C), bias (C) or null, mask (N,C) or null. Without a
// mask the sum is (residual + branch) + bias, as before dropout existed.
template <typename T>
void residual_forward(T* out, const T* residual, const T* branch, const T* bias, int64_t n,
                      int64_t c, const T* mask, T dropout_scale) {
  if (mask != nullptr) {
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < c; ++j) {
        const int64_t k = i * c + j;
        const T dropped =
            (branch[k] + (bias != nullptr ? bias[j] : T(0))) * mask[k] * dropout_scale;
        out[k] = residual[k] + dropped;
      }
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < c; ++j) {
      const int64_t k = i * c + j;
      out[k] = residual[k] + branch[k] + (bias != nullptr ? bias[j] : T(0));
    }
  }
}

// dbias is (C) or null, dout (N,C).
template <typename T>
void residual_backward(T* dbias, const T* dout, int64_t n, int64_t c) {
  if (dbias == nullptr) return;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < c; ++j) dbias[j] += dout[i * c + j];
  }
}

template void residual_forward<float>(float*, const float*, const float*, const float*, int64_t,
                                      int64_t, const float*, float);
template void residual_forward<double>(double*, const double*, const double*, const double*,
                                       int64_t, int64_t, const double*, double);
template void residual_backward<float>(float*, const float*, int64_t, int64_t);
template void residual_backward<double>(double*, const double*, int64_t, int64_t);

}  // namespace strata::cpu
