#pragma once
// The CPU emulation of CUDA (kernels/emu/README.md): the runtime API's types and the calls the
// repository uses, for the host compiler. The kernels of kernels/cuda, built with
// STRATA_CUDA_EMU, include this file instead of the toolkit's. The device side (threadIdx,
// barriers, shuffles, intrinsics) is in strata_emu_device.hpp, included at the end.
//
// Every call returns cudaSuccess or an error code as the toolkit's does for a bad argument the
// caller can handle (an invalid device, a null pointer); what a GPU would turn into a hang, a
// fault or a wrong answer throws strata::emu::EmulationError instead (strata_emu.hpp).

#include <cstddef>
#include <cstdint>

#include "library_types.h"

#define __host__
#define __device__
#define __global__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __launch_bounds__(...)

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};
struct uint3 {
  unsigned x, y, z;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }

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
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidPitchValue = 12,
  cudaErrorNoKernelImageForDevice = 209,
  cudaErrorUnsupportedPtxVersion = 222,
  cudaErrorInvalidResourceHandle = 400,
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

// Stream and event flags (driver_types.h).
constexpr unsigned cudaStreamDefault = 0x0;
constexpr unsigned cudaStreamNonBlocking = 0x1;
constexpr unsigned cudaEventDefault = 0x0;
constexpr unsigned cudaEventDisableTiming = 0x2;

enum cudaFuncAttribute {
  cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
  cudaFuncAttributePreferredSharedMemoryCarveout = 9,
};

// The attributes cudaDeviceGetAttribute answers, with the toolkit's values.
enum cudaDeviceAttr {
  cudaDevAttrMaxThreadsPerBlock = 1,
  cudaDevAttrMaxSharedMemoryPerBlock = 8,
  cudaDevAttrWarpSize = 10,
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrComputeCapabilityMajor = 75,
  cudaDevAttrComputeCapabilityMinor = 76,
  cudaDevAttrMaxSharedMemoryPerMultiprocessor = 81,
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
};

// The fields of the toolkit's cudaDeviceProp that callers read; the emulated device is an H100
// SXM's limits (CUDA C++ Programming Guide, technical specifications for compute capability 9.0).
struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  size_t sharedMemPerBlock;
  size_t sharedMemPerBlockOptin;
  size_t sharedMemPerMultiprocessor;
  int regsPerBlock;
  int warpSize;
  int maxThreadsPerBlock;
  int maxThreadsDim[3];
  int maxGridSize[3];
  int multiProcessorCount;
  int major;
  int minor;
  int l2CacheSize;
};

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* properties, int device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device);
cudaError_t cudaRuntimeGetVersion(int* version);
cudaError_t cudaDriverGetVersion(int* version);
cudaError_t cudaDeviceSynchronize();

cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorString(cudaError_t error);
const char* cudaGetErrorName(cudaError_t error);

cudaError_t cudaMalloc(void** pointer, size_t bytes);
cudaError_t cudaFree(void* pointer);
cudaError_t cudaMallocAsync(void** pointer, size_t bytes, cudaStream_t stream);
cudaError_t cudaFreeAsync(void* pointer, cudaStream_t stream);
cudaError_t cudaMemcpy(void* destination, const void* source, size_t bytes, cudaMemcpyKind kind);
// rows of width bytes, destination_pitch and source_pitch bytes apart.
cudaError_t cudaMemcpy2DAsync(void* destination, size_t destination_pitch, const void* source,
                              size_t source_pitch, size_t width, size_t rows, cudaMemcpyKind kind,
                              cudaStream_t stream = nullptr);
cudaError_t cudaMemcpyAsync(void* destination, const void* source, size_t bytes,
                            cudaMemcpyKind kind, cudaStream_t stream = nullptr);
cudaError_t cudaMemset(void* pointer, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* pointer, int value, size_t bytes, cudaStream_t stream = nullptr);

cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags = 0);

cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* milliseconds, cudaEvent_t start, cudaEvent_t end);

namespace strata::emu {
// A kernel as a key: the address of its function (cudaFuncSetAttribute, launch).
using KernelKey = void (*)();
cudaError_t set_function_attribute(KernelKey kernel, cudaFuncAttribute attribute, int value);
}  // namespace strata::emu

template <typename... Params>
cudaError_t cudaFuncSetAttribute(void (*kernel)(Params...), cudaFuncAttribute attribute,
                                 int value) {
  return strata::emu::set_function_attribute(reinterpret_cast<strata::emu::KernelKey>(kernel),
                                             attribute, value);
}

#include "strata_emu_device.hpp"
