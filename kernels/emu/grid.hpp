#pragma once
// Running one kernel launch of the CPU emulation: every block of the grid in the options' order,
// each block's threads as fibers (block.cpp).

#include <cstddef>
#include <string>

#include "cuda_runtime.h"

namespace strata::emu {

struct GridLaunch {
  std::string kernel_name;  // as written in STRATA_LAUNCH, e.g. "adamw_kernel<T>"
  dim3 grid;
  dim3 block;
  size_t dynamic_shared_bytes = 0;
  detail::ThreadBody body;  // what each thread runs
};

// The most shared memory a block may have (static and dynamic) and the most static shared memory
// (the H100's limits: CUDA C++ Programming Guide, technical specifications, compute capability
// 9.0), and the most dynamic shared memory a launch may ask for without
// cudaFuncAttributeMaxDynamicSharedMemorySize.
constexpr size_t kSharedBytesPerBlock = 227 * 1024;
constexpr size_t kStaticSharedBytes = 48 * 1024;
constexpr size_t kDefaultDynamicSharedBytes = 48 * 1024;
constexpr unsigned kMaxThreadsPerBlock = 1024;

// Runs every block of launch to completion; throws EmulationError on a hard failure.
void run_grid(const GridLaunch& launch);

}  // namespace strata::emu
