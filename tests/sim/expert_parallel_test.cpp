// Expert parallelism (ep > 1) in the task graph and the simulator: the all-to-all dispatcher's
// traffic matrix against its closed form, a grid of plans that the validator passes with folded
// and full graphs agreeing, model FLOPs that do not depend on how the experts are split or how
// skewed the routing is, the experts' gradients reduced over their own data-parallel group and
// their states sharded over it (Megatron-Core's expert_parallel_buffers and expert-data-parallel
// group), and folded step times within 1% of full ones.

#include <catch2/catch.hpp>

#include "plan/memory_plan.hpp"
#include "plan/moe_dims.hpp"
#include "plan/op_shapes.hpp"
#include "plan/shard_sizes.hpp"
#include "sim/compute_model.hpp"
#include "sim/simulate.hpp"
#include "tests/plan/plan_fixtures.hpp"

namespace strata {
namespace {

ModelSpec moe_model() { return test::small_moe(); }

ParallelPlan ep_plan(int64_t dp, int64_t ep, int64_t tp, int64_t pp, MoeDispatcher dispatcher) {
  ParallelPlan plan = test::make_plan(dp, tp, pp, 1, dp * 4, 64);
  plan.ep = ep;
  plan.sequence_parallel = tp > 1;
  plan.moe_dispatcher = dispatcher;
  return plan;
}

// The busiest rank (member 0) receives load x 1/ep of every member's T x k slots, the others the
// rest equally. 8 experts over ep 4 (2 local), the busiest taking 2x the mean:
// load = (2 + (2 - 1)(8 - 2)/(8 - 1)) / 2 = 10/7; with T = 1024 tokens, k = 2, 2048 slots of
// 256 bytes: 2048 x 10/7 / 4 = 731.43 rows to member 0, 2048 x (4 - 10/7) / 12 = 438.86 to each
// other member.
TEST_CASE("the all-to-all dispatcher's traffic matrix follows the busiest rank's load",
          "[plan][moe][ep]") {
  ModelSpec model = moe_model();
  ParallelPlan plan = ep_plan(4, 4, 1, 1, MoeDispatcher::kAllToAll);
  plan.seq_len = 1024;
  model.max_seq = 1024;
  plan.moe_imbalance = 2;
  CHECK(moe_rank_load(model, plan) == Approx(10.0 / 7));
  const std::vector<int64_t> m = moe_dispatch_matrix(model, plan, 256);
  REQUIRE(m.size() == 16);
  for (int64_t i = 0; i < 4; ++i) {
    int64_t row = 0;
    for (int64_t j = 0; j < 4; ++j) row += m[static_cast<size_t>(i * 4 + j)];
    CHECK(row == Approx(2048 * 256).margin(4));
    CHECK(m[static_cast<size_t>(i * 4)] == std::llround(2048.0 * 10 / 7 / 4 * 256));
    for (int64_t j = 1; j < 4; ++j)
      CHECK(m[static_cast<size_t>(i * 4 + j)] == std::llround(2048.0 * (4 - 10.0 / 7) / 12 * 256));
  }
  const std::vector<int64_t> back = transposed(m, 4);
  CHECK(back[1] == m[4]);
  plan.moe_imbalance = 1;
  for (const int64_t bytes : moe_dispatch_matrix(model, plan, 256)) CHECK(bytes == 2048 / 4 * 256);
}

TEST_CASE("every expert-parallel plan of a grid compiles to a valid graph, folded and full",
          "[plan][moe][ep]") {
  const ModelSpec model = moe_model();
  int variant = 0;
  for (const int64_t ep : {2, 4}) {
    for (const int64_t tp : {1, 2}) {
      for (const int64_t pp : {1, 2}) {
        for (const MoeDispatcher dispatcher :
             {MoeDispatcher::kAllGather, MoeDispatcher::kAllToAll}) {
          ParallelPlan plan = ep_plan(ep * (variant % 2 + 1), ep, tp, pp, dispatcher);
          plan.cp = variant % 3 == 1 ? 2 : 1;
          plan.grouped_gemm = variant % 2 == 0;
          plan.zero_stage = variant % 3;
          plan.moe_imbalance = variant % 4 == 0 ? 3 : 1;
          plan.overlap.grad_reduce = plan.overlap.param_gather = plan.zero_stage > 0;
          ++variant;
          INFO("dp " << plan.dp << " ep " << ep << " cp " << plan.cp << " tp " << tp << " pp " << pp
                     << " " << to_string(dispatcher) << " zero " << plan.zero_stage << " imbalance "
                     << plan.moe_imbalance);
          test::check_folded_and_full(model, plan);
        }
      }
    }
  }
}

// Model FLOPs count each token's k active experts (Megatron-LM's accounting): the same however
// the experts are split and however skewed the routing, which makes the busiest rank compute
// more rows (the hardware FLOPs, every rank priced as the busiest) but not the model more work.
TEST_CASE("model FLOPs do not depend on ep, the dispatcher or the imbalance", "[plan][moe][ep]") {
  const ModelSpec model = moe_model();
  const double base =
      test::compile_checked(model, ep_plan(4, 1, 2, 1, MoeDispatcher::kAllGather)).flops.model;
  for (const int64_t ep : {1, 2, 4}) {
    for (const MoeDispatcher dispatcher : {MoeDispatcher::kAllGather, MoeDispatcher::kAllToAll}) {
      for (const double imbalance : {1.0, 2.5}) {
        ParallelPlan plan = ep_plan(4, ep, 2, 1, dispatcher);
        plan.moe_imbalance = imbalance;
        INFO("ep " << ep << " " << to_string(dispatcher) << " imbalance " << imbalance);
        const CompiledPlan compiled = test::compile_checked(model, plan);
        CHECK(compiled.flops.model == Approx(base).epsilon(1e-6));
        if (ep > 1 && imbalance > 1) CHECK(compiled.flops.hardware > compiled.flops.model * 1.01);
      }
    }
  }
}

// With ep 4 of dp 8 (ZeRO 1), each MoE layer's local experts (2 of 8, up 2 x 256 x 128 and down
// 128 x 256 each) are reduced over the 2 ranks holding the same experts, the rest of the
// parameters over all 8; the optimizer's states are sharded the same way.
TEST_CASE("the experts' gradients and states go over the expert-data-parallel group",
          "[plan][moe][ep]") {
  const ModelSpec model = moe_model();
  ParallelPlan plan = ep_plan(8, 4, 1, 1, MoeDispatcher::kAllToAll);
  plan.zero_stage = 1;
  const CompiledPlan compiled = test::compile_checked(model, plan, GraphMode::kFull);
  const TaskGraph& graph = compiled.graph;
  const int64_t experts_per_layer = 2 * (2 * 256 * 128 + 128 * 256);
  const int64_t expert_params = 3 * experts_per_layer;  // 3 MoE layers
  const int64_t all_params = stage_parameters(model, plan).front();
  CHECK(stage_expert_parameters(model, plan).front() == expert_params);
  const int64_t grad_bytes = state_bytes_per_parameter(plan.dtype, plan.precision).grads;
  int64_t dense_bytes = 0;
  int64_t expert_bytes = 0;
  size_t expert_group_size = 0;
  for (const Task& t : graph.tasks()) {
    if (t.rank != 0 || t.role != TaskRole::kGradSync) continue;
    const CommGroup& group = graph.group(t.group);
    if (group.kind == GroupKind::kExpertDp) {
      expert_bytes += t.bytes;
      expert_group_size = group.ranks.size();
    } else {
      CHECK(group.kind == GroupKind::kDp);
      CHECK(group.ranks.size() == 8);
      dense_bytes += t.bytes;
    }
  }
  CHECK(expert_group_size == 2);
  CHECK(expert_bytes == expert_params * grad_bytes);
  CHECK(dense_bytes == (all_params - expert_params) * grad_bytes);
  const int64_t optimizer = state_bytes_per_parameter(plan.dtype, plan.precision).optimizer;
  CHECK(compiled.memory.stages.front().at_peak.optimizer ==
        sharded((all_params - expert_params) * optimizer, 8) +
            sharded(expert_params * optimizer, 2));
}

// Symmetry folding over the ep axis: the folded rank (ep coordinate 0) is the busiest, and its
// all-to-all images share links as the full graph's members do.
TEST_CASE("folded and full expert-parallel graphs agree within 1% on step time",
          "[sim][moe][ep][folding]") {
  const ModelSpec model = moe_model();
  for (const MoeDispatcher dispatcher : {MoeDispatcher::kAllGather, MoeDispatcher::kAllToAll}) {
    for (const double imbalance : {1.0, 3.0}) {
      ParallelPlan plan = ep_plan(8, 4, 2, 2, dispatcher);
      plan.moe_imbalance = imbalance;
      plan.cp = imbalance > 1 ? 2 : 1;  // and context parallelism beside the experts
      plan.zero_stage = 1;
      const double folded =
          simulate(test::compile_checked(model, plan, GraphMode::kFolded, "dgx-h100")).step_time_s;
      const SimResult full =
          simulate(test::compile_checked(model, plan, GraphMode::kFull, "dgx-h100"));
      INFO(to_string(dispatcher) << " imbalance " << imbalance << " cp " << plan.cp << ": folded "
                                 << folded << " s, full " << full.step_time_s << " s");
      CHECK(std::abs(folded / full.step_time_s - 1) <= 0.01);
      CHECK(full.comm_s.ep > 0);
    }
  }
}

// Skewed routing costs time: the busiest rank computes more rows and receives more bytes (a model
// wide enough that its expert GEMMs are not launch-bound: h 1024, experts of 4096, s 2048).
TEST_CASE("imbalanced routing slows the step", "[sim][moe][ep]") {
  ModelSpec model = moe_model();
  model.hidden = 1024;
  model.heads = model.kv_heads = 8;
  model.ffn_hidden = model.expert_ffn_hidden = 4096;
  model.max_seq = 2048;
  for (const MoeDispatcher dispatcher : {MoeDispatcher::kAllGather, MoeDispatcher::kAllToAll}) {
    ParallelPlan plan = ep_plan(8, 4, 2, 1, dispatcher);
    plan.seq_len = 2048;
    const double balanced = simulate(test::compile_checked(model, plan)).step_time_s;
    plan.moe_imbalance = 3;
    const double skewed = simulate(test::compile_checked(model, plan)).step_time_s;
    INFO(to_string(dispatcher) << ": balanced " << balanced << " s, skewed " << skewed << " s");
    CHECK(skewed > balanced * 1.05);
  }
}

// A balanced MoE of one expert taken by every token (top-1) is the dense model with that FFN plus
// the MoE layer's own work, which Megatron-Core runs even for one expert: the router's h-wide
// product, the routing (softmax and top-k) and the token permutation and its inverse, each a copy
// of the rank's rows. Llama 3 8B's layer shape (4 layers, s 4096, 2 micro-batches) on dgx-h100 at
// tp 1: the MoE step is the dense step plus those ops' times (within 3% of the
// difference), about 1% of the step. The "within 0.5%" is therefore not met, by that
// mechanism; at tp 2 the difference stays under 1.5%.
TEST_CASE("a one-expert top-1 MoE steps as the dense model plus its routing and permutations",
          "[sim][moe]") {
  const ModelSpec dense = test::llama3_8b_layers(4);
  const ModelSpec moe = test::one_expert_moe(dense);
  const ClusterSpec cluster = load_cluster("dgx-h100");
  const DeviceEfficiency efficiency = efficiency_for(cluster.device, std::nullopt);
  for (const int64_t tp : {1, 2}) {
    for (const MoeDispatcher dispatcher : {MoeDispatcher::kAllGather, MoeDispatcher::kAllToAll}) {
      ParallelPlan plan = test::make_plan(1, tp, 1, 1, 2, 4096);
      plan.sequence_parallel = tp > 1;
      plan.moe_dispatcher = dispatcher;
      const double a =
          simulate(test::compile_checked(dense, plan, GraphMode::kFolded, "dgx-h100")).step_time_s;
      const double b =
          simulate(test::compile_checked(moe, plan, GraphMode::kFolded, "dgx-h100")).step_time_s;
      INFO("tp " << tp << " " << to_string(dispatcher) << ": dense " << a << " s, MoE " << b
                 << " s");
      CHECK(b > a);
      CHECK(b / a - 1 <= 0.015);
      if (tp > 1) continue;
      const PlanOpShapes ops = plan_op_shapes(moe, plan);
      TimeNs own_ns = 0;
      for (const OpShapePair* pair : {&ops.router, &ops.routing, &ops.permute, &ops.unpermute}) {
        own_ns += compute_time_ns(cluster.device, efficiency, pair->forward) +
                  compute_time_ns(cluster.device, efficiency, pair->backward);
      }
      const double expected = static_cast<double>(2 * 4 * own_ns) * 1e-9;
      INFO("the MoE layers' own ops: " << expected << " s");
      CHECK(b - a == Approx(expected).epsilon(0.03));
    }
  }
}

}  // namespace
}  // namespace strata
