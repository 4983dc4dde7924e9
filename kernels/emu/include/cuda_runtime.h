#pragma once
// The CPU emulation of CUDA (kernels/emu/README.md): the runtime API's types and the calls the
// repository uses, for the host compiler. The kernels of kernels/cuda, built with
// STRATA_CUDA_EMU, include this file instead of the toolkit's.
//
// SKELETON (issue 19): the types the emulated libraries need; the runtime fills in the rest.

#include <cstddef>
#include <cstdint>

#include "library_types.h"

#define __host__
#define __device__
#define __global__
#define __forceinline__ inline

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};

typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;

// The values of the toolkit's driver_types.h, so that messages name the same numbers.
enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3,
  cudaErrorInsufficientDriver = 35,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorNoKernelImageForDevice = 209,
  cudaErrorUnsupportedPtxVersion = 222,
  cudaErrorIllegalAddress = 700,
  cudaErrorLaunchFailure = 719,
  cudaErrorNotReady = 600,
};
typedef enum cudaError cudaError_t;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

// The calls the emulated libraries' tests (tests/emu/library_memory.hpp) make, with the
// toolkit's signatures; the runtime implements them.
cudaError_t cudaMalloc(void** devPtr, size_t size);
cudaError_t cudaFree(void* devPtr);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind);
cudaError_t cudaDeviceSynchronize();
