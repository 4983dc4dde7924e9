// Rotary position embedding (kernels/cpu/rotary.cpp; Su et al. 2021, RoFormer): the forward
// against the rotate-half formula and RoFormer's properties, in place, backward against central
// differences, float against double.

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "kernels/cpu/kernels.hpp"
#include "tests/kernels/gradient_check.hpp"

namespace strata::cpu {
namespace {

using test::cast_to;
using test::check_close;
using test::kFloatTolerance;
using test::kGradientTolerance;
using test::random_values;
using test::widen;

// B = 2 sequences of T = 6 tokens; a fused QKV row of NH = 2 query and NKV = 1 kv heads of
// HS = 8: W = (2 + 2*1) * 8 = 32. The queries are columns [0, 16), the keys [16, 24).
constexpr int64_t kB = 2;
constexpr int64_t kT = 6;
constexpr int64_t kNH = 2;
constexpr int64_t kNKV = 1;
constexpr int64_t kHS = 8;
constexpr int64_t kW = (kNH + 2 * kNKV) * kHS;
constexpr int64_t kKeyCol = kNH * kHS;
constexpr double kTheta = 10000.0;

// The rotated buffer from the formula: for row r at position p = r % T and a head's pair i,
// angle = p * theta^(-2i/HS), out[i] = x[i] cos - x[i+HS/2] sin, out[i+HS/2] = x[i+HS/2] cos +
// x[i] sin; columns outside [first_col, first_col + heads*HS) unchanged.
std::vector<double> rotate_reference(const std::vector<double>& x, int64_t heads, int64_t first_col,
                                     double theta) {
  std::vector<double> y = x;
  const int64_t half = kHS / 2;
  for (int64_t r = 0; r < kB * kT; ++r) {
    const double p = static_cast<double>(r % kT);
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < half; ++i) {
        const double angle = p * std::pow(theta, -2.0 * static_cast<double>(i) / kHS);
        const int64_t lo = r * kW + first_col + h * kHS + i;
        const int64_t hi = lo + half;
        y[lo] = x[lo] * std::cos(angle) - x[hi] * std::sin(angle);
        y[hi] = x[hi] * std::cos(angle) + x[lo] * std::sin(angle);
      }
    }
  }
  return y;
}

template <typename T>
std::vector<double> run_forward(const std::vector<double>& x, int64_t heads, int64_t first_col,
                                double theta = kTheta) {
  const auto inp = cast_to<T>(x);
  std::vector<T> out(inp.size(), T(1e3));  // poisoned: every entry must be written
  rotary_forward(out.data(), inp.data(), kB, kT, heads, kHS, kW, first_col, theta);
  return widen(out);
}

template <typename T>
std::vector<double> run_backward(const std::vector<double>& dy, int64_t heads, int64_t first_col,
                                 double theta = kTheta) {
  const auto dout = cast_to<T>(dy);
  std::vector<T> dinp(dout.size(), T(1e3));
  rotary_backward(dinp.data(), dout.data(), kB, kT, heads, kHS, kW, first_col, theta);
  return widen(dinp);
}

TEST_CASE(
    "rotary rotates pair (x_i, x_{i+HS/2}) of each head by p * theta^(-2i/HS) (rotate-half, "
    "Megatron and HF Llama) and copies the other columns",
    "[rotary]") {
  const std::vector<double> x = random_values(kB * kT * kW, 71, -2.0, 2.0);
  SECTION("the query heads, theta 10000") {
    check_close("out", run_forward<double>(x, kNH, 0), rotate_reference(x, kNH, 0, kTheta), 1e-15);
  }
  SECTION("the key heads, Llama 3's theta 500000") {
    check_close("out", run_forward<double>(x, kNKV, kKeyCol, 5e5),
                rotate_reference(x, kNKV, kKeyCol, 5e5), 1e-15);
  }
  SECTION("columns outside the rotated heads are copied bit for bit") {
    const std::vector<double> y = run_forward<double>(x, kNKV, kKeyCol);
    for (int64_t r = 0; r < kB * kT; ++r) {
      for (int64_t j = 0; j < kW; ++j) {
        if (j < kKeyCol || j >= kKeyCol + kNKV * kHS) CHECK(y[r * kW + j] == x[r * kW + j]);
      }
    }
  }
}

TEST_CASE("rotary at position 0 is the identity, bit for bit", "[rotary]") {
  // The angle is 0: cos 1, sin 0, so x cos - y sin = x exactly.
  const std::vector<double> x = random_values(kB * kT * kW, 72);
  const std::vector<double> y = run_forward<double>(x, kNH + kNKV, 0);
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t j = 0; j < kW; ++j) CHECK(y[b * kT * kW + j] == x[b * kT * kW + j]);
  }
  // and moves the other positions (so that the check above can tell).
  CHECK(y[kW] != x[kW]);
}

TEST_CASE(
    "rotary's backward (the rotation by -angle) undoes the forward: x restored to 1e-15, and "
    "the norm of each pair is kept",
    "[rotary]") {
  // R(-a) R(a) = I, and a rotation keeps lengths (R is orthogonal, RoFormer after eq. (16)).
  const std::vector<double> x = random_values(kB * kT * kW, 73, -3.0, 3.0);
  const std::vector<double> y = run_forward<double>(x, kNH, 0);
  check_close("restored", run_backward<double>(y, kNH, 0), x, 1e-15);
  for (int64_t r = 0; r < kB * kT; ++r) {
    for (int64_t i = 0; i < kHS / 2; ++i) {
      const int64_t lo = r * kW + i;
      const int64_t hi = lo + kHS / 2;
      CHECK(std::hypot(y[lo], y[hi]) == Approx(std::hypot(x[lo], x[hi])).epsilon(1e-14));
    }
  }
}

TEST_CASE(
    "rotary: q_m . k_n after rotation depends only on m - n (RoFormer's relative position "
    "property)",
    "[rotary]") {
  // RoFormer eq. (16): (R_m q)^T (R_n k) = q^T R_{n-m} k. One query vector q and one key
  // vector k placed at every position of each sequence; compare the dot products of the pairs
  // (m, n) = (4, 1) and (5, 2) (offset 3), (3, 3) and (0, 0) (offset 0, where it is q . k).
  std::vector<double> x(kB * kT * kW, 0.0);
  const std::vector<double> q = random_values(kHS, 74);
  const std::vector<double> k = random_values(kHS, 75);
  for (int64_t r = 0; r < kB * kT; ++r) {
    for (int64_t d = 0; d < kHS; ++d) {
      x[r * kW + d] = q[d];
      x[r * kW + kKeyCol + d] = k[d];
    }
  }
  std::vector<double> y = run_forward<double>(x, kNH, 0);
  y = [&] {
    std::vector<double> z(y.size());
    rotary_forward(z.data(), y.data(), kB, kT, kNKV, kHS, kW, kKeyCol, kTheta);
    return z;
  }();
  const auto dot = [&](int64_t b, int64_t m, int64_t n) {
    double sum = 0;
    for (int64_t d = 0; d < kHS; ++d) {
      sum += y[(b * kT + m) * kW + d] * y[(b * kT + n) * kW + kKeyCol + d];
    }
    return sum;
  };
  double q_dot_k = 0;
  for (int64_t d = 0; d < kHS; ++d) q_dot_k += q[d] * k[d];
  CHECK(dot(0, 4, 1) == Approx(dot(0, 5, 2)).epsilon(1e-13));
  CHECK(dot(1, 4, 1) == Approx(dot(0, 5, 2)).epsilon(1e-13));
  CHECK(dot(0, 3, 3) == Approx(q_dot_k).epsilon(1e-13));
  CHECK(dot(1, 0, 0) == Approx(q_dot_k).epsilon(1e-13));
  // Another offset gives another value, so that the checks above can fail.
  CHECK(std::abs(dot(0, 4, 1) - dot(0, 4, 2)) > 1e-3);
}

TEST_CASE("rotary in place (out == inp) gives the out-of-place result, forward and backward",
          "[rotary]") {
  const std::vector<double> x = random_values(kB * kT * kW, 76);
  std::vector<double> in_place = x;
  rotary_forward(in_place.data(), in_place.data(), kB, kT, kNKV, kHS, kW, kKeyCol, kTheta);
  CHECK(in_place == run_forward<double>(x, kNKV, kKeyCol));
  in_place = x;
  rotary_backward(in_place.data(), in_place.data(), kB, kT, kNKV, kHS, kW, kKeyCol, kTheta);
  CHECK(in_place == run_backward<double>(x, kNKV, kKeyCol));
}

TEST_CASE(
    "rotary backward (float64) equals central differences of sum(out * R) over the whole row "
    "(rotated and copied columns), written",
    "[rotary]") {
  std::vector<double> x = random_values(kB * kT * kW, 77, -2.0, 2.0);
  const std::vector<double> dout = random_values(kB * kT * kW, 78);  // R of L = sum(out * R)
  const int64_t heads = GENERATE(kNH, kNKV);
  const int64_t first_col = heads == kNH ? 0 : kKeyCol;
  const std::vector<double> analytic = run_backward<double>(dout, heads, first_col);
  std::vector<double> out(x.size());
  const auto loss = [&] {
    rotary_forward(out.data(), x.data(), kB, kT, heads, kHS, kW, first_col, kTheta);
    return test::weighted_sum(out, dout);
  };
  INFO("heads = " << heads << ", first_col = " << first_col);
  check_close("dinp", analytic, test::numeric_gradient(x, loss), kGradientTolerance);
}

TEST_CASE("rotary float agrees with double within 1e-5 relative", "[rotary]") {
  const std::vector<double> x = test::float_representable(random_values(kB * kT * kW, 79));
  check_close("out", run_forward<float>(x, kNH, 0), run_forward<double>(x, kNH, 0),
              kFloatTolerance);
  check_close("dinp", run_backward<float>(x, kNKV, kKeyCol), run_backward<double>(x, kNKV, kKeyCol),
              kFloatTolerance);
}

}  // namespace
}  // namespace strata::cpu
