// The emulated device as the runtime describes it: one device with an H100 SXM's limits (CUDA
// C++ Programming Guide, technical specifications for compute capability 9.0; NVIDIA H100 data
// sheet: 132 SMs, 80 GB, 50 MB of L2), the runtime's version, and the error names and strings.

#include <cstdio>

#include "kernels/emu/grid.hpp"
#include "kernels/emu/last_error.hpp"
#include "strata_emu.hpp"

namespace {

// CUDA 13.0, the toolkit the repository builds with (1000 * major + 10 * minor).
constexpr int kVersion = 13000;
constexpr int kMultiprocessors = 132;
constexpr size_t kSharedBytesPerMultiprocessor = 228 * 1024;

cudaError_t check_device(int device) {
  return strata::emu::returned(device == 0 ? cudaSuccess : cudaErrorInvalidDevice);
}

}  // namespace

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return strata::emu::returned(cudaErrorInvalidValue);
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) { return check_device(device); }

cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return strata::emu::returned(cudaErrorInvalidValue);
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* properties, int device) {
  if (properties == nullptr) return strata::emu::returned(cudaErrorInvalidValue);
  if (check_device(device) != cudaSuccess) return cudaErrorInvalidDevice;
  cudaDeviceProp p{};
  std::snprintf(p.name, sizeof(p.name), "%s", "Strata CPU emulation of CUDA (H100 limits)");
  p.totalGlobalMem = size_t{80} << 30;
  p.sharedMemPerBlock = strata::emu::kDefaultDynamicSharedBytes;
  p.sharedMemPerBlockOptin = strata::emu::kSharedBytesPerBlock;
  p.sharedMemPerMultiprocessor = kSharedBytesPerMultiprocessor;
  p.regsPerBlock = 65536;
  p.warpSize = 32;
  p.maxThreadsPerBlock = static_cast<int>(strata::emu::kMaxThreadsPerBlock);
  p.maxThreadsDim[0] = 1024;
  p.maxThreadsDim[1] = 1024;
  p.maxThreadsDim[2] = 64;
  p.maxGridSize[0] = 0x7fffffff;
  p.maxGridSize[1] = 65535;
  p.maxGridSize[2] = 65535;
  p.multiProcessorCount = kMultiprocessors;
  p.major = 9;
  p.minor = 0;
  p.l2CacheSize = 50 << 20;
  *properties = p;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device) {
  if (value == nullptr) return strata::emu::returned(cudaErrorInvalidValue);
  if (check_device(device) != cudaSuccess) return cudaErrorInvalidDevice;
  switch (attribute) {
    case cudaDevAttrMaxThreadsPerBlock:
      *value = static_cast<int>(strata::emu::kMaxThreadsPerBlock);
      return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlock:
      *value = static_cast<int>(strata::emu::kDefaultDynamicSharedBytes);
      return cudaSuccess;
    case cudaDevAttrWarpSize:
      *value = 32;
      return cudaSuccess;
    case cudaDevAttrMultiProcessorCount:
      *value = kMultiprocessors;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor:
      *value = 9;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor:
      *value = 0;
      return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor:
      *value = static_cast<int>(kSharedBytesPerMultiprocessor);
      return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = static_cast<int>(strata::emu::kSharedBytesPerBlock);
      return cudaSuccess;
  }
  return strata::emu::returned(cudaErrorInvalidValue);
}

cudaError_t cudaRuntimeGetVersion(int* version) {
  if (version == nullptr) return strata::emu::returned(cudaErrorInvalidValue);
  *version = kVersion;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* version) { return cudaRuntimeGetVersion(version); }

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError:
      return "cudaErrorInitializationError";
    case cudaErrorInsufficientDriver:
      return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidPitchValue:
      return "cudaErrorInvalidPitchValue";
    case cudaErrorNoKernelImageForDevice:
      return "cudaErrorNoKernelImageForDevice";
    case cudaErrorUnsupportedPtxVersion:
      return "cudaErrorUnsupportedPtxVersion";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case cudaErrorIllegalAddress:
      return "cudaErrorIllegalAddress";
    case cudaErrorLaunchFailure:
      return "cudaErrorLaunchFailure";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
  }
  return "cudaErrorUnknown";
}

// The toolkit's descriptions.
const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInitializationError:
      return "initialization error";
    case cudaErrorInsufficientDriver:
      return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidPitchValue:
      return "invalid pitch argument";
    case cudaErrorNoKernelImageForDevice:
      return "no kernel image is available for execution on the device";
    case cudaErrorUnsupportedPtxVersion:
      return "the provided PTX was compiled with an unsupported toolchain.";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorIllegalAddress:
      return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure";
    case cudaErrorNotReady:
      return "device not ready";
  }
  return "unknown error";
}
