#pragma once
// What the kernel tests share: seeded random buffers, the scalar objective L = sum(out * R) whose
// gradient with respect to out is R, central finite differences in float64, and the comparison
// of two buffers by their largest difference relative to the reference's largest value.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace strata::test {

// Central differences lose about 1e-16 * |L| / eps to rounding and gain eps^2 * L''' / 6 of
// truncation: with eps = 1e-6 and |L| ~ 10 both stay near 1e-9, well under the tolerances.
constexpr double kFiniteDifferenceEps = 1e-6;
// float64 backward against central differences.
constexpr double kGradientTolerance = 1e-6;
// The float instantiation against the double one, on the same (float-representable) inputs.
constexpr double kFloatTolerance = 1e-5;

// n values uniform in [lo, hi) from a std::mt19937_64 seeded with seed.
inline std::vector<double> random_values(int64_t n, uint64_t seed, double lo = -1.0,
                                         double hi = 1.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(lo, hi);
  std::vector<double> x(static_cast<size_t>(n));
  for (double& xi : x) xi = uniform(rng);
  return x;
}

// The values rounded to float, so that the float and double instantiations see the same inputs.
inline std::vector<double> float_representable(std::vector<double> x) {
  for (double& xi : x) xi = static_cast<double>(static_cast<float>(xi));
  return x;
}

template <typename T>
std::vector<T> cast_to(const std::vector<double>& x) {
  return std::vector<T>(x.begin(), x.end());
}

template <typename T>
std::vector<double> widen(const std::vector<T>& x) {
  return std::vector<double>(x.begin(), x.end());
}

// a - b, elementwise: what an accumulated (+=) gradient added to its starting value.
inline std::vector<double> minus(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> d(a.size());
  for (size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
  return d;
}

// L = sum_i out_i * r_i: dL/dout = r.
template <typename T>
double weighted_sum(const std::vector<T>& out, const std::vector<double>& r) {
  double sum = 0;
  for (size_t i = 0; i < out.size(); ++i) sum += static_cast<double>(out[i]) * r[i];
  return sum;
}

// dL/dx_i = (L(x + eps e_i) - L(x - eps e_i)) / (2 eps) for every i; loss reads x, which is
// restored after each perturbation.
inline std::vector<double> numeric_gradient(std::vector<double>& x,
                                            const std::function<double()>& loss,
                                            double eps = kFiniteDifferenceEps) {
  std::vector<double> grad(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + eps;
    const double plus = loss();
    x[i] = saved - eps;
    const double minus = loss();
    x[i] = saved;
    grad[i] = (plus - minus) / (2 * eps);
  }
  return grad;
}

// max_i |got_i - want_i| / max_i |want_i| (the reference must not be all zeros).
inline double relative_difference(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  double max_diff = 0;
  double max_want = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    max_diff = std::max(max_diff, std::abs(got[i] - want[i]));
    max_want = std::max(max_want, std::abs(want[i]));
  }
  REQUIRE(max_want > 0);
  return max_diff / max_want;
}

// Checks got against want within tolerance (relative to want's largest value), printing the
// largest difference as llm.c's tests do.
inline void check_close(const std::string& what, const std::vector<double>& got,
                        const std::vector<double>& want, double tolerance) {
  const double difference = relative_difference(got, want);
  INFO(what << ": largest difference / largest value = " << difference);
  CHECK(difference < tolerance);
}

}  // namespace strata::test
