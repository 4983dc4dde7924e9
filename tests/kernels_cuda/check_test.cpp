// The check macros: a failed CUDA or cuBLAS call throws CudaError naming the call as written,
// the file and line, the error's name and a hint. Needs no GPU: the status is passed in.
#include <catch2/catch.hpp>

#include <string>

#include "kernels/cuda/check.hpp"

namespace strata::cuda {
namespace {

std::string message_of(auto&& call) {
  try {
    call();
  } catch (const CudaError& error) {
    return error.what();
  }
  return "";
}

TEST_CASE("check macros pass success through", "[check]") {
  CHECK_NOTHROW(STRATA_CUDA_CHECK(cudaSuccess));
  CHECK_NOTHROW(STRATA_CUBLAS_CHECK(CUBLAS_STATUS_SUCCESS));
}

TEST_CASE("a failed CUDA call names the call, the file, the line and a hint", "[check]") {
  const int line = __LINE__ + 1;
  const std::string message = message_of([] { STRATA_CUDA_CHECK(cudaErrorMemoryAllocation); });
  CHECK(message.find("CUDA call cudaErrorMemoryAllocation failed at "
                     "tests/kernels_cuda/check_test.cpp:" +
                     std::to_string(line)) != std::string::npos);
  CHECK(message.find("cudaErrorMemoryAllocation (out of memory)") != std::string::npos);
  CHECK(message.find("lower the micro-batch") != std::string::npos);
}

TEST_CASE("a failed cuBLAS call names the call and the status", "[check]") {
  const std::string message = message_of([] { STRATA_CUBLAS_CHECK(CUBLAS_STATUS_NOT_SUPPORTED); });
  CHECK(message.find("CUDA call CUBLAS_STATUS_NOT_SUPPORTED failed at tests/kernels_cuda/") !=
        std::string::npos);
  CHECK(message.find("CUBLAS_STATUS_NOT_SUPPORTED") != std::string::npos);
  CHECK(message.find("not supported on this GPU") != std::string::npos);
}

}  // namespace
}  // namespace strata::cuda
