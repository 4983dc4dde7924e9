// The per-stream state of the CUDA kernels.

#include "kernels/cuda/context.hpp"

#include "kernels/cuda/check.hpp"

namespace strata::cuda {

Context::Context(cudaStream_t stream) : stream_(stream) {
  STRATA_CUBLAS_CHECK(cublasCreate(&cublas_));
  STRATA_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
  STRATA_CUBLAS_CHECK(cublasLtCreate(&cublaslt_));
  void* workspace = nullptr;
  STRATA_CUDA_CHECK(cudaMalloc(&workspace, kCublasLtWorkspaceBytes));
  cublaslt_workspace_ = static_cast<std::byte*>(workspace);
}

// Destructors do not throw: a failure while freeing is left to the next checked call to report.
Context::~Context() {
  if (scratch_ != nullptr) cudaFreeAsync(scratch_, stream_);
  cudaStreamSynchronize(stream_);
  cudaFree(cublaslt_workspace_);
  cublasLtDestroy(cublaslt_);
  cublasDestroy(cublas_);
}

std::byte* Context::scratch(size_t bytes) {
  if (bytes <= scratch_bytes_) return scratch_;
  if (scratch_ != nullptr) STRATA_CUDA_CHECK(cudaFreeAsync(scratch_, stream_));
  scratch_ = nullptr;
  scratch_bytes_ = 0;
  // Grow by half again so that a run of slightly larger requests allocates once.
  const size_t grown = bytes + bytes / 2;
  void* memory = nullptr;
  STRATA_CUDA_CHECK(cudaMallocAsync(&memory, grown, stream_));
  scratch_ = static_cast<std::byte*>(memory);
  scratch_bytes_ = grown;
  return scratch_;
}

void Context::synchronize() const { STRATA_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

}  // namespace strata::cuda
