#pragma once
// The device side of the CPU emulation of CUDA (kernels/emu/README.md), for the host compiler:
// the built-in indices, barriers, warp shuffles, shared memory, asynchronous copies and the
// launch. Every CUDA thread of a block is a fiber (kernels/emu/block.cpp); a fiber gives way only
// at a barrier or a warp collective, so between two barriers the threads run one after another
// in the order the options choose (strata_emu.hpp).
//
// The math functions the kernels call (expf, exp2f, logf, sqrtf, fmaxf, fmaf) are the C
// library's, from <cmath>; CUDA's integer min is below; bf16 conversions are in cuda_bf16.h.
//
// Included at the end of cuda_runtime.h: it uses its types, and nothing of strata_emu.hpp (which
// includes cuda_runtime.h), so that either header may come first.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

namespace strata::emu {

[[noreturn]] void fail(const std::string& message);

namespace detail {

// The running thread's indices and its launch's shape, set by the block scheduler before it
// resumes a fiber (all fibers run on the host thread that synchronizes).
extern thread_local uint3 thread_index;
extern thread_local uint3 block_index;
extern thread_local dim3 block_shape;
extern thread_local dim3 grid_shape;

// Fails with message prefixed by the running kernel's name, block and thread.
[[noreturn]] void fail_in_kernel(const std::string& message);

// __syncthreads() at file:line: every thread of the block must reach a __syncthreads() at the
// same place before any goes on.
void sync_block(const char* file, int line);

// A warp collective (a shuffle, __syncwarp, a wmma operation): the calling lane waits until every
// lane named in mask has reached a collective of the same name and mask; then complete runs once,
// given each lane's operands (null for lanes outside mask), and the lanes go on. A lane named in
// mask that has exited, or waits elsewhere, fails.
using CollectiveCompletion = void (*)(void* const* lane_operands);
void warp_collective(const char* name, unsigned mask, void* operands,
                     CollectiveCompletion complete);

// The calling thread's lane (0..31) in its warp: threads are numbered x fastest, then y, then z.
int lane_index();

// Static shared memory: the block's region for the declaration whose key is key (the address of
// a static object next to it), allocated on first use in the launch, the same for every thread
// and block. Dynamic shared memory: the launch's region (shared_bytes of STRATA_LAUNCH).
std::byte* static_shared(const void* key, size_t bytes, size_t alignment);
std::byte* dynamic_shared();
// The offset of pointer in the block's shared memory; fails if it does not point there.
unsigned shared_offset(const void* pointer, const char* what);

// Fails unless pointer is 16-byte aligned; what names the access ("load128").
void check_aligned16(const void* pointer, const char* what);

// cp.async of 16 bytes (global to shared memory): queued by the calling thread, landing only at
// its wait_async_copies(), so that a read before the wait sees the old bytes.
void copy_async16(void* shared_destination, const void* global_source);
void wait_async_copies();

// The completion of a collective that only synchronizes (__syncwarp).
inline void complete_nothing(void* const* /*lane_operands*/) {}

// Calls complete with lane_operands cast back to Operands.
template <typename Operands, void (*Complete)(Operands* const* lanes)>
void complete_typed(void* const* lane_operands) {
  Operands* lanes[32];
  for (int lane = 0; lane < 32; ++lane) lanes[lane] = static_cast<Operands*>(lane_operands[lane]);
  Complete(lanes);
}

// A collective whose operands have a type: see warp_collective.
template <typename Operands, void (*Complete)(Operands* const* lanes)>
void typed_warp_collective(const char* name, unsigned mask, Operands& operands) {
  warp_collective(name, mask, &operands, &complete_typed<Operands, Complete>);
}

template <typename V>
struct ShuffleOperands {
  V value;
  int source_lane;
  V result;
};

template <typename V>
void complete_shuffle(ShuffleOperands<V>* const* lanes) {
  for (int lane = 0; lane < 32; ++lane) {
    if (lanes[lane] == nullptr) continue;
    const int source = lanes[lane]->source_lane;
    if (lanes[source] == nullptr) {
      fail_in_kernel("a warp shuffle: lane " + std::to_string(lane) + " reads lane " +
                     std::to_string(source) +
                     ", which is not in the mask (an undefined value on a GPU)");
    }
    lanes[lane]->result = lanes[source]->value;
  }
}

// What a kernel launch runs on each thread: the kernel applied to the launch's arguments.
using ThreadBody = std::function<void()>;

// Checks the launch's shape and shared memory (fails naming kernel_name) and queues it on stream.
void launch_grid(const char* kernel_name, KernelKey kernel, dim3 grid, dim3 block,
                 size_t shared_bytes, cudaStream_t stream, ThreadBody body);

}  // namespace detail

// STRATA_LAUNCH(grid, block, shared_bytes, stream, kernel)(arguments...) under the emulation
// (kernels/cuda/common.cuh): the arguments are copied, as a launch does, and the launch is queued
// on stream. call(arguments...) calls the kernel, so that a kernel template's arguments are
// deduced from the launch's as nvcc does; kernel is its address when the launch names one
// function (kernel<T, D>), else null (STRATA_EMU_KERNEL_KEY), for cudaFuncSetAttribute's values.
template <typename Call>
auto launch(const char* kernel_name, KernelKey kernel, dim3 grid, dim3 block, size_t shared_bytes,
            cudaStream_t stream, Call call) {
  return [=](auto&&... arguments) {
    auto copies = std::make_tuple(arguments...);
    detail::launch_grid(kernel_name, kernel, grid, block, shared_bytes, stream,
                        [call, copies] { std::apply(call, copies); });
  };
}

// The address of the function the launch names, or null when it names a template whose
// arguments the launch deduces (kernels/cuda/common.cuh's STRATA_LAUNCH).
#define STRATA_EMU_KERNEL_KEY(...)                                     \
  [&]<int kDeferred = 0>()->::strata::emu::KernelKey {                 \
    if constexpr (requires { &__VA_ARGS__; }) {                        \
      return reinterpret_cast<::strata::emu::KernelKey>(&__VA_ARGS__); \
    } else {                                                           \
      return nullptr;                                                  \
    }                                                                  \
  }                                                                    \
  ()

// The block's static shared memory for a declaration (STRATA_SHARED, kernels/cuda/common.cuh).
template <typename T>
T& static_shared(const void* key) {
  return *reinterpret_cast<T*>(detail::static_shared(key, sizeof(T), alignof(T)));
}
// The launch's dynamic shared memory (STRATA_DYNAMIC_SHARED).
template <typename T>
T* dynamic_shared() {
  return reinterpret_cast<T*>(detail::dynamic_shared());
}

using detail::check_aligned16;
using detail::copy_async16;
using detail::wait_async_copies;

}  // namespace strata::emu

// kernel<<<grid, block, shared_bytes, stream>>>(arguments...) is
// STRATA_EMU_LAUNCH(grid, block, shared_bytes, stream, kernel)(arguments...) here
// (kernels/cuda/common.cuh's STRATA_LAUNCH): the kernel as written names the launch in failures.
#define STRATA_EMU_LAUNCH(grid, block, shared_bytes, stream, ...)                      \
  ::strata::emu::launch(#__VA_ARGS__, STRATA_EMU_KERNEL_KEY(__VA_ARGS__), grid, block, \
                        shared_bytes, stream,                                          \
                        [](const auto&... arguments) { __VA_ARGS__(arguments...); })

// `__shared__ type name extents;` is STRATA_EMU_SHARED(type, name, extents) here, and
// `extern __shared__ type name[];` STRATA_EMU_DYNAMIC_SHARED(type, name): name refers to the
// running block's shared memory (a host `static` would be one for all blocks). The key of a
// static declaration is a tag object next to it.
#define STRATA_EMU_SHARED(type, name, extents) \
  static constexpr char name##_shared_key = 0; \
  type(&name) extents = ::strata::emu::static_shared<type extents>(&name##_shared_key)
#define STRATA_EMU_DYNAMIC_SHARED(type, name) \
  type* const name = ::strata::emu::dynamic_shared<type>()

#define threadIdx (std::as_const(::strata::emu::detail::thread_index))
#define blockIdx (std::as_const(::strata::emu::detail::block_index))
#define blockDim (std::as_const(::strata::emu::detail::block_shape))
#define gridDim (std::as_const(::strata::emu::detail::grid_shape))
#define __syncthreads() ::strata::emu::detail::sync_block(__FILE__, __LINE__)

inline void __syncwarp(unsigned mask = 0xffffffffu) {
  ::strata::emu::detail::warp_collective("__syncwarp", mask, nullptr,
                                         &::strata::emu::detail::complete_nothing);
}

// The value of lane (this lane ^ lane_mask) within groups of width lanes; a lane whose partner
// lies in a later group keeps its own value (CUDA C++ Programming Guide, warp shuffle functions).
template <typename V>
V __shfl_xor_sync(unsigned mask, V value, int lane_mask, int width = 32) {
  static_assert(std::is_trivially_copyable_v<V>);
  const int lane = ::strata::emu::detail::lane_index();
  int source = lane ^ lane_mask;
  if (source >= (lane / width + 1) * width) source = lane;
  ::strata::emu::detail::ShuffleOperands<V> operands{value, source, value};
  ::strata::emu::detail::typed_warp_collective<::strata::emu::detail::ShuffleOperands<V>,
                                               &::strata::emu::detail::complete_shuffle<V>>(
      "__shfl_xor_sync", mask, operands);
  return operands.result;
}

// The value of lane source_lane % width of this lane's group of width lanes (CUDA C++
// Programming Guide, warp shuffle functions).
template <typename V>
V __shfl_sync(unsigned mask, V value, int source_lane, int width = 32) {
  static_assert(std::is_trivially_copyable_v<V>);
  const int lane = ::strata::emu::detail::lane_index();
  const int source = lane / width * width + source_lane % width;
  ::strata::emu::detail::ShuffleOperands<V> operands{value, source, value};
  ::strata::emu::detail::typed_warp_collective<::strata::emu::detail::ShuffleOperands<V>,
                                               &::strata::emu::detail::complete_shuffle<V>>(
      "__shfl_sync", mask, operands);
  return operands.result;
}

// CUDA's device min of two ints (math_functions.h).
inline int min(int a, int b) { return a < b ? a : b; }

inline size_t __cvta_generic_to_shared(const void* pointer) {
  return ::strata::emu::detail::shared_offset(pointer, "__cvta_generic_to_shared");
}
