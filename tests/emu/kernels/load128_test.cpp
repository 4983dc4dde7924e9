// kernels/cuda/common.cuh's 16-byte vector accesses on the CPU emulation of CUDA: a misaligned
// load128 faults on a GPU (a vector load needs an address aligned to its size, PTX ISA "Vectors")
// and fails here, naming the kernel; the aligned one runs.

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "strata_emu.hpp"

namespace {

using strata::cuda::load128;
using strata::cuda::Packed128;

// out[0, 4) = in[offset, offset + 4) through one 16-byte load.
__global__ void copy_four_floats(float* out, const float* in, int offset) {
  const Packed128<float> packed = load128(in + offset);
  for (int k = 0; k < Packed128<float>::kSize; ++k) out[k] = packed.values[k];
}

TEST_CASE("a misaligned load128 fails and an aligned one runs", "[emu]") {
  void* in = nullptr;
  void* out = nullptr;
  REQUIRE(cudaMalloc(&in, 16 * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMalloc(&out, 4 * sizeof(float)) == cudaSuccess);
  const std::vector<float> values = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  REQUIRE(cudaMemcpy(in, values.data(), 16 * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  auto* in_floats = static_cast<float*>(in);
  auto* out_floats = static_cast<float*>(out);

  std::string message;
  try {
    STRATA_LAUNCH(1, 1, 0, nullptr, copy_four_floats)(out_floats, in_floats, 1);
    cudaDeviceSynchronize();
  } catch (const strata::emu::EmulationError& error) {
    message = error.what();
  }
  CHECK(message.find("kernel copy_four_floats") != std::string::npos);
  CHECK(message.find("load128") != std::string::npos);
  CHECK(message.find("not 16-byte aligned") != std::string::npos);

  STRATA_LAUNCH(1, 1, 0, nullptr, copy_four_floats)(out_floats, in_floats, 4);
  std::vector<float> copied(4);
  REQUIRE(cudaMemcpy(copied.data(), out, 4 * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(copied == std::vector<float>{4, 5, 6, 7});
  cudaFree(out);
  cudaFree(in);
}

}  // namespace
