// GELU in GPT-2's tanh approximation (kernels/cpu/gelu.cpp): values and symmetry, backward
// against central differences, float against double.

#include <catch2/catch.hpp>

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

constexpr int64_t kN = 13;

struct GeluInputs {
  std::vector<double> inp = random_values(kN, 21, -3.0, 3.0);
  std::vector<double> dout = random_values(kN, 22);  // R of L = sum(out * R)
};

struct GeluOutputs {
  std::vector<double> out, dinp;
};

template <typename T>
GeluOutputs run_gelu(const GeluInputs& in) {
  const auto inp = cast_to<T>(in.inp);
  const auto dout = cast_to<T>(in.dout);
  std::vector<T> out(kN);
  std::vector<T> dinp(kN, T(1e3));
  gelu_forward(out.data(), inp.data(), kN);
  gelu_backward(dinp.data(), inp.data(), dout.data(), kN);
  return {widen(out), widen(dinp)};
}

TEST_CASE("gelu(0) = 0, gelu(1) = 0.8411919906, gelu(10) = 10, gelu(-10) = 0") {
  // 0.5 * (1 + tanh(sqrt(2/pi) * 1.044715)) = 0.84119199060...; tanh saturates at +-10.
  const std::vector<double> x = {0.0, 1.0, 10.0, -10.0};
  std::vector<double> y(x.size());
  gelu_forward(y.data(), x.data(), static_cast<int64_t>(x.size()));
  CHECK(y[0] == 0.0);
  CHECK(y[1] == Approx(0.8411919906082768).epsilon(1e-12));
  CHECK(y[2] == Approx(10.0).epsilon(1e-15));
  CHECK(std::abs(y[3]) < 1e-15);
}

TEST_CASE("gelu(x) - gelu(-x) = x, since tanh is odd") {
  // 0.5 x (1 + tanh u) + 0.5 x (1 - tanh u) = x.
  const std::vector<double> x = random_values(kN, 23, -4.0, 4.0);
  std::vector<double> minus_x(kN);
  for (int64_t i = 0; i < kN; ++i) minus_x[i] = -x[i];
  std::vector<double> y(kN), y_minus(kN);
  gelu_forward(y.data(), x.data(), kN);
  gelu_forward(y_minus.data(), minus_x.data(), kN);
  for (int64_t i = 0; i < kN; ++i) CHECK(y[i] - y_minus[i] == Approx(x[i]).epsilon(1e-14));
}

TEST_CASE("gelu backward (float64) equals central differences of sum(out * R), written") {
  GeluInputs in;
  const GeluOutputs analytic = run_gelu<double>(in);
  std::vector<double> out(kN);
  const auto loss = [&] {
    gelu_forward(out.data(), in.inp.data(), kN);
    return test::weighted_sum(out, in.dout);
  };
  check_close("dinp", analytic.dinp, test::numeric_gradient(in.inp, loss), kGradientTolerance);
}

TEST_CASE("gelu float agrees with double within 1e-5 relative") {
  GeluInputs in;
  in.inp = test::float_representable(in.inp);
  in.dout = test::float_representable(in.dout);
  const GeluOutputs f = run_gelu<float>(in);
  const GeluOutputs d = run_gelu<double>(in);
  check_close("out", f.out, d.out, kFloatTolerance);
  check_close("dinp", f.dinp, d.dinp, kFloatTolerance);
}

}  // namespace
}  // namespace strata::cpu
