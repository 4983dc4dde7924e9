// The rank layout: ranks numbered over the parallel axes in the plan's rank order, innermost first
// (Megatron-Core's RankGenerator), nodes filled in rank order; the worked examples of
// rank_layout.hpp and Megatron-LM's own.

#include <catch2/catch.hpp>

#include "plan/rank_layout.hpp"

namespace strata {
namespace {

std::vector<int64_t> along(const RankLayout& layout, int64_t rank, Axis axis) {
  return layout.group(rank, axis_bit(axis));
}

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
  CHECK(along(layout, 5, Axis::kTp) == std::vector<int64_t>{4, 5});
  CHECK(along(layout, 5, Axis::kDp) == std::vector<int64_t>{5, 7});
  CHECK(along(layout, 5, Axis::kPp) == std::vector<int64_t>{1, 5});
  CHECK(layout.group(2, axes_mask({Axis::kTp, Axis::kPp})) == std::vector<int64_t>{2, 3, 6, 7});
  CHECK(layout.group(2, kEveryAxis).size() == 8);
  CHECK(layout.group(2, 0) == std::vector<int64_t>{2});
}

// Megatron-LM's docstring of initialize_model_parallel (megatron/core/parallel_state.py): 16 GPUs,
// tp 2, pp 4 (so dp 2) give the data-parallel groups [g0, g2], [g1, g3], [g4, g6], ..., the
// tensor groups [g0, g1], [g2, g3], ... and the pipeline groups [g0, g4, g8, g12], [g1, g5, g9,
// g13], [g2, g6, g10, g14], [g3, g7, g11, g15].
TEST_CASE("Megatron-LM's 16-GPU example of tp 2 x pp 4 groups", "[layout]") {
  ParallelPlan plan;
  plan.dp = 2;
  plan.tp = 2;
  plan.pp = 4;
  const RankLayout layout(plan, 8);
  CHECK(along(layout, 0, Axis::kDp) == std::vector<int64_t>{0, 2});
  CHECK(along(layout, 1, Axis::kDp) == std::vector<int64_t>{1, 3});
  CHECK(along(layout, 4, Axis::kDp) == std::vector<int64_t>{4, 6});
  CHECK(along(layout, 13, Axis::kDp) == std::vector<int64_t>{13, 15});
  CHECK(along(layout, 2, Axis::kTp) == std::vector<int64_t>{2, 3});
  CHECK(along(layout, 0, Axis::kPp) == std::vector<int64_t>{0, 4, 8, 12});
  CHECK(along(layout, 9, Axis::kPp) == std::vector<int64_t>{1, 5, 9, 13});
  CHECK(along(layout, 14, Axis::kPp) == std::vector<int64_t>{2, 6, 10, 14});
  CHECK(along(layout, 3, Axis::kPp) == std::vector<int64_t>{3, 7, 11, 15});
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
    CHECK(layout.rank_of(c) == rank);
    for (const int64_t peer : along(layout, rank, Axis::kTp))
      CHECK(layout.coord(peer).node == c.node);
  }
}

// Another order lays the ranks out as rank_layout.hpp documents: in "dp-tp-pp" DP is innermost,
// so ranks 0 and 1 are the two DP replicas of (tp 0, pp 0) and ranks 2 and 3 those of tp 1; and
// Megatron-LM's --use-tp-pp-dp-mapping order "tp-cp-ep-pp-dp" puts the pipeline inside DP.
TEST_CASE("a rank order other than Megatron-Core's default", "[layout]") {
  ParallelPlan plan;
  plan.dp = 2;
  plan.tp = 2;
  plan.pp = 2;
  plan.rank_order = parse_rank_order("dp-tp-pp", "test", "rank_order");
  CHECK(plan.axes().order_text() == "dp-tp-pp-cp-ep");
  const RankLayout layout(plan, 4);
  const RankCoord r1 = layout.coord(1);
  CHECK((r1.dp == 1 && r1.tp == 0 && r1.pp == 0));
  const RankCoord r2 = layout.coord(2);
  CHECK((r2.dp == 0 && r2.tp == 1 && r2.pp == 0));
  CHECK(along(layout, 0, Axis::kDp) == std::vector<int64_t>{0, 1});
  CHECK(along(layout, 0, Axis::kTp) == std::vector<int64_t>{0, 2});
  CHECK(along(layout, 0, Axis::kPp) == std::vector<int64_t>{0, 4});

  plan.rank_order = parse_rank_order("tp-cp-ep-pp-dp", "test", "rank_order");
  const RankLayout tp_pp_dp(plan, 4);
  CHECK(along(tp_pp_dp, 0, Axis::kPp) == std::vector<int64_t>{0, 2});
  CHECK(along(tp_pp_dp, 0, Axis::kDp) == std::vector<int64_t>{0, 4});
  for (int64_t rank = 0; rank < tp_pp_dp.world_size(); ++rank)
    CHECK(tp_pp_dp.rank_of(tp_pp_dp.coord(rank)) == rank);
}

// Every named axis with a size: tp 2, cp 2, ep 2, dp 2, pp 2 in Megatron-Core's order have
// strides 1, 2, 4, 8, 16 (the mixed-radix numbering), and a group along two axes has four members.
TEST_CASE("five axes number ranks as a mixed-radix number", "[layout]") {
  ParallelAxes axes;
  axes.sizes = {2, 2, 2, 2, 2, 1};  // tp, cp, ep, dp, pp; tp-outer 1
  const RankLayout layout(axes, 8);
  CHECK(layout.world_size() == 32);
  const RankCoord c = layout.coord(1 + 2 + 8 + 16);
  CHECK((c.tp == 1 && c.cp == 1 && c.ep == 0 && c.dp == 1 && c.pp == 1));
  CHECK(along(layout, 0, Axis::kCp) == std::vector<int64_t>{0, 2});
  CHECK(along(layout, 0, Axis::kEp) == std::vector<int64_t>{0, 4});
  CHECK(layout.group(0, axes_mask({Axis::kDp, Axis::kCp})) == std::vector<int64_t>{0, 2, 8, 10});
}

TEST_CASE("a rank order names each axis once", "[layout]") {
  CHECK_THROWS_WITH(parse_rank_order("tp-dp-tp", "plan.json", "rank_order"),
                    Catch::Contains("lists tp twice"));
  CHECK_THROWS_WITH(parse_rank_order("tp-xp", "plan.json", "rank_order"),
                    Catch::Contains("'xp' in 'tp-xp' is not an axis"));
  CHECK_THROWS(parse_rank_order("", "plan.json", "rank_order"));
}

}  // namespace
}  // namespace strata
