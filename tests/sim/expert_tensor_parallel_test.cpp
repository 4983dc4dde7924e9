// Expert tensor parallelism below tp (--expert-tensor-parallel-size etp < tp): the MoE layers'
// rank grid against Megatron-Core's expert RankGenerator, the refusals of the splits Strata does
// not lay out, the experts' weights and collectives at their own width, model FLOPs that do not
// depend on etp, a grid of plans that the validator passes, and folded step times within 1% of
// full ones.

#include <catch2/catch.hpp>

#include "plan/rank_layout.hpp"
#include "plan/shard_sizes.hpp"
#include "sim/simulate.hpp"
#include "tests/input_error.hpp"
#include "tests/plan/plan_fixtures.hpp"

namespace strata {
namespace {

ModelSpec moe_model() { return test::small_moe(); }

ParallelPlan etp_plan(int64_t dp, int64_t tp, int64_t etp, int64_t ep, MoeDispatcher dispatcher) {
  ParallelPlan plan = test::make_plan(dp, tp, 1, 1, dp * 4, 64);
  plan.etp = etp;
  plan.ep = ep;
  plan.sequence_parallel = true;
  plan.moe_dispatcher = dispatcher;
  return plan;
}

std::vector<int64_t> group_of(const ParallelPlan& plan, int64_t rank, GroupKind kind) {
  return RankLayout(plan, 8).group(rank, group_axes(kind));
}

// Megatron-Core (parallel_state.py) lays out the MoE layers' ranks with an expert RankGenerator of
// its own, order "tp-ep-dp-pp" with tp = etp: on 8 ranks with tp 2, dp 4, etp 1 and ep 4, the
// expert-parallel groups are [0..3] and [4..7], the expert-data-parallel groups [0, 4], [1, 5],
// ..., and each expert is whole on its rank; the dense layers keep TP groups [0, 1], ... and
// data-parallel groups [0, 2, 4, 6] and [1, 3, 5, 7].
TEST_CASE("etp < tp lays the experts' groups out as Megatron-Core's expert grid",
          "[plan][moe][etp]") {
  const ParallelPlan plan = etp_plan(4, 2, 1, 4, MoeDispatcher::kAllToAll);
  validate_plan(plan, moe_model(), 8, "test");
  CHECK(plan.tp_outer() == 2);
  CHECK(plan.ep_from_dp() == 2);
  CHECK(plan.expert_data_shards() == 2);
  CHECK(group_of(plan, 5, GroupKind::kTp) == std::vector<int64_t>{4, 5});
  CHECK(group_of(plan, 5, GroupKind::kExpertTp) == std::vector<int64_t>{5});
  CHECK(group_of(plan, 5, GroupKind::kEp) == std::vector<int64_t>{4, 5, 6, 7});
  CHECK(group_of(plan, 5, GroupKind::kTpEp) == std::vector<int64_t>{4, 5, 6, 7});
  CHECK(group_of(plan, 5, GroupKind::kExpertDp) == std::vector<int64_t>{1, 5});
  CHECK(group_of(plan, 5, GroupKind::kDp) == std::vector<int64_t>{1, 3, 5, 7});
  // The rank order names tp, cp, ep, dp and pp only.
  CHECK(plan.axes().order_text() == "tp-cp-ep-dp-pp");
  CHECK(plan.axes().tp() == 2);
}

TEST_CASE("an etp that does not divide tp, or an ep that does not span tp / etp, is refused",
          "[plan][moe][etp]") {
  const auto refusal = [](const ParallelPlan& plan) {
    return test::input_error_of([&] { validate_plan(plan, moe_model(), std::nullopt, "test"); });
  };
  const auto not_dividing = refusal(etp_plan(2, 4, 3, 4, MoeDispatcher::kAllToAll));
  REQUIRE(not_dividing);
  CHECK(not_dividing->field() == "etp (--etp)");
  const auto too_wide = refusal(etp_plan(2, 2, 4, 2, MoeDispatcher::kAllToAll));
  REQUIRE(too_wide);
  CHECK(too_wide->field() == "etp (--etp)");
  // etp 1 of tp 4: ep must cover the 4 TP ranks that hold different experts.
  const auto narrow_ep = refusal(etp_plan(2, 4, 1, 2, MoeDispatcher::kAllToAll));
  REQUIRE(narrow_ep);
  CHECK(narrow_ep->field() == "ep (--ep)");
  CHECK_THAT(narrow_ep->problem(), Catch::Contains("not a multiple of 4"));
  // ep 8 of tp 2 / etp 1 leaves 4 for dp 2.
  const auto beyond_dp = refusal(etp_plan(2, 2, 1, 8, MoeDispatcher::kAllToAll));
  REQUIRE(beyond_dp);
  CHECK(beyond_dp->field() == "ep (--ep)");
}

// At etp 1 each rank holds E / ep whole experts (2 of 8 at ep 4: up 2 x 256 x 128 and down
// 128 x 256 each, 3 MoE layers), twice what etp = tp = 2 holds of its 2 experts, and the all-to-all
// dispatcher runs no expert-TP gather or reduce-scatter; at etp 2 of tp 4 those go over 2-rank
// groups.
TEST_CASE("the experts keep their own width and TP group", "[plan][moe][etp]") {
  const ModelSpec model = moe_model();
  const int64_t whole = 3 * 2 * (2 * 256 * 128 + 128 * 256);
  const ParallelPlan one = etp_plan(4, 2, 1, 4, MoeDispatcher::kAllToAll);
  CHECK(stage_expert_parameters(model, one).front() == whole);
  CHECK(stage_expert_parameters(model, etp_plan(4, 2, 0, 4, MoeDispatcher::kAllToAll)).front() ==
        whole / 2);
  const auto expert_tp_groups = [&](const ParallelPlan& plan) {
    const CompiledPlan compiled = test::compile_checked(model, plan, GraphMode::kFull);
    std::vector<size_t> sizes;
    for (const Task& t : compiled.graph.tasks()) {
      if (t.rank != 0 || t.role != TaskRole::kMoeDispatch) continue;
      const CommGroup& group = compiled.graph.group(t.group);
      if (group.kind != GroupKind::kEp) sizes.push_back(group.ranks.size());
    }
    return sizes;
  };
  CHECK(expert_tp_groups(one).empty());
  const std::vector<size_t> two = expert_tp_groups(etp_plan(2, 4, 2, 2, MoeDispatcher::kAllToAll));
  REQUIRE_FALSE(two.empty());
  for (const size_t size : two) CHECK(size == 2);
}

// Model FLOPs count each token's k active experts, however wide the experts' TP groups.
TEST_CASE("model FLOPs do not depend on etp", "[plan][moe][etp]") {
  const ModelSpec model = moe_model();
  for (const MoeDispatcher dispatcher : {MoeDispatcher::kAllGather, MoeDispatcher::kAllToAll}) {
    const double base = test::compile_checked(model, etp_plan(2, 4, 0, 2, dispatcher)).flops.model;
    for (const int64_t etp : {1, 2}) {
      const ParallelPlan plan = etp_plan(2, 4, etp, 8 / etp, dispatcher);
      INFO(to_string(dispatcher) << " etp " << etp);
      CHECK(test::compile_checked(model, plan).flops.model == Approx(base).epsilon(1e-6));
    }
  }
}

TEST_CASE("every etp < tp plan of a grid compiles to a valid graph, folded and full",
          "[plan][moe][etp]") {
  const ModelSpec model = moe_model();
  int variant = 0;
  for (const int64_t tp : {2, 4}) {
    for (const int64_t etp : {1, 2}) {
      if (etp >= tp) continue;
      for (const int64_t ep_from_dp : {1, 2}) {
        for (const MoeDispatcher dispatcher :
             {MoeDispatcher::kAllGather, MoeDispatcher::kAllToAll}) {
          ParallelPlan plan = etp_plan(2, tp, etp, tp / etp * ep_from_dp, dispatcher);
          plan.pp = variant % 2 + 1;
          plan.cp = variant % 3 == 1 ? 2 : 1;
          plan.zero_stage = variant % 3;
          plan.moe_imbalance = variant % 4 == 0 ? 3 : 1;
          plan.grouped_gemm = variant % 2 == 0;
          ++variant;
          INFO("tp " << tp << " etp " << etp << " ep " << plan.ep << " pp " << plan.pp << " cp "
                     << plan.cp << " " << to_string(dispatcher) << " zero " << plan.zero_stage);
          test::check_folded_and_full(model, plan);
        }
      }
    }
  }
}

// Symmetry folding over tp-outer: the folded rank's expert-parallel images span the TP ranks as
// the full graph's members do.
TEST_CASE("folded and full etp < tp graphs agree within 1% on step time",
          "[sim][moe][etp][folding]") {
  const ModelSpec model = moe_model();
  for (const MoeDispatcher dispatcher : {MoeDispatcher::kAllGather, MoeDispatcher::kAllToAll}) {
    ParallelPlan plan = etp_plan(4, 4, 2, 4, dispatcher);
    plan.pp = 2;
    plan.zero_stage = 1;
    plan.moe_imbalance = 2;
    const double folded =
        simulate(test::compile_checked(model, plan, GraphMode::kFolded, "dgx-h100")).step_time_s;
    const SimResult full =
        simulate(test::compile_checked(model, plan, GraphMode::kFull, "dgx-h100"));
    INFO(to_string(dispatcher) << ": folded " << folded << " s, full " << full.step_time_s << " s");
    CHECK(std::abs(folded / full.step_time_s - 1) <= 0.01);
    CHECK(full.comm_s.ep > 0);
  }
}

}  // namespace
}  // namespace strata
