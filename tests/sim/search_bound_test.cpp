// The lower bounds the search prunes by (sim/step_bound.hpp, plan/memory_plan.hpp) against what
// they bound: a bound above the simulated step, or above the memory plan's peak, would let the
// search skip a plan that belongs in the top K.

#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "plan/memory_plan.hpp"
#include "sim/step_bound.hpp"
#include "tests/sim/search_fixtures.hpp"

namespace strata {
namespace {

using test::describe;
using test::simulate_directly;

struct BoundCase {
  std::string model;
  std::string cluster;
  ParallelPlan plan;
};

ParallelPlan plan_of(int64_t dp, int64_t tp, int64_t pp, ScheduleKind schedule, int64_t vpp,
                     int64_t zero_stage, RecomputeKind recompute, bool sequence_parallel,
                     int64_t micro_batch, int64_t global_batch, int64_t seq_len) {
  ParallelPlan p;
  p.dp = dp;
  p.tp = tp;
  p.pp = pp;
  p.schedule = schedule;
  p.vpp = vpp;
  p.zero_stage = zero_stage;
  p.recompute = recompute;
  p.sequence_parallel = sequence_parallel;
  p.micro_batch = micro_batch;
  p.global_batch = global_batch;
  p.seq_len = seq_len;
  return p;
}

// 32 small plans over both bounds' terms: tp 1/2/4/8 (TP collectives on the compute chain), pp
// 1/2/4 under 1F1B, interleaved (vpp 2, 3, 4) and GPipe (fill, drain, stored micro-batches),
// ZeRO 0-3 (DP stream and optimizer tail), recompute none/selective/full, sequence parallelism on
// and off, micro-batch 1 and 2, layouts inside one node and across 2 or 4 nodes (8 GPUs per node),
// bf16 and fp32; GPT-2 124M (12 layers), tiny-gpt (4) and Llama 3 8B (32, GQA) at short sequences
// on H100s and A100s; MoE models with and without expert parallelism (below).
std::vector<BoundCase> bound_cases() {
  constexpr auto k1f1b = ScheduleKind::k1F1B;
  constexpr auto kInter = ScheduleKind::kInterleaved;
  constexpr auto kGpipe = ScheduleKind::kGpipe;
  constexpr auto kNone = RecomputeKind::kNone;
  constexpr auto kSel = RecomputeKind::kSelective;
  constexpr auto kFull = RecomputeKind::kFull;
  std::vector<BoundCase> cases{
      {"gpt2-124m", "dgx-h100", plan_of(8, 1, 1, k1f1b, 1, 0, kNone, false, 1, 16, 1024)},
      {"gpt2-124m", "dgx-h100", plan_of(4, 2, 1, k1f1b, 1, 1, kSel, true, 2, 16, 1024)},
      {"gpt2-124m", "dgx-h100", plan_of(2, 4, 1, k1f1b, 1, 2, kFull, true, 1, 8, 1024)},
      {"gpt2-124m", "dgx-h100", plan_of(2, 2, 2, k1f1b, 1, 3, kNone, false, 1, 16, 1024)},
      {"gpt2-124m", "dgx-h100", plan_of(2, 1, 4, kInter, 3, 1, kSel, false, 1, 16, 1024)},
      {"gpt2-124m", "dgx-h100", plan_of(1, 2, 4, kGpipe, 1, 0, kFull, true, 2, 16, 1024)},
      {"gpt2-124m", "dgx-a100", plan_of(4, 1, 2, kInter, 2, 2, kNone, false, 2, 32, 1024)},
      {"gpt2-124m", "dgx-a100", plan_of(16, 1, 1, k1f1b, 1, 3, kSel, false, 2, 32, 1024)},
      {"gpt2-124m", "dgx-a100", plan_of(2, 4, 2, k1f1b, 1, 1, kSel, true, 1, 8, 1024)},
      {"gpt2-124m", "dgx-a100", plan_of(1, 4, 4, kInter, 3, 0, kNone, true, 1, 8, 1024)},
      {"tiny-gpt", "dgx-h100", plan_of(2, 2, 2, k1f1b, 1, 0, kNone, false, 1, 8, 256)},
      {"tiny-gpt", "dgx-h100", plan_of(1, 8, 1, k1f1b, 1, 0, kSel, true, 2, 8, 256)},
      {"tiny-gpt", "dgx-h100", plan_of(4, 1, 2, kGpipe, 1, 2, kFull, false, 1, 16, 256)},
      {"tiny-gpt", "dgx-a100", plan_of(2, 2, 2, kInter, 2, 3, kSel, true, 1, 8, 256)},
      {"tiny-gpt", "dgx-a100", plan_of(8, 1, 1, k1f1b, 1, 1, kNone, false, 2, 16, 256)},
      {"tiny-gpt", "dgx-a100", plan_of(1, 4, 4, k1f1b, 1, 0, kFull, true, 1, 8, 256)},
      {"tiny-gpt", "dgx-a100", plan_of(2, 1, 4, kGpipe, 1, 1, kNone, false, 2, 16, 256)},
      {"llama3-8b", "dgx-h100", plan_of(1, 8, 1, k1f1b, 1, 0, kSel, true, 1, 4, 512)},
      {"llama3-8b", "dgx-h100", plan_of(2, 4, 2, kInter, 2, 1, kSel, true, 1, 8, 512)},
      {"llama3-8b", "dgx-h100", plan_of(2, 2, 4, k1f1b, 1, 2, kFull, true, 1, 8, 512)},
      {"llama3-8b", "dgx-h100", plan_of(2, 8, 2, kInter, 4, 1, kSel, true, 1, 8, 512)},
      {"llama3-8b", "dgx-a100", plan_of(1, 8, 2, k1f1b, 1, 0, kNone, true, 1, 8, 512)},
      {"llama3-8b", "dgx-a100", plan_of(4, 2, 1, k1f1b, 1, 3, kSel, false, 1, 8, 512)},
      {"llama3-8b", "dgx-a100", plan_of(1, 4, 4, kGpipe, 1, 0, kSel, true, 2, 8, 512)},
  };
  BoundCase fp32{"gpt2-124m", "dgx-h100", plan_of(8, 1, 1, k1f1b, 1, 1, kNone, false, 1, 8, 512)};
  fp32.plan.dtype = DType::kFp32;
  cases.push_back(fp32);
  // MoE layers (their routed experts, shared experts and the experts' own data-parallel group):
  // Mixtral 8x7B and Qwen1.5-MoE (shared experts behind a gate, 60 experts) with expert
  // parallelism under both dispatchers, and Mixtral at ep 1; ZeRO 3 with the experts gathered
  // over their own 2 ranks (Mixtral, ep 4 of dp 8), and with them whole on each rank (Qwen, ep 4
  // of dp 4).
  const auto moe = [&](const char* family, ParallelPlan plan, int64_t ep,
                       MoeDispatcher dispatcher) {
    plan.ep = ep;
    plan.moe_dispatcher = dispatcher;
    cases.push_back({std::string(STRATA_SOURCE_DIR) + "/tests/models/data/" + family + ".json",
                     "dgx-h100", plan});
  };
  constexpr auto kGather = MoeDispatcher::kAllGather;
  constexpr auto kToAll = MoeDispatcher::kAllToAll;
  moe("mixtral-8x7b", plan_of(8, 1, 4, k1f1b, 1, 1, kNone, false, 1, 16, 512), 8, kToAll);
  moe("mixtral-8x7b", plan_of(4, 2, 4, kInter, 2, 1, kSel, true, 1, 16, 512), 4, kGather);
  moe("mixtral-8x7b", plan_of(2, 4, 4, k1f1b, 1, 0, kFull, true, 1, 8, 512), 1, kGather);
  moe("qwen1.5-moe-a2.7b", plan_of(8, 2, 1, k1f1b, 1, 2, kNone, true, 1, 16, 512), 4, kToAll);
  moe("qwen1.5-moe-a2.7b", plan_of(4, 1, 2, kGpipe, 1, 1, kSel, false, 2, 16, 512), 2, kGather);
  moe("mixtral-8x7b", plan_of(8, 1, 2, k1f1b, 1, 3, kNone, false, 1, 16, 512), 4, kToAll);
  moe("qwen1.5-moe-a2.7b", plan_of(4, 2, 1, k1f1b, 1, 3, kSel, true, 1, 8, 512), 4, kGather);
  return cases;
}

std::string describe(const BoundCase& c) {
  return fmt::format("{} on {} ({} GPUs): {}, ep {} {}", c.model, c.cluster, c.plan.gpus(),
                     describe(c.plan), c.plan.ep, to_string(c.plan.moe_dispatcher));
}

// sim/step_bound.hpp: every term of the bound is work the simulated step cannot avoid, so
//   bound <= simulate(compile_plan(..., kFolded)).step_time_s   for every plan;
// and it leaves out only pipeline messages and the overlap of communication with compute, so it
// is not vacuous: bound >= 0.5 x step (a bound of 0 would pass the first check and prune nothing).
TEST_CASE("the step-time bound is at most the simulated step and at least half of it",
          "[search][bound]") {
  double worst_ratio = 1;
  std::string worst;
  for (const BoundCase& c : bound_cases()) {
    const ModelSpec model = load_model(c.model);
    const ClusterSpec cluster = load_cluster(c.cluster);
    const double step_s = simulate_directly(model, cluster, c.plan).result.step_time_s;
    StepBoundModel bounds(model, cluster, std::nullopt);
    const double bound_s = static_cast<double>(bounds.step_lower_bound_ns(c.plan)) * 1e-9;
    const double ratio = bound_s / step_s;
    INFO(fmt::format("{}: bound {:.9f} s, simulated step {:.9f} s, ratio {:.3f}", describe(c),
                     bound_s, step_s, ratio));
    CHECK(bound_s <= step_s);
    CHECK(ratio >= 0.5);
    if (ratio < worst_ratio) {
      worst_ratio = ratio;
      worst = describe(c);
    }
  }
  WARN(fmt::format("the loosest step-time bound: {:.3f} x the simulated step, for {}", worst_ratio,
                   worst));
}

// The same bound with DeepSeek's latent attention (sim/step_bound.cpp counts its projections in
// place of the QKV product, and leaves out its latents' TP collectives): a dense latent-attention
// model of 4 layers shaped as DeepSeek-V2's attention (h 2048, 16 heads of 128 + 64 query-key and
// 128 value dimensions, a key-value latent of 512 and, with a query latent, one of 768), with and
// without a query latent, sequence parallelism on and off.
TEST_CASE("the step-time bound holds with latent attention", "[search][bound][mla]") {
  ModelSpec model = load_model("tiny-llama");
  model.hidden = 2048;
  model.heads = model.kv_heads = 16;
  model.ffn_hidden = 5632;
  model.kv_lora_rank = 512;
  model.qk_nope_head_dim = 128;
  model.qk_rope_head_dim = 64;
  model.v_head_dim = 128;
  const ClusterSpec cluster = load_cluster("dgx-h100");
  for (const int64_t q_lora_rank : {int64_t{768}, int64_t{0}}) {
    model.q_lora_rank = q_lora_rank;
    validate_model(model, "test");
    for (const bool sp : {true, false}) {
      const ParallelPlan plan =
          plan_of(2, 2, 2, ScheduleKind::k1F1B, 1, 1, RecomputeKind::kSelective, sp, 1, 8, 2048);
      const double step_s = simulate_directly(model, cluster, plan).result.step_time_s;
      StepBoundModel bounds(model, cluster, std::nullopt);
      const double bound_s = static_cast<double>(bounds.step_lower_bound_ns(plan)) * 1e-9;
      INFO(fmt::format("q_lora_rank {} sp {}: bound {:.9f} s, simulated step {:.9f} s", q_lora_rank,
                       sp, bound_s, step_s));
      CHECK(bound_s <= step_s);
      CHECK(bound_s >= 0.5 * step_s);
    }
  }
}

// plan/memory_plan.hpp: the lower bound counts the model states and the activations the layers
// store for the micro-batches in flight when the first backward starts, all of which the memory
// plan's replay holds at that moment, so
//   model states (largest stage) <= bound <= compile_plan(...).memory.peak_bytes
// for every plan, GPipe (all m micro-batches in flight) and interleaved (a longer warm-up) too.
TEST_CASE("the memory bound lies between the model states and the memory plan's peak",
          "[search][bound][memory]") {
  double worst_ratio = 1;
  std::string worst;
  for (const BoundCase& c : bound_cases()) {
    const ModelSpec model = load_model(c.model);
    const ClusterSpec cluster = load_cluster(c.cluster);
    validate_plan(c.plan, model, c.plan.gpus(), "test");
    const CompiledPlan compiled = compile_plan(model, cluster, c.plan, GraphMode::kFolded);
    const int64_t bound = peak_memory_lower_bound_bytes(model, c.plan);
    int64_t states = 0;
    for (const StageMemory& stage : compiled.memory.stages) {
      states = std::max(
          states, model_state_bytes(stage.parameters, stage.expert_parameters, c.plan).total());
    }
    const double ratio =
        static_cast<double>(bound) / static_cast<double>(compiled.memory.peak_bytes);
    INFO(fmt::format("{}: model states {} B, bound {} B, memory plan peak {} B", describe(c),
                     states, bound, compiled.memory.peak_bytes));
    REQUIRE(states > 0);
    CHECK(states <= bound);
    CHECK(bound <= compiled.memory.peak_bytes);
    if (ratio < worst_ratio) {
      worst_ratio = ratio;
      worst = describe(c);
    }
  }
  WARN(fmt::format("the loosest memory bound: {:.3f} x the memory plan's peak, for {}", worst_ratio,
                   worst));
}

}  // namespace
}  // namespace strata
