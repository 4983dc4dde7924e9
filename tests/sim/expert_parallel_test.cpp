// Expert parallelism (ep > 1) in the task graph and the simulator: the all-to-all dispatcher's
// traffic matrix against its closed form, a grid of plans that the validator passes with folded
// and full graphs agreeing, model FLOPs that do not depend on how the experts are split or how
// skewed the routing is, the experts' gradients reduced over their own data-parallel group and
// their states sharded over it (Megatron-Core's expert_parallel_buffers and expert-data-parallel
// group), and folded step times within 1% of full ones. ZeRO 3 and ZeRO-Offload with ep > 1
// (torchtitan's FSDP2 with its experts sharded over dp x cp / ep, DeepSpeed's expert-data-parallel
// partitions): each MoE layer gathered in two parts, its experts over their own group, and model
// states, gathered buffers and host copies sized by each part's shards.

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
          // ZeRO 0-3, each twice; ZeRO 3 with the experts over one expert-data-parallel rank
          // (dp = ep, cp 1: variants 6 and 14) and over several (7, 15).
          plan.zero_stage = variant / 2 % 4;
          plan.moe_imbalance = variant % 4 == 0 ? 3 : 1;
          plan.overlap.grad_reduce = plan.overlap.param_gather = plan.zero_stage > 0;
          // ZeRO-Offload under ZeRO 1, 2 and 3, and the parameters too under ZeRO 3.
          plan.offload.optimizer = plan.zero_stage > 0 && variant % 3 != 0;
          plan.offload.params = plan.zero_stage == 3 && variant % 4 == 2;
          ++variant;
          INFO("dp " << plan.dp << " ep " << ep << " cp " << plan.cp << " tp " << tp << " pp " << pp
                     << " " << to_string(dispatcher) << " zero " << plan.zero_stage << " imbalance "
                     << plan.moe_imbalance << " offload optimizer " << plan.offload.optimizer
                     << " params " << plan.offload.params);
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

// Bytes of rank 0's tasks of `role` on groups of `kind`, and those groups' size (0: none).
struct RoleBytes {
  int64_t bytes = 0;
  int64_t tasks = 0;
  size_t group_size = 0;
};
RoleBytes role_bytes(const TaskGraph& graph, TaskRole role, GroupKind kind) {
  RoleBytes found;
  for (const Task& t : graph.tasks()) {
    if (t.rank != 0 || t.role != role || t.kind != TaskKind::kCollective) continue;
    const CommGroup& group = graph.group(t.group);
    if (group.kind != kind) continue;
    found.bytes += t.bytes;
    ++found.tasks;
    found.group_size = group.ranks.size();
  }
  return found;
}

// ZeRO 3 with ep 4 of dp 8 (torchtitan's FSDP2 units: the block over dp, its experts over
// dp / ep = 2; DeepSpeed's expert_data_parallel_group likewise). moe_model's layers at h 128:
// a dense layer qkv 128 x 384 + out 128 x 128 + 2 norms of 128 + SwiGLU 2 x 512 x 128 + 512 x 128
// = 262,400; an MoE layer's attention and norms 65,792 + router 8 x 128 = 66,816 dense and its 2
// local experts 2 x (2 x 256 x 128 + 128 x 256) = 196,608; embedding 256 x 128 and head
// 128 + 256 x 128. The rank holds 262,400 + 3 x 66,816 + 65,664 = 528,512 dense parameters,
// sharded 8 ways, and 3 x 196,608 = 589,824 experts', sharded 2 ways: 2-byte parameters
// 132,128 + 589,824 = 721,952 bytes. Each MoE layer's pass gathers twice: its 66,816 dense
// parameters (133,632 bytes) over the 8 data-parallel ranks, then its 196,608 experts' (393,216
// bytes) over the 2 expert-data-parallel ranks; 4 micro-batches x 2 passes x 3 MoE layers = 24
// experts' gathers. Each micro-batch's gradients are reduce-scattered the same way.
TEST_CASE("ZeRO 3 with ep 4 of dp 8 shards and gathers the experts over their 2 ranks",
          "[plan][moe][ep][zero]") {
  const ModelSpec model = moe_model();
  ParallelPlan plan = ep_plan(8, 4, 1, 1, MoeDispatcher::kAllToAll);
  plan.zero_stage = 3;
  REQUIRE(plan.micro_batches() == 4);
  const CompiledPlan compiled = test::compile_checked(model, plan, GraphMode::kFull);
  for (const auto& error : compiled.validation.errors) FAIL_CHECK(error);
  const TaskGraph& graph = compiled.graph;
  const int64_t dense_params = 528512;
  const int64_t expert_params = 589824;
  REQUIRE(stage_parameters(model, plan).front() == dense_params + expert_params);
  REQUIRE(stage_expert_parameters(model, plan).front() == expert_params);

  const StateBytesPerParameter per = state_bytes_per_parameter(plan.dtype, plan.precision);
  REQUIRE(per.params == 2);
  const MemoryBreakdown& at_peak = compiled.memory.stages.front().at_peak;
  CHECK(at_peak.params == 721952);
  CHECK(at_peak.grads == dense_params * per.grads / 8 + expert_params * per.grads / 2);
  CHECK(at_peak.optimizer == dense_params * per.optimizer / 8 + expert_params * per.optimizer / 2);

  // The gathers: the dense layer (524,800 bytes), the MoE layers' dense parts, the embedding and
  // head (65,536 and 65,792 bytes) over dp; the experts over expert dp.
  const RoleBytes dense_gathers = role_bytes(graph, TaskRole::kParamGather, GroupKind::kDp);
  const RoleBytes expert_gathers = role_bytes(graph, TaskRole::kParamGather, GroupKind::kExpertDp);
  CHECK(dense_gathers.group_size == 8);
  CHECK(dense_gathers.bytes == 4 * 2 * dense_params * 2);
  CHECK(expert_gathers.group_size == 2);
  CHECK(expert_gathers.tasks == 24);
  CHECK(expert_gathers.bytes == 24 * 393216);
  int64_t moe_dense_gathers = 0;
  for (const Task& t : graph.tasks()) {
    if (t.rank != 0 || t.role != TaskRole::kParamGather || t.layer < 1) continue;
    if (graph.group(t.group).kind == GroupKind::kDp) {
      CHECK(t.bytes == 133632);
      ++moe_dense_gathers;
    } else {
      CHECK(t.bytes == 393216);
    }
  }
  CHECK(moe_dense_gathers == 24);
  // The gathered buffers hold the whole layer: both parts, allocated and freed per pass.
  int64_t gathered_bytes = 0;
  for (const Task& t : graph.tasks()) {
    if (t.rank == 0 && t.kind == TaskKind::kMemory && t.buffer == BufferClass::kGatheredParams &&
        t.memory == MemoryAction::kAlloc && t.layer >= 1)
      gathered_bytes += t.bytes;
  }
  CHECK(gathered_bytes == 24 * (133632 + 393216));

  // Each micro-batch's gradients reduce-scattered (fp32 main gradients), the experts' over 2.
  const RoleBytes dense_syncs = role_bytes(graph, TaskRole::kGradSync, GroupKind::kDp);
  const RoleBytes expert_syncs = role_bytes(graph, TaskRole::kGradSync, GroupKind::kExpertDp);
  CHECK(dense_syncs.bytes == 4 * dense_params * per.grads);
  CHECK(expert_syncs.bytes == 4 * expert_params * per.grads);
  CHECK(expert_syncs.group_size == 2);
}

// With ep = dp (8, cp 1) each rank holds its experts alone (one expert-data-parallel rank): ZeRO 3
// shards and gathers only the dense parameters, the experts stay whole on the rank and the
// expert GEMMs read them there (no gathered copy, no all-gather); model states count them whole.
// 1 local expert per MoE layer: 3 x (2 x 256 x 128 + 128 x 256) = 294,912 parameters.
TEST_CASE("ZeRO 3 with ep = dp leaves the experts whole and ungathered", "[plan][moe][ep][zero]") {
  const ModelSpec model = moe_model();
  ParallelPlan plan = ep_plan(8, 8, 1, 1, MoeDispatcher::kAllToAll);
  plan.zero_stage = 3;
  const CompiledPlan compiled = test::compile_checked(model, plan);
  for (const auto& error : compiled.validation.errors) FAIL_CHECK(error);
  const TaskGraph& graph = compiled.graph;
  const int64_t expert_params = 294912;
  const int64_t dense_params = 528512;
  REQUIRE(stage_expert_parameters(model, plan).front() == expert_params);
  CHECK(compiled.memory.stages.front().at_peak.params == dense_params * 2 / 8 + expert_params * 2);
  for (const Task& t : graph.tasks()) {
    if (t.kind == TaskKind::kCollective) CHECK(graph.group(t.group).kind != GroupKind::kExpertDp);
    if (t.kind == TaskKind::kMemory && t.buffer == BufferClass::kGatheredParams && t.layer >= 1)
      CHECK(t.bytes == 133632);  // an MoE layer's dense parameters
  }
  bool expert_weights_read = false;
  for (size_t id = 0; id < graph.tasks().size(); ++id) {
    const Task& t = graph.task(static_cast<TaskId>(id));
    if (t.role != TaskRole::kExpertUp || t.phase != Phase::kForward) continue;
    for (const TensorUse use : graph.uses(static_cast<TaskId>(id))) {
      const std::string name = tensor_name(graph, graph.tensor(use.tensor()));
      CHECK(name.find("experts_up_w gathered") == std::string::npos);
      if (name.find("experts_up_w") != std::string::npos) expert_weights_read = true;
    }
  }
  CHECK(expert_weights_read);
}

// ZeRO-Offload with ep 4 of dp 8 (ZeRO 3, optimizer and parameters on the host; DeepSpeed keeps
// each partition on the host in its own group's shard): per MoE layer pass the experts' shard
// comes up from the host, 393,216 / 2 = 196,608 bytes, beside the dense part's 133,632 / 8 =
// 16,704; each micro-batch's reduced gradient shards go down, the experts' 1/2 and the rest's 1/8
// of their fp32 bytes; the host holds optimizer states and fp32 gradients by the same shards.
// With ep = dp the experts' gradients, not reduced, still go down whole.
TEST_CASE("ZeRO-Offload with ep moves each part's own shard", "[plan][moe][ep][zero][offload]") {
  const ModelSpec model = moe_model();
  const int64_t dense_params = 528512;
  for (const int64_t ep : {4, 8}) {
    ParallelPlan plan = ep_plan(8, ep, 1, 1, MoeDispatcher::kAllToAll);
    plan.zero_stage = 3;
    plan.offload.optimizer = plan.offload.params = true;
    const CompiledPlan compiled = test::compile_checked(model, plan);
    for (const auto& error : compiled.validation.errors) FAIL_CHECK(error);
    const TaskGraph& graph = compiled.graph;
    const int64_t expert_shards = 8 / ep;
    const int64_t expert_params = stage_expert_parameters(model, plan).front();
    const int64_t expert_layer_bytes = expert_params / 3 * 2;
    INFO("ep " << ep);
    int64_t expert_copies = 0;
    int64_t to_host = 0;
    for (const Task& t : graph.tasks()) {
      if (t.kind != TaskKind::kCopy) continue;
      if (t.role == TaskRole::kGradToHost) to_host += t.bytes;
      if (t.role == TaskRole::kParamsToDevice && t.layer >= 1 &&
          t.bytes == expert_layer_bytes / expert_shards)
        ++expert_copies;
    }
    CHECK(expert_copies == 24);
    const StateBytesPerParameter per = state_bytes_per_parameter(plan.dtype, plan.precision);
    CHECK(to_host ==
          4 * (dense_params * per.grads / 8 + expert_params * per.grads / expert_shards));
    CHECK(compiled.memory.host_bytes ==
          (dense_params / 8 + expert_params / expert_shards) * (per.optimizer + 4 + per.params));
    const MemoryBreakdown& at_peak = compiled.memory.stages.front().at_peak;
    CHECK(at_peak.params + at_peak.grads + at_peak.optimizer == 0);
  }
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

// The same under ZeRO 3 with ep 4 of dp 8 (the experts gathered over their 2 ranks beside the
// dense parts over 8), and with the optimizer and parameters offloaded.
TEST_CASE("folded and full ZeRO 3 expert-parallel graphs agree within 1% on step time",
          "[sim][moe][ep][zero][folding]") {
  const ModelSpec model = moe_model();
  for (const bool offload : {false, true}) {
    ParallelPlan plan = ep_plan(8, 4, 2, 2, MoeDispatcher::kAllToAll);
    plan.zero_stage = 3;
    plan.offload.optimizer = plan.offload.params = offload;
    const double folded =
        simulate(test::compile_checked(model, plan, GraphMode::kFolded, "dgx-h100")).step_time_s;
    const SimResult full =
        simulate(test::compile_checked(model, plan, GraphMode::kFull, "dgx-h100"));
    INFO("offload " << offload << ": folded " << folded << " s, full " << full.step_time_s << " s");
    CHECK(std::abs(folded / full.step_time_s - 1) <= 0.01);
    CHECK(full.comm_s.dp > 0);
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
