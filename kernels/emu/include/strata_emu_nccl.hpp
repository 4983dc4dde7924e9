#pragma once
// The emulated NCCL's call log and its timeout (kernels/emu/nccl.cpp): what tests read to check
// that every rank made the same calls in the same order, grouped the same way, and split its
// communicators with consistent colors and keys.
//
//   strata::emu::clear_nccl_call_log();
//   ... 8 rank threads run ...
//   for (const NcclCall& call : strata::emu::nccl_call_log()) if (call.rank == 3) ...
//
// Records are appended when a call is made (on the host, in each thread's call order; the
// threads' records interleave), failed calls included, with their result.

#include <chrono>
#include <cstdint>
#include <vector>

#include "nccl.h"

namespace strata::emu {

enum class NcclOp : uint8_t {
  kCommInitRank,
  kCommSplit,
  kCommFinalize,
  kCommDestroy,
  kAllReduce,
  kReduceScatter,
  kAllGather,
  kBroadcast,
  kSend,
  kRecv,
  kGroupStart,
  kGroupEnd,
};

const char* to_string(NcclOp op);

struct NcclCall {
  NcclOp op = NcclOp::kGroupStart;
  // The caller's rank in its world (ncclCommInitRank's rank); for ncclGroupStart/End, the rank of
  // the last communicator this thread initialized (-1 before any).
  int32_t rank = -1;
  uint64_t world = 0;  // the world (unique id) the communicator descends from; 0 without one
  // The communicator's members as world ranks, in communicator rank order (a split: the parent's).
  std::vector<int32_t> members;
  size_t count = 0;  // elements (reduce_scatter: per member; all_gather: sent)
  ncclDataType_t datatype = ncclFloat32;
  ncclRedOp_t redop = ncclSum;  // reductions only
  // send/recv: the peer's world rank; broadcast: the root's world rank; otherwise -1.
  int32_t peer = -1;
  // ncclCommSplit: the color and key passed, and the new communicator's members as world ranks
  // (empty for NCCL_SPLIT_NOCOLOR).
  int32_t color = 0;
  int32_t key = 0;
  std::vector<int32_t> split_members;
  // How many ncclGroupStart were open when the call was made; ncclGroupStart records the depth
  // it opens (1 for the outermost), ncclGroupEnd the depth it closes.
  int32_t group_depth = 0;
  const void* stream = nullptr;  // the cudaStream_t the call was queued on
  ncclResult_t result = ncclSuccess;
};

// A copy of the log of this process, in append order.
std::vector<NcclCall> nccl_call_log();
void clear_nccl_call_log();

// How long a collective, a receive, ncclCommInitRank or ncclCommSplit waits for the other ranks
// before it fails (60 s unless a test that checks the failure shortens it). Returns the previous.
std::chrono::milliseconds set_nccl_timeout(std::chrono::milliseconds timeout);

}  // namespace strata::emu
