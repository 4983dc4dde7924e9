// The copy kernel of strata calibrate --backend cuda: the copy bandwidth ceiling with every SM
// busy, and, with a few blocks, a stand-in for a communication kernel (NCCL's kernels move data
// with one block per channel) beside a GEMM.

#include "exec/cuda_calibration_copy.hpp"

#include <stdexcept>
#include <string>

#include "kernels/cuda/common.cuh"

namespace strata::cuda_calibration {

namespace {

constexpr int kCopyThreads = 256;

// dst (n 16-byte words) = src: each thread copies the words i, i + stride, ... of the grid.
__global__ void copy_words(cuda::Packed128<float>* dst, const cuda::Packed128<float>* src,
                           int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    dst[i] = src[i];
  }
}

}  // namespace

void copy_kernel(cudaStream_t stream, void* dst, const void* src, size_t bytes, int blocks) {
  if (bytes % 16 != 0 || !cuda::is_aligned16(dst) || !cuda::is_aligned16(src) || blocks < 1) {
    throw std::invalid_argument("copy_kernel: bytes = " + std::to_string(bytes) +
                                " and both pointers must be 16-byte multiples, blocks >= 1");
  }
  using Word = cuda::Packed128<float>;
  STRATA_LAUNCH(dim3(static_cast<unsigned>(blocks)), dim3(kCopyThreads), 0, stream, copy_words)
  (static_cast<Word*>(dst), static_cast<const Word*>(src), static_cast<int64_t>(bytes / 16));
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda_calibration
