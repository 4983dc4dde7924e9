#include "exec/nccl_communicator.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.hpp"
#include "exec/nccl_check.hpp"

namespace strata {

namespace {

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::kSum ? ncclSum : ncclMax; }

bool meets(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  return std::ranges::any_of(a, [&](int32_t rank) { return std::ranges::binary_search(b, rank); });
}

// The splits every rank derives from the same group list (exec/nccl_communicator.hpp): rounds
// of pairwise disjoint groups, dealt greedily from the groups in ascending order.
std::vector<std::vector<std::vector<int32_t>>> split_rounds(
    const std::set<std::vector<int32_t>>& groups) {
  std::vector<std::vector<std::vector<int32_t>>> rounds;
  for (const std::vector<int32_t>& group : groups) {
    const auto round = std::ranges::find_if(rounds, [&](const auto& members) {
      return std::ranges::none_of(members, [&](const auto& other) { return meets(group, other); });
    });
    if (round == rounds.end()) {
      rounds.push_back({group});
    } else {
      round->push_back(group);
    }
  }
  return rounds;
}

class NcclCommunicator final : public TypedCommunicator<NcclCommunicator> {
 public:
  NcclCommunicator(Communicator& bootstrap, Backend& backend)
      : bootstrap_(bootstrap), backend_(backend) {
    const int32_t world_size = bootstrap.world_size();
    std::vector<int32_t> world(static_cast<size_t>(world_size));
    for (int32_t r = 0; r < world_size; ++r) world[static_cast<size_t>(r)] = r;
    bootstrap.register_groups({world});
    // The id's bytes travel as floats 0..255, which every path carries exactly.
    ncclUniqueId id{};
    if (rank() == 0) STRATA_NCCL_CHECK(ncclGetUniqueId(&id));
    std::vector<float> bytes(NCCL_UNIQUE_ID_BYTES);
    for (size_t i = 0; i < bytes.size(); ++i) {
      bytes[i] = static_cast<float>(static_cast<unsigned char>(id.internal[i]));
    }
    bootstrap.broadcast(std::span(bytes), 0, world);
    for (size_t i = 0; i < bytes.size(); ++i) {
      id.internal[i] = static_cast<char>(static_cast<unsigned char>(bytes[i]));
    }
    STRATA_NCCL_CHECK(ncclCommInitRank(&world_, world_size, id, rank()));
  }

  ~NcclCommunicator() override {
    for (auto& [group, comm] : groups_) ncclCommDestroy(comm);
    ncclCommDestroy(world_);
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int32_t rank() const override { return bootstrap_.rank(); }
  int32_t world_size() const override { return bootstrap_.world_size(); }

  void register_groups(const std::vector<std::vector<int32_t>>& groups) override {
    bootstrap_.register_groups(groups);
    std::set<std::vector<int32_t>> fresh;
    for (const std::vector<int32_t>& group : groups) {
      STRATA_ASSERT(!group.empty() && std::ranges::is_sorted(group) &&
                        std::ranges::adjacent_find(group) == group.end() && group.front() >= 0 &&
                        group.back() < world_size(),
                    fmt::format("group [{}] is not ascending distinct ranks of a world of {}",
                                fmt::join(group, ", "), world_size()));
      if (!split_.contains(group)) fresh.insert(group);
    }
    for (const auto& round : split_rounds(fresh)) {
      int color = NCCL_SPLIT_NOCOLOR;
      for (size_t i = 0; i < round.size(); ++i) {
        if (std::ranges::binary_search(round[i], rank())) color = static_cast<int>(i);
      }
      ncclComm_t comm = nullptr;
      STRATA_NCCL_CHECK(ncclCommSplit(world_, color, rank(), &comm, nullptr));
      for (const auto& group : round) split_.insert(group);
      if (color == NCCL_SPLIT_NOCOLOR) continue;
      const std::vector<int32_t>& group = round[static_cast<size_t>(color)];
      int size = 0;
      int index = 0;
      STRATA_NCCL_CHECK(ncclCommCount(comm, &size));
      STRATA_NCCL_CHECK(ncclCommUserRank(comm, &index));
      const auto member = std::ranges::find(group, rank());
      STRATA_ASSERT(
          static_cast<size_t>(size) == group.size() && index == member - group.begin(),
          fmt::format("rank {}: the communicator of group [{}] has {} ranks and puts this "
                      "one at {}: the ranks passed different group lists",
                      rank(), fmt::join(group, ", "), size, index));
      groups_.emplace(group, comm);
    }
  }

  void barrier() override {
    backend_.synchronize();
    bootstrap_.barrier();
  }

  bool batches_p2p() const override { return true; }
  void begin_p2p_batch() override { STRATA_NCCL_CHECK(ncclGroupStart()); }
  void end_p2p_batch() override { STRATA_NCCL_CHECK(ncclGroupEnd()); }

 private:
  friend class TypedCommunicator<NcclCommunicator>;

  cudaStream_t stream() { return static_cast<cudaStream_t>(backend_.native_stream()); }

  template <typename T>
  static ncclDataType_t nccl_type() {
    if constexpr (std::is_same_v<T, double>) return ncclFloat64;
    return std::is_same_v<T, Bf16> ? ncclBfloat16 : ncclFloat32;
  }

  template <typename T>
  void all_reduce_typed(std::span<T> data, RankGroup group, ReduceOp op) {
    STRATA_NCCL_CHECK(ncclAllReduce(data.data(), data.data(), data.size(), nccl_type<T>(),
                                    nccl_op(op), group_comm(group), stream()));
  }
  template <typename T>
  void reduce_scatter_typed(std::span<const T> send, std::span<T> recv, RankGroup group) {
    STRATA_NCCL_CHECK(ncclReduceScatter(send.data(), recv.data(), recv.size(), nccl_type<T>(),
                                        ncclSum, group_comm(group), stream()));
  }
  template <typename T>
  void all_gather_typed(std::span<const T> send, std::span<T> recv, RankGroup group) {
    STRATA_NCCL_CHECK(ncclAllGather(send.data(), recv.data(), send.size(), nccl_type<T>(),
                                    group_comm(group), stream()));
  }
  template <typename T>
  void broadcast_typed(std::span<T> data, int32_t root, RankGroup group) {
    const auto root_member = std::ranges::find(group, root);
    STRATA_ASSERT(root_member != group.end(), fmt::format("broadcast root {} is not in group [{}]",
                                                          root, fmt::join(group, ", ")));
    STRATA_NCCL_CHECK(ncclBroadcast(data.data(), data.data(), data.size(), nccl_type<T>(),
                                    static_cast<int>(root_member - group.begin()),
                                    group_comm(group), stream()));
  }
  // The tag is not sent: NCCL matches messages between two ranks by order.
  template <typename T>
  void send_typed(std::span<const T> data, int32_t peer, int32_t /*tag*/) {
    STRATA_NCCL_CHECK(ncclSend(data.data(), data.size(), nccl_type<T>(), peer, world_, stream()));
  }
  template <typename T>
  void recv_typed(std::span<T> data, int32_t peer, int32_t /*tag*/) {
    STRATA_NCCL_CHECK(ncclRecv(data.data(), data.size(), nccl_type<T>(), peer, world_, stream()));
  }

  ncclComm_t group_comm(RankGroup group) const {
    const auto found = groups_.find(group);
    STRATA_ASSERT(found != groups_.end(),
                  fmt::format("rank {} runs a collective on group [{}], which it did not register "
                              "or is not a member of",
                              rank(), fmt::join(group, ", ")));
    return found->second;
  }

  struct GroupLess {
    using is_transparent = void;
    bool operator()(RankGroup a, RankGroup b) const {
      return std::ranges::lexicographical_compare(a, b);
    }
  };

  Communicator& bootstrap_;
  Backend& backend_;
  ncclComm_t world_ = nullptr;
  std::map<std::vector<int32_t>, ncclComm_t, GroupLess> groups_;  // this rank's groups
  std::set<std::vector<int32_t>> split_;  // every group split so far, this rank's or not
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, Backend& backend) {
  return std::make_unique<NcclCommunicator>(bootstrap, backend);
}

}  // namespace strata
