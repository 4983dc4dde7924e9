#pragma once
// The rank layout: which global rank holds which (dp, pp, tp) coordinate and on which node and GPU.
// TP is innermost (TP peers share a node and its NVLink), then DP, then PP, as Megatron-LM orders
// its groups ("tp-dp-pp"):  rank = (pp_rank * dp + dp_rank) * tp + tp_rank.
// Worked example, dp 2 x tp 2 x pp 2 on 4-GPU nodes: ranks 0,1 are (dp0,pp0,tp0/1) on node 0;
// ranks 2,3 are dp1 of stage 0, also node 0; ranks 4..7 are stage 1 on node 1.

#include <cstdint>
#include <vector>

#include "plan/parallel_plan.hpp"

namespace strata {

struct RankCoord {
  int64_t dp = 0;
  int64_t pp = 0;
  int64_t tp = 0;
  int64_t node = 0;
  int64_t gpu = 0;  // local GPU index within the node
};

class RankLayout {
 public:
  RankLayout(const ParallelPlan& plan, int64_t gpus_per_node);

  int64_t world_size() const { return dp_ * tp_ * pp_; }
  int64_t rank_of(int64_t dp, int64_t pp, int64_t tp) const { return (pp * dp_ + dp) * tp_ + tp; }
  RankCoord coord(int64_t rank) const;

  // Members of the groups a rank belongs to, ascending.
  std::vector<int64_t> tp_group(int64_t rank) const;
  std::vector<int64_t> dp_group(int64_t rank) const;
  std::vector<int64_t> pp_group(int64_t rank) const;
  // The ranks that hold one model replica (tp x pp) — the model-parallel group.
  std::vector<int64_t> model_parallel_group(int64_t rank) const;

  int64_t gpus_per_node() const { return gpus_per_node_; }

 private:
  int64_t dp_;
  int64_t tp_;
  int64_t pp_;
  int64_t gpus_per_node_;
};

}  // namespace strata
