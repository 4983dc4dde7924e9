#pragma once
// Communicators of a device backend's buffers where there is no NCCL between the ranks.
//
// The loopback communicator: ranks that are threads of one process, their backends on one device
// (NCCL refuses two ranks of one communicator on one GPU). The ranks meet on their in-process
// world (exec/inprocess_communicator.hpp) as the in-process communicator's do, but post device
// buffers with the event after which each may be read. A call is queued on the rank's current
// stream (the task's) and returns, as NCCL's calls do (exec/communicator.hpp, device
// communicators): the stream waits for the peers' events, reads their buffers (device copies, and
// Backend::reduce_in_order for reductions: group order, the in-process communicator's bits), and
// waits for the peers' reads of this rank's buffer before anything queued after the call (the
// collective's second meeting exchanges those events). A message is a device copy of the sent
// buffer, which the receiver copies out of and frees. The host never touches the data.
//
// The staged communicator: for ranks that are processes (MPI), whose device buffers no peer can
// read. Each call copies the rank's device buffers to the host on the current stream, runs the
// host communicator on the copies, and copies the results back before it returns: the host
// communicator's bits, through host memory.

#include <cstdint>
#include <memory>

#include "exec/backend.hpp"
#include "exec/communicator.hpp"
#include "exec/inprocess_communicator.hpp"

namespace strata {

// `rank`'s loopback communicator on `world`. The world and the backend must outlive it; every
// rank's backend is on the same device (or, for the CPU backend, in this process).
std::unique_ptr<Communicator> make_loopback_communicator(InProcessWorld& world, int32_t rank,
                                                         Backend& backend);

// host and backend must outlive the communicator.
std::unique_ptr<Communicator> make_staged_communicator(Communicator& host, Backend& backend);

}  // namespace strata
