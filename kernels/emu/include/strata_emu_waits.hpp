#pragma once
// Queued work that waits for other host threads (kernels/emu/README.md, "Work that waits"): what
// the emulated NCCL needs from the runtime beyond strata_emu.hpp.
//
// On a GPU, a kernel that waits for another rank (an NCCL collective for its peers' inputs, a
// receive for its message, a send for its receiver) spins on the device while other streams'
// kernels run. Here such an item carries a wait condition: the runtime runs it only once the
// condition holds, and runs other ready work meanwhile, so that two streams of one rank progress
// independently, as on a GPU. When items still wait and no work anywhere has run for the wait
// timeout, the synchronizing call fails with what each item waits for (a GPU would hang).
//
// Shared between the runtime (kernels/emu/runtime.cpp) and the emulated NCCL (nccl_calls.cpp).

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cuda_runtime.h"

namespace strata::emu {

// What an item still waits for ("ranks [1, 3] did not arrive"); empty once it can run. Called
// under the device lock, any number of times.
using WaitCondition = std::function<std::string()>;

// Queues work on stream (null: the legacy default stream) after the work queued there so far and
// after every item of `after` (ids returned here or by last_queued; finished ones are skipped),
// to run once `waits` answers empty (a null condition: at once). Returns the item's id.
uint64_t enqueue_waiting(cudaStream_t stream, std::string what, WaitCondition waits,
                         std::function<void()> work, const std::vector<uint64_t>& after);

// The last item queued on stream, or 0 when the stream has none pending.
uint64_t last_queued(cudaStream_t stream);

// How long the runtime lets items wait while no work anywhere runs before it fails (60 s unless
// a test that checks the failure shortens it). Returns the previous value.
std::chrono::milliseconds set_wait_timeout(std::chrono::milliseconds timeout);

}  // namespace strata::emu
