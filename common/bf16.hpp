#pragma once
// bfloat16 on the host: the upper 16 bits of an IEEE-754 binary32, as CUDA's __nv_bfloat16
// stores it (cuda_bf16.h), so a device buffer of one is a device buffer of the other. Conversion
// from float rounds to nearest, ties to even (__float2bfloat16_rn); a NaN stays a quiet NaN of
// the same sign. A sum of two is computed in fp32 and rounded once, as the device's bf16 add
// does: exact in fp32 for operands whose exponents differ by at most 15 (8 + 15 + 1 bits fit in
// fp32's 24), and where they differ by more the smaller is far under half a bf16 ulp of the
// larger, so the result is the correctly rounded bf16 sum either way. The host communicators sum
// bf16 buffers with it.

#include <cmath>
#include <compare>
#include <cstdint>
#include <cstring>

namespace strata {

struct Bf16 {
  uint16_t bits = 0;

  static Bf16 from_float(float value) {
    uint32_t word = 0;
    std::memcpy(&word, &value, sizeof(word));
    if (std::isnan(value)) return {static_cast<uint16_t>((word >> 16) | 0x40)};
    word += 0x7fff + ((word >> 16) & 1);  // round to nearest, ties to even
    return {static_cast<uint16_t>(word >> 16)};
  }
  float to_float() const {
    const uint32_t word = static_cast<uint32_t>(bits) << 16;
    float value = 0;
    std::memcpy(&value, &word, sizeof(value));
    return value;
  }

  friend Bf16 operator+(Bf16 a, Bf16 b) { return from_float(a.to_float() + b.to_float()); }
  // Equal bits; ordered as the values held (max reductions).
  friend bool operator==(Bf16 a, Bf16 b) { return a.bits == b.bits; }
  friend auto operator<=>(Bf16 a, Bf16 b) { return a.to_float() <=> b.to_float(); }
};

static_assert(sizeof(Bf16) == 2 && alignof(Bf16) == 2, "Bf16 has __nv_bfloat16's layout");

}  // namespace strata
