#include "plan/rank_layout.hpp"

#include "common/error.hpp"

namespace strata {

RankLayout::RankLayout(const ParallelPlan& plan, int64_t gpus_per_node)
    : dp_(plan.dp), tp_(plan.tp), pp_(plan.pp), gpus_per_node_(gpus_per_node) {
  STRATA_ASSERT(gpus_per_node_ > 0, "a node has at least one GPU");
}

RankCoord RankLayout::coord(int64_t rank) const {
  STRATA_ASSERT(rank >= 0 && rank < world_size(), "rank out of range");
  RankCoord c;
  c.tp = rank % tp_;
  c.dp = (rank / tp_) % dp_;
  c.pp = rank / (tp_ * dp_);
  c.node = rank / gpus_per_node_;
  c.gpu = rank % gpus_per_node_;
  return c;
}

std::vector<int64_t> RankLayout::tp_group(int64_t rank) const {
  const RankCoord c = coord(rank);
  std::vector<int64_t> group;
  for (int64_t t = 0; t < tp_; ++t) group.push_back(rank_of(c.dp, c.pp, t));
  return group;
}

std::vector<int64_t> RankLayout::dp_group(int64_t rank) const {
  const RankCoord c = coord(rank);
  std::vector<int64_t> group;
  for (int64_t d = 0; d < dp_; ++d) group.push_back(rank_of(d, c.pp, c.tp));
  return group;
}

std::vector<int64_t> RankLayout::pp_group(int64_t rank) const {
  const RankCoord c = coord(rank);
  std::vector<int64_t> group;
  for (int64_t p = 0; p < pp_; ++p) group.push_back(rank_of(c.dp, p, c.tp));
  return group;
}

std::vector<int64_t> RankLayout::model_parallel_group(int64_t rank) const {
  const RankCoord c = coord(rank);
  std::vector<int64_t> group;
  for (int64_t p = 0; p < pp_; ++p) {
    for (int64_t t = 0; t < tp_; ++t) group.push_back(rank_of(c.dp, p, t));
  }
  return group;
}

}  // namespace strata
