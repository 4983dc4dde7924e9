#pragma once
// What every CUDA kernel call needs besides its buffers: the stream it runs on, the cuBLAS and
// cuBLASLt handles bound to that stream, cuBLASLt's workspace, and scratch memory for partial
// sums. One Context per stream; it is not shared between threads.

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>

namespace strata::cuda {

class Context {
 public:
  // Runs on stream (the default stream when null) of the current device.
  explicit Context(cudaStream_t stream = nullptr);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  cudaStream_t stream() const { return stream_; }
  cublasHandle_t cublas() const { return cublas_; }
  cublasLtHandle_t cublaslt() const { return cublaslt_; }

  // cuBLASLt's workspace: 32 MiB, what NVIDIA recommends for Hopper (cuBLAS docs, 2.4.3).
  std::byte* cublaslt_workspace() const { return cublaslt_workspace_; }
  static constexpr size_t kCublasLtWorkspaceBytes = size_t{32} << 20;

  // At least bytes of device memory, 256-byte aligned, valid for the work queued on the stream
  // until the next call: a kernel wrapper asks once for all it needs. It grows stream-ordered
  // (cudaFreeAsync, cudaMallocAsync), so work already queued keeps the old buffer.
  std::byte* scratch(size_t bytes);

  // Blocks until the work queued on the stream is done.
  void synchronize() const;

 private:
  cudaStream_t stream_;
  cublasHandle_t cublas_ = nullptr;
  cublasLtHandle_t cublaslt_ = nullptr;
  std::byte* cublaslt_workspace_ = nullptr;
  std::byte* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
};

}  // namespace strata::cuda
