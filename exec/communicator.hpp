#pragma once
// Communicator: the collectives and point-to-point messages a rank of the executor runs over a
// group of ranks (docs/design.md, "Executor"). Implementations: in-process (ranks are threads of
// one process; exec/inprocess_communicator.hpp), MPI (ranks are processes;
// exec/mpi_communicator.hpp), and for a device backend's buffers the loopback communicator
// (thread-ranks on one device; exec/loopback_communicator.hpp, which also has the staged
// communicator for device buffers through a host one) and NCCL (exec/nccl_communicator.hpp).
//
// Contract, the same for every implementation:
//  - A group is the ascending list of the global ranks taking part; the calling rank is one of
//    them. Every member calls the same collectives on a group in the same order (the task graph
//    guarantees it: the i-th collective on a group is one instance).
//  - Reductions are deterministic and identical on every implementation: element i of the result
//    is ((x[group[0]] + x[group[1]]) + x[group[2]]) + ..., summed in group order, in the buffer's
//    own type. So a run's losses do not depend on the communicator, the thread timing or the
//    number of processes.
//  - Collectives block until this rank's result is complete. send() returns once the data has
//    been copied out (it never waits for the receiver); recv() blocks until the message with the
//    same (sender, receiver, tag) has arrived. Messages between two ranks with the same tag are
//    received in the order they were sent.
//  - Buffers are host memory here; a device backend's communicator takes device pointers.
//  - Where it can tell, a communicator notes when the data of a collective or a receive began
//    to move (first_transfer_ns): the executor's measured trace starts the task's communication
//    there, as the simulator's trace does (sim/trace.hpp, transfer_us), so that the time a rank
//    waits for its peers to arrive is not counted as communication.
//
// Device communicators (the loopback communicator and NCCL) differ, and say so:
//  - Their calls are queued on the task's stream (Backend::native_stream) and return at once;
//    they complete in stream order, before the work queued after them on that stream (the
//    runtime records the task's event after its calls, so tasks that wait for it see the
//    results). "Blocks until complete" above reads "complete in stream order" for them; their
//    barrier still blocks the host. Their double buffers are device memory too (the squared
//    gradient norm). The loopback communicator's host still meets its peers in each call (it
//    exchanges buffers and events), NCCL's does not.
//  - NCCL's sums are in NCCL's order (rings, trees, chosen by size and topology), not the group
//    order above: its results are NOT bit-identical to the in-process, MPI or loopback
//    communicators'. They differ in rounding only; runs on NCCL match the CPU runs' losses within
//    a tolerance, not bit for bit. (The CPU emulation's fake NCCL sums in group order, so runs on
//    it are bit-identical to the CPU communicators'.)
//  - NCCL has no tags: the n-th send from a to b meets b's n-th recv from a, so both ranks must
//    issue the messages between them in the same order (the task graph's). A send may wait for
//    its receive, so pipeline messages go in batches (batches_p2p below).

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "common/bf16.hpp"
#include "plan/task_graph.hpp"  // ReduceOp

namespace strata {

using RankGroup = std::span<const int32_t>;

// Whether two buffers share memory (an in-place collective's send and recv).
template <typename T>
bool overlap(std::span<const T> a, std::span<const T> b) {
  const std::less<const T*> less;
  return less(a.data(), b.data() + b.size()) && less(b.data(), a.data() + a.size());
}

// A reduce_scatter's send holds group.size() chunks of recv's size, an all_gather's recv as many
// of send's; a mismatch is a bug in the caller (TypedCommunicator checks every call).
void check_reduce_scatter_sizes(int32_t rank, size_t send, size_t recv, RankGroup group);
void check_all_gather_sizes(int32_t rank, size_t send, size_t recv, RankGroup group);

// One step of the group-order reduction above, in T's arithmetic (float, double, or Bf16 with
// each step rounded to bf16): the host communicators' and the CPU backend's reduce_in_order.
template <typename T>
T reduce_step(T accumulated, T next, ReduceOp op) {
  if (op == ReduceOp::kSum) return accumulated + next;
  return next > accumulated ? next : accumulated;
}

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int32_t rank() const = 0;
  virtual int32_t world_size() const = 0;
  // Every rank calls this once, before any collective, with the same list: every group any
  // collective will use (the task graph's groups). MPI builds its sub-communicators here.
  virtual void register_groups(const std::vector<std::vector<int32_t>>& groups) = 0;

  // data (n) on every member becomes the reduction over the group.
  virtual void all_reduce(std::span<float> data, RankGroup group, ReduceOp op) = 0;
  virtual void all_reduce(std::span<double> data, RankGroup group, ReduceOp op) = 0;
  // send (group.size() * n): chunk i (n elements) is reduced over the group into recv (n) on
  // member i (the member at index i of the group).
  virtual void reduce_scatter(std::span<const float> send, std::span<float> recv,
                              RankGroup group) = 0;
  // recv (group.size() * n): chunk i is member i's send (n).
  virtual void all_gather(std::span<const float> send, std::span<float> recv, RankGroup group) = 0;
  // data (n) on every member becomes root's (root is a global rank in the group).
  virtual void broadcast(std::span<float> data, int32_t root, RankGroup group) = 0;
  virtual void send(std::span<const float> data, int32_t peer, int32_t tag) = 0;
  virtual void recv(std::span<float> data, int32_t peer, int32_t tag) = 0;
  // The same on bfloat16 buffers (a bf16 run's activations and parameters): sums in bf16, each
  // step rounded (common/bf16.hpp), in group order. A message is received as the type it was
  // sent as.
  virtual void all_reduce(std::span<Bf16> data, RankGroup group, ReduceOp op) = 0;
  virtual void reduce_scatter(std::span<const Bf16> send, std::span<Bf16> recv,
                              RankGroup group) = 0;
  virtual void all_gather(std::span<const Bf16> send, std::span<Bf16> recv, RankGroup group) = 0;
  virtual void broadcast(std::span<Bf16> data, int32_t root, RankGroup group) = 0;
  virtual void send(std::span<const Bf16> data, int32_t peer, int32_t tag) = 0;
  virtual void recv(std::span<Bf16> data, int32_t peer, int32_t tag) = 0;
  // Every rank of the world waits for every other (checkpoints use it).
  virtual void barrier() = 0;

  // True where a send may wait for its receiver (NCCL, for a message larger than its buffers):
  // the runtime then issues the sends and receives of adjacent pipeline tasks as one batch,
  // between begin_p2p_batch and end_p2p_batch (NCCL: one ncclGroupStart/End, as Megatron-LM
  // batches a stage's send and receive), so that two stages that each send to the other before
  // they receive cannot deadlock. The calls of a batch complete, in stream order, only once it
  // ends. The host communicators' sends never wait: no batches, and these do nothing.
  virtual bool batches_p2p() const { return false; }
  virtual void begin_p2p_batch() {}
  virtual void end_p2p_batch() {}

  // Opens a window: first_transfer_ns() then answers for the calls made after this one.
  void mark_transfers() { first_transfer_ns_ = -1; }
  // When the data of this rank's first collective, barrier or receive since mark_transfers()
  // began to move, in nanoseconds of std::chrono::steady_clock: the instant the last member of
  // the group arrived, or the message was sent. -1 when there was none, or where the
  // communicator cannot tell (MPI's calls do not say when their peers arrived).
  int64_t first_transfer_ns() const { return first_transfer_ns_; }

 protected:
  void note_transfer(int64_t steady_ns) {
    if (first_transfer_ns_ < 0) first_transfer_ns_ = steady_ns;
  }

 private:
  int64_t first_transfer_ns_ = -1;
};

// The element-type overloads of a communicator whose calls are templates on the element type:
// Derived defines all_reduce_typed<T> for T float, double and Bf16, and reduce_scatter_typed,
// all_gather_typed, broadcast_typed, send_typed and recv_typed for float and Bf16, with the
// arguments of the calls above (it befriends this class if they are private). The sizes of
// reduce_scatter and all_gather are checked here, before Derived's call.
template <typename Derived>
class TypedCommunicator : public Communicator {
 public:
  void all_reduce(std::span<float> data, RankGroup group, ReduceOp op) override {
    self().all_reduce_typed(data, group, op);
  }
  void all_reduce(std::span<double> data, RankGroup group, ReduceOp op) override {
    self().all_reduce_typed(data, group, op);
  }
  void all_reduce(std::span<Bf16> data, RankGroup group, ReduceOp op) override {
    self().all_reduce_typed(data, group, op);
  }
  void reduce_scatter(std::span<const float> send, std::span<float> recv,
                      RankGroup group) override {
    check_reduce_scatter_sizes(rank(), send.size(), recv.size(), group);
    self().reduce_scatter_typed(send, recv, group);
  }
  void reduce_scatter(std::span<const Bf16> send, std::span<Bf16> recv, RankGroup group) override {
    check_reduce_scatter_sizes(rank(), send.size(), recv.size(), group);
    self().reduce_scatter_typed(send, recv, group);
  }
  void all_gather(std::span<const float> send, std::span<float> recv, RankGroup group) override {
    check_all_gather_sizes(rank(), send.size(), recv.size(), group);
    self().all_gather_typed(send, recv, group);
  }
  void all_gather(std::span<const Bf16> send, std::span<Bf16> recv, RankGroup group) override {
    check_all_gather_sizes(rank(), send.size(), recv.size(), group);
    self().all_gather_typed(send, recv, group);
  }
  void broadcast(std::span<float> data, int32_t root, RankGroup group) override {
    self().broadcast_typed(data, root, group);
  }
  void broadcast(std::span<Bf16> data, int32_t root, RankGroup group) override {
    self().broadcast_typed(data, root, group);
  }
  void send(std::span<const float> data, int32_t peer, int32_t tag) override {
    self().send_typed(data, peer, tag);
  }
  void send(std::span<const Bf16> data, int32_t peer, int32_t tag) override {
    self().send_typed(data, peer, tag);
  }
  void recv(std::span<float> data, int32_t peer, int32_t tag) override {
    self().recv_typed(data, peer, tag);
  }
  void recv(std::span<Bf16> data, int32_t peer, int32_t tag) override {
    self().recv_typed(data, peer, tag);
  }

 private:
  Derived& self() { return static_cast<Derived&>(*this); }
};

}  // namespace strata
