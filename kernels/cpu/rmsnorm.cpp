// RMSNorm (Zhang & Sennrich 2019) over the channels of each token, Llama's norm: LayerNorm without
// the mean subtraction and without a bias.

#include <cmath>

#include "kernels/cpu/kernels.hpp"

namespace strata::cpu {

// Llama 3's rms_norm_eps (its config.json), inside the square root.
constexpr double kRmsNormEps = 1e-5;

// out is (N,C), rstd (N), inp (N,C), weight (C).
// rstd = 1 / sqrt(mean_j(inp^2) + eps), out = inp * rstd * weight.
template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int64_t n, int64_t c) {
  for (int64_t i = 0; i < n; ++i) {
    const T* x = inp + i * c;
    T sum_squares = 0;
    for (int64_t j = 0; j < c; ++j) sum_squares += x[j] * x[j];
    const T s = T(1) / std::sqrt(sum_squares / static_cast<T>(c) + static_cast<T>(kRmsNormEps));
    T* y = out + i * c;
    for (int64_t j = 0; j < c; ++j) y[j] = x[j] * s * weight[j];
    rstd[i] = s;
  }
}

// dinp is (N,C), dweight (C), dout (N,C), inp (N,C), weight (C), rstd (N).
// With norm = inp * rstd and dnorm = dout * weight, per row: d rstd / d inp_k = -rstd^3 inp_k / C,
// so dinp_k = rstd * dnorm_k - rstd^3 inp_k / C * sum_j dnorm_j inp_j
//           = rstd * (dnorm_k - norm_k * mean_j(dnorm * norm)),
// and dweight += dout * norm.
template <typename T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight,
                      const T* rstd, int64_t n, int64_t c) {
  for (int64_t i = 0; i < n; ++i) {
    const T* x = inp + i * c;
    const T* dy = dout + i * c;
    T* dx = dinp + i * c;
    const T s = rstd[i];
    T dnorm_norm_mean = 0;
    for (int64_t j = 0; j < c; ++j) {
      const T norm = x[j] * s;
      const T dnorm = weight[j] * dy[j];
      dnorm_norm_mean += dnorm * norm;
    }
    dnorm_norm_mean /= static_cast<T>(c);
    for (int64_t j = 0; j < c; ++j) {
      const T norm = x[j] * s;
      const T dnorm = weight[j] * dy[j];
      dweight[j] += norm * dy[j];
      dx[j] = (dnorm - norm * dnorm_norm_mean) * s;
    }
  }
}

template void rmsnorm_forward<float>(float*, float*, const float*, const float*, int64_t, int64_t);
template void rmsnorm_forward<double>(double*, double*, const double*, const double*, int64_t,
                                      int64_t);
template void rmsnorm_backward<float>(float*, float*, const float*, const float*, const float*,
                                      const float*, int64_t, int64_t);
template void rmsnorm_backward<double>(double*, double*, const double*, const double*,
                                       const double*, const double*, int64_t, int64_t);

}  // namespace strata::cpu
