#pragma once
// The NCCL communicator: one rank per GPU, its collectives and messages queued on the backend's
// current stream (Backend::native_stream, the task's) with NCCL.
//
//  - Setup: rank 0 calls ncclGetUniqueId and broadcasts its 128 bytes over `bootstrap` (MPI in
//    real runs, the in-process communicator in tests), each byte as one float (0..255, exact on
//    any path); every rank calls ncclCommInitRank for the world.
//  - register_groups builds one communicator per group with ncclCommSplit of the world. Every
//    rank receives the same list, so every rank derives the same splits from it: the distinct
//    groups in ascending order (a group's ranks compared as lists) are dealt greedily into
//    rounds of disjoint groups (a group joins the first round none of whose groups it meets),
//    and each round is one ncclCommSplit in which a rank's color is the index in the round of
//    its group, NCCL_SPLIT_NOCOLOR when it has none, and its key is its global rank (so that the
//    new communicator's rank i is group[i]). On a dp2 x tp2 x pp2 layout the tp, dp and pp
//    groups each make one round, and the world another.
//  - send and recv are ncclSend and ncclRecv on the world communicator. NCCL has no tags: it
//    matches the n-th send from a to b with b's n-th receive from a, so the runtime must issue
//    the messages between two ranks in the same order on both sides (the task graph's order).
//  - Double all-reduces carry the runtime's host scalars (the gradient norm's sum of squares):
//    the communicator synchronizes the backend (every stream), then all-reduces them on the host
//    through `bootstrap`, in group order. barrier() synchronizes the backend, then runs
//    bootstrap's barrier.
//
// The calls return once queued (exec/communicator.hpp, "device communicators"): NCCL's sums are
// in NCCL's order (rings, trees), not the group order of the CPU communicators, so a run's
// results are NOT bit-identical to the in-process or MPI run's; they agree within rounding.
// Built against the toolkit's NCCL (strata_exec_nccl, where cmake/cuda.cmake finds it) and the
// CPU emulation's (strata_exec_nccl_emu, kernels/emu/include/nccl.h, whose sums are in group
// order).

#include <memory>

#include "exec/backend.hpp"
#include "exec/communicator.hpp"

namespace strata {

// bootstrap and backend must outlive the communicator; bootstrap's world is this one's.
// Collective over bootstrap's world: every rank calls it.
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, Backend& backend);

}  // namespace strata
