#pragma once
// The rank layout: which global rank holds which coordinate along each parallel axis
// (plan/parallel_axes.hpp) and on which node and GPU. The plan's rank order lists the axes
// innermost first; a rank is the mixed-radix number of its coordinates in that order, as
// Megatron-Core's RankGenerator numbers them:
//   rank = c[o0] + s[o0] * (c[o1] + s[o1] * (c[o2] + ...)), o the order, s the sizes.
// Megatron-Core's default "tp-cp-ep-dp-pp" puts TP innermost (TP peers share a node and its
// NVLink), then DP, then PP: with cp = ep = 1, rank = (pp_rank * dp + dp_rank) * tp + tp_rank.
// Worked example, dp 2 x tp 2 x pp 2 on 4-GPU nodes: ranks 0,1 are (dp0,pp0,tp0/1) on node 0;
// ranks 2,3 are dp1 of stage 0, also node 0; ranks 4..7 are stage 1 on node 1. In the order
// "dp-tp-pp" ranks 0,1 are dp 0/1 of (tp0, pp0) and ranks 2,3 those of tp1.
//
// A group is formed "along axes": the ranks whose coordinates differ from a rank's only along
// those axes (the TP group along tp, the DP group along dp, the model-parallel group along tp and
// pp).

#include <cstdint>
#include <vector>

#include "plan/parallel_axes.hpp"
#include "plan/parallel_plan.hpp"

namespace strata {

struct RankCoord {
  int64_t tp = 0;
  int64_t cp = 0;
  int64_t ep = 0;
  int64_t dp = 0;
  int64_t pp = 0;
  int64_t tp_outer = 0;  // with etp < tp: the TP rank's etp block (parallel_axes.hpp)
  int64_t node = 0;
  int64_t gpu = 0;  // local GPU index within the node

  int64_t operator[](Axis axis) const;
  int64_t& operator[](Axis axis);
  // This coordinate with `axis` at `value`.
  RankCoord with(Axis axis, int64_t value) const;
};

class RankLayout {
 public:
  RankLayout(const ParallelAxes& axes, int64_t gpus_per_node);
  RankLayout(const ParallelPlan& plan, int64_t gpus_per_node);

  int64_t world_size() const { return world_size_; }
  int64_t size(Axis axis) const { return axes_.size(axis); }
  const ParallelAxes& axes() const { return axes_; }
  // The rank at these axis coordinates (node and gpu ignored).
  int64_t rank_of(const RankCoord& coord) const;
  RankCoord coord(int64_t rank) const;

  // The ranks whose coordinates differ from `rank`'s only along `axes`, ascending.
  std::vector<int64_t> group(int64_t rank, AxisMask axes) const;

  int64_t gpus_per_node() const { return gpus_per_node_; }

 private:
  ParallelAxes axes_;
  PerAxis stride_{};  // by Axis: the rank distance of one step along it
  int64_t world_size_;
  int64_t gpus_per_node_;
};

}  // namespace strata
