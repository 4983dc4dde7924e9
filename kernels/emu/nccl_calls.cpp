// The emulated NCCL's collectives and messages (include/nccl.h has the model): each call checked
// when made, queued as a post and a waiting completion (strata_emu_waits.hpp) after its
// communicator's previous call, or kept for ncclGroupEnd, which queues a group as one launch over
// all its streams. Communicators are nccl.cpp's; the shared state is nccl_state.hpp.

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cuda_bf16.h"
#include "kernels/emu/nccl_state.hpp"
#include "nccl.h"
#include "strata_emu.hpp"
#include "strata_emu_nccl.hpp"
#include "strata_emu_waits.hpp"

namespace strata::emu {
namespace {

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
T combine(T accumulated, T next, ncclRedOp_t redop) {
  return redop == ncclSum ? accumulated + next : (next > accumulated ? next : accumulated);
}
// bf16 in fp32, each step rounded to nearest even, as NCCL's bf16 reductions compute.
__nv_bfloat16 combine(__nv_bfloat16 accumulated, __nv_bfloat16 next, ncclRedOp_t redop) {
  const float a = __bfloat162float(accumulated);
  const float b = __bfloat162float(next);
  return redop == ncclSum ? __float2bfloat16_rn(a + b) : (b > a ? next : accumulated);
}

template <typename T>
void reduce(std::byte* result, const std::vector<std::optional<Post>>& posts, size_t offset,
            size_t count, ncclRedOp_t redop) {
  const size_t bytes = count * sizeof(T);
  std::vector<T> accumulated(count);
  std::vector<T> next(count);
  std::memcpy(accumulated.data(), posts[0]->input.data() + offset * sizeof(T), bytes);
  for (size_t j = 1; j < posts.size(); ++j) {
    std::memcpy(next.data(), posts[j]->input.data() + offset * sizeof(T), bytes);
    for (size_t i = 0; i < count; ++i) accumulated[i] = combine(accumulated[i], next[i], redop);
  }
  std::memcpy(result, accumulated.data(), bytes);
}

void reduce(std::byte* result, const std::vector<std::optional<Post>>& posts, size_t offset,
            size_t count, ncclDataType_t datatype, ncclRedOp_t redop) {
  if (datatype == ncclFloat32) {
    reduce<float>(result, posts, offset, count, redop);
  } else if (datatype == ncclBfloat16) {
    reduce<__nv_bfloat16>(result, posts, offset, count, redop);
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
  NcclCall call = record_call(c.op, comm);
  call.count = c.count;
  call.datatype = c.datatype;
  call.redop = c.redop;
  call.stream = stream;
  if (comm == nullptr) return refuse_call(call, ncclInvalidArgument, "comm is null");
  const bool reduces = c.op == NcclOp::kAllReduce || c.op == NcclOp::kReduceScatter;
  if (element_bytes(c.datatype) == 0)
    return refuse_call(call, ncclInvalidArgument, "invalid datatype");
  if (reduces &&
      (c.datatype != ncclFloat32 && c.datatype != ncclFloat64 && c.datatype != ncclBfloat16)) {
    fail(std::string(what) +
         ": the emulated NCCL reduces ncclFloat32, ncclFloat64 and ncclBfloat16 only");
  }
  if (reduces && c.redop != ncclSum && c.redop != ncclMax) {
    fail(std::string(what) + ": the emulated NCCL reduces with ncclSum and ncclMax only");
  }
  const int n = comm->size();
  if (c.op == NcclOp::kBroadcast) {
    if (c.root < 0 || c.root >= n) {
      return refuse_call(call, ncclInvalidArgument,
                         "root " + std::to_string(c.root) + " is not a rank of a communicator of " +
                             std::to_string(n));
    }
    call.peer = comm->clique->members()[static_cast<size_t>(c.root)];
  }
  const bool sends = c.op != NcclOp::kBroadcast || c.root == comm->rank;
  if (c.count > 0 && ((sends && c.send == nullptr) || c.recv == nullptr)) {
    return refuse_call(call, ncclInvalidArgument, "a null buffer");
  }
  log_call(call);

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
  const std::string name = std::string(what) + " on ranks " + join_ranks(clique->members()) +
                           " (call " + std::to_string(index) + " on the communicator, rank " +
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
    return "ranks " + join_ranks(absent) + " did not arrive";
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
  NcclCall call = record_call(op, comm);
  call.count = count;
  call.datatype = datatype;
  call.stream = stream;
  if (comm == nullptr) return refuse_call(call, ncclInvalidArgument, "comm is null");
  if (element_bytes(datatype) == 0)
    return refuse_call(call, ncclInvalidArgument, "invalid datatype");
  if (peer < 0 || peer >= comm->size()) {
    return refuse_call(call, ncclInvalidArgument,
                       "peer " + std::to_string(peer) + " is not a rank of a communicator of " +
                           std::to_string(comm->size()));
  }
  if (count > 0 && (op == NcclOp::kSend ? send == nullptr : recv == nullptr)) {
    return refuse_call(call, ncclInvalidArgument, "a null buffer");
  }
  call.peer = comm->clique->members()[static_cast<size_t>(peer)];
  log_call(call);

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
  log_call(record_call(NcclOp::kGroupStart, nullptr));
  return ncclSuccess;
}

// The outermost ncclGroupEnd queues the group's calls as one launch (include/nccl.h): an item
// posting every call (sends, receives, collectives' inputs) after the work queued so far on each
// of the group's streams and after each communicator's previous call, then one completing them
// all once every call's wait condition holds; the group's other streams wait for it.
ncclResult_t ncclGroupEnd() {
  using namespace strata::emu;
  NcclCall call = record_call(NcclOp::kGroupEnd, nullptr);
  if (group_depth == 0) {
    call.result = ncclInvalidUsage;
    log_call(call);
    return refuse(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  }
  log_call(call);
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
