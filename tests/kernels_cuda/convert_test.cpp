// Conversion between fp32 and bf16 on the GPU (kernels/cuda/convert.cu) against the host's
// bfloat16 (common/bf16.hpp), an implementation of its own: fp32 to bf16 rounds to nearest with
// ties to even, bit for bit, and bf16 to fp32 is exact.

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "common/bf16.hpp"
#include "kernels/cuda/check.hpp"
#include "kernels/cuda/context.hpp"
#include "kernels/cuda/kernels.hpp"
#include "tests/kernels_cuda/device_buffers.hpp"

namespace strata::cuda {
namespace {

using test::DeviceBuffer;
using test::random_floats;

float from_bits(uint32_t word) {
  float value = 0;
  std::memcpy(&value, &word, sizeof(value));
  return value;
}

template <typename T>
DeviceBuffer<T> upload_raw(const std::vector<T>& host) {
  DeviceBuffer<T> buffer(host.size());
  STRATA_CUDA_CHECK(
      cudaMemcpy(buffer.data(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return buffer;
}

template <typename T>
std::vector<T> download_raw(const DeviceBuffer<T>& buffer) {
  STRATA_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<T> host(buffer.size());
  STRATA_CUDA_CHECK(
      cudaMemcpy(host.data(), buffer.data(), host.size() * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}

// Values where rounding decides: ties (1 + 2^-8 is halfway between 1 and 1 + 2^-7 and rounds
// down to the even 1; 1 + 3 * 2^-8 rounds up to the even 1 + 2^-6), just off a tie, the largest
// float (rounds to infinity), the smallest normal and a subnormal, infinities, zeros of both
// signs; then random values over many binades.
std::vector<float> hard_values() {
  std::vector<float> x = {1.0f + 0x1p-8f,
                          1.0f + 3 * 0x1p-8f,
                          -(1.0f + 0x1p-8f),
                          1.0f + 0x1p-8f + 0x1p-23f,
                          std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::min(),
                          from_bits(0x00012345u),
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          0.0f,
                          -0.0f,
                          3.140625f,
                          65504.0f};
  for (const float r : random_floats(1021, 5)) x.push_back(r * std::ldexp(1.0f, int(r * 60)));
  return x;
}

TEST_CASE("convert fp32 to bf16 on the GPU rounds as the host's bfloat16, bit for bit",
          "[gpu][convert]") {
  // Bf16::from_float adds 0x7fff plus the kept lowest bit to the word (round to nearest even);
  // __float2bfloat16_rn on the device must give the same 16 bits for every value, NaN aside
  // (any quiet NaN is accepted for a NaN input).
  Context ctx;
  std::vector<float> x = hard_values();
  x.push_back(std::numeric_limits<float>::quiet_NaN());
  DeviceBuffer<float> src = upload_raw(x);
  DeviceBuffer<bf16> dst(x.size());
  test::poison(dst);
  convert(ctx, dst.data(), src.data(), static_cast<int64_t>(x.size()));
  const std::vector<bf16> got = download_raw(dst);
  size_t mismatches = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    uint16_t bits = 0;
    std::memcpy(&bits, &got[i], sizeof(bits));
    const Bf16 want = Bf16::from_float(x[i]);
    if (std::isnan(x[i])) {
      CHECK(std::isnan(Bf16{bits}.to_float()));
    } else if (bits != want.bits) {
      ++mismatches;
      INFO("x = " << x[i] << ": device " << bits << ", host " << want.bits);
      CHECK(bits == want.bits);
    }
  }
  CHECK(mismatches == 0);
}

TEST_CASE("convert bf16 to fp32 on the GPU is exact, and back gives the same bits",
          "[gpu][convert]") {
  // Every bf16 value is an fp32 value (its word shifted up 16 bits): the widening is exact and
  // rounding it back is the identity. Checked on the host's roundings of the hard values, on an
  // unaligned odd-length span.
  Context ctx;
  std::vector<Bf16> x;  // __nv_bfloat16's layout (common/bf16.hpp)
  std::vector<float> widened;
  for (const float value : hard_values()) {
    x.push_back(Bf16::from_float(value));
    widened.push_back(x.back().to_float());
  }
  DeviceBuffer<Bf16> src = upload_raw(x);
  DeviceBuffer<float> wide(x.size());
  DeviceBuffer<Bf16> back(x.size());
  test::poison(wide);
  STRATA_CUDA_CHECK(cudaMemset(back.data(), 0xFF, back.size() * sizeof(Bf16)));
  const auto n = static_cast<int64_t>(x.size()) - 1;
  const auto device = [](Bf16* p) { return reinterpret_cast<bf16*>(p); };
  convert(ctx, wide.data() + 1, static_cast<const bf16*>(device(src.data() + 1)), n);
  convert(ctx, device(back.data() + 1), static_cast<const float*>(wide.data() + 1), n);
  const std::vector<float> got = download_raw(wide);
  const std::vector<Bf16> round_trip = download_raw(back);
  size_t mismatches = 0;
  for (size_t i = 1; i < x.size(); ++i) {
    mismatches += std::memcmp(&got[i], &widened[i], sizeof(float)) != 0 ? 1 : 0;
    mismatches += round_trip[i] != x[i] ? 1 : 0;
  }
  CHECK(mismatches == 0);
}

}  // namespace
}  // namespace strata::cuda
