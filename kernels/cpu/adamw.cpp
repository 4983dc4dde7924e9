// AdamW with gradient clipping, and the sum of squares behind the global gradient norm.

#include <algorithm>
#include <cmath>

#include "kernels/cpu/kernels.hpp"

namespace strata::cpu {

template <typename T>
double sum_of_squares(const T* x, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return sum;
}

// param, grad, m, v are (n).
template <typename T>
void adamw_update(T* param, const T* grad, T* m, T* v, int64_t n, const AdamWConfig& config,
                  int64_t step, double grad_scale) {
  const double b1 = config.beta1;
  const double b2 = config.beta2;
  const double m_correction = 1.0 - std::pow(b1, static_cast<double>(step));
  const double v_correction = 1.0 - std::pow(b2, static_cast<double>(step));
  for (int64_t i = 0; i < n; ++i) {
    const double g = static_cast<double>(grad[i]) * grad_scale;
    const double mi = b1 * static_cast<double>(m[i]) + (1.0 - b1) * g;
    const double vi = b2 * static_cast<double>(v[i]) + (1.0 - b2) * g * g;
    m[i] = static_cast<T>(mi);
    v[i] = static_cast<T>(vi);
    const double update = (mi / m_correction) / (std::sqrt(vi / v_correction) + config.eps) +
                          config.weight_decay * static_cast<double>(param[i]);
    param[i] = static_cast<T>(static_cast<double>(param[i]) - config.lr * update);
  }
}

double clip_factor(double norm, double max_norm) {
  if (max_norm <= 0) return 1.0;
  return std::min(1.0, max_norm / (norm + 1e-6));
}

template double sum_of_squares<float>(const float*, int64_t);
template double sum_of_squares<double>(const double*, int64_t);
template void adamw_update<float>(float*, const float*, float*, float*, int64_t, const AdamWConfig&,
                                  int64_t, double);
template void adamw_update<double>(double*, const double*, double*, double*, int64_t,
                                   const AdamWConfig&, int64_t, double);

}  // namespace strata::cpu
