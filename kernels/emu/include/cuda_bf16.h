#pragma once
// The CPU emulation of CUDA: bfloat16 as the toolkit's cuda_bf16.h defines it (the upper 16 bits
// of an IEEE fp32, conversions from fp32 rounding to nearest even), for the host compiler.
//
// SKELETON (issue 19): the type and its conversions; the runtime adds the device intrinsics.

#include <cmath>
#include <cstdint>
#include <cstring>

struct __nv_bfloat16 {
  uint16_t x = 0;
};

inline float __bfloat162float(__nv_bfloat16 value) {
  const uint32_t bits = static_cast<uint32_t>(value.x) << 16;
  float result;
  std::memcpy(&result, &bits, sizeof(result));
  return result;
}

inline __nv_bfloat16 __float2bfloat16_rn(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  __nv_bfloat16 result;
  if (std::isnan(value)) {
    result.x = static_cast<uint16_t>((bits >> 16) | 0x40);  // a quiet NaN keeps its sign
  } else {
    bits += 0x7fff + ((bits >> 16) & 1);  // round to nearest, ties to even
    result.x = static_cast<uint16_t>(bits >> 16);
  }
  return result;
}
