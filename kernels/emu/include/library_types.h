#pragma once
// The CPU emulation of CUDA: the data types of the toolkit's library_types.h that the
// repository's cuBLAS and cuBLASLt calls name, with the toolkit's values.

typedef enum cudaDataType_t {
  CUDA_R_32F = 0,
  CUDA_R_64F = 1,
  CUDA_R_16F = 2,
  CUDA_R_32I = 10,
  CUDA_R_16BF = 14,
} cudaDataType;
