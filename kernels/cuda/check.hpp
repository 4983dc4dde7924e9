#pragma once
// The check macros around every CUDA runtime and cuBLAS call: a failure throws CudaError whose
// message names the call as written, the file and line, the error's name and description, and a
// hint for the user. Kernel launches are checked with STRATA_CUDA_CHECK(cudaGetLastError()).
//
//   STRATA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
//   -> CUDA call cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream) failed at
//      kernels/cuda/context.cpp:57: cudaErrorInvalidValue (invalid argument)

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace strata::cuda {

// A failed CUDA or cuBLAS call.
class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws CudaError unless status is success; call, file and line are where the macro stands.
void check_cuda(cudaError_t status, const char* call, const char* file, int line);
void check_cublas(cublasStatus_t status, const char* call, const char* file, int line);

}  // namespace strata::cuda

#define STRATA_CUDA_CHECK(call) ::strata::cuda::check_cuda((call), #call, __FILE__, __LINE__)
#define STRATA_CUBLAS_CHECK(call) ::strata::cuda::check_cublas((call), #call, __FILE__, __LINE__)
