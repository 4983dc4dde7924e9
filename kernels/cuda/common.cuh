#pragma once
// What the CUDA kernels share: conversions between the storage type and fp32, warp and block
// reductions in a fixed order, 16-byte vector loads, and checks on sizes and launches.

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/check.hpp"

namespace strata::cuda {

constexpr int kWarpSize = 32;

// Launches a kernel: STRATA_LAUNCH(grid, block, shared_bytes, stream, kernel)(arguments...) is
// kernel<<<grid, block, shared_bytes, stream>>>(arguments...) under nvcc. The kernel comes last
// so that a template-id's commas stay in the macro's variadic part. Built by the host compiler
// for the CPU emulation of CUDA (STRATA_CUDA_EMU, kernels/emu), the same call queues the launch
// on the emulated stream, with the kernel as written for failure messages.
#if defined(STRATA_CUDA_EMU)
#define STRATA_LAUNCH(grid, block, shared_bytes, stream, ...) \
  STRATA_EMU_LAUNCH(grid, block, shared_bytes, stream, __VA_ARGS__)
#else
#define STRATA_LAUNCH(grid, block, shared_bytes, stream, ...) \
  __VA_ARGS__<<<grid, block, shared_bytes, stream>>>
#endif

// Shared memory declarations: STRATA_SHARED(float, sums, [4][32]) is
// `__shared__ float sums[4][32]` and STRATA_DYNAMIC_SHARED(float, partial, 16) is
// `extern __shared__ __align__(16) float partial[]` under nvcc. The CPU emulation gives each
// block its own shared memory, which host `static` variables cannot (strata_emu_device.hpp; its
// dynamic region is 128-byte aligned).
#if defined(STRATA_CUDA_EMU)
#define STRATA_SHARED(type, name, extents) STRATA_EMU_SHARED(type, name, extents)
#define STRATA_DYNAMIC_SHARED(type, name, alignment) STRATA_EMU_DYNAMIC_SHARED(type, name)
#else
#define STRATA_SHARED(type, name, extents) __shared__ type name extents
// clang-format would split the declaration after __align__(alignment).
// clang-format off
#define STRATA_DYNAMIC_SHARED(type, name, alignment) \
  extern __shared__ __align__(alignment) type name[]
// clang-format on
#endif

// Checks the launch just queued (a bad configuration is reported here; a fault in the kernel
// by the next synchronizing call).
#define STRATA_CUDA_CHECK_LAUNCH() STRATA_CUDA_CHECK(cudaGetLastError())

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// value as an int, for kernels that index with int; throws std::invalid_argument naming what
// when it does not fit.
inline int checked_int(int64_t value, const char* what) {
  if (value < 0 || value > INT_MAX) {
    throw std::invalid_argument(std::string(what) + " = " + std::to_string(value) +
                                " is outside [0, 2^31): split the call into smaller ones");
  }
  return static_cast<int>(value);
}

// fp32 arithmetic on either storage type.
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// Butterfly reductions over the 32 lanes of a warp: every lane ends with the same value, and
// the order of the additions depends only on the lane values, so the result is reproducible.
// V is float or double.
template <typename V>
__device__ __forceinline__ V warp_sum(V x) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    x += __shfl_xor_sync(0xffffffffu, x, offset);
  }
  return x;
}
__device__ __forceinline__ float warp_max(float x) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  }
  return x;
}

// The sum of x over the block's threads, returned to every thread. Needs blockDim.x a multiple
// of 32 and at most 1024, and every thread of the block to call it. shared holds 32 values; the
// function synchronizes before it returns, so shared may be reused right after.
template <typename V>
__device__ __forceinline__ V block_sum(V x, V* shared) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  x = warp_sum(x);
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  x = lane < warps ? shared[lane] : V(0);
  x = warp_sum(x);
  __syncthreads();
  return x;
}
__device__ __forceinline__ float block_max(float x, float* shared) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  x = warp_max(x);
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  x = lane < warps ? shared[lane] : -INFINITY;
  x = warp_max(x);
  __syncthreads();
  return x;
}

// 16 bytes of T: 4 floats or 8 bf16s, loaded and stored as one instruction. The pointer must be
// 16-byte aligned; callers check is_aligned16 and fall back to scalar code otherwise.
template <typename T>
struct alignas(16) Packed128 {
  static constexpr int kSize = 16 / sizeof(T);
  T values[kSize];
};
// The CPU emulation fails on a misaligned address, which faults on a GPU.
template <typename T>
__device__ __forceinline__ Packed128<T> load128(const T* address) {
#if defined(STRATA_CUDA_EMU)
  ::strata::emu::check_aligned16(address, "load128");
#endif
  return *reinterpret_cast<const Packed128<T>*>(address);
}
template <typename T>
__device__ __forceinline__ void store128(T* address, const Packed128<T>& packed) {
#if defined(STRATA_CUDA_EMU)
  ::strata::emu::check_aligned16(address, "store128");
#endif
  *reinterpret_cast<Packed128<T>*>(address) = packed;
}
inline bool is_aligned16(const void* pointer) {
  return reinterpret_cast<uintptr_t>(pointer) % 16 == 0;
}

// 16 bytes from global to shared memory without registers (cp.async.cg, sm_80 and later): the
// copy is in flight until this thread's wait_async_copies(); both addresses 16-byte aligned. The
// CPU emulation lands the copy only at the wait, and fails on a misaligned address.
__device__ __forceinline__ void copy_async16(void* shared_destination, const void* global_source) {
#if defined(STRATA_CUDA_EMU)
  ::strata::emu::copy_async16(shared_destination, global_source);
#else
  const unsigned to_shared = static_cast<unsigned>(__cvta_generic_to_shared(shared_destination));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(to_shared), "l"(global_source)
               : "memory");
#endif
}

// Waits until this thread's copy_async16 copies have landed; a __syncthreads() after it makes
// every thread's copies visible to the block.
__device__ __forceinline__ void wait_async_copies() {
#if defined(STRATA_CUDA_EMU)
  ::strata::emu::wait_async_copies();
#else
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
#endif
}

// x = p[0, kWidth) as floats: one 16-byte load when kWidth is Packed128<T>::kSize (p must then
// be 16-byte aligned), else kWidth scalar loads.
template <int kWidth, typename T>
__device__ __forceinline__ void load_floats(float (&x)[kWidth], const T* p) {
  if constexpr (kWidth == Packed128<T>::kSize) {
    const Packed128<T> packed = load128(p);
#pragma unroll
    for (int k = 0; k < kWidth; ++k) x[k] = to_float(packed.values[k]);
  } else {
#pragma unroll
    for (int k = 0; k < kWidth; ++k) x[k] = to_float(p[k]);
  }
}

// p[0, kWidth) = x rounded to T, as one 16-byte store when kWidth is Packed128<T>::kSize.
template <int kWidth, typename T>
__device__ __forceinline__ void store_floats(T* p, const float (&x)[kWidth]) {
  if constexpr (kWidth == Packed128<T>::kSize) {
    Packed128<T> packed;
#pragma unroll
    for (int k = 0; k < kWidth; ++k) packed.values[k] = from_float<T>(x[k]);
    store128(p, packed);
  } else {
#pragma unroll
    for (int k = 0; k < kWidth; ++k) p[k] = from_float<T>(x[k]);
  }
}

}  // namespace strata::cuda
