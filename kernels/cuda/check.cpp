// The messages of the CUDA and cuBLAS check macros.

#include "kernels/cuda/check.hpp"

#include <fmt/format.h>

#include <string_view>

namespace strata::cuda {
namespace {

// The path from the repository root when file lies inside it (kernels/cuda/...), else file.
std::string_view source_path(std::string_view file) {
  for (std::string_view folder : {"kernels/", "exec/", "bench/", "tests/"}) {
    const size_t at = file.rfind(folder);
    if (at != std::string_view::npos) return file.substr(at);
  }
  return file;
}

std::string cuda_hint(cudaError_t status) {
  switch (status) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
      return "no usable GPU: check that `nvidia-smi` lists one and the driver is loaded";
    case cudaErrorMemoryAllocation:
      return "the GPU is out of memory: lower the micro-batch or sequence length, or free memory";
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
      return "a kernel touched memory it does not own: run under `compute-sanitizer` to find it";
    case cudaErrorInvalidConfiguration:
      return "a kernel's launch shape is out of range: check the sizes passed in";
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
      return "built for another GPU: reconfigure with -DCMAKE_CUDA_ARCHITECTURES=<this GPU's>";
    default:
      return "";
  }
}

std::string cublas_hint(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "cuBLAS could not start: check the GPU and driver with `nvidia-smi`";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "cuBLAS is out of GPU memory";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "this type, layout or epilogue is not supported on this GPU";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "a size, leading dimension or pointer is invalid";
    default:
      return "";
  }
}

[[noreturn]] void fail(std::string_view call, std::string_view file, int line,
                       std::string_view name, std::string_view description, std::string_view hint) {
  std::string message = fmt::format("CUDA call {} failed at {}:{}: {} ({})", call,
                                    source_path(file), line, name, description);
  if (!hint.empty()) message += fmt::format("; {}", hint);
  throw CudaError(message);
}

}  // namespace

void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) return;
  fail(call, file, line, cudaGetErrorName(status), cudaGetErrorString(status), cuda_hint(status));
}

void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  fail(call, file, line, cublasGetStatusName(status), cublasGetStatusString(status),
       cublas_hint(status));
}

}  // namespace strata::cuda
