// RMSNorm (kernels/cpu/rmsnorm.cpp): closed forms of the forward, backward against central
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

// B*T = 2*5 rows of C = 9 channels.
constexpr int64_t kN = 10;
constexpr int64_t kC = 9;
constexpr double kEps = 1e-5;

struct RmsNormInputs {
  std::vector<double> inp = random_values(kN * kC, 61, -2.0, 3.0);
  std::vector<double> weight = random_values(kC, 62, 0.5, 1.5);
  std::vector<double> dout = random_values(kN * kC, 63);  // R of L = sum(out * R)
  std::vector<double> dweight = random_values(kC, 64);
};

struct RmsNormOutputs {
  std::vector<double> out, rstd, dinp, dweight;
};

template <typename T>
RmsNormOutputs run_rmsnorm(const RmsNormInputs& in) {
  const auto inp = cast_to<T>(in.inp);
  const auto weight = cast_to<T>(in.weight);
  const auto dout = cast_to<T>(in.dout);
  auto dweight = cast_to<T>(in.dweight);
  std::vector<T> out(kN * kC), rstd(kN);
  std::vector<T> dinp(kN * kC, T(1e3));
  rmsnorm_forward(out.data(), rstd.data(), inp.data(), weight.data(), kN, kC);
  rmsnorm_backward(dinp.data(), dweight.data(), dout.data(), inp.data(), weight.data(), rstd.data(),
                   kN, kC);
  return {widen(out), widen(rstd), widen(dinp), widen(dweight)};
}

TEST_CASE("rmsnorm of a constant row a gives out = weight * a / sqrt(a^2 + 1e-5)", "[rmsnorm]") {
  // mean(inp^2) = a^2, so rstd = 1 / sqrt(a^2 + eps) and out_j = a * rstd * weight_j: about
  // sign(a) * weight_j when a^2 >> eps.
  RmsNormInputs in;
  const std::vector<double> values = {-3.0, -0.5, 1e-3, 0.25, 2.0, 7.0, -1e-2, 1.0, 4.5, -8.0};
  for (int64_t i = 0; i < kN; ++i) {
    for (int64_t j = 0; j < kC; ++j) in.inp[i * kC + j] = values[i];
  }
  const RmsNormOutputs result = run_rmsnorm<double>(in);
  for (int64_t i = 0; i < kN; ++i) {
    const double a = values[i];
    const double s = 1 / std::sqrt(a * a + kEps);
    CHECK(result.rstd[i] == Approx(s).epsilon(1e-14));
    for (int64_t j = 0; j < kC; ++j) {
      CHECK(result.out[i * kC + j] == Approx(a * s * in.weight[j]).epsilon(1e-14));
      if (std::abs(a) >= 1) {
        CHECK(result.out[i * kC + j] == Approx(std::copysign(in.weight[j], a)).epsilon(1e-5));
      }
    }
  }
}

TEST_CASE("rmsnorm with weight 1 gives rows of mean square ms/(ms+1e-5) and saves 1/sqrt(ms+1e-5)",
          "[rmsnorm]") {
  // y = x / sqrt(ms + eps) with ms = mean(x^2): mean(y^2) = ms / (ms + eps), the square of the
  // output's rms, which is 1 up to eps.
  RmsNormInputs in;
  in.weight.assign(kC, 1.0);
  const RmsNormOutputs result = run_rmsnorm<double>(in);
  for (int64_t i = 0; i < kN; ++i) {
    double ms = 0, y_ms = 0;
    for (int64_t j = 0; j < kC; ++j) ms += in.inp[i * kC + j] * in.inp[i * kC + j] / kC;
    for (int64_t j = 0; j < kC; ++j) y_ms += result.out[i * kC + j] * result.out[i * kC + j] / kC;
    CHECK(y_ms == Approx(ms / (ms + kEps)).epsilon(1e-13));
    CHECK(std::abs(std::sqrt(y_ms) - 1) < kEps);
    CHECK(result.rstd[i] == Approx(1 / std::sqrt(ms + kEps)).epsilon(1e-13));
  }
}

TEST_CASE("rmsnorm applies the weight after normalizing: out = norm * weight", "[rmsnorm]") {
  const RmsNormInputs in;
  RmsNormInputs plain = in;
  plain.weight.assign(kC, 1.0);
  const RmsNormOutputs scaled = run_rmsnorm<double>(in);
  const RmsNormOutputs norm = run_rmsnorm<double>(plain);
  std::vector<double> expected(kN * kC);
  for (int64_t i = 0; i < kN * kC; ++i) expected[i] = norm.out[i] * in.weight[i % kC];
  check_close("out", scaled.out, expected, 1e-14);
}

TEST_CASE(
    "rmsnorm backward (float64) equals central differences of sum(out * R): dinp, and dweight "
    "accumulated",
    "[rmsnorm]") {
  RmsNormInputs in;
  const RmsNormOutputs analytic = run_rmsnorm<double>(in);
  std::vector<double> out(kN * kC), rstd(kN);
  const auto loss = [&] {
    rmsnorm_forward(out.data(), rstd.data(), in.inp.data(), in.weight.data(), kN, kC);
    return test::weighted_sum(out, in.dout);
  };
  check_close("dinp", analytic.dinp, test::numeric_gradient(in.inp, loss), kGradientTolerance);
  check_close("dweight", test::minus(analytic.dweight, in.dweight),
              test::numeric_gradient(in.weight, loss), kGradientTolerance);
}

TEST_CASE(
    "rmsnorm's input gradient is almost orthogonal to its row: dinp . inp = 1e-5 * rstd^3 * "
    "sum(dnorm * inp)",
    "[rmsnorm]") {
  // out is invariant to scaling a row but for eps: with s^2 = 1/(ms + eps),
  // dinp . x = s * sum(dnorm x) * (1 - s^2 ms) = eps * s^3 * sum(dnorm x), dnorm = dout * weight.
  const RmsNormInputs in;
  const RmsNormOutputs result = run_rmsnorm<double>(in);
  for (int64_t i = 0; i < kN; ++i) {
    double dinp_dot_x = 0, dnorm_dot_x = 0;
    for (int64_t j = 0; j < kC; ++j) {
      const int64_t k = i * kC + j;
      dinp_dot_x += result.dinp[k] * in.inp[k];
      dnorm_dot_x += in.dout[k] * in.weight[j] * in.inp[k];
    }
    const double s = result.rstd[i];
    CHECK(dinp_dot_x == Approx(kEps * s * s * s * dnorm_dot_x).epsilon(1e-6).margin(1e-15));
  }
}

TEST_CASE("rmsnorm float agrees with double within 1e-5 relative", "[rmsnorm]") {
  RmsNormInputs in;
  for (auto* x : {&in.inp, &in.weight, &in.dout, &in.dweight}) *x = test::float_representable(*x);
  const RmsNormOutputs f = run_rmsnorm<float>(in);
  const RmsNormOutputs d = run_rmsnorm<double>(in);
  check_close("out", f.out, d.out, kFloatTolerance);
  check_close("rstd", f.rstd, d.rstd, kFloatTolerance);
  check_close("dinp", f.dinp, d.dinp, kFloatTolerance);
  check_close("dweight", f.dweight, d.dweight, kFloatTolerance);
}

}  // namespace
}  // namespace strata::cpu
