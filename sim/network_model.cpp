// NetworkModel: collectives and pipeline transfers as engine activities on the topology graph,
// with folded graphs' symmetric images priced through flow weights (sim/network_model.hpp).

#include "sim/network_model.hpp"

#include <algorithm>

namespace strata {

NetworkModel::NetworkModel(const TaskGraph& graph, const ClusterSpec& cluster,
                           const ParallelPlan& plan, Engine& engine,
                           std::vector<ProcessorId> processor_of_rank)
    : graph_(graph),
      plan_(plan),
      layout_(plan, cluster.gpus_per_node),
      builder_(cluster, plan.gpus(), engine, std::move(processor_of_rank)) {}

std::vector<std::pair<int64_t, int64_t>> NetworkModel::images(bool over_dp, bool over_tp) const {
  if (graph_.mode() == GraphMode::kFull) return {{0, 0}};
  std::vector<std::pair<int64_t, int64_t>> shifts;
  for (int64_t d = 0; d < (over_dp ? plan_.dp : 1); ++d) {
    for (int64_t t = 0; t < (over_tp ? plan_.tp : 1); ++t) shifts.emplace_back(d, t);
  }
  return shifts;
}

int64_t NetworkModel::shifted(int64_t rank, std::pair<int64_t, int64_t> shift) const {
  const RankCoord c = layout_.coord(rank);
  return layout_.rank_of((c.dp + shift.first) % plan_.dp, c.pp, (c.tp + shift.second) % plan_.tp);
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

ActivityId NetworkModel::add_collective(int32_t group, CollectiveKind kind, int64_t bytes,
                                        ActivityId join) {
  const auto key = std::make_tuple(group, kind, bytes);
  auto found = collectives_.find(key);
  if (found == collectives_.end()) {
    const CommGroup& members = graph_.group(group);
    // A TP group's copies are the other DP replicas' TP groups of the stage, a DP group's the
    // other TP ranks' DP groups; the embedding group has a copy per (dp, tp) position.
    const GroupKind group_kind = members.kind;
    const auto shifts =
        images(group_kind == GroupKind::kTp || group_kind == GroupKind::kEmbedding ||
                   group_kind == GroupKind::kModelParallel,
               group_kind == GroupKind::kDp || group_kind == GroupKind::kEmbedding);
    std::vector<CollectivePlan> plans;
    std::vector<int64_t> leaves;
    for (const auto& shift : shifts) {
      std::vector<int64_t> gpus;
      for (const int32_t rank : members.ranks) gpus.push_back(shifted(rank, shift));
      if (plans.empty()) leaves = leaves_of(gpus);
      if (!plans.empty() && !shares_leaf(gpus, leaves)) continue;
      // The copies are the same group shifted: the first's choice of algorithm holds for all.
      plans.push_back(
          plans.empty() ? plan_collective(builder_.topology(), builder_.tuning(), kind, gpus, bytes)
                        : plan_collective_as(plans.front().algorithm, builder_.topology(),
                                             builder_.tuning(), kind, gpus, bytes));
    }
    found = collectives_.emplace(key, builder_.build(plans)).first;
  }
  return builder_.add(found->second, join);
}

ActivityId NetworkModel::add_p2p(int64_t src, int64_t dst, int64_t bytes, ActivityId join) {
  const auto key = std::make_tuple(src, dst, bytes);
  auto found = transfers_.find(key);
  if (found == transfers_.end()) {
    // Every DP replica and TP peer of a folded stage sends at the same time.
    const auto shifts = images(true, true);
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
