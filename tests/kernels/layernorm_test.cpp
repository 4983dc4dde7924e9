// LayerNorm (kernels/cpu/layernorm.cpp): the normalized rows' moments, backward against central
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

struct LayerNormInputs {
  std::vector<double> inp = random_values(kN * kC, 11, -2.0, 3.0);  // rows with a nonzero mean
  std::vector<double> weight = random_values(kC, 12, 0.5, 1.5);
  std::vector<double> bias = random_values(kC, 13);
  std::vector<double> dout = random_values(kN * kC, 14);  // R of L = sum(out * R)
  std::vector<double> dweight = random_values(kC, 15);
  std::vector<double> dbias = random_values(kC, 16);
};

struct LayerNormOutputs {
  std::vector<double> out, mean, rstd, dinp, dweight, dbias;
};

template <typename T>
LayerNormOutputs run_layernorm(const LayerNormInputs& in) {
  const auto inp = cast_to<T>(in.inp);
  const auto weight = cast_to<T>(in.weight);
  const auto bias = cast_to<T>(in.bias);
  const auto dout = cast_to<T>(in.dout);
  auto dweight = cast_to<T>(in.dweight);
  auto dbias = cast_to<T>(in.dbias);
  std::vector<T> out(kN * kC), mean(kN), rstd(kN);
  std::vector<T> dinp(kN * kC, T(1e3));
  layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(),
                    kN, kC);
  layernorm_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                     weight.data(), mean.data(), rstd.data(), kN, kC);
  return {widen(out), widen(mean), widen(rstd), widen(dinp), widen(dweight), widen(dbias)};
}

TEST_CASE(
    "layernorm with weight 1 and bias 0 gives rows of mean 0 and variance var/(var+1e-5), "
    "and saves the row's mean and 1/sqrt(var+1e-5)") {
  // y = (x - mean) / sqrt(var + eps): mean(y) = 0, var(y) = var / (var + eps) (biased variances).
  LayerNormInputs in;
  in.weight.assign(kC, 1.0);
  in.bias.assign(kC, 0.0);
  const LayerNormOutputs result = run_layernorm<double>(in);
  for (int64_t i = 0; i < kN; ++i) {
    double x_mean = 0, x_var = 0, y_mean = 0, y_var = 0;
    for (int64_t j = 0; j < kC; ++j) x_mean += in.inp[i * kC + j] / kC;
    for (int64_t j = 0; j < kC; ++j) y_mean += result.out[i * kC + j] / kC;
    for (int64_t j = 0; j < kC; ++j) {
      x_var += (in.inp[i * kC + j] - x_mean) * (in.inp[i * kC + j] - x_mean) / kC;
      y_var += result.out[i * kC + j] * result.out[i * kC + j] / kC;
    }
    CHECK(std::abs(y_mean) < 1e-14);
    CHECK(y_var == Approx(x_var / (x_var + 1e-5)).epsilon(1e-13));
    CHECK(result.mean[i] == Approx(x_mean).epsilon(1e-14));
    CHECK(result.rstd[i] == Approx(1 / std::sqrt(x_var + 1e-5)).epsilon(1e-13));
  }
}

TEST_CASE("layernorm applies the affine after normalizing: out = norm * weight + bias") {
  const LayerNormInputs in;
  LayerNormInputs plain = in;
  plain.weight.assign(kC, 1.0);
  plain.bias.assign(kC, 0.0);
  const LayerNormOutputs affine = run_layernorm<double>(in);
  const LayerNormOutputs norm = run_layernorm<double>(plain);
  std::vector<double> expected(kN * kC);
  for (int64_t i = 0; i < kN * kC; ++i) {
    expected[i] = norm.out[i] * in.weight[i % kC] + in.bias[i % kC];
  }
  check_close("out", affine.out, expected, 1e-14);
}

TEST_CASE(
    "layernorm with a null bias equals bias 0, and a null dbias leaves dinp and dweight "
    "unchanged") {
  LayerNormInputs in;
  in.bias.assign(kC, 0.0);
  const LayerNormOutputs zero_bias = run_layernorm<double>(in);
  std::vector<double> out(kN * kC), mean(kN), rstd(kN), dinp(kN * kC);
  auto dweight = in.dweight;
  const double* no_bias = nullptr;
  layernorm_forward(out.data(), mean.data(), rstd.data(), in.inp.data(), in.weight.data(), no_bias,
                    kN, kC);
  layernorm_backward(dinp.data(), dweight.data(), static_cast<double*>(nullptr), in.dout.data(),
                     in.inp.data(), in.weight.data(), mean.data(), rstd.data(), kN, kC);
  CHECK(out == zero_bias.out);
  CHECK(dinp == zero_bias.dinp);
  CHECK(dweight == zero_bias.dweight);
}

TEST_CASE(
    "layernorm backward (float64) equals central differences of sum(out * R): dinp, "
    "dweight and dbias, the last two accumulated") {
  LayerNormInputs in;
  const LayerNormOutputs analytic = run_layernorm<double>(in);
  std::vector<double> out(kN * kC), mean(kN), rstd(kN);
  const auto loss = [&] {
    layernorm_forward(out.data(), mean.data(), rstd.data(), in.inp.data(), in.weight.data(),
                      in.bias.data(), kN, kC);
    return test::weighted_sum(out, in.dout);
  };
  check_close("dinp", analytic.dinp, test::numeric_gradient(in.inp, loss), kGradientTolerance);
  check_close("dweight", test::minus(analytic.dweight, in.dweight),
              test::numeric_gradient(in.weight, loss), kGradientTolerance);
  check_close("dbias", test::minus(analytic.dbias, in.dbias), test::numeric_gradient(in.bias, loss),
              kGradientTolerance);
}

TEST_CASE("layernorm float agrees with double within 1e-5 relative") {
  LayerNormInputs in;
  for (auto* x : {&in.inp, &in.weight, &in.bias, &in.dout, &in.dweight, &in.dbias}) {
    *x = test::float_representable(*x);
  }
  const LayerNormOutputs f = run_layernorm<float>(in);
  const LayerNormOutputs d = run_layernorm<double>(in);
  check_close("out", f.out, d.out, kFloatTolerance);
  check_close("mean", f.mean, d.mean, kFloatTolerance);
  check_close("rstd", f.rstd, d.rstd, kFloatTolerance);
  check_close("dinp", f.dinp, d.dinp, kFloatTolerance);
  check_close("dweight", f.dweight, d.dweight, kFloatTolerance);
  check_close("dbias", f.dbias, d.dbias, kFloatTolerance);
}

}  // namespace
}  // namespace strata::cpu
