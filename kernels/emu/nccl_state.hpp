#pragma once
// The emulated NCCL's shared state (internal to kernels/emu: nccl.cpp makes and ends
// communicators, nccl_calls.cpp queues their collectives and messages; include/nccl.h has the
// model).
//
// A Clique is what the members of one communicator share (its world ranks, the meetings of its
// collectives, its messages, its splits), each guarded by the clique's mutex. A member's ncclComm
// holds the clique and its own counters (the index of its next collective, of its next message to
// or from each peer), which every call reads on the calling thread and captures by value in the
// queued work, so that the i-th call of every member is one instance.

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "nccl.h"
#include "strata_emu_nccl.hpp"
#include "strata_emu_waits.hpp"

namespace strata::emu {

// Bytes per element of datatype; 0 for a value outside ncclDataType_t.
size_t element_bytes(ncclDataType_t datatype);

// "[0, 4, 5]"
std::string join_ranks(const std::vector<int32_t>& ranks);

// What a member brings to a collective: the call's arguments, and a copy of its input taken
// when its queued work ran (so that members may overwrite their buffers as soon as they leave).
struct Post {
  NcclOp op = NcclOp::kAllReduce;
  size_t count = 0;
  ncclDataType_t datatype = ncclFloat32;
  ncclRedOp_t redop = ncclSum;
  int root = -1;
  std::vector<std::byte> input;
};

// One instance of a collective on a communicator: the members' posts by communicator rank.
struct Meeting {
  std::vector<std::optional<Post>> posts;
  size_t arrived = 0;
  size_t finished = 0;  // members that computed their result; the last erases the meeting
};

struct Message {
  size_t count = 0;
  ncclDataType_t datatype = ncclFloat32;
  std::vector<std::byte> data;
};

class Clique;

// One ncclCommSplit of a communicator: each member's (color, key), then the new cliques.
struct SplitMeeting {
  std::vector<std::optional<std::pair<int, int>>> colors_keys;
  size_t arrived = 0;
  size_t left = 0;
  std::map<int, std::shared_ptr<Clique>> cliques;  // by color
};

class Clique {
 public:
  Clique(uint64_t world, std::vector<int32_t> members)
      : world_(world), members_(std::move(members)) {}

  uint64_t world() const { return world_; }
  const std::vector<int32_t>& members() const { return members_; }
  size_t size() const { return members_.size(); }

  std::mutex mutex;
  std::condition_variable cv;
  std::map<uint64_t, Meeting> meetings;  // by the collective's index on the communicator
  // By (sender, receiver, index of the message between them), in communicator ranks.
  std::map<std::tuple<int, int, uint64_t>, Message> messages;
  // The receives posted, by the same key, until their send completes.
  std::set<std::tuple<int, int, uint64_t>> receives;
  std::map<uint64_t, SplitMeeting> splits;  // by the split's index on the communicator

 private:
  uint64_t world_;
  std::vector<int32_t> members_;  // world ranks, by communicator rank
};

// Appends a call to the log (strata_emu_nccl.hpp).
void log_call(NcclCall call);

// A call's two halves (include/nccl.h): the post, which never waits, and the completion, which
// runs once its wait condition holds. Inside ncclGroupStart/End they are kept for ncclGroupEnd.
struct Pending {
  cudaStream_t stream = nullptr;
  ncclComm* comm = nullptr;
  std::string what;
  std::function<void()> post;
  WaitCondition waits;
  std::function<void()> complete;
};

// This thread's state: the open groups' depth and the calls kept for ncclGroupEnd, the rank of
// the last communicator it initialized (-1 before any), and its last refusal's message.
extern thread_local int group_depth;
extern thread_local std::vector<Pending> grouped;
extern thread_local int32_t thread_rank;
extern thread_local std::string last_error;

// Keeps message as this thread's last error (ncclGetLastError) and returns result.
ncclResult_t refuse(ncclResult_t result, const std::string& message);

// A refused call: logged with its result, and "<call's name>: <message>" kept as this thread's
// last error; returns result.
ncclResult_t refuse_call(NcclCall call, ncclResult_t result, const std::string& message);

}  // namespace strata::emu

// A member's handle on a communicator (NCCL's opaque ncclComm), used by one thread.
struct ncclComm {
  std::shared_ptr<strata::emu::Clique> clique;
  int rank = 0;  // this member's communicator rank
  uint64_t next_collective = 0;
  uint64_t next_split = 0;
  std::map<int, uint64_t> sent;      // messages sent to each peer (communicator rank)
  std::map<int, uint64_t> received;  // receives posted from each peer
  // The queued item that completes this member's last call: NCCL runs a communicator's calls in
  // call order, whatever their streams (each launch waits for the communicator's previous one).
  uint64_t last_item = 0;

  int32_t world_rank() const { return clique->members()[static_cast<size_t>(rank)]; }
  int size() const { return static_cast<int>(clique->size()); }
};

namespace strata::emu {

// A log record of op on comm (null: a call without a communicator) at this thread's group depth.
NcclCall record_call(NcclOp op, const ncclComm* comm);

}  // namespace strata::emu
