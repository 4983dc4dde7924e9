// The rank layout: TP innermost, then DP, then PP (Megatron-LM's order), nodes filled in rank
// order; the worked example of rank_layout.hpp.

#include <catch2/catch.hpp>

#include "plan/rank_layout.hpp"

namespace strata {
namespace {

TEST_CASE("the worked example: dp 2 x tp 2 x pp 2 on 4-GPU nodes", "[layout]") {
  ParallelPlan plan;
  plan.dp = 2;
  plan.tp = 2;
  plan.pp = 2;
  const RankLayout layout(plan, 4);
  CHECK(layout.world_size() == 8);
  const RankCoord r3 = layout.coord(3);
  CHECK((r3.dp == 1 && r3.pp == 0 && r3.tp == 1 && r3.node == 0 && r3.gpu == 3));
  const RankCoord r4 = layout.coord(4);
  CHECK((r4.dp == 0 && r4.pp == 1 && r4.tp == 0 && r4.node == 1 && r4.gpu == 0));
  CHECK(layout.tp_group(5) == std::vector<int64_t>{4, 5});
  CHECK(layout.dp_group(5) == std::vector<int64_t>{5, 7});
  CHECK(layout.pp_group(5) == std::vector<int64_t>{1, 5});
  CHECK(layout.model_parallel_group(2) == std::vector<int64_t>{2, 3, 6, 7});
}

// With tp = 8 on 8-GPU nodes every TP group is exactly one node (NVLink), and rank_of inverts
// coord for every rank.
TEST_CASE("TP groups stay inside a node and rank_of inverts coord", "[layout]") {
  ParallelPlan plan;
  plan.dp = 4;
  plan.tp = 8;
  plan.pp = 4;
  const RankLayout layout(plan, 8);
  for (int64_t rank = 0; rank < layout.world_size(); ++rank) {
    const RankCoord c = layout.coord(rank);
    CHECK(layout.rank_of(c.dp, c.pp, c.tp) == rank);
    for (const int64_t peer : layout.tp_group(rank)) CHECK(layout.coord(peer).node == c.node);
  }
}

}  // namespace
}  // namespace strata
