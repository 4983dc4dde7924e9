#include "exec/loopback_communicator.hpp"

#include <algorithm>
#include <map>
#include <span>
#include <utility>
#include <variant>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.hpp"
#include "exec/rendezvous.hpp"

namespace strata {

namespace {

class StagedCommunicator final : public TypedCommunicator<StagedCommunicator> {
 public:
  StagedCommunicator(Communicator& host, Backend& backend) : host_(host), backend_(backend) {}

  int32_t rank() const override { return host_.rank(); }
  int32_t world_size() const override { return host_.world_size(); }
  void register_groups(const std::vector<std::vector<int32_t>>& groups) override {
    host_.register_groups(groups);
  }

  void barrier() override { host_.barrier(); }

 private:
  friend class TypedCommunicator<StagedCommunicator>;

  // The host communicator's view of when the data began to move is this one's (the runtime
  // measures the wait for peers through it).
  void note_host_transfer() {
    if (host_.first_transfer_ns() >= 0) note_transfer(host_.first_transfer_ns());
  }

  template <typename T>
  std::vector<T> to_host(std::span<const T> device) {
    std::vector<T> host(device.size());
    backend_.download(std::span(host), device.data());
    return host;
  }

  // Each call: the device buffer to the host, the host communicator's call, the result back.
  template <typename T>
  void all_reduce_typed(std::span<T> data, RankGroup group, ReduceOp op) {
    std::vector<T> staged = to_host(std::span<const T>(data));
    host_.mark_transfers();
    host_.all_reduce(std::span(staged), group, op);
    note_host_transfer();
    backend_.upload(data.data(), staged);
  }
  template <typename T>
  void reduce_scatter_typed(std::span<const T> send, std::span<T> recv, RankGroup group) {
    const std::vector<T> staged = to_host(send);
    std::vector<T> result(recv.size());
    host_.mark_transfers();
    host_.reduce_scatter(std::span<const T>(staged), std::span(result), group);
    note_host_transfer();
    backend_.upload(recv.data(), result);
  }
  template <typename T>
  void all_gather_typed(std::span<const T> send, std::span<T> recv, RankGroup group) {
    const std::vector<T> staged = to_host(send);
    std::vector<T> result(recv.size());
    host_.mark_transfers();
    host_.all_gather(std::span<const T>(staged), std::span(result), group);
    note_host_transfer();
    backend_.upload(recv.data(), result);
  }
  template <typename T>
  void broadcast_typed(std::span<T> data, int32_t root, RankGroup group) {
    std::vector<T> staged = to_host(std::span<const T>(data));
    host_.mark_transfers();
    host_.broadcast(std::span(staged), root, group);
    note_host_transfer();
    backend_.upload(data.data(), staged);
  }
  template <typename T>
  void send_typed(std::span<const T> data, int32_t peer, int32_t tag) {
    host_.send(std::span<const T>(to_host(data)), peer, tag);
  }
  template <typename T>
  void recv_typed(std::span<T> data, int32_t peer, int32_t tag) {
    std::vector<T> staged(data.size());
    host_.mark_transfers();
    host_.recv(std::span(staged), peer, tag);
    note_host_transfer();
    backend_.upload(data.data(), staged);
  }

  Communicator& host_;
  Backend& backend_;
};

class LoopbackCommunicator final : public TypedCommunicator<LoopbackCommunicator> {
 public:
  LoopbackCommunicator(InProcessWorld& world, int32_t rank, Backend& backend)
      : world_(world), rank_(rank), backend_(backend) {}
  LoopbackCommunicator(const LoopbackCommunicator&) = delete;
  LoopbackCommunicator& operator=(const LoopbackCommunicator&) = delete;
  ~LoopbackCommunicator() override {
    for (const auto& [stream, scratch] : scratch_) backend_.release(scratch.data);
  }

  int32_t rank() const override { return rank_; }
  int32_t world_size() const override { return world_.world_size(); }
  void register_groups(const std::vector<std::vector<int32_t>>& groups) override {
    world_.throw_if_aborted();
    groups_.merge(world_.join(groups, rank_));
  }

  // As NCCL's barrier: this rank's queued work is done, then every rank has arrived.
  void barrier() override {
    backend_.synchronize();
    world_.throw_if_aborted();
    note_transfer(world_.barrier_rendezvous().leave());
  }

 private:
  friend class TypedCommunicator<LoopbackCommunicator>;
  using Member = InProcessWorld::Member;

  // A collective's first meeting: this rank's place in the group, and every member's post.
  struct Meeting {
    Member member;
    std::span<const Contribution> all;  // valid until the second meeting
  };

  // Posts this rank's device buffer, ready once the work queued so far on the current stream is
  // done, and meets the group.
  template <typename T>
  Meeting meet(RankGroup group, Collective kind, ReduceOp op, int32_t root,
               std::span<const T> buffer) {
    world_.throw_if_aborted();
    const Member member = InProcessWorld::member(groups_, group, rank_);
    const auto [all, met_ns] =
        member.rendezvous->meet(member.index, {.kind = kind,
                                               .op = op,
                                               .root = root,
                                               .data = buffer,
                                               .device = true,
                                               .event = backend_.record_shared_event()});
    note_transfer(met_ns);
    check_matching(all, group);
    return {member, all};
  }

  // Member j's buffer from element `offset`, once the current stream has waited for it.
  template <typename T>
  const T* read(const Meeting& meeting, size_t j, size_t offset) {
    if (j != meeting.member.index) backend_.wait_shared_event(*meeting.all[j].event);
    return std::get<std::span<const T>>(meeting.all[j].data).data() + offset;
  }
  template <typename T>
  std::vector<const T*> read_all(const Meeting& meeting, size_t offset) {
    std::vector<const T*> inputs;
    for (size_t j = 0; j < meeting.all.size(); ++j) inputs.push_back(read<T>(meeting, j, offset));
    return inputs;
  }

  // The second meeting: every member posts when its reads of the others' buffers are done, and
  // the current stream waits for the others' before anything after (this rank's own writes, and
  // the tasks that may reuse its buffer): a peer may still be reading it.
  void wait_for_readers(const Member& member) {
    Contribution done;
    done.device = true;
    done.event = backend_.record_shared_event();
    const auto [all, met_ns] = member.rendezvous->meet(member.index, std::move(done));
    for (size_t j = 0; j < all.size(); ++j) {
      if (j != member.index) backend_.wait_shared_event(*all[j].event);
    }
  }

  template <typename T>
  void all_reduce_typed(std::span<T> data, RankGroup group, ReduceOp op) {
    const Meeting meeting = meet(group, Collective::kAllReduce, op, -1, std::span<const T>(data));
    // In place: the peers read `data`, so the result waits in scratch until they are done.
    T* result = scratch<T>(data.size());
    backend_.reduce_in_order(result, std::span<const T* const>(read_all<T>(meeting, 0)),
                             std::ssize(data), op);
    wait_for_readers(meeting.member);
    backend_.copy(data.data(), result, std::ssize(data));
  }

  template <typename T>
  void reduce_scatter_typed(std::span<const T> send, std::span<T> recv, RankGroup group) {
    const size_t n = recv.size();
    const Meeting meeting = meet(group, Collective::kReduceScatter, ReduceOp::kSum, -1, send);
    const bool in_place = overlap(send, std::span<const T>(recv));
    T* result = in_place ? scratch<T>(n) : recv.data();
    backend_.reduce_in_order(
        result, std::span<const T* const>(read_all<T>(meeting, meeting.member.index * n)),
        static_cast<int64_t>(n), ReduceOp::kSum);
    wait_for_readers(meeting.member);
    if (in_place) backend_.copy(recv.data(), result, static_cast<int64_t>(n));
  }

  template <typename T>
  void all_gather_typed(std::span<const T> send, std::span<T> recv, RankGroup group) {
    const size_t n = send.size();
    const Meeting meeting = meet(group, Collective::kAllGather, ReduceOp::kSum, -1, send);
    const bool in_place = overlap(send, std::span<const T>(recv));
    T* result = in_place ? scratch<T>(recv.size()) : recv.data();
    for (size_t j = 0; j < meeting.all.size(); ++j)
      backend_.copy(result + j * n, read<T>(meeting, j, 0), static_cast<int64_t>(n));
    wait_for_readers(meeting.member);
    if (in_place) backend_.copy(recv.data(), result, std::ssize(recv));
  }

  // Only the root's buffer is read, and the root does not write it.
  template <typename T>
  void broadcast_typed(std::span<T> data, int32_t root, RankGroup group) {
    const auto root_member = std::ranges::find(group, root);
    STRATA_ASSERT(root_member != group.end(), fmt::format("broadcast root {} is not in group [{}]",
                                                          root, fmt::join(group, ", ")));
    const Meeting meeting =
        meet(group, Collective::kBroadcast, ReduceOp::kSum, root, std::span<const T>(data));
    if (root != rank_) {
      const auto j = static_cast<size_t>(root_member - group.begin());
      backend_.copy(data.data(), read<T>(meeting, j, 0), std::ssize(data));
    }
    wait_for_readers(meeting.member);
  }

  // The message is copied out on the current stream into memory of its own, which the receiver
  // frees once it has copied it in: the sender may reuse its buffer at once.
  template <typename T>
  void send_typed(std::span<const T> data, int32_t peer, int32_t tag) {
    world_.throw_if_aborted();
    check_peer(rank_, peer, tag, world_size());
    auto* staging = backend_.allocate<T>(std::ssize(data));
    backend_.copy(staging, data.data(), std::ssize(data));
    world_.mailbox(peer).put(
        rank_, tag,
        DeviceMessage{staging, std::ssize(data), dtype_of<T>(), backend_.record_shared_event()});
  }

  template <typename T>
  void recv_typed(std::span<T> data, int32_t peer, int32_t tag) {
    world_.throw_if_aborted();
    check_peer(rank_, peer, tag, world_size());
    const Mailbox::Message message = world_.mailbox(rank_).take(peer, tag);
    note_transfer(message.sent_ns);
    const auto* device = std::get_if<DeviceMessage>(&message.data);
    STRATA_ASSERT(device != nullptr && device->dtype == dtype_of<T>(),
                  fmt::format("rank {} received a message from rank {} (tag {}) sent as another "
                              "element type or from host memory",
                              rank_, peer, tag));
    STRATA_ASSERT(device->elements == std::ssize(data),
                  fmt::format("rank {} received {} elements from rank {} (tag {}) into a buffer "
                              "of {}",
                              rank_, device->elements, peer, tag, data.size()));
    backend_.wait_shared_event(*device->ready);
    backend_.copy(data.data(), static_cast<const T*>(device->staging), std::ssize(data));
    backend_.release(device->staging);
  }

  // A result that must wait for the peers' reads before it is written: scratch of the current
  // stream, reused by the calls queued there one after another.
  template <typename T>
  T* scratch(size_t elements) {
    Scratch& s = scratch_[backend_.native_stream()];
    const auto bytes = static_cast<int64_t>(elements * sizeof(T));
    if (s.bytes < bytes) {
      if (s.data != nullptr) backend_.release(s.data);
      s.data = backend_.allocate_bytes(bytes);
      s.bytes = bytes;
    }
    return static_cast<T*>(s.data);
  }

  struct Scratch {
    void* data = nullptr;
    int64_t bytes = 0;
  };

  InProcessWorld& world_;
  int32_t rank_;
  Backend& backend_;
  InProcessWorld::Memberships groups_;
  std::map<void*, Scratch> scratch_;  // by the stream's native handle (one on the CPU backend)
};

}  // namespace

std::unique_ptr<Communicator> make_loopback_communicator(InProcessWorld& world, int32_t rank,
                                                         Backend& backend) {
  return std::make_unique<LoopbackCommunicator>(world, rank, backend);
}

std::unique_ptr<Communicator> make_staged_communicator(Communicator& host, Backend& backend) {
  return std::make_unique<StagedCommunicator>(host, backend);
}

}  // namespace strata
