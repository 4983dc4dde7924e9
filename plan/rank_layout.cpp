#include "plan/rank_layout.hpp"

#include <algorithm>

#include "common/error.hpp"

namespace strata {

int64_t RankCoord::operator[](Axis axis) const { return along(*this, axis); }

int64_t& RankCoord::operator[](Axis axis) { return along(*this, axis); }

RankCoord RankCoord::with(Axis axis, int64_t value) const {
  RankCoord moved = *this;
  moved[axis] = value;
  return moved;
}

RankLayout::RankLayout(const ParallelAxes& axes, int64_t gpus_per_node)
    : axes_(axes), world_size_(axes.world_size()), gpus_per_node_(gpus_per_node) {
  STRATA_ASSERT(gpus_per_node_ > 0, "a node has at least one GPU");
  int64_t stride = 1;
  for (const Axis axis : axes_.order) {
    at(stride_, axis) = stride;
    stride *= axes_.size(axis);
  }
}

RankLayout::RankLayout(const ParallelPlan& plan, int64_t gpus_per_node)
    : RankLayout(plan.axes(), gpus_per_node) {}

int64_t RankLayout::rank_of(const RankCoord& coord) const {
  int64_t rank = 0;
  for (const Axis axis : kAllAxes) {
    STRATA_ASSERT(coord[axis] >= 0 && coord[axis] < size(axis), "coordinate out of range");
    rank += coord[axis] * at(stride_, axis);
  }
  return rank;
}

RankCoord RankLayout::coord(int64_t rank) const {
  STRATA_ASSERT(rank >= 0 && rank < world_size_, "rank out of range");
  const PerAxis coords = axes_.coords(rank);
  RankCoord c;
  for (const Axis axis : kAllAxes) c[axis] = at(coords, axis);
  c.node = rank / gpus_per_node_;
  c.gpu = rank % gpus_per_node_;
  return c;
}

std::vector<int64_t> RankLayout::group(int64_t rank, AxisMask axes) const {
  // From the member at coordinate 0 along the group's axes, every step along each of them.
  RankCoord first = coord(rank);
  for (const Axis axis : kAllAxes) {
    if (has_axis(axes, axis)) first[axis] = 0;
  }
  std::vector<int64_t> members{rank_of(first)};
  for (const Axis axis : kAllAxes) {
    if (!has_axis(axes, axis)) continue;
    const size_t count = members.size();
    for (int64_t step = 1; step < size(axis); ++step) {
      for (size_t i = 0; i < count; ++i) members.push_back(members[i] + step * at(stride_, axis));
    }
  }
  std::sort(members.begin(), members.end());
  return members;
}

}  // namespace strata
