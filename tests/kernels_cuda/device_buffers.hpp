#pragma once
// What the GPU kernel tests share: device buffers filled from host vectors (with the rounding
// of the storage type, so that the CPU reference sees exactly the kernel's inputs), poisoning of
// outputs before a run (every byte 0xFF, a NaN in fp32 and bf16, so an element the kernel never
// writes fails the comparison), and the comparison ||out - ref|| / ||ref||.
//
// Tolerances (issue 7): fp32 variants under 1e-5, bf16 under 1e-2, relative L2. An accumulated
// (+=) gradient starts from random values, and what the kernel added (out - start) is compared
// with what the reference added, so that the start does not hide the error. Every fp32 output
// compared also goes to the goldens (goldens.hpp): saved on a GPU, checked on the emulator.

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/kernels.hpp"
#include "tests/kernels_cuda/goldens.hpp"

namespace strata::cuda::test {

template <typename T>
constexpr double kTolerance = std::is_same_v<T, float> ? 1e-5 : 1e-2;

template <typename T>
constexpr const char* kTypeName = std::is_same_v<T, float> ? "fp32" : "bf16";

// A device allocation of n elements, freed on destruction.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : size_(n) {
    void* memory = nullptr;
    STRATA_CUDA_CHECK(cudaMalloc(&memory, n * sizeof(T) + 16));  // never a zero-size malloc
    data_ = static_cast<T*>(memory);
  }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&&) = delete;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

// n values uniform in [lo, hi) from a std::mt19937_64 seeded with seed, none of them zero.
inline std::vector<float> random_floats(size_t n, uint64_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(lo, hi);
  std::vector<float> x(n);
  for (float& xi : x) {
    do xi = uniform(rng);
    while (xi == 0.0f);
  }
  return x;
}

// n token ids uniform in [0, vocab).
inline std::vector<int32_t> random_tokens(size_t n, uint64_t seed, int32_t vocab) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> uniform(0, vocab - 1);
  std::vector<int32_t> tokens(n);
  for (int32_t& token : tokens) token = uniform(rng);
  return tokens;
}

// x as T stores it: bf16 keeps 8 bits of mantissa (round to nearest even).
template <typename T>
std::vector<float> rounded(std::vector<float> x) {
  if constexpr (!std::is_same_v<T, float>) {
    for (float& xi : x) xi = __bfloat162float(__float2bfloat16_rn(xi));
  }
  return x;
}

// The host values converted to T on the device.
template <typename T>
DeviceBuffer<T> upload(const std::vector<float>& host) {
  std::vector<T> converted(host.size());
  for (size_t i = 0; i < host.size(); ++i) {
    if constexpr (std::is_same_v<T, float>) {
      converted[i] = host[i];
    } else {
      converted[i] = __float2bfloat16_rn(host[i]);
    }
  }
  DeviceBuffer<T> buffer(host.size());
  STRATA_CUDA_CHECK(
      cudaMemcpy(buffer.data(), converted.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return buffer;
}

inline DeviceBuffer<int32_t> upload_tokens(const std::vector<int32_t>& host) {
  DeviceBuffer<int32_t> buffer(host.size());
  STRATA_CUDA_CHECK(cudaMemcpy(buffer.data(), host.data(), host.size() * sizeof(int32_t),
                               cudaMemcpyHostToDevice));
  return buffer;
}

// The device values as floats, after the work queued on every stream is done.
template <typename T>
std::vector<float> download(const DeviceBuffer<T>& buffer) {
  STRATA_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<T> raw(buffer.size());
  STRATA_CUDA_CHECK(
      cudaMemcpy(raw.data(), buffer.data(), buffer.size() * sizeof(T), cudaMemcpyDeviceToHost));
  std::vector<float> values(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    if constexpr (std::is_same_v<T, float>) {
      values[i] = raw[i];
    } else {
      values[i] = __bfloat162float(raw[i]);
    }
  }
  return values;
}

// Every byte 0xFF: a NaN in fp32 and in bf16.
template <typename T>
void poison(DeviceBuffer<T>& buffer) {
  STRATA_CUDA_CHECK(cudaMemset(buffer.data(), 0xFF, buffer.size() * sizeof(T)));
}

// What the comparison found: ||out - ref|| / ||ref|| (infinite when out has a NaN, as a poisoned
// element left unwritten does) and the largest difference with its index.
struct Comparison {
  double rel_l2 = 0;
  double max_abs_diff = 0;
  size_t max_index = 0;
  std::string describe() const {
    return "rel L2 " + std::to_string(rel_l2) + ", largest |out - ref| " +
           std::to_string(max_abs_diff) + " at index " + std::to_string(max_index);
  }
};

template <typename Out, typename Ref>
Comparison compare(const std::vector<Out>& out, const std::vector<Ref>& ref) {
  REQUIRE(out.size() == ref.size());
  double diff2 = 0;
  double ref2 = 0;
  Comparison result;
  for (size_t i = 0; i < out.size(); ++i) {
    const double d = static_cast<double>(out[i]) - static_cast<double>(ref[i]);
    if (std::isnan(d)) {
      result.rel_l2 = INFINITY;
      result.max_abs_diff = INFINITY;
      result.max_index = i;
      return result;
    }
    diff2 += d * d;
    ref2 += static_cast<double>(ref[i]) * static_cast<double>(ref[i]);
    if (std::abs(d) > result.max_abs_diff) {
      result.max_abs_diff = std::abs(d);
      result.max_index = i;
    }
  }
  result.rel_l2 = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  return result;
}

static_assert(kTolerance<float> == kGoldenTolerance);

// An fp32 output to the goldens (goldens.hpp): saved, checked, or both, as the environment asks;
// the mismatches with the goldens, empty when none.
template <typename Out>
std::string compare_with_goldens(const char* what, const std::vector<Out>& out,
                                 const Comparison& compared) {
  return check_golden(what, std::vector<double>(out.begin(), out.end()),
                      compared.rel_l2 < kTolerance<float>);
}

// Checks out against ref within T's tolerance, printing what was compared and how far apart; an
// fp32 output also against its goldens from a GPU, where given (goldens.hpp).
#define STRATA_REQUIRE_CLOSE(T, what, out, ref)                                                  \
  do {                                                                                           \
    const auto& out_ = (out);                                                                    \
    const ::strata::cuda::test::Comparison comparison_ =                                         \
        ::strata::cuda::test::compare(out_, (ref));                                              \
    INFO(::strata::cuda::test::kTypeName<T> << " " << (what) << ": " << comparison_.describe()); \
    CHECK(comparison_.rel_l2 < ::strata::cuda::test::kTolerance<T>);                             \
    if constexpr (std::is_same_v<T, float>) {                                                    \
      const std::string golden_ =                                                                \
          ::strata::cuda::test::compare_with_goldens((what), out_, comparison_);                 \
      INFO(golden_);                                                                             \
      CHECK(golden_.empty());                                                                    \
    }                                                                                            \
  } while (false)

}  // namespace strata::cuda::test
