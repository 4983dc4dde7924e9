// The host bfloat16 (common/bf16.hpp) against facts of the format itself: bf16 is the upper 16
// bits of an IEEE-754 binary32 (8 exponent bits, 7 stored mantissa bits), rounded to nearest,
// ties to even, as CUDA's __float2bfloat16_rn rounds (CUDA Math API, "Bfloat16 Precision
// Conversion"). The bit patterns below are worked out by hand from that layout.

#include "common/bf16.hpp"

#include <cmath>
#include <cstdint>
#include <limits>

#include <catch2/catch.hpp>

namespace strata {
namespace {

TEST_CASE("bf16 keeps the upper half of a float's bits") {
  CHECK(Bf16::from_float(1.0f).bits == 0x3f80);   // 1.0f is 0x3f800000
  CHECK(Bf16::from_float(-2.0f).bits == 0xc000);  // -2.0f is 0xc0000000
  CHECK(Bf16::from_float(0.0f).bits == 0x0000);
  CHECK(Bf16{0x3f80}.to_float() == 1.0f);
  CHECK(Bf16{0x4049}.to_float() == 3.140625f);  // 1.5703125 * 2: mantissa 0x49 / 128 = 0.5703125
}

TEST_CASE("bf16 rounds to nearest, ties to even") {
  // Above 1 the spacing is 2^-7: 1 + 2^-8 is halfway between 1 (even mantissa) and 1 + 2^-7.
  CHECK(Bf16::from_float(1.0f + 0x1p-8f).bits == 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): up.
  CHECK(Bf16::from_float(1.0f + 3 * 0x1p-8f).bits == 0x3f82);
  // Just above and below the halfway point round to the nearer neighbour.
  CHECK(Bf16::from_float(1.0f + 0x1p-8f + 0x1p-20f).bits == 0x3f81);
  CHECK(Bf16::from_float(1.0f + 0x1p-8f - 0x1p-20f).bits == 0x3f80);
  // The largest finite bf16 is 0x7f7f; past it, halfway up, rounds to infinity.
  CHECK(Bf16::from_float(std::numeric_limits<float>::max()).bits == 0x7f80);
}

TEST_CASE("bf16 keeps a NaN a NaN and its sign") {
  const Bf16 nan = Bf16::from_float(-std::numeric_limits<float>::quiet_NaN());
  CHECK(std::isnan(nan.to_float()));
  CHECK(std::signbit(nan.to_float()));
  // A signalling NaN comes back quiet, still a NaN.
  CHECK(std::isnan(Bf16::from_float(std::numeric_limits<float>::signaling_NaN()).to_float()));
}

TEST_CASE("a bf16 sum rounds once, to the nearest bf16 of the exact sum") {
  const Bf16 one = Bf16::from_float(1.0f);
  // 1 + 2^-8 exactly: halfway, to even (1).
  CHECK((one + Bf16::from_float(0x1p-8f)).bits == 0x3f80);
  // 1 + 1.5 * 2^-8 is above halfway: up to 1 + 2^-7.
  CHECK((one + Bf16::from_float(1.5f * 0x1p-8f)).bits == 0x3f81);
  // Far apart: the smaller is lost.
  CHECK((one + Bf16::from_float(0x1p-30f)) == one);
  // Group-order sums are not associative in bf16: ((1 + 2^-8) + 2^-8) is 1, 1 + 2^-7 is not.
  const Bf16 half_ulp = Bf16::from_float(0x1p-8f);
  CHECK(((one + half_ulp) + half_ulp) == one);
  CHECK((one + (half_ulp + half_ulp)).bits == 0x3f81);
}

TEST_CASE("bf16 orders as the values it holds") {
  CHECK(Bf16::from_float(-1.0f) < Bf16::from_float(0.5f));
  CHECK(Bf16::from_float(2.0f) > Bf16::from_float(1.0f));
}

}  // namespace
}  // namespace strata
