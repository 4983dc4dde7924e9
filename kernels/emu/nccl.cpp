// The emulated NCCL (include/nccl.h has the model): worlds and communicators of rank threads,
// collectives and messages that meet in memory when each rank's queued work runs, and the call
// log of include/strata_emu_nccl.hpp.
//
// Shared state: a Clique is what the members of one communicator share (its world ranks, the
// meetings of its collectives, its messages, its splits), each guarded by the clique's mutex. A
// member's ncclComm holds the clique and its own counters (the index of its next collective, of
// its next message to or from each peer), which every call reads on the calling thread and
// captures by value in the queued work, so that the i-th call of every member is one instance.

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstring>
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
#include "strata_emu.hpp"
#include "strata_emu_nccl.hpp"
#include "strata_emu_waits.hpp"

namespace strata::emu {

namespace {

using Clock = std::chrono::steady_clock;

std::atomic<int64_t> timeout_ms{60'000};

std::chrono::milliseconds timeout() { return std::chrono::milliseconds(timeout_ms.load()); }

// The bytes of a unique id: this magic, then the world's serial number.
constexpr std::array<char, 16> kIdMagic = {'s', 't', 'r', 'a', 't', 'a', '-', 'e',
                                           'm', 'u', '-', 'n', 'c', 'c', 'l', '\0'};

size_t element_bytes(ncclDataType_t datatype) {
  switch (datatype) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
    default:
      return 0;
  }
}

std::string join(const std::vector<int32_t>& ranks) {
  std::string text = "[";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(ranks[i]);
  }
  return text + "]";
}

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

// ncclCommInitRank and ncclCommSplit block the host: waits on the condition variable until
// ready(); after the timeout fails with what_failed().
template <typename Ready, typename Describe>
void wait_or_fail(std::unique_lock<std::mutex>& lock, std::condition_variable& cv, Ready ready,
                  Describe what_failed) {
  if (cv.wait_for(lock, timeout(), ready)) return;
  fail(what_failed() + " within " + std::to_string(timeout().count()) +
       " ms; every rank must synchronize its streams before it blocks on the host "
       "(kernels/emu/include/nccl.h)");
}

// ---- The log ---------------------------------------------------------------------------------

std::mutex log_mutex;
std::vector<NcclCall> call_log;

void append(NcclCall call) {
  std::lock_guard lock(log_mutex);
  call_log.push_back(std::move(call));
}

// ---- This thread's state ---------------------------------------------------------------------

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

thread_local int group_depth = 0;
thread_local std::vector<Pending> grouped;
thread_local int32_t thread_rank = -1;
thread_local std::string last_error;

ncclResult_t refuse(ncclResult_t result, const std::string& message) {
  last_error = message;
  return result;
}

// ---- Worlds ----------------------------------------------------------------------------------

// A world whose ranks are joining (ncclCommInitRank): the last to join makes the clique.
struct JoiningWorld {
  int nranks = 0;
  std::vector<bool> joined;
  size_t arrived = 0;
  size_t left = 0;
  std::shared_ptr<Clique> clique;
};

std::mutex worlds_mutex;
std::condition_variable worlds_cv;
std::map<uint64_t, JoiningWorld> joining;
std::atomic<uint64_t> next_world{1};

}  // namespace

const char* to_string(NcclOp op) {
  switch (op) {
    case NcclOp::kCommInitRank:
      return "ncclCommInitRank";
    case NcclOp::kCommSplit:
      return "ncclCommSplit";
    case NcclOp::kCommFinalize:
      return "ncclCommFinalize";
    case NcclOp::kCommDestroy:
      return "ncclCommDestroy";
    case NcclOp::kAllReduce:
      return "ncclAllReduce";
    case NcclOp::kReduceScatter:
      return "ncclReduceScatter";
    case NcclOp::kAllGather:
      return "ncclAllGather";
    case NcclOp::kBroadcast:
      return "ncclBroadcast";
    case NcclOp::kSend:
      return "ncclSend";
    case NcclOp::kRecv:
      return "ncclRecv";
    case NcclOp::kGroupStart:
      return "ncclGroupStart";
    case NcclOp::kGroupEnd:
      return "ncclGroupEnd";
  }
  return "?";
}

std::vector<NcclCall> nccl_call_log() {
  std::lock_guard lock(log_mutex);
  return call_log;
}

void clear_nccl_call_log() {
  std::lock_guard lock(log_mutex);
  call_log.clear();
}

// The host waits' timeout here, the queued calls' the runtime's wait timeout.
std::chrono::milliseconds set_nccl_timeout(std::chrono::milliseconds value) {
  set_wait_timeout(value);
  return std::chrono::milliseconds(timeout_ms.exchange(value.count()));
}

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
namespace {

NcclCall record(NcclOp op, const ncclComm* comm) {
  NcclCall call;
  call.op = op;
  call.group_depth = group_depth;
  if (comm != nullptr) {
    call.rank = comm->world_rank();
    call.world = comm->clique->world();
    call.members = comm->clique->members();
  } else {
    call.rank = thread_rank;
  }
  return call;
}

// Queues a call's two halves on its stream, after the communicator's previous call, or keeps
// them for ncclGroupEnd inside a group.
void submit(Pending call) {
  if (group_depth > 0) {
    grouped.push_back(std::move(call));
    return;
  }
  enqueue_waiting(call.stream, call.what + " (post)", nullptr, std::move(call.post),
                  {call.comm->last_item});
  call.comm->last_item = enqueue_waiting(call.stream, std::move(call.what), std::move(call.waits),
                                         std::move(call.complete), {});
}

// result (count elements of T) = the reduction of each member's input from element `offset` on,
// in communicator rank order, ((x0 + x1) + x2) + ..., one step at a time in T: the steps
// exec/inprocess_communicator.cpp takes.
template <typename T>
void reduce(std::byte* result, const std::vector<std::optional<Post>>& posts, size_t offset,
            size_t count, ncclRedOp_t redop) {
  const size_t bytes = count * sizeof(T);
  std::vector<T> accumulated(count);
  std::vector<T> next(count);
  std::memcpy(accumulated.data(), posts[0]->input.data() + offset * sizeof(T), bytes);
  for (size_t j = 1; j < posts.size(); ++j) {
    std::memcpy(next.data(), posts[j]->input.data() + offset * sizeof(T), bytes);
    for (size_t i = 0; i < count; ++i) {
      accumulated[i] = redop == ncclSum ? accumulated[i] + next[i]
                                        : (next[i] > accumulated[i] ? next[i] : accumulated[i]);
    }
  }
  std::memcpy(result, accumulated.data(), bytes);
}

void reduce(std::byte* result, const std::vector<std::optional<Post>>& posts, size_t offset,
            size_t count, ncclDataType_t datatype, ncclRedOp_t redop) {
  if (datatype == ncclFloat32) {
    reduce<float>(result, posts, offset, count, redop);
  } else {
    reduce<double>(result, posts, offset, count, redop);
  }
}

struct Collective {
  NcclOp op;
  const void* send;
  void* recv;
  size_t count;
  ncclDataType_t datatype;
  ncclRedOp_t redop;
  int root;  // broadcast's root (communicator rank), else -1
};

// Checks a collective's arguments on the calling thread and queues it.
ncclResult_t collective(const Collective& c, ncclComm_t comm, cudaStream_t stream) {
  const char* what = to_string(c.op);
  NcclCall call = record(c.op, comm);
  call.count = c.count;
  call.datatype = c.datatype;
  call.redop = c.redop;
  call.stream = stream;
  const auto refused = [&](ncclResult_t result, const std::string& message) {
    call.result = result;
    append(call);
    return refuse(result, std::string(what) + ": " + message);
  };
  if (comm == nullptr) return refused(ncclInvalidArgument, "comm is null");
  const bool reduces = c.op == NcclOp::kAllReduce || c.op == NcclOp::kReduceScatter;
  if (element_bytes(c.datatype) == 0) return refused(ncclInvalidArgument, "invalid datatype");
  if (reduces && (c.datatype != ncclFloat32 && c.datatype != ncclFloat64)) {
    fail(std::string(what) + ": the emulated NCCL reduces ncclFloat32 and ncclFloat64 only");
  }
  if (reduces && c.redop != ncclSum && c.redop != ncclMax) {
    fail(std::string(what) + ": the emulated NCCL reduces with ncclSum and ncclMax only");
  }
  const int n = comm->size();
  if (c.op == NcclOp::kBroadcast) {
    if (c.root < 0 || c.root >= n) {
      return refused(ncclInvalidArgument, "root " + std::to_string(c.root) +
                                              " is not a rank of a communicator of " +
                                              std::to_string(n));
    }
    call.peer = comm->clique->members()[static_cast<size_t>(c.root)];
  }
  const bool sends = c.op != NcclOp::kBroadcast || c.root == comm->rank;
  if (c.count > 0 && ((sends && c.send == nullptr) || c.recv == nullptr)) {
    return refused(ncclInvalidArgument, "a null buffer");
  }
  append(call);

  const size_t element = element_bytes(c.datatype);
  const auto members = static_cast<size_t>(n);
  size_t input_bytes = c.count * element;
  size_t output_bytes = c.count * element;
  if (c.op == NcclOp::kReduceScatter) input_bytes *= members;
  if (c.op == NcclOp::kAllGather) output_bytes *= members;
  if (!sends) input_bytes = 0;

  const std::shared_ptr<Clique> clique = comm->clique;
  const auto rank = static_cast<size_t>(comm->rank);
  const uint64_t index = comm->next_collective++;
  const std::string name = std::string(what) + " on ranks " + join(clique->members()) + " (call " +
                           std::to_string(index) + " on the communicator, rank " +
                           std::to_string(comm->world_rank()) + ")";
  auto post = [=] {
    if (input_bytes > 0) check_device_range(c.send, input_bytes, name + ": sendbuff");
    if (output_bytes > 0) check_device_range(c.recv, output_bytes, name + ": recvbuff");
    Post mine{c.op, c.count, c.datatype, c.redop, c.root, {}};
    const auto* input = static_cast<const std::byte*>(c.send);
    if (input_bytes > 0) mine.input.assign(input, input + input_bytes);
    std::lock_guard lock(clique->mutex);
    Meeting& meeting = clique->meetings[index];
    if (meeting.posts.empty()) meeting.posts.resize(members);
    meeting.posts[rank] = std::move(mine);
    ++meeting.arrived;
  };
  auto waits = [=]() -> std::string {
    std::lock_guard lock(clique->mutex);
    const Meeting& meeting = clique->meetings.at(index);
    if (meeting.arrived == members) return "";
    std::vector<int32_t> absent;
    for (size_t j = 0; j < members; ++j) {
      if (!meeting.posts[j]) absent.push_back(clique->members()[j]);
    }
    return "ranks " + join(absent) + " did not arrive";
  };
  auto complete = [=] {
    Meeting* found = nullptr;
    {
      std::lock_guard lock(clique->mutex);
      found = &clique->meetings.at(index);
    }
    Meeting& meeting = *found;
    // Nobody writes the posts until every member has finished.
    const std::vector<std::optional<Post>>& posts = meeting.posts;
    const Post& first = *posts[0];
    for (size_t j = 1; j < members; ++j) {
      const Post& other = *posts[j];
      if (other.op != first.op || other.count != first.count || other.datatype != first.datatype ||
          other.redop != first.redop || other.root != first.root) {
        fail(name + ": the members called different collectives: rank " +
             std::to_string(clique->members()[0]) + " " + to_string(first.op) + " of " +
             std::to_string(first.count) + " (type " + std::to_string(first.datatype) + ", op " +
             std::to_string(first.redop) + ", root " + std::to_string(first.root) + "), rank " +
             std::to_string(clique->members()[j]) + " " + to_string(other.op) + " of " +
             std::to_string(other.count) + " (type " + std::to_string(other.datatype) + ", op " +
             std::to_string(other.redop) + ", root " + std::to_string(other.root) + ")");
      }
    }
    auto* output = static_cast<std::byte*>(c.recv);
    switch (c.op) {
      case NcclOp::kAllReduce:
        if (c.count > 0) reduce(output, posts, 0, c.count, c.datatype, c.redop);
        break;
      case NcclOp::kReduceScatter:
        if (c.count > 0) reduce(output, posts, rank * c.count, c.count, c.datatype, c.redop);
        break;
      case NcclOp::kAllGather:
        for (size_t j = 0; j < members && c.count > 0; ++j) {
          std::memcpy(output + j * c.count * element, posts[j]->input.data(), c.count * element);
        }
        break;
      default:  // broadcast
        if (c.count > 0) {
          std::memcpy(output, posts[static_cast<size_t>(c.root)]->input.data(), c.count * element);
        }
        break;
    }
    const std::lock_guard lock(clique->mutex);
    if (++meeting.finished == members) clique->meetings.erase(index);
  };
  submit({stream, comm, name, std::move(post), std::move(waits), std::move(complete)});
  return ncclSuccess;
}

ncclResult_t point_to_point(NcclOp op, const void* send, void* recv, size_t count,
                            ncclDataType_t datatype, int peer, ncclComm_t comm,
                            cudaStream_t stream) {
  const char* what = to_string(op);
  NcclCall call = record(op, comm);
  call.count = count;
  call.datatype = datatype;
  call.stream = stream;
  const auto refused = [&](ncclResult_t result, const std::string& message) {
    call.result = result;
    append(call);
    return refuse(result, std::string(what) + ": " + message);
  };
  if (comm == nullptr) return refused(ncclInvalidArgument, "comm is null");
  if (element_bytes(datatype) == 0) return refused(ncclInvalidArgument, "invalid datatype");
  if (peer < 0 || peer >= comm->size()) {
    return refused(ncclInvalidArgument, "peer " + std::to_string(peer) +
                                            " is not a rank of a communicator of " +
                                            std::to_string(comm->size()));
  }
  if (count > 0 && (op == NcclOp::kSend ? send == nullptr : recv == nullptr)) {
    return refused(ncclInvalidArgument, "a null buffer");
  }
  call.peer = comm->clique->members()[static_cast<size_t>(peer)];
  append(call);

  const std::shared_ptr<Clique> clique = comm->clique;
  const size_t bytes = count * element_bytes(datatype);
  const int self = comm->rank;
  if (op == NcclOp::kSend) {
    const auto key = std::make_tuple(self, peer, comm->sent[peer]++);
    const std::string name = "ncclSend from rank " + std::to_string(comm->world_rank()) +
                             " to rank " + std::to_string(call.peer) + " (message " +
                             std::to_string(std::get<2>(key)) + " between them)";
    auto post = [=] {
      if (bytes > 0) check_device_range(send, bytes, name + ": sendbuff");
      const auto* data = static_cast<const std::byte*>(send);
      Message message{count, datatype, std::vector<std::byte>(data, data + bytes)};
      std::lock_guard lock(clique->mutex);
      clique->messages[key] = std::move(message);
    };
    // Every send waits for its receive, as a message larger than NCCL's buffers does.
    auto waits = [=, receiver = call.peer]() -> std::string {
      std::lock_guard lock(clique->mutex);
      return clique->receives.count(key) != 0
                 ? ""
                 : "rank " + std::to_string(receiver) + " did not post the matching ncclRecv";
    };
    auto complete = [=] {
      std::lock_guard lock(clique->mutex);
      clique->receives.erase(key);
    };
    submit({stream, comm, name, std::move(post), std::move(waits), std::move(complete)});
    return ncclSuccess;
  }
  const auto key = std::make_tuple(peer, self, comm->received[peer]++);
  const std::string name = "ncclRecv on rank " + std::to_string(comm->world_rank()) +
                           " from rank " + std::to_string(call.peer) + " (message " +
                           std::to_string(std::get<2>(key)) + " between them)";
  auto post = [=] {
    if (bytes > 0) check_device_range(recv, bytes, name + ": recvbuff");
    std::lock_guard lock(clique->mutex);
    clique->receives.insert(key);
  };
  auto waits = [=]() -> std::string {
    std::lock_guard lock(clique->mutex);
    return clique->messages.count(key) != 0 ? "" : "no matching ncclSend ran";
  };
  auto complete = [=] {
    Message message;
    {
      std::lock_guard lock(clique->mutex);
      const auto found = clique->messages.find(key);
      message = std::move(found->second);
      clique->messages.erase(found);
    }
    if (message.count != count || message.datatype != datatype) {
      fail(name + ": the send has " + std::to_string(message.count) + " elements of type " +
           std::to_string(message.datatype) + ", the receive " + std::to_string(count) +
           " of type " + std::to_string(datatype));
    }
    if (bytes > 0) std::memcpy(recv, message.data.data(), bytes);
  };
  submit({stream, comm, name, std::move(post), std::move(waits), std::move(complete)});
  return ncclSuccess;
}

}  // namespace
}  // namespace strata::emu

using strata::emu::NcclCall;
using strata::emu::NcclOp;

ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return strata::emu::refuse(ncclInvalidArgument, "version is null");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  if (uniqueId == nullptr) return strata::emu::refuse(ncclInvalidArgument, "uniqueId is null");
  *uniqueId = {};
  const uint64_t world = strata::emu::next_world++;
  std::memcpy(uniqueId->internal, strata::emu::kIdMagic.data(), strata::emu::kIdMagic.size());
  std::memcpy(uniqueId->internal + strata::emu::kIdMagic.size(), &world, sizeof(world));
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  using namespace strata::emu;
  NcclCall call = record(NcclOp::kCommInitRank, nullptr);
  call.rank = rank;
  call.count = static_cast<size_t>(std::max(nranks, 0));
  const auto refused = [&](ncclResult_t result, const std::string& message) {
    call.result = result;
    append(call);
    return refuse(result, "ncclCommInitRank: " + message);
  };
  uint64_t world = 0;
  std::memcpy(&world, commId.internal + kIdMagic.size(), sizeof(world));
  if (comm == nullptr) return refused(ncclInvalidArgument, "comm is null");
  if (std::memcmp(commId.internal, kIdMagic.data(), kIdMagic.size()) != 0 || world == 0) {
    return refused(ncclInvalidArgument, "the id is not one ncclGetUniqueId made");
  }
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    return refused(ncclInvalidArgument,
                   "rank " + std::to_string(rank) + " of " + std::to_string(nranks) + " ranks");
  }
  if (group_depth > 0) fail("ncclCommInitRank inside a group is not emulated");
  call.world = world;
  std::shared_ptr<Clique> clique;
  {
    std::unique_lock lock(worlds_mutex);
    JoiningWorld& joiner = joining[world];
    if (joiner.joined.empty()) {
      joiner.nranks = nranks;
      joiner.joined.resize(static_cast<size_t>(nranks));
    }
    if (joiner.nranks != nranks || joiner.joined[static_cast<size_t>(rank)]) {
      return refused(ncclInvalidUsage, "rank " + std::to_string(rank) + " of " +
                                           std::to_string(nranks) +
                                           " joins a world it already joined, or of another size");
    }
    joiner.joined[static_cast<size_t>(rank)] = true;
    if (++joiner.arrived == static_cast<size_t>(nranks)) {
      std::vector<int32_t> members(static_cast<size_t>(nranks));
      for (int32_t r = 0; r < nranks; ++r) members[static_cast<size_t>(r)] = r;
      joiner.clique = std::make_shared<Clique>(world, std::move(members));
      worlds_cv.notify_all();
    }
    wait_or_fail(
        lock, worlds_cv, [&] { return joiner.clique != nullptr; },
        [&] {
          std::vector<int32_t> absent;
          for (int32_t r = 0; r < nranks; ++r) {
            if (!joiner.joined[static_cast<size_t>(r)]) absent.push_back(r);
          }
          return "ncclCommInitRank of world " + std::to_string(world) + ": ranks " + join(absent) +
                 " did not join";
        });
    clique = joiner.clique;
    if (++joiner.left == static_cast<size_t>(nranks)) joining.erase(world);
  }
  *comm = new ncclComm{clique, rank, 0, 0, {}, {}, 0};
  thread_rank = rank;
  call.members = clique->members();
  append(call);
  return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                           ncclConfig_t* config) {
  using namespace strata::emu;
  NcclCall call = record(NcclOp::kCommSplit, comm);
  call.color = color;
  call.key = key;
  const auto refused = [&](ncclResult_t result, const std::string& message) {
    call.result = result;
    append(call);
    return refuse(result, "ncclCommSplit: " + message);
  };
  if (comm == nullptr || newcomm == nullptr) {
    return refused(ncclInvalidArgument, "comm or newcomm is null");
  }
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR) {
    return refused(ncclInvalidArgument, "color " + std::to_string(color) + " is negative");
  }
  if (config != nullptr) fail("ncclCommSplit: a config is not emulated (pass null)");
  if (group_depth > 0) fail("ncclCommSplit inside a group is not emulated");
  const std::shared_ptr<Clique> parent = comm->clique;
  const size_t members = parent->size();
  const uint64_t index = comm->next_split++;
  std::shared_ptr<Clique> clique;
  int new_rank = 0;
  {
    std::unique_lock lock(parent->mutex);
    SplitMeeting& split = parent->splits[index];
    if (split.colors_keys.empty()) split.colors_keys.resize(members);
    split.colors_keys[static_cast<size_t>(comm->rank)] = std::pair{color, key};
    if (++split.arrived == members) {
      // The members of each color ordered by key, ties by parent rank (NCCL's rule).
      std::map<int, std::vector<std::tuple<int, int>>> by_color;  // color -> (key, parent rank)
      for (size_t j = 0; j < members; ++j) {
        const auto [c, k] = *split.colors_keys[j];
        if (c != NCCL_SPLIT_NOCOLOR) by_color[c].emplace_back(k, static_cast<int>(j));
      }
      for (auto& [c, ranks] : by_color) {
        std::ranges::sort(ranks);
        std::vector<int32_t> world_ranks;
        for (const auto& [k, j] : ranks) world_ranks.push_back(parent->members()[j]);
        split.cliques[c] = std::make_shared<Clique>(parent->world(), std::move(world_ranks));
      }
      parent->cv.notify_all();
    } else {
      wait_or_fail(
          lock, parent->cv, [&] { return split.arrived == members; },
          [&] {
            std::vector<int32_t> absent;
            for (size_t j = 0; j < members; ++j) {
              if (!split.colors_keys[j]) absent.push_back(parent->members()[j]);
            }
            return "ncclCommSplit " + std::to_string(index) + " of ranks " +
                   join(parent->members()) + ": ranks " + join(absent) + " did not call it";
          });
    }
    if (color != NCCL_SPLIT_NOCOLOR) {
      clique = split.cliques.at(color);
      const auto found = std::ranges::find(clique->members(), comm->world_rank());
      new_rank = static_cast<int>(found - clique->members().begin());
    }
    if (++split.left == members) parent->splits.erase(index);
  }
  *newcomm = clique ? new ncclComm{clique, new_rank, 0, 0, {}, {}, 0} : nullptr;
  if (clique) call.split_members = clique->members();
  append(call);
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  strata::emu::append(strata::emu::record(NcclOp::kCommFinalize, comm));
  if (comm == nullptr) return strata::emu::refuse(ncclInvalidArgument, "comm is null");
  return ncclSuccess;
}

// The queued work holds the clique, not the handle: destroying a handle with calls still queued
// is safe, as NCCL's ncclCommDestroy waits for them.
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  strata::emu::append(strata::emu::record(NcclOp::kCommDestroy, comm));
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (comm == nullptr || count == nullptr) {
    return strata::emu::refuse(ncclInvalidArgument, "ncclCommCount: a null argument");
  }
  *count = comm->size();
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (comm == nullptr || rank == nullptr) {
    return strata::emu::refuse(ncclInvalidArgument, "ncclCommUserRank: a null argument");
  }
  *rank = comm->rank;
  return ncclSuccess;
}

// NCCL's own strings (src/misc/utils.cc, ncclGetErrorString).
const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t /*comm*/) { return strata::emu::last_error.c_str(); }

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
  return strata::emu::collective({NcclOp::kAllReduce, sendbuff, recvbuff, count, datatype, op, -1},
                                 comm, stream);
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  return strata::emu::collective(
      {NcclOp::kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, -1}, comm, stream);
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return strata::emu::collective(
      {NcclOp::kAllGather, sendbuff, recvbuff, sendcount, datatype, ncclSum, -1}, comm, stream);
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  return strata::emu::collective(
      {NcclOp::kBroadcast, sendbuff, recvbuff, count, datatype, ncclSum, root}, comm, stream);
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  return strata::emu::point_to_point(NcclOp::kSend, sendbuff, nullptr, count, datatype, peer, comm,
                                     stream);
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  return strata::emu::point_to_point(NcclOp::kRecv, nullptr, recvbuff, count, datatype, peer, comm,
                                     stream);
}

ncclResult_t ncclGroupStart() {
  using namespace strata::emu;
  ++group_depth;
  append(record(NcclOp::kGroupStart, nullptr));
  return ncclSuccess;
}

// The outermost ncclGroupEnd queues the group's calls as one launch (include/nccl.h): an item
// posting every call (sends, receives, collectives' inputs) after the work queued so far on each
// of the group's streams and after each communicator's previous call, then one completing them
// all once every call's wait condition holds; the group's other streams wait for it.
ncclResult_t ncclGroupEnd() {
  using namespace strata::emu;
  NcclCall call = record(NcclOp::kGroupEnd, nullptr);
  if (group_depth == 0) {
    call.result = ncclInvalidUsage;
    append(call);
    return refuse(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  }
  append(call);
  if (--group_depth > 0 || grouped.empty()) return ncclSuccess;
  auto calls = std::make_shared<std::vector<Pending>>(std::exchange(grouped, {}));
  std::vector<cudaStream_t> streams;
  std::vector<ncclComm*> comms;
  std::string what = "ncclGroupEnd of";
  for (const Pending& pending : *calls) {
    if (std::ranges::find(streams, pending.stream) == streams.end()) {
      streams.push_back(pending.stream);
    }
    if (std::ranges::find(comms, pending.comm) == comms.end()) comms.push_back(pending.comm);
    what += (&pending == &calls->front() ? " " : ", ") + pending.what;
  }
  std::vector<uint64_t> after;
  for (const cudaStream_t stream : streams) after.push_back(last_queued(stream));
  for (const ncclComm* comm : comms) after.push_back(comm->last_item);
  enqueue_waiting(
      streams.front(), what + " (post)", nullptr,
      [calls] {
        for (const Pending& pending : *calls) pending.post();
      },
      after);
  const uint64_t completed = enqueue_waiting(
      streams.front(), what,
      [calls]() -> std::string {
        for (const Pending& pending : *calls) {
          std::string reason = pending.waits();
          if (!reason.empty()) return pending.what + ": " + reason;
        }
        return "";
      },
      [calls] {
        for (const Pending& pending : *calls) pending.complete();
      },
      {});
  for (size_t i = 1; i < streams.size(); ++i) {
    enqueue_waiting(streams[i], what + " (join)", nullptr, [] {}, {completed});
  }
  for (ncclComm* comm : comms) comm->last_item = completed;
  return ncclSuccess;
}
