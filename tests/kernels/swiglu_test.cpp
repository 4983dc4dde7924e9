// SwiGLU in Megatron-LM's [gate | up] layout (kernels/cpu/swiglu.cpp): silu's closed-form values
// and limits, out = silu(gate) * up at chosen points and rows, backward against central
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

// N = 3 rows of H = 5: inp is (3,10), out (3,5).
constexpr int64_t kN = 3;
constexpr int64_t kH = 5;

struct SwigluInputs {
  std::vector<double> inp = random_values(kN * 2 * kH, 31, -4.0, 4.0);
  std::vector<double> dout = random_values(kN * kH, 32);  // R of L = sum(out * R)
};

struct SwigluOutputs {
  std::vector<double> out, dinp;
};

template <typename T>
SwigluOutputs run_swiglu(const SwigluInputs& in) {
  const auto inp = cast_to<T>(in.inp);
  const auto dout = cast_to<T>(in.dout);
  std::vector<T> out(kN * kH, T(1e3));
  std::vector<T> dinp(kN * 2 * kH, T(1e3));
  swiglu_forward(out.data(), inp.data(), kN, kH);
  swiglu_backward(dinp.data(), inp.data(), dout.data(), kN, kH);
  return {widen(out), widen(dinp)};
}

// One row [gate | up] of width 2 * gate.size().
std::vector<double> row_of(const std::vector<double>& gate, const std::vector<double>& up) {
  std::vector<double> row(gate);
  row.insert(row.end(), up.begin(), up.end());
  return row;
}

TEST_CASE("silu(0) = 0, silu(1) = 0.7310585786, silu(20) -> 20, silu(-20) -> 0", "[swiglu]") {
  // With up = 1, out = silu(gate) = gate / (1 + e^-gate): 1 / (1 + e^-1) = 0.73105857863...;
  // silu(20) = 20 - 4.1e-8 and silu(-20) = -4.1e-8 (x sigmoid(x) -> x and -> 0 in the tails).
  const std::vector<double> gate = {0.0, 1.0, 20.0, -20.0};
  const std::vector<double> inp = row_of(gate, {1.0, 1.0, 1.0, 1.0});
  std::vector<double> out(gate.size());
  swiglu_forward(out.data(), inp.data(), 1, static_cast<int64_t>(gate.size()));
  CHECK(out[0] == 0.0);
  CHECK(out[1] == Approx(0.7310585786300049).epsilon(1e-12));
  CHECK(out[2] == Approx(20.0).epsilon(1e-8));
  CHECK(out[2] < 20.0);
  CHECK(std::abs(out[3]) < 1e-7);
  CHECK(out[3] < 0.0);
}

TEST_CASE("swiglu out = silu(gate) * up at chosen points, row by row", "[swiglu]") {
  // Two rows of H = 2. silu(2) * 3 = 6 / (1 + e^-2) = 5.284782467867294;
  // silu(-1) * 0.5 = -0.5 / (1 + e) = -0.13447071068499755; silu(0) * 7 = 0;
  // silu(1) * -2 = -2 / (1 + e^-1) = -1.4621171572600098.
  std::vector<double> inp = row_of({2.0, -1.0}, {3.0, 0.5});
  const std::vector<double> second = row_of({0.0, 1.0}, {7.0, -2.0});
  inp.insert(inp.end(), second.begin(), second.end());
  std::vector<double> out(4, 1e3);
  swiglu_forward(out.data(), inp.data(), 2, 2);
  CHECK(out[0] == Approx(5.284782467867294).epsilon(1e-12));
  CHECK(out[1] == Approx(-0.13447071068499755).epsilon(1e-12));
  CHECK(out[2] == 0.0);
  CHECK(out[3] == Approx(-1.4621171572600098).epsilon(1e-12));
}

TEST_CASE("swiglu backward at gate = 0: dgate = dout * up / 2 (silu'(0) = 1/2), dup = 0",
          "[swiglu]") {
  // silu'(x) = s (1 + x (1 - s)) with s = sigmoid(0) = 1/2 gives 1/2; silu(0) = 0.
  const std::vector<double> inp = row_of({0.0}, {3.0});
  const std::vector<double> dout = {5.0};
  std::vector<double> dinp(2, 1e3);
  swiglu_backward(dinp.data(), inp.data(), dout.data(), 1, 1);
  CHECK(dinp[0] == 7.5);
  CHECK(dinp[1] == 0.0);
}

TEST_CASE("swiglu backward (float64) equals central differences of sum(out * R), written",
          "[swiglu]") {
  SwigluInputs in;
  const SwigluOutputs analytic = run_swiglu<double>(in);
  std::vector<double> out(kN * kH);
  const auto loss = [&] {
    swiglu_forward(out.data(), in.inp.data(), kN, kH);
    return test::weighted_sum(out, in.dout);
  };
  check_close("dinp", analytic.dinp, test::numeric_gradient(in.inp, loss), kGradientTolerance);
}

TEST_CASE("swiglu float agrees with double within 1e-5 relative", "[swiglu]") {
  SwigluInputs in;
  in.inp = test::float_representable(in.inp);
  in.dout = test::float_representable(in.dout);
  const SwigluOutputs f = run_swiglu<float>(in);
  const SwigluOutputs d = run_swiglu<double>(in);
  check_close("out", f.out, d.out, kFloatTolerance);
  check_close("dinp", f.dinp, d.dinp, kFloatTolerance);
}

}  // namespace
}  // namespace strata::cpu
