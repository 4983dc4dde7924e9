// Kernel launches of the CPU emulation: the checks a launch gets on a GPU (the block's shape, the
// grid's, dynamic shared memory against the function's attribute), made hard failures, and the
// launch queued on its stream (kernels/emu/README.md).

#include <map>
#include <memory>
#include <string>

#include "kernels/emu/grid.hpp"
#include "kernels/emu/last_error.hpp"
#include "strata_emu.hpp"

namespace strata::emu {
namespace {

// cudaFuncAttributeMaxDynamicSharedMemorySize per kernel (looked up, never iterated).
std::map<KernelKey, size_t>& max_dynamic_shared_bytes() {
  static std::map<KernelKey, size_t> attributes;
  return attributes;
}

std::string shape(dim3 d) {
  return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
}

void check_shape(const std::string& kernel, dim3 grid, dim3 block, size_t shared_bytes,
                 KernelKey key) {
  const std::string launch = "the launch of " + kernel + ": ";
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (threads == 0 || threads > kMaxThreadsPerBlock || block.z > 64) {
    fail(launch + "block " + shape(block) + " has " + std::to_string(threads) +
         " threads; a block has 1 to 1024 (and z at most 64)");
  }
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 ||
      grid.z > 65535) {
    fail(launch + "grid " + shape(grid) +
         " is out of range (x in [1, 2^31), y and z in [1, 65535])");
  }
  if (shared_bytes > kSharedBytesPerBlock) {
    fail(launch + std::to_string(shared_bytes) +
         " bytes of dynamic shared memory are over the 227 KiB a block may have");
  }
  if (shared_bytes > kDefaultDynamicSharedBytes) {
    const auto attribute = max_dynamic_shared_bytes().find(key);
    const size_t allowed = attribute == max_dynamic_shared_bytes().end()
                               ? kDefaultDynamicSharedBytes
                               : attribute->second;
    if (shared_bytes > allowed) {
      fail(launch + std::to_string(shared_bytes) +
           " bytes of dynamic shared memory are over 48 KiB, and cudaFuncSetAttribute(kernel, "
           "cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) allows " +
           std::to_string(allowed));
    }
  }
}

}  // namespace

cudaError_t set_function_attribute(KernelKey kernel, cudaFuncAttribute attribute, int value) {
  const DeviceLock lock;
  switch (attribute) {
    case cudaFuncAttributeMaxDynamicSharedMemorySize:
      if (value < 0 || static_cast<size_t>(value) > kSharedBytesPerBlock) {
        return returned(cudaErrorInvalidValue);
      }
      max_dynamic_shared_bytes()[kernel] = static_cast<size_t>(value);
      return cudaSuccess;
    case cudaFuncAttributePreferredSharedMemoryCarveout:
      return returned(value >= -1 && value <= 100 ? cudaSuccess : cudaErrorInvalidValue);
  }
  return returned(cudaErrorInvalidValue);
}

namespace detail {

void launch_grid(const char* kernel_name, KernelKey kernel, dim3 grid, dim3 block,
                 size_t shared_bytes, cudaStream_t stream, ThreadBody body) {
  const DeviceLock lock;
  check_shape(kernel_name, grid, block, shared_bytes, kernel);
  auto launch = std::make_shared<GridLaunch>(
      GridLaunch{kernel_name, grid, block, shared_bytes, std::move(body)});
  enqueue(stream, kernel_name, [launch] { run_grid(*launch); });
}

}  // namespace detail
}  // namespace strata::emu
