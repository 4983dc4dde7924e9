#include "exec/inprocess_communicator.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.hpp"

namespace strata {

namespace {

enum class Collective : uint8_t { kAllReduce, kReduceScatter, kAllGather, kBroadcast };

int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

[[noreturn]] void throw_rank_failed() { throw std::runtime_error("another rank failed"); }

// One step of a reduction in the buffer's own type; results accumulate in group order,
// ((x0 + x1) + x2) + ..., the same steps as exec/mpi_communicator.cpp takes.
template <typename T>
T combine(T accumulated, T next, ReduceOp op) {
  if (op == ReduceOp::kSum) return accumulated + next;
  return next > accumulated ? next : accumulated;
}

// A group is ascending global ranks of the world, at least one.
void check_group(RankGroup group, int32_t world_size) {
  STRATA_ASSERT(!group.empty(), "a communicator group has no ranks");
  STRATA_ASSERT(std::ranges::is_sorted(group) && std::ranges::adjacent_find(group) == group.end() &&
                    group.front() >= 0 && group.back() < world_size,
                fmt::format("group [{}] is not ascending distinct ranks of a world of {}",
                            fmt::join(group, ", "), world_size));
}

}  // namespace

// What one member brings to a collective: which collective, and the buffer the other members
// read (all_reduce: its data; reduce_scatter and all_gather: its send; broadcast: the data).
struct Contribution {
  Collective kind = Collective::kAllReduce;
  ReduceOp op = ReduceOp::kSum;
  int32_t root = -1;  // broadcast's root, -1 otherwise
  std::variant<std::span<const float>, std::span<const double>, std::span<const Bf16>> data;

  size_t size() const {
    return std::visit([](auto span) { return span.size(); }, data);
  }
};

// Where the members of one group meet for each collective. A collective is two waits on a
// generation barrier: meet() returns once every member has posted its contribution, then each
// member computes its own result into a scratch buffer reading the others' buffers; leave()
// returns once every member has done so, after which each writes its result into its own
// buffer (the buffers are in place: writing earlier would change what a slower member reads).
// Between the two waits no member posts again, so the contributions stay put.
class Rendezvous {
 public:
  Rendezvous(size_t members, const std::atomic<bool>& aborted)
      : contributions_(members), aborted_(aborted) {}

  struct Met {
    std::span<const Contribution> all;  // every member's contribution, in group order
    int64_t met_ns = 0;                 // when the last member arrived (steady clock)
  };

  // Posts `mine` as the contribution of member `index`; returns every member's once all arrived.
  Met meet(size_t index, const Contribution& mine) {
    std::unique_lock lock(mutex_);
    contributions_[index] = mine;
    arrive_and_wait(lock);
    // The generation cannot open again before this member arrives again: met_ns_ is this one's.
    return {contributions_, met_ns_};
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
    if (++arrived_ == contributions_.size()) {
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
  std::vector<Contribution> contributions_;  // one per member, in group order
  size_t arrived_ = 0;
  uint64_t generation_ = 0;
  int64_t met_ns_ = 0;  // when the latest generation's last member arrived
  const std::atomic<bool>& aborted_;
};

// The messages sent to one rank, a FIFO queue per (sender, tag).
class Mailbox {
 public:
  explicit Mailbox(const std::atomic<bool>& aborted) : aborted_(aborted) {}

  struct Message {
    std::variant<std::vector<float>, std::vector<Bf16>> data;
    int64_t sent_ns = 0;  // when it was put (steady clock)
  };

  template <typename T>
  void put(int32_t sender, int32_t tag, std::vector<T> data) {
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

class InProcessCommunicator final : public Communicator {
 public:
  InProcessCommunicator(InProcessWorld& world, int32_t rank) : world_(world), rank_(rank) {}

  int32_t rank() const override { return rank_; }
  int32_t world_size() const override { return world_.world_size(); }

  void register_groups(const std::vector<std::vector<int32_t>>& groups) override {
    world_.throw_if_aborted();
    for (const std::vector<int32_t>& group : groups) {
      check_group(group, world_size());
      const auto member = std::ranges::find(group, rank_);
      if (member == group.end()) continue;
      const auto index = static_cast<size_t>(member - group.begin());
      groups_.try_emplace(group, Member{&world_.rendezvous(group), index});
    }
  }

  void all_reduce(std::span<float> data, RankGroup group, ReduceOp op) override {
    all_reduce_typed(data, group, op);
  }
  void all_reduce(std::span<double> data, RankGroup group, ReduceOp op) override {
    all_reduce_typed(data, group, op);
  }
  void all_reduce(std::span<Bf16> data, RankGroup group, ReduceOp op) override {
    all_reduce_typed(data, group, op);
  }
  void reduce_scatter(std::span<const float> send, std::span<float> recv,
                      RankGroup group) override {
    reduce_scatter_typed(send, recv, group);
  }
  void reduce_scatter(std::span<const Bf16> send, std::span<Bf16> recv, RankGroup group) override {
    reduce_scatter_typed(send, recv, group);
  }
  void all_gather(std::span<const float> send, std::span<float> recv, RankGroup group) override {
    all_gather_typed(send, recv, group);
  }
  void all_gather(std::span<const Bf16> send, std::span<Bf16> recv, RankGroup group) override {
    all_gather_typed(send, recv, group);
  }
  void broadcast(std::span<float> data, int32_t root, RankGroup group) override {
    broadcast_typed(data, root, group);
  }
  void broadcast(std::span<Bf16> data, int32_t root, RankGroup group) override {
    broadcast_typed(data, root, group);
  }
  void send(std::span<const float> data, int32_t peer, int32_t tag) override {
    send_typed(data, peer, tag);
  }
  void send(std::span<const Bf16> data, int32_t peer, int32_t tag) override {
    send_typed(data, peer, tag);
  }
  void recv(std::span<float> data, int32_t peer, int32_t tag) override {
    recv_typed(data, peer, tag);
  }
  void recv(std::span<Bf16> data, int32_t peer, int32_t tag) override {
    recv_typed(data, peer, tag);
  }

  void barrier() override {
    world_.throw_if_aborted();
    note_transfer(world_.barrier_rendezvous().leave());
  }

 private:
  struct Member {
    Rendezvous* rendezvous = nullptr;
    size_t index = 0;  // this rank's index in the group
  };

  // Every group a collective uses was registered (the MPI communicator needs it too).
  Member member_of(RankGroup group) const {
    const auto found = groups_.find(group);
    STRATA_ASSERT(found != groups_.end(),
                  fmt::format("rank {} runs a collective on group [{}], which it did not register "
                              "or is not a member of",
                              rank_, fmt::join(group, ", ")));
    return found->second;
  }

  template <typename T>
  void all_reduce_typed(std::span<T> data, RankGroup group, ReduceOp op) {
    world_.throw_if_aborted();
    const Member member = member_of(group);
    const auto [all, met_ns] = member.rendezvous->meet(
        member.index, {Collective::kAllReduce, op, -1, std::span<const T>(data)});
    note_transfer(met_ns);
    check_matching(all, group);
    std::vector<T> result(data.size());
    for (size_t j = 0; j < all.size(); ++j) {
      const auto x = std::get<std::span<const T>>(all[j].data);
      if (j == 0) {
        std::ranges::copy(x, result.begin());
        continue;
      }
      for (size_t k = 0; k < result.size(); ++k) result[k] = combine(result[k], x[k], op);
    }
    member.rendezvous->leave();
    std::ranges::copy(result, data.begin());
  }

  template <typename T>
  void reduce_scatter_typed(std::span<const T> send, std::span<T> recv, RankGroup group) {
    world_.throw_if_aborted();
    const Member member = member_of(group);
    const size_t n = recv.size();
    STRATA_ASSERT(send.size() == group.size() * n,
                  fmt::format("reduce_scatter on rank {}: send has {} elements, not group size {} "
                              "x recv {}",
                              rank_, send.size(), group.size(), n));
    const auto [all, met_ns] = member.rendezvous->meet(
        member.index, {Collective::kReduceScatter, ReduceOp::kSum, -1, send});
    note_transfer(met_ns);
    check_matching(all, group);
    std::vector<T> result(n);
    const size_t offset = member.index * n;
    for (size_t j = 0; j < all.size(); ++j) {
      const auto chunk = std::get<std::span<const T>>(all[j].data).subspan(offset, n);
      if (j == 0) {
        std::ranges::copy(chunk, result.begin());
        continue;
      }
      for (size_t k = 0; k < n; ++k) result[k] = combine(result[k], chunk[k], ReduceOp::kSum);
    }
    member.rendezvous->leave();
    std::ranges::copy(result, recv.begin());
  }

  template <typename T>
  void all_gather_typed(std::span<const T> send, std::span<T> recv, RankGroup group) {
    world_.throw_if_aborted();
    const Member member = member_of(group);
    const size_t n = send.size();
    STRATA_ASSERT(recv.size() == group.size() * n,
                  fmt::format("all_gather on rank {}: recv has {} elements, not group size {} x "
                              "send {}",
                              rank_, recv.size(), group.size(), n));
    const auto [all, met_ns] =
        member.rendezvous->meet(member.index, {Collective::kAllGather, ReduceOp::kSum, -1, send});
    note_transfer(met_ns);
    check_matching(all, group);
    std::vector<T> result(recv.size());
    for (size_t j = 0; j < all.size(); ++j) {
      std::ranges::copy(std::get<std::span<const T>>(all[j].data),
                        result.begin() + static_cast<std::ptrdiff_t>(j * n));
    }
    member.rendezvous->leave();
    std::ranges::copy(result, recv.begin());
  }

  template <typename T>
  void broadcast_typed(std::span<T> data, int32_t root, RankGroup group) {
    world_.throw_if_aborted();
    const Member member = member_of(group);
    const auto root_member = std::ranges::find(group, root);
    STRATA_ASSERT(root_member != group.end(), fmt::format("broadcast root {} is not in group [{}]",
                                                          root, fmt::join(group, ", ")));
    const auto [all, met_ns] = member.rendezvous->meet(
        member.index, {Collective::kBroadcast, ReduceOp::kSum, root, std::span<const T>(data)});
    note_transfer(met_ns);
    check_matching(all, group);
    // Only the root's buffer is read and the root does not write it: copy in place.
    if (root != rank_) {
      std::ranges::copy(
          std::get<std::span<const T>>(all[static_cast<size_t>(root_member - group.begin())].data),
          data.begin());
    }
    member.rendezvous->leave();
  }

  template <typename T>
  void send_typed(std::span<const T> data, int32_t peer, int32_t tag) {
    world_.throw_if_aborted();
    check_peer(peer, tag);
    world_.mailbox(peer).put(rank_, tag, std::vector<T>(data.begin(), data.end()));
  }

  template <typename T>
  void recv_typed(std::span<T> data, int32_t peer, int32_t tag) {
    world_.throw_if_aborted();
    check_peer(peer, tag);
    const Mailbox::Message message = world_.mailbox(rank_).take(peer, tag);
    note_transfer(message.sent_ns);
    const auto* values = std::get_if<std::vector<T>>(&message.data);
    STRATA_ASSERT(values != nullptr,
                  fmt::format("rank {} received a message from rank {} (tag {}) sent as another "
                              "element type",
                              rank_, peer, tag));
    STRATA_ASSERT(values->size() == data.size(),
                  fmt::format("rank {} received {} elements from rank {} (tag {}) into a buffer "
                              "of {}",
                              rank_, values->size(), peer, tag, data.size()));
    std::ranges::copy(*values, data.begin());
  }

  // Every member called the same collective with the same sizes; a mismatch is a bug in the task
  // graph (members of one group running different instances).
  void check_matching(std::span<const Contribution> all, RankGroup group) const {
    const Contribution& first = all.front();
    for (size_t j = 1; j < all.size(); ++j) {
      const Contribution& other = all[j];
      STRATA_ASSERT(
          other.kind == first.kind && other.op == first.op && other.root == first.root &&
              other.data.index() == first.data.index() && other.size() == first.size(),
          fmt::format("members of group [{}] called different collectives: rank {} posted {} "
                      "elements (collective {}, op {}, root {}), rank {} posted {} (collective "
                      "{}, op {}, root {})",
                      fmt::join(group, ", "), group[0], first.size(), static_cast<int>(first.kind),
                      static_cast<int>(first.op), first.root, group[j], other.size(),
                      static_cast<int>(other.kind), static_cast<int>(other.op), other.root));
    }
  }

  void check_peer(int32_t peer, int32_t tag) const {
    STRATA_ASSERT(peer >= 0 && peer < world_size() && tag >= 0,
                  fmt::format("rank {}: peer {} or tag {} out of range (world of {})", rank_, peer,
                              tag, world_size()));
  }

  InProcessWorld& world_;
  int32_t rank_;
  std::map<std::vector<int32_t>, Member, InProcessWorld::GroupLess> groups_;
};

bool InProcessWorld::GroupLess::operator()(RankGroup a, RankGroup b) const {
  return std::ranges::lexicographical_compare(a, b);
}

InProcessWorld::InProcessWorld(int32_t world_size) : world_size_(world_size) {
  STRATA_ASSERT(world_size > 0, fmt::format("an in-process world of {} ranks", world_size));
  barrier_ = std::make_unique<Rendezvous>(static_cast<size_t>(world_size), aborted_);
  for (int32_t r = 0; r < world_size; ++r)
    mailboxes_.push_back(std::make_unique<Mailbox>(aborted_));
}

InProcessWorld::~InProcessWorld() = default;

std::unique_ptr<Communicator> InProcessWorld::communicator(int32_t rank) {
  STRATA_ASSERT(rank >= 0 && rank < world_size_,
                fmt::format("rank {} of a world of {}", rank, world_size_));
  return std::make_unique<InProcessCommunicator>(*this, rank);
}

void InProcessWorld::abort() {
  aborted_.store(true);
  // Lock each waiter's mutex before waking it: a rank between its check of the flag and its wait
  // holds that mutex, so it either sees the flag or is already waiting when woken.
  std::lock_guard lock(groups_mutex_);
  for (auto& [group, rendezvous] : rendezvous_) rendezvous->wake_all();
  barrier_->wake_all();
  for (auto& mailbox : mailboxes_) mailbox->wake_all();
}

void InProcessWorld::throw_if_aborted() const {
  if (aborted_.load()) throw_rank_failed();
}

Rendezvous& InProcessWorld::rendezvous(RankGroup group) {
  std::lock_guard lock(groups_mutex_);
  auto found = rendezvous_.find(group);
  if (found == rendezvous_.end()) {
    found = rendezvous_
                .emplace(std::vector<int32_t>(group.begin(), group.end()),
                         std::make_unique<Rendezvous>(group.size(), aborted_))
                .first;
  }
  return *found->second;
}

}  // namespace strata
