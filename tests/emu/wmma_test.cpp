// nvcuda::wmma on the CPU emulation of CUDA (kernels/emu/include/mma.h): the fragments' element
// layout is a fixed permutation that is not the identity (so code assuming a layout fails), a
// load then store returns the tile, and mma_sync computes D = A B + C.

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace {

namespace wmma = nvcuda::wmma;
using Accumulator = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// lanes (32 x 8): the tile element each lane's fragment element holds, found by loading the tile
// whose element (r, c) is 16 r + c; round_trip (16 x 16): that fragment stored back.
__global__ void map_accumulator(float* lanes, float* round_trip) {
  STRATA_EMU_SHARED(float, tile, [16 * 16]);
  for (int e = static_cast<int>(threadIdx.x); e < 256; e += 32) tile[e] = static_cast<float>(e);
  __syncwarp();
  Accumulator fragment;
  wmma::load_matrix_sync(fragment, tile, 16, wmma::mem_row_major);
  for (int i = 0; i < Accumulator::num_elements; ++i) lanes[threadIdx.x * 8 + i] = fragment.x[i];
  wmma::store_matrix_sync(round_trip, fragment, 16, wmma::mem_row_major);
}

// d (16 x 16, row-major) = a (16 x 16 bf16, row-major) b (16 x 16 bf16, column-major) + 1.
__global__ void product(float* d, const __nv_bfloat16* a, const __nv_bfloat16* b) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb;
  Accumulator acc;
  wmma::fill_fragment(acc, 1.0f);
  wmma::load_matrix_sync(fa, a, 16);
  wmma::load_matrix_sync(fb, b, 16);
  wmma::mma_sync(acc, fa, fb, acc);
  wmma::store_matrix_sync(d, acc, 16, wmma::mem_row_major);
}

template <typename T>
T* device_copy(const std::vector<T>& host) {
  void* memory = nullptr;
  REQUIRE(cudaMalloc(&memory, host.size() * sizeof(T)) == cudaSuccess);
  REQUIRE(cudaMemcpy(memory, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice) ==
          cudaSuccess);
  return static_cast<T*>(memory);
}

template <typename T>
std::vector<T> host_copy(const T* device, size_t n) {
  std::vector<T> host(n);
  REQUIRE(cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
  return host;
}

// The 256 elements of a tile are spread over the 32 lanes, 8 each, every element once; lane 0
// does not hold elements 0..7 (the layout is not the identity); a store undoes a load.
TEST_CASE("wmma fragments hold a permutation of the tile that is not the identity", "[emu]") {
  float* lanes = device_copy(std::vector<float>(256, -1.0f));
  float* round_trip = device_copy(std::vector<float>(256, -1.0f));
  STRATA_EMU_LAUNCH(1, 32, 0, nullptr, map_accumulator)(lanes, round_trip);
  std::vector<float> held = host_copy(lanes, 256);
  std::vector<float> tile(256);
  std::iota(tile.begin(), tile.end(), 0.0f);
  CHECK(host_copy(round_trip, 256) == tile);
  CHECK(std::vector<float>(held.begin(), held.begin() + 8) !=
        std::vector<float>(tile.begin(), tile.begin() + 8));
  std::sort(held.begin(), held.end());
  CHECK(held == tile);
  cudaFree(round_trip);
  cudaFree(lanes);
}

// D(i, j) = 1 + sum_k A(i, k) B(k, j), with B given column-major (B(k, j) at b[16 j + k]). bf16
// inputs of 8-bit mantissas multiply exactly in fp32, so the sums agree with float64 to fp32's
// rounding.
TEST_CASE("wmma::mma_sync computes a b + c", "[emu]") {
  std::vector<float> a(256), b(256);
  for (int i = 0; i < 256; ++i) {
    a[static_cast<size_t>(i)] = static_cast<float>(i % 7 - 3) / 4.0f;
    b[static_cast<size_t>(i)] = static_cast<float>(i % 5 - 2) / 2.0f;
  }
  std::vector<__nv_bfloat16> a16(256), b16(256);
  std::transform(a.begin(), a.end(), a16.begin(), __float2bfloat16_rn);
  std::transform(b.begin(), b.end(), b16.begin(), __float2bfloat16_rn);
  __nv_bfloat16* device_a = device_copy(a16);
  __nv_bfloat16* device_b = device_copy(b16);
  float* device_d = device_copy(std::vector<float>(256, 0.0f));
  STRATA_EMU_LAUNCH(1, 32, 0, nullptr, product)(device_d, device_a, device_b);
  const std::vector<float> d = host_copy(device_d, 256);
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 16; ++j) {
      double expected = 1.0;
      for (int k = 0; k < 16; ++k) expected += double{a[i * 16 + k]} * double{b[j * 16 + k]};
      INFO("D(" << i << ", " << j << ")");
      CHECK(std::abs(d[static_cast<size_t>(i * 16 + j)] - expected) < 1e-5);
    }
  }
  cudaFree(device_d);
  cudaFree(device_b);
  cudaFree(device_a);
}

}  // namespace
