// The emulated cuBLAS (kernels/emu/cublas.cpp) against the cuBLAS documentation of
// cublasGemmStridedBatchedEx: C_b = alpha op(A_b) op(B_b) + beta C_b, column-major, checked with a
// naive loop in this file; fp32 accumulation with one rounding at the output; the statuses.

#include <cublas_v2.h>
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/emu/include/strata_emu.hpp"
#include "tests/emu/library_memory.hpp"

namespace strata::emu {
namespace {

using test::DeviceArray;
using test::to_bf16;
using test::to_float;

// One strided-batched product's sizes, as cuBLAS takes them.
struct Shape {
  cublasOperation_t transa = CUBLAS_OP_N;
  cublasOperation_t transb = CUBLAS_OP_N;
  int m = 0, n = 0, k = 0;
  int lda = 0, ldb = 0, ldc = 0;
  long long stride_a = 0, stride_b = 0, stride_c = 0;
  int batches = 1;
};

// The documented column-major semantics: op(X)(r, c) = X[r + c ld], or X[c + r ld] transposed;
// the result is c, updated in place, in double.
std::vector<double> naive_product(const Shape& s, const std::vector<float>& a,
                                  const std::vector<float>& b, const std::vector<float>& c,
                                  double alpha, double beta) {
  std::vector<double> result(c.begin(), c.end());
  for (int batch = 0; batch < s.batches; ++batch) {
    for (int j = 0; j < s.n; ++j) {
      for (int i = 0; i < s.m; ++i) {
        double sum = 0.0;
        for (int p = 0; p < s.k; ++p) {
          const double a_ip = s.transa == CUBLAS_OP_N ? a[batch * s.stride_a + i + p * s.lda]
                                                      : a[batch * s.stride_a + p + i * s.lda];
          const double b_pj = s.transb == CUBLAS_OP_N ? b[batch * s.stride_b + p + j * s.ldb]
                                                      : b[batch * s.stride_b + j + p * s.ldb];
          sum += a_ip * b_pj;
        }
        double& out = result[batch * s.stride_c + i + j * s.ldc];
        out = alpha * sum + beta * out;
      }
    }
  }
  return result;
}

// Small integers: every product and sum below is exact in fp32 (and in bf16 storage).
std::vector<float> small_integers(size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> uniform(-4, 4);
  std::vector<float> values(count);
  for (float& value : values) value = static_cast<float>(uniform(rng));
  return values;
}

struct Handle {
  Handle() { REQUIRE(cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS); }
  ~Handle() { cublasDestroy(handle); }
  cublasHandle_t handle = nullptr;
};

TEST_CASE(
    "cublasGemmStridedBatchedEx in fp32: every transpose pair, padded leading dimensions "
    "and batch strides, as the documented column-major loop, and nothing outside C_b",
    "[emu]") {
  // Integer data make the expected values exact, so the comparison is equality; the padding rows
  // of C and the gaps between batches keep their values because the loop never writes them.
  Handle cublas;
  for (cublasOperation_t transa : {CUBLAS_OP_N, CUBLAS_OP_T}) {
    for (cublasOperation_t transb : {CUBLAS_OP_N, CUBLAS_OP_T}) {
      Shape s{transa, transb, 5, 4, 3};
      s.lda = (transa == CUBLAS_OP_N ? s.m : s.k) + 2;
      s.ldb = (transb == CUBLAS_OP_N ? s.k : s.n) + 1;
      s.ldc = s.m + 3;
      s.stride_a = s.lda * (transa == CUBLAS_OP_N ? s.k : s.m) + 7;
      s.stride_b = s.ldb * (transb == CUBLAS_OP_N ? s.n : s.k) + 5;
      s.stride_c = s.ldc * s.n + 2;
      s.batches = 3;
      const auto a = small_integers(s.stride_a * s.batches, 1);
      const auto b = small_integers(s.stride_b * s.batches, 2);
      const auto c = small_integers(s.stride_c * s.batches, 3);
      DeviceArray<float> a_device(a), b_device(b), c_device(c);
      const float alpha = 2.0f, beta = -1.0f;
      REQUIRE(cublasGemmStridedBatchedEx(
                  cublas.handle, transa, transb, s.m, s.n, s.k, &alpha, a_device.data(), CUDA_R_32F,
                  s.lda, s.stride_a, b_device.data(), CUDA_R_32F, s.ldb, s.stride_b, &beta,
                  c_device.data(), CUDA_R_32F, s.ldc, s.stride_c, s.batches, CUBLAS_COMPUTE_32F,
                  CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
      const std::vector<float> got = c_device.to_host();
      const std::vector<double> expected = naive_product(s, a, b, c, alpha, beta);
      INFO("transa " << transa << " transb " << transb);
      for (size_t index = 0; index < got.size(); ++index) {
        INFO("element " << index);
        REQUIRE(got[index] == expected[index]);
      }
    }
  }
}

TEST_CASE(
    "cublasGemmStridedBatchedEx in fp32 on random values: relative L2 error against double "
    "under 1e-6",
    "[emu]") {
  // fp32 accumulation over k = 41 terms of size ~1 keeps the error near k * 2^-24 ~ 2e-6 in the
  // worst case and far less in L2; the kernel tests' fp32 tolerance is 1e-5.
  Handle cublas;
  Shape s{CUBLAS_OP_T, CUBLAS_OP_N, 37, 29, 41};
  s.lda = s.k;
  s.ldb = s.k;
  s.ldc = s.m;
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> a(s.k * s.m), b(s.k * s.n), c(s.m * s.n, 0.0f);
  for (float& value : a) value = uniform(rng);
  for (float& value : b) value = uniform(rng);
  DeviceArray<float> a_device(a), b_device(b), c_device(c);
  const float alpha = 1.0f, beta = 0.0f;
  REQUIRE(cublasGemmStridedBatchedEx(
              cublas.handle, s.transa, s.transb, s.m, s.n, s.k, &alpha, a_device.data(), CUDA_R_32F,
              s.lda, 0, b_device.data(), CUDA_R_32F, s.ldb, 0, &beta, c_device.data(), CUDA_R_32F,
              s.ldc, 0, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
  const std::vector<float> got = c_device.to_host();
  const std::vector<double> expected = naive_product(s, a, b, c, alpha, beta);
  double error = 0.0, norm = 0.0;
  for (size_t index = 0; index < got.size(); ++index) {
    error += (got[index] - expected[index]) * (got[index] - expected[index]);
    norm += expected[index] * expected[index];
  }
  REQUIRE(std::sqrt(error / norm) < 1e-6);
}

TEST_CASE("cublasGemmStridedBatchedEx in bf16 accumulates in fp32 and rounds once, at the output",
          "[emu]") {
  // A row (1, 2^-8, 2^-8) times a column of ones: in fp32 the sum is 1 + 2^-7, a bf16 value. Had
  // each partial sum been rounded to bf16 (8 significant bits), 1 + 2^-8 would round to even, 1,
  // and the result would be 1. With an fp32 output, (1, 2^-9, 2^-9) gives 1 + 2^-8 exactly.
  Handle cublas;
  const float alpha = 1.0f, beta = 0.0f;
  const std::vector<float> ones{1.0f, 1.0f, 1.0f};
  DeviceArray<__nv_bfloat16> b_device(to_bf16(ones));

  DeviceArray<__nv_bfloat16> a_bf16(to_bf16({1.0f, std::ldexp(1.0f, -8), std::ldexp(1.0f, -8)}));
  DeviceArray<__nv_bfloat16> c_bf16(to_bf16({0.0f}));
  REQUIRE(cublasGemmStridedBatchedEx(
              cublas.handle, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 3, &alpha, a_bf16.data(), CUDA_R_16BF,
              1, 0, b_device.data(), CUDA_R_16BF, 3, 0, &beta, c_bf16.data(), CUDA_R_16BF, 1, 0, 1,
              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(to_float(c_bf16.to_host())[0] == 1.0f + std::ldexp(1.0f, -7));

  DeviceArray<__nv_bfloat16> a_fine(to_bf16({1.0f, std::ldexp(1.0f, -9), std::ldexp(1.0f, -9)}));
  DeviceArray<float> c_fp32(std::vector<float>{0.0f});
  REQUIRE(cublasGemmStridedBatchedEx(
              cublas.handle, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 3, &alpha, a_fine.data(), CUDA_R_16BF,
              1, 0, b_device.data(), CUDA_R_16BF, 3, 0, &beta, c_fp32.data(), CUDA_R_32F, 1, 0, 1,
              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(c_fp32.to_host()[0] == 1.0f + std::ldexp(1.0f, -8));
}

TEST_CASE(
    "cublasGemmStridedBatchedEx with beta 0 does not read C, and reads alpha and beta "
    "during the call",
    "[emu]") {
  // BLAS: "when beta is zero, C need not be set on input", so NaNs there do not reach the result.
  // cuBLAS's host pointer mode: the scalars may change as soon as the call returns, before the
  // queued product runs.
  Handle cublas;
  DeviceArray<float> a_device(std::vector<float>{3.0f});
  DeviceArray<float> b_device(std::vector<float>{5.0f});
  DeviceArray<float> c_device(std::vector<float>{std::numeric_limits<float>::quiet_NaN()});
  float alpha = 2.0f, beta = 0.0f;
  REQUIRE(cublasGemmStridedBatchedEx(
              cublas.handle, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &alpha, a_device.data(), CUDA_R_32F,
              1, 0, b_device.data(), CUDA_R_32F, 1, 0, &beta, c_device.data(), CUDA_R_32F, 1, 0, 1,
              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
  alpha = 100.0f;
  beta = 1.0f;
  REQUIRE(c_device.to_host()[0] == 30.0f);
}

TEST_CASE("cublasGemmStridedBatchedEx answers the documented statuses and queues nothing then",
          "[emu]") {
  // cuBLAS documentation, cublasGemmStridedBatchedEx: NOT_INITIALIZED without a handle;
  // INVALID_VALUE for negative sizes or a leading dimension below max(1, rows); NOT_SUPPORTED for
  // fp32 A and B into a bf16 C (not in the CUBLAS_COMPUTE_32F table). A compute type the
  // emulation does not implement is an EmulationError rather than a guess.
  Handle cublas;
  DeviceArray<float> a_device(std::vector<float>(4, 1.0f));
  DeviceArray<float> c_device(std::vector<float>(4, 7.0f));
  const float alpha = 1.0f, beta = 0.0f;
  const auto call = [&](cublasHandle_t handle, int m, int lda, cudaDataType c_type,
                        cublasComputeType_t compute) {
    return cublasGemmStridedBatchedEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, m, 2, 2, &alpha,
                                      a_device.data(), CUDA_R_32F, lda, 0, a_device.data(),
                                      CUDA_R_32F, 2, 0, &beta, c_device.data(), c_type, 2, 0, 1,
                                      compute, CUBLAS_GEMM_DEFAULT);
  };
  CHECK(call(nullptr, 2, 2, CUDA_R_32F, CUBLAS_COMPUTE_32F) == CUBLAS_STATUS_NOT_INITIALIZED);
  CHECK(call(cublas.handle, -1, 2, CUDA_R_32F, CUBLAS_COMPUTE_32F) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(call(cublas.handle, 2, 1, CUDA_R_32F, CUBLAS_COMPUTE_32F) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(call(cublas.handle, 2, 2, CUDA_R_16BF, CUBLAS_COMPUTE_32F) == CUBLAS_STATUS_NOT_SUPPORTED);
  CHECK_THROWS_AS(call(cublas.handle, 2, 2, CUDA_R_32F, CUBLAS_COMPUTE_64F), EmulationError);
  REQUIRE(c_device.to_host() == std::vector<float>(4, 7.0f));
}

TEST_CASE("cublasGetStatusName and cublasGetStatusString name the status", "[emu]") {
  // The names are the enumerators of cublas_api.h, which the check macros print.
  CHECK(std::string(cublasGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED)) ==
        "CUBLAS_STATUS_NOT_SUPPORTED");
  CHECK(std::string(cublasGetStatusName(CUBLAS_STATUS_INVALID_VALUE)) ==
        "CUBLAS_STATUS_INVALID_VALUE");
  CHECK(std::string(cublasGetStatusString(CUBLAS_STATUS_SUCCESS)) ==
        "the operation completed successfully");
}

}  // namespace
}  // namespace strata::emu
