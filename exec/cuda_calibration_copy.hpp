#pragma once
// The copy kernel of strata calibrate --backend cuda (cuda_calibration_copy.cu).

#include <cuda_runtime.h>

#include <cstddef>

namespace strata::cuda_calibration {

// dst = src: `bytes` a multiple of 16 and both pointers 16-byte aligned, over `blocks` blocks of
// 256 threads striding through the buffer. Throws std::invalid_argument otherwise.
void copy_kernel(cudaStream_t stream, void* dst, const void* src, size_t bytes, int blocks);

}  // namespace strata::cuda_calibration
