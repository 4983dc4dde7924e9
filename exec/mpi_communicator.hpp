#pragma once
// The MPI communicator: the ranks of a run are the processes of MPI_COMM_WORLD (the caller
// initializes and finalizes MPI; this communicator must be destroyed before MPI_Finalize). It
// works on its own duplicate of MPI_COMM_WORLD, so its messages never match another library's,
// and builds one sub-communicator per group in register_groups.
//
// Reductions are bit-identical to the in-process communicator's (exec/communicator.hpp): MPI's
// own reduction may add in any order (trees, rings, pairs), so every member's contribution is
// gathered (MPI_Allgather for all_reduce, MPI_Alltoall of the chunks for reduce_scatter) and
// summed here in group order, ((x0 + x1) + x2) + ..., at the price of group.size() times the
// message bytes; bf16 buffers move as 16-bit words and are summed here the same way. Only built
// when CMake finds MPI (STRATA_HAVE_MPI=1).

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include <mpi.h>

#include "exec/communicator.hpp"

namespace strata {

class MpiCommunicator final : public TypedCommunicator<MpiCommunicator> {
 public:
  MpiCommunicator();
  // Waits for the sends still in flight (their receivers must receive them), frees the
  // communicators.
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int32_t rank() const override { return rank_; }
  int32_t world_size() const override { return world_size_; }
  // Collective over the world: every rank calls MPI_Comm_split once per group, in list order.
  void register_groups(const std::vector<std::vector<int32_t>>& groups) override;

  void barrier() override;

 private:
  friend class TypedCommunicator<MpiCommunicator>;

  // A send in flight: MPI reads `data` until `request` completes.
  struct PendingSend {
    std::vector<std::byte> data;
    MPI_Request request = MPI_REQUEST_NULL;
  };

  struct GroupLess {
    using is_transparent = void;
    bool operator()(RankGroup a, RankGroup b) const;
  };

  // The sub-communicator of a registered group this rank is a member of; its rank i is group[i].
  MPI_Comm group_comm(RankGroup group) const;
  template <typename T>
  void all_reduce_typed(std::span<T> data, RankGroup group, ReduceOp op);
  template <typename T>
  void reduce_scatter_typed(std::span<const T> send, std::span<T> recv, RankGroup group);
  template <typename T>
  void all_gather_typed(std::span<const T> send, std::span<T> recv, RankGroup group);
  template <typename T>
  void broadcast_typed(std::span<T> data, int32_t root, RankGroup group);
  // MPI_Isend of a copy of `data`; the copy lives until the send completes.
  template <typename T>
  void send_typed(std::span<const T> data, int32_t peer, int32_t tag);
  template <typename T>
  void recv_typed(std::span<T> data, int32_t peer, int32_t tag);
  // Frees the sends that have completed (MPI_Test), keeping the others.
  void free_completed_sends();
  void check_tag(int32_t peer, int32_t tag) const;

  MPI_Comm world_ = MPI_COMM_NULL;  // our duplicate of MPI_COMM_WORLD
  int32_t rank_ = 0;
  int32_t world_size_ = 0;
  int32_t tag_ub_ = 0;  // the largest tag MPI accepts (MPI_TAG_UB, at least 32767)
  std::map<std::vector<int32_t>, MPI_Comm, GroupLess> groups_;
  std::vector<PendingSend> pending_sends_;
};

}  // namespace strata
