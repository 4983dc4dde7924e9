// NetworkModel: collectives and pipeline transfers as engine activities on the topology graph,
// with folded graphs' symmetric images priced through flow weights (sim/network_model.hpp).

#include "sim/network_model.hpp"

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
    for (const auto& shift : shifts) {
      std::vector<int64_t> gpus;
      for (const int32_t rank : members.ranks) gpus.push_back(shifted(rank, shift));
      plans.push_back(plan_collective(builder_.topology(), builder_.tuning(), kind, gpus, bytes));
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
    for (const auto& shift : shifts) {
      plans.push_back(plan_p2p(builder_.topology(), builder_.tuning(), shifted(src, shift),
                               shifted(dst, shift), bytes));
    }
    found = transfers_.emplace(key, builder_.build(plans)).first;
  }
  return builder_.add(found->second, join);
}

}  // namespace strata
