// The linear layer out = inp @ weight^T + bias (kernels/cpu/matmul.cpp): forward against the
// naive triple loop, backward against central differences, float against double.

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

// B*T = 2*5 rows, C = 8 in, OC = 11 out.
constexpr int64_t kN = 10;
constexpr int64_t kC = 8;
constexpr int64_t kOC = 11;

struct MatmulInputs {
  std::vector<double> inp = random_values(kN * kC, 1);
  std::vector<double> weight = random_values(kOC * kC, 2);
  std::vector<double> bias = random_values(kOC, 3);
  std::vector<double> dout = random_values(kN * kOC, 4);  // R of L = sum(out * R)
  // Starting values of the accumulated gradients.
  std::vector<double> dweight = random_values(kOC * kC, 5);
  std::vector<double> dbias = random_values(kOC, 6);
};

struct MatmulOutputs {
  std::vector<double> out, dinp, dweight, dbias;
};

// Forward and backward in precision T; dinp starts as garbage, which must be overwritten.
template <typename T>
MatmulOutputs run_matmul(const MatmulInputs& in) {
  const auto inp = cast_to<T>(in.inp);
  const auto weight = cast_to<T>(in.weight);
  const auto bias = cast_to<T>(in.bias);
  const auto dout = cast_to<T>(in.dout);
  auto dweight = cast_to<T>(in.dweight);
  auto dbias = cast_to<T>(in.dbias);
  std::vector<T> out(kN * kOC);
  std::vector<T> dinp(kN * kC, T(1e3));
  matmul_forward(out.data(), inp.data(), weight.data(), bias.data(), kN, kC, kOC);
  matmul_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(), weight.data(),
                  kN, kC, kOC);
  return {widen(out), widen(dinp), widen(dweight), widen(dbias)};
}

TEST_CASE("matmul forward equals the naive triple loop, with a bias and with a null bias") {
  // out[i][o] = sum_j inp[i][j] * weight[o][j] (+ bias[o]).
  const MatmulInputs in;
  std::vector<double> with_bias(kN * kOC);
  std::vector<double> without_bias(kN * kOC);
  matmul_forward(with_bias.data(), in.inp.data(), in.weight.data(), in.bias.data(), kN, kC, kOC);
  matmul_forward(without_bias.data(), in.inp.data(), in.weight.data(),
                 static_cast<const double*>(nullptr), kN, kC, kOC);
  std::vector<double> expected(kN * kOC);
  std::vector<double> expected_bias(kN * kOC);
  for (int64_t i = 0; i < kN; ++i) {
    for (int64_t o = 0; o < kOC; ++o) {
      double sum = 0;
      for (int64_t j = 0; j < kC; ++j) sum += in.inp[i * kC + j] * in.weight[o * kC + j];
      expected[i * kOC + o] = sum;
      expected_bias[i * kOC + o] = sum + in.bias[o];
    }
  }
  check_close("out without bias", without_bias, expected, 1e-14);
  check_close("out with bias", with_bias, expected_bias, 1e-14);
}

TEST_CASE(
    "matmul backward (float64) equals central differences of sum(out * R): dinp, dweight "
    "and dbias, the last two accumulated") {
  MatmulInputs in;
  const MatmulOutputs analytic = run_matmul<double>(in);
  std::vector<double> out(kN * kOC);
  const auto loss = [&] {
    matmul_forward(out.data(), in.inp.data(), in.weight.data(), in.bias.data(), kN, kC, kOC);
    return test::weighted_sum(out, in.dout);
  };
  check_close("dinp", analytic.dinp, test::numeric_gradient(in.inp, loss), kGradientTolerance);
  check_close("dweight", test::minus(analytic.dweight, in.dweight),
              test::numeric_gradient(in.weight, loss), kGradientTolerance);
  check_close("dbias", test::minus(analytic.dbias, in.dbias), test::numeric_gradient(in.bias, loss),
              kGradientTolerance);
}

TEST_CASE("matmul backward with null dinp and dbias accumulates the same dweight") {
  // dweight += dout^T @ inp does not depend on the skipped outputs.
  const MatmulInputs in;
  const MatmulOutputs full = run_matmul<double>(in);
  auto dweight = in.dweight;
  matmul_backward(static_cast<double*>(nullptr), dweight.data(), static_cast<double*>(nullptr),
                  in.dout.data(), in.inp.data(), in.weight.data(), kN, kC, kOC);
  check_close("dweight", dweight, full.dweight, 1e-14);
}

struct AccumulateResult {
  std::vector<double> accumulated;  // start, then matmul_forward_accumulate
  std::vector<double> expected;     // start + matmul_forward into a temporary
};

// In precision T: out = start, out += inp @ weight^T; and the reference computed apart.
template <typename T>
AccumulateResult run_accumulate(const MatmulInputs& in, const std::vector<double>& start) {
  const auto inp = cast_to<T>(in.inp);
  const auto weight = cast_to<T>(in.weight);
  auto accumulated = cast_to<T>(start);
  matmul_forward_accumulate(accumulated.data(), inp.data(), weight.data(), kN, kC, kOC);
  std::vector<T> product(kN * kOC);
  matmul_forward(product.data(), inp.data(), weight.data(), static_cast<const T*>(nullptr), kN, kC,
                 kOC);
  auto expected = cast_to<T>(start);
  for (size_t i = 0; i < expected.size(); ++i) expected[i] += product[i];
  return {widen(accumulated), widen(expected)};
}

TEST_CASE(
    "matmul forward accumulate adds inp @ weight^T into out: matmul forward into a temporary plus "
    "an add, float and double; with C = 0 out is unchanged") {
  // out += inp @ weight^T is the same gemm with beta = 1. BLAS may add a long row's partial sums
  // into out per block of C, so the two agree to rounding, not necessarily bit for bit: 1e-14
  // relative in double, 1e-6 in float (a few ulps of sums of C = 8 products of size ~1).
  const MatmulInputs in;
  const std::vector<double> start = random_values(kN * kOC, 7);
  const AccumulateResult d = run_accumulate<double>(in, start);
  check_close("out (double)", d.accumulated, d.expected, 1e-14);
  const AccumulateResult f = run_accumulate<float>(in, start);
  check_close("out (float)", f.accumulated, f.expected, 1e-6);
  auto untouched = start;
  matmul_forward_accumulate(untouched.data(), in.inp.data(), in.weight.data(), kN, int64_t{0}, kOC);
  CHECK(untouched == start);
}

TEST_CASE("matmul float (sgemm) agrees with double (dgemm) within 1e-5 relative") {
  MatmulInputs in;
  for (auto* x : {&in.inp, &in.weight, &in.bias, &in.dout, &in.dweight, &in.dbias}) {
    *x = test::float_representable(*x);
  }
  const MatmulOutputs f = run_matmul<float>(in);
  const MatmulOutputs d = run_matmul<double>(in);
  check_close("out", f.out, d.out, kFloatTolerance);
  check_close("dinp", f.dinp, d.dinp, kFloatTolerance);
  check_close("dweight", f.dweight, d.dweight, kFloatTolerance);
  check_close("dbias", f.dbias, d.dbias, kFloatTolerance);
}

}  // namespace
}  // namespace strata::cpu
