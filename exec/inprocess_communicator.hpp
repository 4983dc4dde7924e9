#pragma once
// The in-process communicator: the ranks of a run are threads of one process. An InProcessWorld
// is shared by the W rank threads and hands each its Communicator; collectives meet at a
// rendezvous per group, where every member posts its buffers and computes its own result by
// reading the others' (sums in group order, exec/communicator.hpp), and point-to-point messages
// are copied into a mailbox per receiver. Nothing spins: waiters sleep on condition variables.
//
//   InProcessWorld world(8);
//   // on rank thread r:
//   std::unique_ptr<Communicator> comm = world.communicator(r);
//   comm->register_groups(groups);
//   comm->all_reduce(gradients, dp_group, ReduceOp::kSum);
//
// When one rank thread fails, the others would wait for it forever: its catch block calls
// world.abort(), which wakes every waiting rank and makes every pending and later call on the
// world throw std::runtime_error("another rank failed").
//
// The ranks' device buffers, where the thread-ranks share one device, meet on the same world
// through the loopback communicator (exec/loopback_communicator.hpp).

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "exec/communicator.hpp"
#include "exec/rendezvous.hpp"

namespace strata {

class InProcessWorld {
 public:
  explicit InProcessWorld(int32_t world_size);
  ~InProcessWorld();
  InProcessWorld(const InProcessWorld&) = delete;
  InProcessWorld& operator=(const InProcessWorld&) = delete;

  int32_t world_size() const { return world_size_; }

  // The communicator of `rank` (0 <= rank < world_size), used by that rank's thread alone. The
  // world must outlive it.
  std::unique_ptr<Communicator> communicator(int32_t rank);

  // Wakes every rank waiting in a collective, a barrier or a recv; from now on every call on
  // this world's communicators throws std::runtime_error("another rank failed"). Thread-safe,
  // idempotent.
  void abort();
  bool aborted() const { return aborted_.load(); }

  // The meeting places, for the communicators of this world (in-process and loopback).

  // Groups ordered by their rank lists; lookups by span need no copy.
  struct GroupLess {
    using is_transparent = void;
    bool operator()(RankGroup a, RankGroup b) const;
  };
  // A rank's place in a group: the group's rendezvous and the rank's index in the group.
  struct Member {
    Rendezvous* rendezvous = nullptr;
    size_t index = 0;
  };
  using Memberships = std::map<std::vector<int32_t>, Member, GroupLess>;
  // The groups among `groups` that `rank` is a member of, each checked (ascending distinct ranks
  // of the world) and given its rendezvous (made on first use). The world barrier has its own,
  // so it never meets a collective over the whole world.
  Memberships join(const std::vector<std::vector<int32_t>>& groups, int32_t rank);
  // `rank`'s place in `group`, which it joined (a collective's group is a registered one).
  static Member member(const Memberships& joined, RankGroup group, int32_t rank);
  Rendezvous& barrier_rendezvous() { return *barrier_; }
  Mailbox& mailbox(int32_t receiver) { return *mailboxes_[static_cast<size_t>(receiver)]; }
  // Throws std::runtime_error("another rank failed") once abort() was called.
  void throw_if_aborted() const;

 private:
  Rendezvous& rendezvous(RankGroup group);

  int32_t world_size_;
  std::atomic<bool> aborted_{false};
  std::mutex groups_mutex_;  // guards rendezvous_ (the map, not the rendezvous)
  std::map<std::vector<int32_t>, std::unique_ptr<Rendezvous>, GroupLess> rendezvous_;
  std::unique_ptr<Rendezvous> barrier_;
  std::vector<std::unique_ptr<Mailbox>> mailboxes_;  // one per receiving rank
};

}  // namespace strata
