// GeGLU in Megatron-LM's [gate | up] layout (kernels/cpu/geglu.cpp): out = gelu(gate) * up against
// the tanh closed form at chosen points and rows, backward against central differences, float
// against double.

#include <catch2/catch.hpp>

#include <cmath>
#include <numbers>
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

// N = 3 rows of H = 5: inp is (3,10), out (3,5).
constexpr int64_t kN = 3;
constexpr int64_t kH = 5;

struct GegluInputs {
  std::vector<double> inp = random_values(kN * 2 * kH, 51, -4.0, 4.0);
  std::vector<double> dout = random_values(kN * kH, 52);  // R of L = sum(out * R)
};

struct GegluOutputs {
  std::vector<double> out, dinp;
};

template <typename T>
GegluOutputs run_geglu(const GegluInputs& in) {
  const auto inp = cast_to<T>(in.inp);
  const auto dout = cast_to<T>(in.dout);
  std::vector<T> out(kN * kH, T(1e3));
  std::vector<T> dinp(kN * 2 * kH, T(1e3));
  geglu_forward(out.data(), inp.data(), kN, kH);
  geglu_backward(dinp.data(), inp.data(), dout.data(), kN, kH);
  return {widen(out), widen(dinp)};
}

// One row [gate | up] of width 2 * gate.size().
std::vector<double> row_of(const std::vector<double>& gate, const std::vector<double>& up) {
  std::vector<double> row(gate);
  row.insert(row.end(), up.begin(), up.end());
  return row;
}

// GELU's tanh approximation as written in Hendrycks & Gimpel 2016 and PyTorch's
// gelu(approximate='tanh'): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). The kernel
// computes it as x sigmoid(2u) instead; the two agree up to rounding (1 + tanh u loses about
// three digits to cancellation at x = -4, the end of the test's range: still under 1e-12).
double gelu_tanh_closed_form(double x) {
  const double u = std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1.0 + std::tanh(u));
}

TEST_CASE("geglu out = gelu(gate) * up at chosen points, row by row", "[geglu]") {
  // Two rows of H = 2, values of the tanh form: gelu(1) * 3 = 0.8411919906082768 * 3 =
  // 2.5235759718248305; gelu(-1) * 0.5 = -0.15880800939172324 * 0.5 = -0.07940400469586162
  // (gelu(-1) = gelu(1) - 1, tanh being odd); gelu(0) * 7 = 0;
  // gelu(2) * -2 = 1.954597694087775 * -2 = -3.90919538817555.
  std::vector<double> inp = row_of({1.0, -1.0}, {3.0, 0.5});
  const std::vector<double> second = row_of({0.0, 2.0}, {7.0, -2.0});
  inp.insert(inp.end(), second.begin(), second.end());
  std::vector<double> out(4, 1e3);
  geglu_forward(out.data(), inp.data(), 2, 2);
  CHECK(out[0] == Approx(2.5235759718248305).epsilon(1e-12));
  CHECK(out[1] == Approx(-0.07940400469586162).epsilon(1e-12));
  CHECK(out[2] == 0.0);
  CHECK(out[3] == Approx(-3.90919538817555).epsilon(1e-12));
}

TEST_CASE("geglu out equals 0.5 gate (1 + tanh(sqrt(2/pi) (gate + 0.044715 gate^3))) * up",
          "[geglu]") {
  // The closed form with std::tanh on random rows: the kernel's sigmoid(2u) is 0.5 (1 + tanh u).
  const GegluInputs in;
  std::vector<double> out(kN * kH, 1e3);
  geglu_forward(out.data(), in.inp.data(), kN, kH);
  for (int64_t r = 0; r < kN; ++r) {
    for (int64_t j = 0; j < kH; ++j) {
      const double gate = in.inp[r * 2 * kH + j];
      const double up = in.inp[r * 2 * kH + kH + j];
      INFO("row " << r << ", column " << j << ", gate " << gate << ", up " << up);
      CHECK(out[r * kH + j] == Approx(gelu_tanh_closed_form(gate) * up).epsilon(1e-12));
    }
  }
}

TEST_CASE("geglu backward at gate = 0: dgate = dout * up / 2 (gelu'(0) = 1/2), dup = 0",
          "[geglu]") {
  // gelu'(x) = g + 2 x g (1 - g) s (1 + 3 a x^2) with g = sigmoid(0) = 1/2 at x = 0; gelu(0) = 0.
  const std::vector<double> inp = row_of({0.0}, {3.0});
  const std::vector<double> dout = {5.0};
  std::vector<double> dinp(2, 1e3);
  geglu_backward(dinp.data(), inp.data(), dout.data(), 1, 1);
  CHECK(dinp[0] == 7.5);
  CHECK(dinp[1] == 0.0);
}

TEST_CASE("geglu backward (float64) equals central differences of sum(out * R), written",
          "[geglu]") {
  GegluInputs in;
  const GegluOutputs analytic = run_geglu<double>(in);
  std::vector<double> out(kN * kH);
  const auto loss = [&] {
    geglu_forward(out.data(), in.inp.data(), kN, kH);
    return test::weighted_sum(out, in.dout);
  };
  check_close("dinp", analytic.dinp, test::numeric_gradient(in.inp, loss), kGradientTolerance);
}

TEST_CASE("geglu float agrees with double within 1e-5 relative", "[geglu]") {
  GegluInputs in;
  in.inp = test::float_representable(in.inp);
  in.dout = test::float_representable(in.dout);
  const GegluOutputs f = run_geglu<float>(in);
  const GegluOutputs d = run_geglu<double>(in);
  check_close("out", f.out, d.out, kFloatTolerance);
  check_close("dinp", f.dinp, d.dinp, kFloatTolerance);
}

}  // namespace
}  // namespace strata::cpu
