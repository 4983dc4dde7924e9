#pragma once
// The loopback communicator: collectives over a device backend's buffers for ranks that are
// threads of one process on one GPU (NCCL refuses two ranks of one communicator on one device).
// Each call copies this rank's device buffers to the host on the backend's current stream (the
// task's, after the waits the runtime queued), runs the host communicator on the copies, and
// copies the results back before it returns, as the Communicator contract asks. The host
// communicator is an in-process one, whose sums run in group order: the results are the bits the
// CPU backend's runs get.
//
// Float buffers are the backend's device memory; double buffers are the runtime's host scalars
// (the gradient norm's sum of squares) and go to the host communicator as they are.

#include <memory>

#include "exec/backend.hpp"
#include "exec/communicator.hpp"

namespace strata {

// host and backend must outlive the communicator.
std::unique_ptr<Communicator> make_loopback_communicator(Communicator& host, Backend& backend);

}  // namespace strata
