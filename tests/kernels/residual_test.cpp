// The residual add with the row-parallel product's bias (kernels/cpu/residual.cpp): forward
// values, backward against central differences, float against double; with hidden dropout
// (Megatron-LM's bias_dropout_add), the forward's closed form and the gradients through
// apply_dropout against central differences.

#include <catch2/catch.hpp>

#include <algorithm>
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
// No dropout.
constexpr const double* kNoMask = nullptr;

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
  residual_forward(out.data(), residual.data(), branch.data(), bias.data(), kN, kC,
                   static_cast<const T*>(nullptr), T(1));
  residual_backward(dbias.data(), dout.data(), kN, kC);
  return {widen(out), widen(dbias)};
}

TEST_CASE("residual out = residual + branch + bias, and residual + branch with a null bias") {
  const ResidualInputs in;
  std::vector<double> out(kN * kC), out_no_bias(kN * kC);
  residual_forward(out.data(), in.residual.data(), in.branch.data(), in.bias.data(), kN, kC,
                   kNoMask, 1.0);
  residual_forward(out_no_bias.data(), in.residual.data(), in.branch.data(),
                   static_cast<const double*>(nullptr), kN, kC, kNoMask, 1.0);
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
    residual_forward(out.data(), in.residual.data(), in.branch.data(), in.bias.data(), kN, kC,
                     kNoMask, 1.0);
    return test::weighted_sum(out, in.dout);
  };
  check_close("dbias", test::minus(analytic.dbias, in.dbias), test::numeric_gradient(in.bias, loss),
              kGradientTolerance);
  check_close("dresidual", in.dout, test::numeric_gradient(in.residual, loss), kGradientTolerance);
  check_close("dbranch", in.dout, test::numeric_gradient(in.branch, loss), kGradientTolerance);
  // A null dbias (no bias) is skipped.
  residual_backward(static_cast<double*>(nullptr), in.dout.data(), kN, kC);
}

// A dropout mask (N,C) of rate 0.3 and its scale 1 / (1 - 0.3), with kept and dropped elements.
struct ResidualDropout {
  static constexpr double kRate = 0.3;
  double scale = 1.0 / (1.0 - kRate);
  std::vector<double> mask = std::vector<double>(kN * kC);
  ResidualDropout() {
    std::vector<uint64_t> row_keys(kN);
    for (int64_t i = 0; i < kN; ++i) row_keys[i] = dropout_key(7, static_cast<uint64_t>(i));
    dropout_mask(mask.data(), 99, row_keys.data(), kN, kC, kRate);
    const auto kept = std::count(mask.begin(), mask.end(), 1.0);
    REQUIRE(kept > 0);
    REQUIRE(kept < kN * kC);
  }
};

TEST_CASE(
    "residual with a dropout mask: out = residual + (branch + bias) * mask * scale, with and "
    "without a bias") {
  // Megatron-LM's bias_dropout_add: the bias joins the branch before the dropout.
  const ResidualInputs in;
  const ResidualDropout dropout;
  std::vector<double> out(kN * kC), out_no_bias(kN * kC);
  residual_forward(out.data(), in.residual.data(), in.branch.data(), in.bias.data(), kN, kC,
                   dropout.mask.data(), dropout.scale);
  residual_forward(out_no_bias.data(), in.residual.data(), in.branch.data(),
                   static_cast<const double*>(nullptr), kN, kC, dropout.mask.data(), dropout.scale);
  for (int64_t i = 0; i < kN * kC; ++i) {
    const double m = dropout.mask[i];
    CHECK(out[i] == in.residual[i] + (in.branch[i] + in.bias[i % kC]) * m * dropout.scale);
    CHECK(out_no_bias[i] == in.residual[i] + in.branch[i] * m * dropout.scale);
  }
}

TEST_CASE(
    "residual with dropout (float64): apply_dropout then residual_backward give the branch and "
    "bias gradients of central differences of sum(out * R); the residual's is dout") {
  // d out / d branch = mask * scale elementwise, d out / d bias_j = the same summed over rows.
  ResidualInputs in;
  const ResidualDropout dropout;
  std::vector<double> dbranch(kN * kC, 1e3);  // poisoned: written, not accumulated
  apply_dropout(dbranch.data(), in.dout.data(), dropout.mask.data(), dropout.scale, kN * kC);
  std::vector<double> dbias = in.dbias;
  residual_backward(dbias.data(), dbranch.data(), kN, kC);
  std::vector<double> out(kN * kC);
  const auto loss = [&] {
    residual_forward(out.data(), in.residual.data(), in.branch.data(), in.bias.data(), kN, kC,
                     dropout.mask.data(), dropout.scale);
    return test::weighted_sum(out, in.dout);
  };
  check_close("dbranch", dbranch, test::numeric_gradient(in.branch, loss), kGradientTolerance);
  check_close("dbias", test::minus(dbias, in.dbias), test::numeric_gradient(in.bias, loss),
              kGradientTolerance);
  check_close("dresidual", in.dout, test::numeric_gradient(in.residual, loss), kGradientTolerance);
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
