// The residual add with the row-parallel product's bias (kernels/cpu/residual.cpp): forward
// values, backward against central differences, float against double.

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

constexpr int64_t kN = 10;
constexpr int64_t kC = 8;

struct ResidualInputs {
  std::vector<double> residual = random_values(kN * kC, 41);
  std::vector<double> branch = random_values(kN * kC, 42);
  std::vector<double> bias = random_values(kC, 43);
  std::vector<double> dout = random_values(kN * kC, 44);  // R of L = sum(out * R)
  std::vector<double> dbias = random_values(kC, 45);
};

struct ResidualOutputs {
  std::vector<double> out, dbias;
};

template <typename T>
ResidualOutputs run_residual(const ResidualInputs& in) {
  const auto residual = cast_to<T>(in.residual);
  const auto branch = cast_to<T>(in.branch);
  const auto bias = cast_to<T>(in.bias);
  const auto dout = cast_to<T>(in.dout);
  auto dbias = cast_to<T>(in.dbias);
  std::vector<T> out(kN * kC);
  residual_forward(out.data(), residual.data(), branch.data(), bias.data(), kN, kC);
  residual_backward(dbias.data(), dout.data(), kN, kC);
  return {widen(out), widen(dbias)};
}

TEST_CASE("residual out = residual + branch + bias, and residual + branch with a null bias") {
  const ResidualInputs in;
  std::vector<double> out(kN * kC), out_no_bias(kN * kC);
  residual_forward(out.data(), in.residual.data(), in.branch.data(), in.bias.data(), kN, kC);
  residual_forward(out_no_bias.data(), in.residual.data(), in.branch.data(),
                   static_cast<const double*>(nullptr), kN, kC);
  for (int64_t i = 0; i < kN * kC; ++i) {
    CHECK(out[i] == in.residual[i] + in.branch[i] + in.bias[i % kC]);
    CHECK(out_no_bias[i] == in.residual[i] + in.branch[i]);
  }
}

TEST_CASE(
    "residual backward (float64): dbias (accumulated) equals central differences of "
    "sum(out * R), and so do the input gradients, which are dout itself") {
  ResidualInputs in;
  const ResidualOutputs analytic = run_residual<double>(in);
  std::vector<double> out(kN * kC);
  const auto loss = [&] {
    residual_forward(out.data(), in.residual.data(), in.branch.data(), in.bias.data(), kN, kC);
    return test::weighted_sum(out, in.dout);
  };
  check_close("dbias", test::minus(analytic.dbias, in.dbias), test::numeric_gradient(in.bias, loss),
              kGradientTolerance);
  check_close("dresidual", in.dout, test::numeric_gradient(in.residual, loss), kGradientTolerance);
  check_close("dbranch", in.dout, test::numeric_gradient(in.branch, loss), kGradientTolerance);
  // A null dbias (no bias) is skipped.
  residual_backward(static_cast<double*>(nullptr), in.dout.data(), kN, kC);
}

TEST_CASE("residual float agrees with double within 1e-5 relative") {
  ResidualInputs in;
  for (auto* x : {&in.residual, &in.branch, &in.bias, &in.dout, &in.dbias}) {
    *x = test::float_representable(*x);
  }
  const ResidualOutputs f = run_residual<float>(in);
  const ResidualOutputs d = run_residual<double>(in);
  check_close("out", f.out, d.out, kFloatTolerance);
  check_close("dbias", f.dbias, d.dbias, kFloatTolerance);
}

}  // namespace
}  // namespace strata::cpu
