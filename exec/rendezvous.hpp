#pragma once
// Where the thread-ranks of one process meet (exec/inprocess_communicator.hpp): a rendezvous per
// group, where each member of a collective posts its buffers and gets every member's, and a
// mailbox per receiving rank. The in-process communicator posts host buffers; the loopback
// communicator (exec/loopback_communicator.hpp) posts device buffers of ranks sharing one device,
// with the events that say when they are ready. Nothing spins: waiters sleep on condition
// variables, and an aborted world wakes them all (each then throws "another rank failed").

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <utility>
#include <variant>
#include <vector>

#include "common/bf16.hpp"
#include "exec/backend.hpp"
#include "exec/communicator.hpp"
#include "plan/task_graph.hpp"  // ReduceOp

namespace strata {

inline int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

[[noreturn]] inline void throw_rank_failed() { throw std::runtime_error("another rank failed"); }

enum class Collective : uint8_t { kAllReduce, kReduceScatter, kAllGather, kBroadcast };

// What one member brings to a collective: which collective, and the buffer the other members
// read (all_reduce: its data; reduce_scatter and all_gather: its send; broadcast: the data). A
// device buffer (the loopback communicator's) comes with the event after which it may be read,
// and, in the collective's second meeting, the event after which this member's reads are done.
struct Contribution {
  Collective kind = Collective::kAllReduce;
  ReduceOp op = ReduceOp::kSum;
  int32_t root = -1;  // broadcast's root, -1 otherwise
  std::variant<std::span<const float>, std::span<const double>, std::span<const Bf16>> data;
  bool device = false;
  std::shared_ptr<const SharedEvent> event = nullptr;  // device buffers only

  size_t size() const {
    return std::visit([](auto span) { return span.size(); }, data);
  }
};

// Every member called the same collective with the same sizes on the same kind of memory; a
// mismatch is a bug in the task graph (members of one group running different instances).
void check_matching(std::span<const Contribution> all, RankGroup group);

// A message's peer is a rank of the world and its tag is not negative.
void check_peer(int32_t rank, int32_t peer, int32_t tag, int32_t world_size);

// Where the members of one group meet for each collective: a generation barrier. meet() posts a
// member's contribution and returns once every member has posted, with all of them; leave()
// arrives without one. A generation's posts stay valid until the member that read them arrives
// again: posts alternate between two slots, and a slot is written again only once every member
// has arrived at the generation after, so none still reads it.
class Rendezvous {
 public:
  Rendezvous(size_t members, const std::atomic<bool>& aborted)
      : contributions_{std::vector<Contribution>(members), std::vector<Contribution>(members)},
        aborted_(aborted) {}

  struct Met {
    std::span<const Contribution> all;  // every member's contribution, in group order
    int64_t met_ns = 0;                 // when the last member arrived (steady clock)
  };

  // Posts `mine` as the contribution of member `index`; returns every member's once all arrived.
  Met meet(size_t index, Contribution mine) {
    std::unique_lock lock(mutex_);
    std::vector<Contribution>& slot = contributions_[generation_ % 2];
    slot[index] = std::move(mine);
    arrive_and_wait(lock);
    // The generation cannot open again before this member arrives again: met_ns_ is this one's.
    return {slot, met_ns_};
  }

  // Returns when the last member arrived (steady clock).
  int64_t leave() {
    std::unique_lock lock(mutex_);
    arrive_and_wait(lock);
    return met_ns_;
  }

  // Wakes every waiter (abort): each sees the world aborted and throws.
  void wake_all() {
    std::lock_guard lock(mutex_);
    cv_.notify_all();
  }

 private:
  // The last member to arrive opens the next generation and wakes the others.
  void arrive_and_wait(std::unique_lock<std::mutex>& lock) {
    const uint64_t generation = generation_;
    if (++arrived_ == contributions_[0].size()) {
      arrived_ = 0;
      met_ns_ = steady_now_ns();
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return generation_ != generation || aborted_.load(); });
    }
    if (aborted_.load()) throw_rank_failed();
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  // One per member, in group order, for even and odd generations.
  std::vector<Contribution> contributions_[2];
  size_t arrived_ = 0;
  uint64_t generation_ = 0;
  int64_t met_ns_ = 0;  // when the latest generation's last member arrived
  const std::atomic<bool>& aborted_;
};

// A message between device buffers (the loopback communicator's): a copy of the sent data in
// device memory the receiver copies out of and releases, readable once `ready` has completed.
struct DeviceMessage {
  void* staging = nullptr;
  int64_t elements = 0;
  DType dtype = DType::kFp32;
  std::shared_ptr<const SharedEvent> ready = nullptr;
};

// The messages sent to one rank, a FIFO queue per (sender, tag).
class Mailbox {
 public:
  explicit Mailbox(const std::atomic<bool>& aborted) : aborted_(aborted) {}

  struct Message {
    std::variant<std::vector<float>, std::vector<Bf16>, DeviceMessage> data;
    int64_t sent_ns = 0;  // when it was put (steady clock)
  };

  template <typename Data>
  void put(int32_t sender, int32_t tag, Data data) {
    {
      std::lock_guard lock(mutex_);
      queues_[{sender, tag}].push_back({std::move(data), steady_now_ns()});
    }
    cv_.notify_all();
  }

  // Waits for the oldest message from `sender` with `tag` and removes it.
  Message take(int32_t sender, int32_t tag) {
    std::unique_lock lock(mutex_);
    const std::pair key{sender, tag};
    cv_.wait(lock, [&] {
      const auto queue = queues_.find(key);
      return aborted_.load() || (queue != queues_.end() && !queue->second.empty());
    });
    if (aborted_.load()) throw_rank_failed();
    const auto queue = queues_.find(key);
    Message message = std::move(queue->second.front());
    queue->second.pop_front();
    if (queue->second.empty()) queues_.erase(queue);  // tags may be used once each
    return message;
  }

  void wake_all() {
    std::lock_guard lock(mutex_);
    cv_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<std::pair<int32_t, int32_t>, std::deque<Message>> queues_;
  const std::atomic<bool>& aborted_;
};

}  // namespace strata
