// NetworkModel: collectives and pipeline transfers as engine activities on the topology graph,
// with folded graphs' symmetric images priced through flow weights (sim/network_model.hpp).

#include "sim/network_model.hpp"

#include <algorithm>

namespace strata {

NetworkModel::NetworkModel(const TaskGraph& graph, const ClusterSpec& cluster, Engine& engine,
                           std::vector<ProcessorId> processor_of_rank)
    : graph_(graph),
      layout_(graph.axes(), cluster.gpus_per_node),
      builder_(cluster, layout_.world_size(), engine, std::move(processor_of_rank)) {}

std::vector<PerAxis> NetworkModel::images(AxisMask spanned) const {
  std::vector<PerAxis> shifts{PerAxis{}};
  if (graph_.mode() == GraphMode::kFull) return shifts;
  // The replica axes outermost first, so that the innermost (tp) varies fastest.
  for (const Axis axis : {Axis::kDp, Axis::kEp, Axis::kCp, Axis::kTpOuter, Axis::kTp}) {
    if (has_axis(spanned, axis)) continue;
    std::vector<PerAxis> longer;
    for (const PerAxis& shift : shifts) {
      for (int64_t step = 0; step < layout_.size(axis); ++step) {
        PerAxis moved = shift;
        at(moved, axis) = step;
        longer.push_back(moved);
      }
    }
    shifts = std::move(longer);
  }
  return shifts;
}

int64_t NetworkModel::shifted(int64_t rank, const PerAxis& shift) const {
  RankCoord c = layout_.coord(rank);
  for (const Axis axis : kAllAxes) c[axis] = (c[axis] + at(shift, axis)) % layout_.size(axis);
  return layout_.rank_of(c);
}

// Links belong to a GPU, a node (NICs) or a leaf switch (its aggregated up-link; the spine is
// non-blocking), so an image with no GPU under any leaf of the simulated image's GPUs shares no
// link with it and does not change its weights: skipping it keeps the cost of folding
// independent of the number of DP replicas.
std::vector<int64_t> NetworkModel::leaves_of(const std::vector<int64_t>& gpus) const {
  std::vector<int64_t> leaves;
  for (const int64_t gpu : gpus) leaves.push_back(leaf_of(gpu));
  std::sort(leaves.begin(), leaves.end());
  leaves.erase(std::unique(leaves.begin(), leaves.end()), leaves.end());
  return leaves;
}

bool NetworkModel::shares_leaf(const std::vector<int64_t>& gpus,
                               const std::vector<int64_t>& leaves) const {
  return std::any_of(gpus.begin(), gpus.end(), [&](int64_t gpu) {
    return std::binary_search(leaves.begin(), leaves.end(), leaf_of(gpu));
  });
}

int64_t NetworkModel::leaf_of(int64_t gpu) const {
  const int64_t nodes_per_leaf = builder_.topology().cluster().nodes_per_leaf;
  const int64_t node = builder_.topology().node_of(gpu);
  return nodes_per_leaf > 0 ? node / nodes_per_leaf : 0;
}

// A folded graph simulates one member of an all-to-all (the task's rank): only the flows that
// leave or reach it are simulated, and every other pair's flow joins the images, weighing on the
// links it shares with them. An all-to-all of n members then costs 2(n - 1) flows instead of
// n(n - 1): expert parallelism over 64 ranks, 126 instead of 4032. Where the member's flows share
// a link with the others' (its peers' NICs), they are priced at the simulated flows' sizes, as
// images are.
void NetworkModel::add_folded_all_to_all(const Task& task, const CommGroup& members,
                                         const std::vector<int64_t>& gpus,
                                         std::span<const int64_t> matrix,
                                         std::vector<CollectivePlan>& plans) const {
  const auto self = std::lower_bound(members.ranks.begin(), members.ranks.end(), task.rank);
  const AllToAllPart simulated{std::distance(members.ranks.begin(), self), true};
  plans.push_back(plan_all_to_all(builder_.topology(), builder_.tuning(), gpus, matrix, simulated));
  CollectivePlan others = plan_all_to_all(builder_.topology(), builder_.tuning(), gpus, matrix,
                                          {simulated.member, false});
  if (!others.steps.empty()) plans.push_back(std::move(others));
}

ActivityId NetworkModel::add_collective(TaskId id, ActivityId join) {
  const Task& task = graph_.task(id);
  const CollectiveKind kind = task.collective;
  const int32_t matrix_index = graph_.peer_bytes_index(id);
  const int64_t bytes = matrix_index >= 0 ? 0 : task.bytes;
  const auto key = std::make_tuple(task.group, kind, bytes, matrix_index);
  auto found = collectives_.find(key);
  if (found == collectives_.end()) {
    const CommGroup& members = graph_.group(task.group);
    const std::span<const int64_t> matrix = graph_.peer_bytes(id);
    // A group's copies are the groups at the other coordinates of the replica axes it does not
    // span: a TP group's are the other DP replicas' TP groups of the stage, a DP group's the
    // other TP ranks' DP groups; the embedding group has a copy per (dp, tp) position.
    const auto shifts = images(group_axes(members.kind));
    std::vector<CollectivePlan> plans;
    std::vector<int64_t> leaves;
    for (const auto& shift : shifts) {
      std::vector<int64_t> gpus;
      for (const int32_t rank : members.ranks) gpus.push_back(shifted(rank, shift));
      if (plans.empty()) leaves = leaves_of(gpus);
      if (!plans.empty() && !shares_leaf(gpus, leaves)) continue;
      // The copies are the same group shifted: the first's choice of algorithm holds for all,
      // and an all-to-all's matrix too, row i of each copy being its i-th member's.
      if (!matrix.empty() && plans.empty() && graph_.mode() == GraphMode::kFolded) {
        add_folded_all_to_all(task, members, gpus, matrix, plans);
      } else if (!matrix.empty()) {
        plans.push_back(plan_all_to_all(builder_.topology(), builder_.tuning(), gpus, matrix));
      } else if (plans.empty()) {
        plans.push_back(plan_collective(builder_.topology(), builder_.tuning(), kind, gpus, bytes));
      } else {
        plans.push_back(plan_collective_as(plans.front().algorithm, builder_.topology(),
                                           builder_.tuning(), kind, gpus, bytes));
      }
    }
    found = collectives_.emplace(key, builder_.build(plans)).first;
  }
  return builder_.add(found->second, join);
}

ActivityId NetworkModel::add_p2p(int64_t src, int64_t dst, int64_t bytes, ActivityId join) {
  const auto key = std::make_tuple(src, dst, bytes);
  auto found = transfers_.find(key);
  if (found == transfers_.end()) {
    // Every replica of a folded stage (each DP replica and TP peer) sends at the same time.
    const auto shifts = images(axis_bit(Axis::kPp));
    std::vector<CollectivePlan> plans;
    const std::vector<int64_t> leaves = leaves_of({src, dst});
    for (const auto& shift : shifts) {
      const std::vector<int64_t> gpus{shifted(src, shift), shifted(dst, shift)};
      if (!plans.empty() && !shares_leaf(gpus, leaves)) continue;
      plans.push_back(plan_p2p(builder_.topology(), builder_.tuning(), gpus[0], gpus[1], bytes));
    }
    found = transfers_.emplace(key, builder_.build(plans)).first;
  }
  return builder_.add(found->second, join);
}

ActivityId NetworkModel::add_host_copy(int64_t rank, bool to_host, int64_t bytes, ActivityId join) {
  const auto key = std::make_tuple(rank, to_host, bytes);
  auto found = host_copies_.find(key);
  if (found == host_copies_.end()) {
    const CollectivePlan plan = plan_host_copy(builder_.topology(), rank, to_host, bytes);
    found = host_copies_.emplace(key, builder_.build({&plan, 1})).first;
  }
  return builder_.add(found->second, join);
}

}  // namespace strata
