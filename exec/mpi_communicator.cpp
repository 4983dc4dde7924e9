#include "exec/mpi_communicator.hpp"

#include <algorithm>
#include <climits>
#include <type_traits>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.hpp"
#include "exec/mpi_check.hpp"

namespace strata {

namespace {

// bf16 travels as its 16-bit words; this side sums it.
template <typename T>
MPI_Datatype mpi_type() {
  if constexpr (std::is_same_v<T, float>) {
    return MPI_FLOAT;
  } else if constexpr (std::is_same_v<T, Bf16>) {
    return MPI_UINT16_T;
  } else {
    static_assert(std::is_same_v<T, double>);
    return MPI_DOUBLE;
  }
}

// MPI counts elements in an int.
int mpi_count(size_t elements) {
  STRATA_ASSERT(elements <= static_cast<size_t>(INT_MAX),
                fmt::format("a message of {} elements is beyond MPI's int count", elements));
  return static_cast<int>(elements);
}

}  // namespace

bool MpiCommunicator::GroupLess::operator()(RankGroup a, RankGroup b) const {
  return std::ranges::lexicographical_compare(a, b);
}

MpiCommunicator::MpiCommunicator() {
  int initialized = 0;
  STRATA_MPI_CHECK(MPI_Initialized(&initialized));
  STRATA_ASSERT(initialized != 0, "MpiCommunicator needs MPI_Init first (the caller's job)");
  // Our own duplicate of the world, returning errors to STRATA_MPI_CHECK instead of aborting in
  // MPI's handler; the group communicators split from it inherit the handler.
  STRATA_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &world_));
  STRATA_MPI_CHECK(MPI_Comm_set_errhandler(world_, MPI_ERRORS_RETURN));
  int rank = 0;
  int size = 0;
  STRATA_MPI_CHECK(MPI_Comm_rank(world_, &rank));
  STRATA_MPI_CHECK(MPI_Comm_size(world_, &size));
  rank_ = rank;
  world_size_ = size;
  int* tag_ub = nullptr;
  int found = 0;
  STRATA_MPI_CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &found));
  STRATA_ASSERT(found != 0 && tag_ub != nullptr, "MPI_COMM_WORLD has no MPI_TAG_UB attribute");
  tag_ub_ = *tag_ub;
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized != 0) return;  // MPI freed everything; calling it now is an error
  for (PendingSend& pending : pending_sends_) {
    STRATA_MPI_CHECK(MPI_Wait(&pending.request, MPI_STATUS_IGNORE));
  }
  for (auto& [group, comm] : groups_) STRATA_MPI_CHECK(MPI_Comm_free(&comm));
  STRATA_MPI_CHECK(MPI_Comm_free(&world_));
}

void MpiCommunicator::register_groups(const std::vector<std::vector<int32_t>>& groups) {
  for (const std::vector<int32_t>& group : groups) {
    STRATA_ASSERT(!group.empty() && std::ranges::is_sorted(group) &&
                      std::ranges::adjacent_find(group) == group.end() && group.front() >= 0 &&
                      group.back() < world_size_,
                  fmt::format("group [{}] is not ascending distinct ranks of a world of {}",
                              fmt::join(group, ", "), world_size_));
    const auto member = std::ranges::find(group, rank_);
    const bool is_member = member != group.end();
    // Key = global rank: the sub-communicator's rank i is group[i], the group being ascending.
    MPI_Comm comm = MPI_COMM_NULL;
    STRATA_MPI_CHECK(MPI_Comm_split(world_, is_member ? 0 : MPI_UNDEFINED, rank_, &comm));
    if (!is_member) continue;
    if (!groups_.try_emplace(group, comm).second) {  // listed twice, or registered before
      STRATA_MPI_CHECK(MPI_Comm_free(&comm));
      continue;
    }
    int size = 0;
    int index = 0;
    STRATA_MPI_CHECK(MPI_Comm_size(comm, &size));
    STRATA_MPI_CHECK(MPI_Comm_rank(comm, &index));
    STRATA_ASSERT(static_cast<size_t>(size) == group.size() && index == member - group.begin(),
                  fmt::format("rank {}: the communicator of group [{}] has {} ranks and puts this "
                              "one at {}: the ranks passed different group lists",
                              rank_, fmt::join(group, ", "), size, index));
  }
}

MPI_Comm MpiCommunicator::group_comm(RankGroup group) const {
  const auto found = groups_.find(group);
  STRATA_ASSERT(found != groups_.end(),
                fmt::format("rank {} runs a collective on group [{}], which it did not register or "
                            "is not a member of",
                            rank_, fmt::join(group, ", ")));
  return found->second;
}

template <typename T>
void MpiCommunicator::all_reduce_typed(std::span<T> data, RankGroup group, ReduceOp op) {
  const MPI_Comm comm = group_comm(group);
  const size_t n = data.size();
  const int count = mpi_count(n);
  // gathered is (members, n): row j is member j's data.
  std::vector<T> gathered(group.size() * n);
  STRATA_MPI_CHECK(MPI_Allgather(data.data(), count, mpi_type<T>(), gathered.data(), count,
                                 mpi_type<T>(), comm));
  std::copy_n(gathered.begin(), n, data.begin());
  for (size_t j = 1; j < group.size(); ++j) {
    for (size_t k = 0; k < n; ++k) data[k] = reduce_step(data[k], gathered[j * n + k], op);
  }
}

template <typename T>
void MpiCommunicator::reduce_scatter_typed(std::span<const T> send, std::span<T> recv,
                                           RankGroup group) {
  const MPI_Comm comm = group_comm(group);
  const size_t n = recv.size();
  const int count = mpi_count(n);
  // gathered is (members, n): row j is member j's chunk for this rank. Alltoall has read all of
  // send before recv is written, so recv may alias send.
  std::vector<T> gathered(send.size());
  STRATA_MPI_CHECK(
      MPI_Alltoall(send.data(), count, mpi_type<T>(), gathered.data(), count, mpi_type<T>(), comm));
  std::copy_n(gathered.begin(), n, recv.begin());
  for (size_t j = 1; j < group.size(); ++j) {
    for (size_t k = 0; k < n; ++k)
      recv[k] = reduce_step(recv[k], gathered[j * n + k], ReduceOp::kSum);
  }
}

template <typename T>
void MpiCommunicator::all_gather_typed(std::span<const T> send, std::span<T> recv,
                                       RankGroup group) {
  const MPI_Comm comm = group_comm(group);
  const size_t n = send.size();
  // MPI forbids send and recv to overlap (short of MPI_IN_PLACE): gather from a copy then.
  std::vector<T> copy;
  if (overlap(send, std::span<const T>(recv))) {
    copy.assign(send.begin(), send.end());
    send = copy;
  }
  const int count = mpi_count(n);
  STRATA_MPI_CHECK(
      MPI_Allgather(send.data(), count, mpi_type<T>(), recv.data(), count, mpi_type<T>(), comm));
}

template <typename T>
void MpiCommunicator::broadcast_typed(std::span<T> data, int32_t root, RankGroup group) {
  const MPI_Comm comm = group_comm(group);
  const auto root_member = std::ranges::find(group, root);
  STRATA_ASSERT(root_member != group.end(), fmt::format("broadcast root {} is not in group [{}]",
                                                        root, fmt::join(group, ", ")));
  const auto root_index = static_cast<int>(root_member - group.begin());
  STRATA_MPI_CHECK(MPI_Bcast(data.data(), mpi_count(data.size()), mpi_type<T>(), root_index, comm));
}

template <typename T>
void MpiCommunicator::send_typed(std::span<const T> data, int32_t peer, int32_t tag) {
  free_completed_sends();
  check_tag(peer, tag);
  // The copy's heap buffer does not move when the entry moves into the vector.
  const auto bytes = std::as_bytes(data);
  PendingSend pending{std::vector<std::byte>(bytes.begin(), bytes.end()), MPI_REQUEST_NULL};
  STRATA_MPI_CHECK(MPI_Isend(pending.data.data(), mpi_count(data.size()), mpi_type<T>(), peer, tag,
                             world_, &pending.request));
  pending_sends_.push_back(std::move(pending));
}

template <typename T>
void MpiCommunicator::recv_typed(std::span<T> data, int32_t peer, int32_t tag) {
  free_completed_sends();
  check_tag(peer, tag);
  MPI_Status status;
  const int count = mpi_count(data.size());
  STRATA_MPI_CHECK(MPI_Recv(data.data(), count, mpi_type<T>(), peer, tag, world_, &status));
  int received = 0;
  STRATA_MPI_CHECK(MPI_Get_count(&status, mpi_type<T>(), &received));
  STRATA_ASSERT(received == count,
                fmt::format("rank {} received {} elements from rank {} (tag {}) into a buffer of "
                            "{}",
                            rank_, received, peer, tag, count));
}

// Sends still in flight are not waited for here: their receivers may receive them after the
// barrier (send(); barrier() on one rank, barrier(); recv() on the other is a valid program).
void MpiCommunicator::barrier() {
  free_completed_sends();
  STRATA_MPI_CHECK(MPI_Barrier(world_));
}

void MpiCommunicator::free_completed_sends() {
  std::erase_if(pending_sends_, [](PendingSend& pending) {
    int done = 0;
    STRATA_MPI_CHECK(MPI_Test(&pending.request, &done, MPI_STATUS_IGNORE));
    return done != 0;
  });
}

void MpiCommunicator::check_tag(int32_t peer, int32_t tag) const {
  STRATA_ASSERT(peer >= 0 && peer < world_size_ && tag >= 0 && tag <= tag_ub_,
                fmt::format("rank {}: peer {} or tag {} out of range (world of {}, tags up to {})",
                            rank_, peer, tag, world_size_, tag_ub_));
}

}  // namespace strata
