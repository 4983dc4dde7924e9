// Dropout on the GPU (kernels/cuda/dropout.cu) against the CPU reference (kernels/cpu/dropout.cpp):
// the counter-based mask bit for bit, and a tensor through a mask on odd sizes, unaligned
// pointers and in place.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/kernels.hpp"
#include "kernels/cuda/check.hpp"
#include "kernels/cuda/context.hpp"
#include "kernels/cuda/kernels.hpp"
#include "tests/kernels_cuda/device_buffers.hpp"

namespace strata::cuda {
namespace {

using test::DeviceBuffer;
using test::download;
using test::poison;
using test::random_floats;
using test::rounded;
using test::upload;

// n row keys as a caller builds them (dropout_key of a layer and a token), on the device.
std::vector<uint64_t> row_keys(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> keys(n);
  for (uint64_t& key : keys) key = cpu::dropout_key(rng(), rng() % 4096);
  return keys;
}

DeviceBuffer<uint64_t> upload_keys(const std::vector<uint64_t>& keys) {
  DeviceBuffer<uint64_t> buffer(keys.size());
  STRATA_CUDA_CHECK(cudaMemcpy(buffer.data(), keys.data(), keys.size() * sizeof(uint64_t),
                               cudaMemcpyHostToDevice));
  return buffer;
}

TEMPLATE_TEST_CASE("dropout_mask on the GPU has the CPU reference's bits", "[gpu][dropout]", float,
                   bf16) {
  // mask (N,C) = [u >= rate] with u = (dropout_key(dropout_key(stream, row_keys[i]), j) >> 11)
  // * 2^-53 (kernels/cpu/dropout.cpp): the device's uint64 hash and double comparison give every
  // element the reference's 0 or 1, for rates 0 (all kept), 0.1, 0.5 and 0.9, C = 37 (odd) and
  // 64, and two streams. The kept fraction is also within 5 standard deviations of 1 - rate.
  using T = TestType;
  Context ctx;
  struct Shape {
    int64_t n, c;
  };
  for (const Shape shape : {Shape{5, 37}, Shape{16, 64}}) {
    for (const uint64_t stream : {uint64_t{0}, uint64_t{0x5eed1234abcdULL}}) {
      for (const double rate : {0.0, 0.1, 0.5, 0.9}) {
        INFO("N = " << shape.n << ", C = " << shape.c << ", stream " << stream << ", rate "
                    << rate);
        const size_t count = static_cast<size_t>(shape.n * shape.c);
        const std::vector<uint64_t> keys = row_keys(static_cast<size_t>(shape.n), stream + 3);
        std::vector<float> ref(count);
        cpu::dropout_mask(ref.data(), stream, keys.data(), shape.n, shape.c, rate);
        DeviceBuffer<uint64_t> d_keys = upload_keys(keys);
        DeviceBuffer<T> mask(count);
        poison(mask);
        dropout_mask(ctx, mask.data(), stream, d_keys.data(), shape.n, shape.c, rate);
        const std::vector<float> got = download(mask);
        size_t mismatches = 0;
        for (size_t k = 0; k < count; ++k) mismatches += got[k] != ref[k] ? 1 : 0;
        CHECK(mismatches == 0);
        const double kept = static_cast<double>(std::count(got.begin(), got.end(), 1.0f));
        const double expected = static_cast<double>(count) * (1.0 - rate);
        CHECK(std::abs(kept - expected) <=
              5.0 * std::sqrt(static_cast<double>(count) * rate * (1.0 - rate)) + 1e-9);
      }
    }
  }
}

TEST_CASE("dropout_mask rejects a rate below 0 or from 1 on", "[gpu][dropout]") {
  // kernels/cuda/kernels.hpp: a rate of 1 would drop everything and divide by 0 in the scale;
  // a negative rate is no probability. Both throw std::invalid_argument before any launch.
  Context ctx;
  DeviceBuffer<uint64_t> keys = upload_keys({1, 2});
  DeviceBuffer<float> mask(8);
  CHECK_THROWS_AS(dropout_mask(ctx, mask.data(), 0, keys.data(), 2, 4, 1.0), std::invalid_argument);
  CHECK_THROWS_WITH(dropout_mask(ctx, mask.data(), 0, keys.data(), 2, 4, -0.25),
                    Catch::Contains("rate"));
}

TEMPLATE_TEST_CASE("apply_dropout on the GPU matches the float64 CPU reference", "[gpu][dropout]",
                   float, bf16) {
  // out = in * mask * dropout_scale (cpu::apply_dropout), mask from cpu::dropout_mask at rate
  // 0.25, scale 1 / 0.75. n = 1, 7, 1023 leave a scalar tail after the 16-byte packs; offset 1
  // misaligns every pointer (the scalar kernel); in place (out == in) gives the same values.
  using T = TestType;
  Context ctx;
  constexpr double kRate = 0.25;
  const float scale = static_cast<float>(1.0 / (1.0 - kRate));
  for (const int64_t n : {1, 7, 1023}) {
    for (const size_t offset : {0, 1}) {
      for (const bool in_place : {false, true}) {
        INFO("n = " << n << ", offset = " << offset << (in_place ? ", in place" : ""));
        const size_t count = static_cast<size_t>(n);
        const std::vector<float> in = rounded<T>(random_floats(count + 1, 300 + n));
        const std::vector<uint64_t> keys = {cpu::dropout_key(11, static_cast<uint64_t>(n))};
        std::vector<float> mask(count + 1);
        cpu::dropout_mask(mask.data(), 9, keys.data(), 1, n + 1, kRate);
        std::vector<double> ref(count);
        const std::vector<double> in_d(in.begin() + static_cast<std::ptrdiff_t>(offset),
                                       in.begin() + static_cast<std::ptrdiff_t>(offset + count));
        const std::vector<double> mask_d(
            mask.begin() + static_cast<std::ptrdiff_t>(offset),
            mask.begin() + static_cast<std::ptrdiff_t>(offset + count));
        cpu::apply_dropout(ref.data(), in_d.data(), mask_d.data(), static_cast<double>(scale), n);

        DeviceBuffer<T> d_in = upload<T>(in);
        DeviceBuffer<T> d_mask = upload<T>(mask);
        DeviceBuffer<T> d_out(count + 1);
        poison(d_out);
        T* out = in_place ? d_in.data() + offset : d_out.data() + offset;
        apply_dropout(ctx, out, d_in.data() + offset, d_mask.data() + offset, scale, n);
        const std::vector<float> all = download(in_place ? d_in : d_out);
        const std::vector<float> got(all.begin() + static_cast<std::ptrdiff_t>(offset),
                                     all.begin() + static_cast<std::ptrdiff_t>(offset + count));
        STRATA_REQUIRE_CLOSE(T, "apply_dropout out", got, ref);
        // The element outside [offset, offset + n) is untouched: poisoned, or the input.
        const size_t outside = offset == 0 ? count : 0;
        if (in_place) {
          CHECK(all[outside] == in[outside]);
        } else {
          CHECK(std::isnan(all[outside]));
        }
      }
    }
  }
}

}  // namespace
}  // namespace strata::cuda
