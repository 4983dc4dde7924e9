#pragma once
// The CPU emulation of CUDA (kernels/emu/README.md): what the emulated runtime offers the
// emulated libraries (cuBLAS, cuBLASLt, CUB, and later NCCL) and the kernels' launches. Every
// library call that a real GPU would run asynchronously is queued on its stream with enqueue();
// the runtime decides when queued work runs (adversarial orders that respect only the stream
// order and recorded events), so a library must capture its arguments by value and touch
// device memory only inside the queued work.
//
// Shared between the runtime (kernels/emu/runtime.cpp) and the libraries: change it in both.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

#include "cuda_runtime.h"

namespace strata::emu {

// A hard failure of the emulated program (a divergent barrier, a race, a missing event, an
// access outside an allocation): a GPU would hang, corrupt memory or give a wrong answer. The
// message names the kernel or call and what went wrong.
class EmulationError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
[[noreturn]] void fail(const std::string& message);

// Queues work on stream (null: the legacy default stream) after the work queued there so far.
// `what` names the call in failure messages ("cublasLtMatmul", a kernel's name).
void enqueue(cudaStream_t stream, std::string what, std::function<void()> work);

// Fails unless [pointer, pointer + bytes) lies inside one live device allocation; what names the
// argument ("cublasLtMatmul: A").
void check_device_range(const void* pointer, size_t bytes, const std::string& what);

// The emulated device is shared by the host threads of a process (a rank per thread, each with
// its own streams): every runtime call, launch and library call holds the device lock, and
// queued work runs under it on the thread that synchronizes, so the emulation runs one thing at
// a time. Reentrant on one thread.
class DeviceLock {
 public:
  DeviceLock();
  ~DeviceLock();
  DeviceLock(const DeviceLock&) = delete;
  DeviceLock& operator=(const DeviceLock&) = delete;
};
// Releases the device lock wholly for its scope: for the runtime's waits, and for queued work
// that blocks on other host threads (the emulated NCCL's calls wait through wait conditions
// instead, strata_emu_waits.hpp), so that they can run their own queues meanwhile. Work that a
// released item has not finished counts as pending.
class Unlocked {
 public:
  Unlocked();
  ~Unlocked();
  Unlocked(const Unlocked&) = delete;
  Unlocked& operator=(const Unlocked&) = delete;

 private:
  int depth_;
};

// The order in which the emulator runs what a GPU may run in any order: the threads of a block
// between two barriers, the blocks of a grid, and the queued work of streams not ordered by
// FIFO order or events. Running a program in all three and comparing the results shows the races
// no single order can (kernels/emu/README.md).
enum class Order { kForward, kReverse, kRandom };

struct Options {
  Order order = Order::kForward;
  uint64_t seed = 1;       // of Order::kRandom's generator
  bool racecheck = false;  // the shared-memory write-write race detector (README.md)
};

// Read from the environment on first use: STRATA_EMU_ORDER=forward|reverse|random,
// STRATA_EMU_SEED=<integer>, STRATA_EMU_RACECHECK=0|1; a value outside these fails.
const Options& options();
// Replaces the options (tests that compare orders) and restarts the random generator.
void set_options(const Options& options);

}  // namespace strata::emu
