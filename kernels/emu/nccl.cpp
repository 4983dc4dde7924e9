// The emulated NCCL's communicators (include/nccl.h has the model): unique ids, worlds joined by
// ncclCommInitRank, ncclCommSplit, the handles' queries and ends, the error strings, and the call
// log of include/strata_emu_nccl.hpp. Their collectives and messages are nccl_calls.cpp's; what
// both share is nccl_state.hpp.

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/emu/nccl_state.hpp"
#include "nccl.h"
#include "strata_emu.hpp"
#include "strata_emu_nccl.hpp"
#include "strata_emu_waits.hpp"

namespace strata::emu {
namespace {

std::atomic<int64_t> timeout_ms{60'000};

std::chrono::milliseconds timeout() { return std::chrono::milliseconds(timeout_ms.load()); }

// The bytes of a unique id: this magic, then the world's serial number.
constexpr std::array<char, 16> kIdMagic = {'s', 't', 'r', 'a', 't', 'a', '-', 'e',
                                           'm', 'u', '-', 'n', 'c', 'c', 'l', '\0'};

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

std::string join_ranks(const std::vector<int32_t>& ranks) {
  std::string text = "[";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(ranks[i]);
  }
  return text + "]";
}

void log_call(NcclCall call) {
  std::lock_guard lock(log_mutex);
  call_log.push_back(std::move(call));
}

thread_local int group_depth = 0;
thread_local std::vector<Pending> grouped;
thread_local int32_t thread_rank = -1;
thread_local std::string last_error;

ncclResult_t refuse(ncclResult_t result, const std::string& message) {
  last_error = message;
  return result;
}

ncclResult_t refuse_call(NcclCall call, ncclResult_t result, const std::string& message) {
  call.result = result;
  const std::string what = to_string(call.op);
  log_call(std::move(call));
  return refuse(result, what + ": " + message);
}

NcclCall record_call(NcclOp op, const ncclComm* comm) {
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
  NcclCall call = record_call(NcclOp::kCommInitRank, nullptr);
  call.rank = rank;
  call.count = static_cast<size_t>(std::max(nranks, 0));
  uint64_t world = 0;
  std::memcpy(&world, commId.internal + kIdMagic.size(), sizeof(world));
  if (comm == nullptr) return refuse_call(call, ncclInvalidArgument, "comm is null");
  if (std::memcmp(commId.internal, kIdMagic.data(), kIdMagic.size()) != 0 || world == 0) {
    return refuse_call(call, ncclInvalidArgument, "the id is not one ncclGetUniqueId made");
  }
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    return refuse_call(call, ncclInvalidArgument,
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
      return refuse_call(call, ncclInvalidUsage,
                         "rank " + std::to_string(rank) + " of " + std::to_string(nranks) +
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
          return "ncclCommInitRank of world " + std::to_string(world) + ": ranks " +
                 join_ranks(absent) + " did not join";
        });
    clique = joiner.clique;
    if (++joiner.left == static_cast<size_t>(nranks)) joining.erase(world);
  }
  *comm = new ncclComm{clique, rank, 0, 0, {}, {}, 0};
  thread_rank = rank;
  call.members = clique->members();
  log_call(call);
  return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                           ncclConfig_t* config) {
  using namespace strata::emu;
  NcclCall call = record_call(NcclOp::kCommSplit, comm);
  call.color = color;
  call.key = key;
  if (comm == nullptr || newcomm == nullptr) {
    return refuse_call(call, ncclInvalidArgument, "comm or newcomm is null");
  }
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR) {
    return refuse_call(call, ncclInvalidArgument,
                       "color " + std::to_string(color) + " is negative");
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
                   join_ranks(parent->members()) + ": ranks " + join_ranks(absent) +
                   " did not call it";
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
  log_call(call);
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  strata::emu::log_call(strata::emu::record_call(NcclOp::kCommFinalize, comm));
  if (comm == nullptr) return strata::emu::refuse(ncclInvalidArgument, "comm is null");
  return ncclSuccess;
}

// The queued work holds the clique, not the handle: destroying a handle with calls still queued
// is safe, as NCCL's ncclCommDestroy waits for them.
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  strata::emu::log_call(strata::emu::record_call(NcclOp::kCommDestroy, comm));
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
