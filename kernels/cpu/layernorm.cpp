// LayerNorm (Ba et al. 2016) over the channels of each token, as llm.c's layernorm_forward and
// layernorm_backward.

#include <cmath>

#include "kernels/cpu/kernels.hpp"

namespace strata::cpu {

// GPT-2's epsilon inside the square root.
constexpr double kLayerNormEps = 1e-5;

// out is (N,C), mean (N), rstd (N), inp (N,C), weight (C), bias (C) or null.
template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias,
                       int64_t n, int64_t c) {
  for (int64_t i = 0; i < n; ++i) {
    const T* x = inp + i * c;
    T m = 0;
    for (int64_t j = 0; j < c; ++j) m += x[j];
    m /= static_cast<T>(c);
    T var = 0;
    for (int64_t j = 0; j < c; ++j) var += (x[j] - m) * (x[j] - m);
    var /= static_cast<T>(c);
    const T s = T(1) / std::sqrt(var + static_cast<T>(kLayerNormEps));
    T* y = out + i * c;
    for (int64_t j = 0; j < c; ++j) {
      y[j] = (x[j] - m) * s * weight[j] + (bias != nullptr ? bias[j] : T(0));
    }
    mean[i] = m;
    rstd[i] = s;
  }
}

// dinp is (N,C), dweight (C), dbias (C) or null, dout (N,C), inp (N,C), weight (C), mean (N),
// rstd (N).
// With norm = (inp - mean) * rstd and dnorm = dout * weight, per row:
//   dinp = rstd * (dnorm - mean_j(dnorm) - norm * mean_j(dnorm * norm)),
//   dweight += dout * norm, dbias += dout.
template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const T* mean, const T* rstd, int64_t n, int64_t c) {
  for (int64_t i = 0; i < n; ++i) {
    const T* x = inp + i * c;
    const T* dy = dout + i * c;
    T* dx = dinp + i * c;
    const T m = mean[i];
    const T s = rstd[i];
    T dnorm_mean = 0;
    T dnorm_norm_mean = 0;
    for (int64_t j = 0; j < c; ++j) {
      const T norm = (x[j] - m) * s;
      const T dnorm = weight[j] * dy[j];
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * norm;
    }
    dnorm_mean /= static_cast<T>(c);
    dnorm_norm_mean /= static_cast<T>(c);
    for (int64_t j = 0; j < c; ++j) {
      const T norm = (x[j] - m) * s;
      const T dnorm = weight[j] * dy[j];
      if (dbias != nullptr) dbias[j] += dy[j];
      dweight[j] += norm * dy[j];
      dx[j] = (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
    }
  }
}

template void layernorm_forward<float>(float*, float*, float*, const float*, const float*,
                                       const float*, int64_t, int64_t);
template void layernorm_forward<double>(double*, double*, double*, const double*, const double*,
                                        const double*, int64_t, int64_t);
template void layernorm_backward<float>(float*, float*, float*, const float*, const float*,
                                        const float*, const float*, const float*, int64_t, int64_t);
template void layernorm_backward<double>(double*, double*, double*, const double*, const double*,
                                         const double*, const double*, const double*, int64_t,
                                         int64_t);

}  // namespace strata::cpu
