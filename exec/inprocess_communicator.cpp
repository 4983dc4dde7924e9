#include "exec/inprocess_communicator.hpp"

#include <algorithm>
#include <string>
#include <utility>
#include <variant>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.hpp"

namespace strata {

namespace {

// A group is ascending global ranks of the world, at least one.
void check_group(RankGroup group, int32_t world_size) {
  STRATA_ASSERT(!group.empty(), "a communicator group has no ranks");
  STRATA_ASSERT(std::ranges::is_sorted(group) && std::ranges::adjacent_find(group) == group.end() &&
                    group.front() >= 0 && group.back() < world_size,
                fmt::format("group [{}] is not ascending distinct ranks of a world of {}",
                            fmt::join(group, ", "), world_size));
}

class InProcessCommunicator final : public TypedCommunicator<InProcessCommunicator> {
 public:
  InProcessCommunicator(InProcessWorld& world, int32_t rank) : world_(world), rank_(rank) {}

  int32_t rank() const override { return rank_; }
  int32_t world_size() const override { return world_.world_size(); }

  void register_groups(const std::vector<std::vector<int32_t>>& groups) override {
    world_.throw_if_aborted();
    groups_.merge(world_.join(groups, rank_));
  }

  void barrier() override {
    world_.throw_if_aborted();
    note_transfer(world_.barrier_rendezvous().leave());
  }

 private:
  friend class TypedCommunicator<InProcessCommunicator>;
  using Member = InProcessWorld::Member;
  Member member_of(RankGroup group) const { return InProcessWorld::member(groups_, group, rank_); }

  template <typename T>
  void all_reduce_typed(std::span<T> data, RankGroup group, ReduceOp op) {
    world_.throw_if_aborted();
    const Member member = member_of(group);
    const auto [all, met_ns] = member.rendezvous->meet(
        member.index, {.kind = Collective::kAllReduce, .op = op, .data = std::span<const T>(data)});
    note_transfer(met_ns);
    check_matching(all, group);
    std::vector<T> result(data.size());
    for (size_t j = 0; j < all.size(); ++j) {
      const auto x = std::get<std::span<const T>>(all[j].data);
      if (j == 0) {
        std::ranges::copy(x, result.begin());
        continue;
      }
      for (size_t k = 0; k < result.size(); ++k) result[k] = reduce_step(result[k], x[k], op);
    }
    member.rendezvous->leave();
    std::ranges::copy(result, data.begin());
  }

  template <typename T>
  void reduce_scatter_typed(std::span<const T> send, std::span<T> recv, RankGroup group) {
    world_.throw_if_aborted();
    const Member member = member_of(group);
    const size_t n = recv.size();
    const auto [all, met_ns] =
        member.rendezvous->meet(member.index, {.kind = Collective::kReduceScatter, .data = send});
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
      for (size_t k = 0; k < n; ++k) result[k] = reduce_step(result[k], chunk[k], ReduceOp::kSum);
    }
    member.rendezvous->leave();
    std::ranges::copy(result, recv.begin());
  }

  template <typename T>
  void all_gather_typed(std::span<const T> send, std::span<T> recv, RankGroup group) {
    world_.throw_if_aborted();
    const Member member = member_of(group);
    const size_t n = send.size();
    const auto [all, met_ns] =
        member.rendezvous->meet(member.index, {.kind = Collective::kAllGather, .data = send});
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
        member.index,
        {.kind = Collective::kBroadcast, .root = root, .data = std::span<const T>(data)});
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
    check_peer(rank_, peer, tag, world_size());
    world_.mailbox(peer).put(rank_, tag, std::vector<T>(data.begin(), data.end()));
  }

  template <typename T>
  void recv_typed(std::span<T> data, int32_t peer, int32_t tag) {
    world_.throw_if_aborted();
    check_peer(rank_, peer, tag, world_size());
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

  InProcessWorld& world_;
  int32_t rank_;
  InProcessWorld::Memberships groups_;
};

}  // namespace

void check_peer(int32_t rank, int32_t peer, int32_t tag, int32_t world_size) {
  STRATA_ASSERT(peer >= 0 && peer < world_size && tag >= 0,
                fmt::format("rank {}: peer {} or tag {} out of range (world of {})", rank, peer,
                            tag, world_size));
}

void check_matching(std::span<const Contribution> all, RankGroup group) {
  const Contribution& first = all.front();
  for (size_t j = 1; j < all.size(); ++j) {
    const Contribution& other = all[j];
    STRATA_ASSERT(
        other.kind == first.kind && other.op == first.op && other.root == first.root &&
            other.data.index() == first.data.index() && other.size() == first.size() &&
            other.device == first.device,
        fmt::format("members of group [{}] called different collectives: rank {} posted {} "
                    "{}elements (collective {}, op {}, root {}), rank {} posted {} {}(collective "
                    "{}, op {}, root {})",
                    fmt::join(group, ", "), group[0], first.size(), first.device ? "device " : "",
                    static_cast<int>(first.kind), static_cast<int>(first.op), first.root, group[j],
                    other.size(), other.device ? "device " : "", static_cast<int>(other.kind),
                    static_cast<int>(other.op), other.root));
  }
}

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

InProcessWorld::Memberships InProcessWorld::join(const std::vector<std::vector<int32_t>>& groups,
                                                 int32_t rank) {
  Memberships joined;
  for (const std::vector<int32_t>& group : groups) {
    check_group(group, world_size_);
    const auto found = std::ranges::find(group, rank);
    if (found == group.end()) continue;
    joined.try_emplace(group,
                       Member{&rendezvous(group), static_cast<size_t>(found - group.begin())});
  }
  return joined;
}

InProcessWorld::Member InProcessWorld::member(const Memberships& joined, RankGroup group,
                                              int32_t rank) {
  const auto found = joined.find(group);
  STRATA_ASSERT(found != joined.end(),
                fmt::format("rank {} runs a collective on group [{}], which it did not register "
                            "or is not a member of",
                            rank, fmt::join(group, ", ")));
  return found->second;
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
