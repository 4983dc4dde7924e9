#pragma once
// What the tests of the emulated cuBLAS, cuBLASLt and CUB share: device arrays of exactly the
// elements they hold (so that an access past them fails the runtime's range check), filled from
// host vectors and read back once the queued work is done, and bf16 conversions.

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <catch2/catch.hpp>

#include <cstddef>
#include <vector>

namespace strata::emu::test {

template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(const std::vector<T>& values) : count_(values.size()) {
    void* memory = nullptr;
    REQUIRE(cudaMalloc(&memory, bytes() > 0 ? bytes() : 1) == cudaSuccess);
    data_ = static_cast<T*>(memory);
    REQUIRE(cudaMemcpy(data_, values.data(), bytes(), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  ~DeviceArray() { cudaFree(data_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* data() { return data_; }

  // The values once every queued call has run.
  std::vector<T> to_host() const {
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    std::vector<T> values(count_);
    REQUIRE(cudaMemcpy(values.data(), data_, bytes(), cudaMemcpyDeviceToHost) == cudaSuccess);
    return values;
  }

 private:
  size_t bytes() const { return count_ * sizeof(T); }

  T* data_ = nullptr;
  size_t count_ = 0;
};

inline std::vector<__nv_bfloat16> to_bf16(const std::vector<float>& values) {
  std::vector<__nv_bfloat16> rounded;
  for (float value : values) rounded.push_back(__float2bfloat16_rn(value));
  return rounded;
}

inline std::vector<float> to_float(const std::vector<__nv_bfloat16>& values) {
  std::vector<float> widened;
  for (__nv_bfloat16 value : values) widened.push_back(__bfloat162float(value));
  return widened;
}

}  // namespace strata::emu::test
