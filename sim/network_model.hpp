#pragma once
// The network side of simulate(): turns a collective instance or a pipeline transfer of the task
// graph into engine activities (a latency delay and the flows of each step of its algorithm) on
// the cluster's topology graph.
//
// Folded graphs hold one rank per pipeline stage, but every DP replica and TP peer runs the same
// collectives at the same time. The model plans the collective for each symmetric image of the
// group too (the other TP groups of the stage for a DP group, the other DP replicas for a TP
// group, ...) and gives each simulated flow, on each link, the weight of the image flows that
// cross that link: a NIC shared by eight rails' rings carries eight flows, not one.
//
// An all-to-all with a traffic matrix (TaskGraph::set_peer_bytes) is planned from it
// (plan_all_to_all), each image with the same matrix: member i of an image is the image of
// member i, so the image of a hot expert's rank receives what that rank receives. The weights
// count flows, as for every collective: a link whose image flows leave or reach the image of the
// member its simulated flows leave or reach (a NIC two TP peers share) is priced exactly; where
// images of other members meet the simulated flows (a leaf's up-link), the image flows are
// priced at the simulated flows' sizes. In a folded graph only the simulated member's own flows
// (its row and column of the matrix) are simulated, the other pairs' join the images: 2(n - 1)
// flows per instance instead of n(n - 1).
//
// Plans are cached per (group, kind, bytes, matrix) and per (sender, receiver, bytes): a step has
// a few dozen distinct collectives, repeated per layer and micro-batch.

#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "plan/rank_layout.hpp"
#include "plan/task_graph.hpp"
#include "sim/transfer_builder.hpp"

namespace strata {

class NetworkModel {
 public:
  // `processor_of_rank[r]` is the engine processor of global rank r, or kNoProcessor when r is
  // not simulated (folded graphs).
  NetworkModel(const TaskGraph& graph, const ClusterSpec& cluster, Engine& engine,
               std::vector<ProcessorId> processor_of_rank);

  // Adds the activities of the collective instance that task `id` (any member's task of it)
  // belongs to, starting after `join`; returns the activity that finishes with it.
  ActivityId add_collective(TaskId id, ActivityId join);
  // The same for a pipeline transfer from rank `src` to rank `dst`.
  ActivityId add_p2p(int64_t src, int64_t dst, int64_t bytes, ActivityId join);
  // The same for a copy between rank `rank`'s GPU and its host's memory (offload). Each folded
  // copy has its own GPU's PCIe link, which no other image crosses: only this rank's is planned.
  ActivityId add_host_copy(int64_t rank, bool to_host, int64_t bytes, ActivityId join);

 private:
  // The shifts (a coordinate offset along each replica axis a group does not span) that map a
  // group spanning `spanned` onto its symmetric copies in a folded graph; one zero shift in a
  // full graph.
  std::vector<PerAxis> images(AxisMask spanned) const;
  int64_t shifted(int64_t rank, const PerAxis& shift) const;
  // The leaf switches (rail groups) under which these GPUs sit, sorted.
  std::vector<int64_t> leaves_of(const std::vector<int64_t>& gpus) const;
  bool shares_leaf(const std::vector<int64_t>& gpus, const std::vector<int64_t>& leaves) const;
  int64_t leaf_of(int64_t gpu) const;
  // A folded graph's all-to-all with a traffic matrix over `gpus`: the plan of the flows of the
  // task's own member, then the other pairs' flows as an image.
  void add_folded_all_to_all(const Task& task, const CommGroup& members,
                             const std::vector<int64_t>& gpus, std::span<const int64_t> matrix,
                             std::vector<CollectivePlan>& plans) const;

  const TaskGraph& graph_;
  RankLayout layout_;
  TransferBuilder builder_;
  // (group, kind, bytes, matrix): an all-to-all with a matrix is keyed by the matrix's interned
  // index (TaskGraph::peer_bytes_index) and bytes 0, its members' row sums differing; -1 for
  // none.
  std::map<std::tuple<int32_t, CollectiveKind, int64_t, int32_t>, Transfer> collectives_;
  std::map<std::tuple<int64_t, int64_t, int64_t>, Transfer> transfers_;
  std::map<std::tuple<int64_t, bool, int64_t>, Transfer> host_copies_;
};

}  // namespace strata
