// The communication the lowering emits, against facts stated in the papers
// (data/reference/stated_facts.csv and the Megatron-LM papers).

#include <catch2/catch.hpp>

#include "plan/framework.hpp"
#include "tests/plan/plan_fixtures.hpp"
#include "tests/reference_csv.hpp"

namespace strata {
namespace {

// Data-parallel volume one rank moves per step, in bytes of the (unsharded) buffers: an
// all-reduce is a reduce-scatter plus an all-gather, so it counts twice.
int64_t dp_volume_bytes(const TaskGraph& graph) {
  int64_t bytes = 0;
  for (const Task& t : graph.tasks()) {
    if (t.kind != TaskKind::kCollective || t.rank != 0) continue;
    if (t.role != TaskRole::kGradSync && t.role != TaskRole::kParamGather) continue;
    bytes += t.collective == CollectiveKind::kAllReduce ? 2 * t.bytes : t.bytes;
  }
  return bytes;
}

// ZeRO paper Sec. 7 (stated_facts.csv, "communication volume"): 2 Psi per step for plain DP,
// Pos and Pos+g (a reduce-scatter of gradients and an all-gather of parameters), 3 Psi for
// Pos+g+p (parameters gathered for the forward and again for the backward), with one
// micro-batch per step. The paper's gradients are 16-bit, as DeepSpeed's; Megatron-LM reduces
// fp32 main gradients under bf16, so its reduce-scatter moves twice the bytes.
TEST_CASE("data-parallel volume per step is 2 Psi, or 3 Psi with ZeRO-3",
          "[communication][reference]") {
  bool stated = false;
  for (const auto& row : test::read_reference_csv("stated_facts.csv")) {
    if (row.at("topic") == "zero" && row.at("quantity") == "communication volume") {
      CHECK(row.at("value") == "2*Psi (DP, Pos, Pos+g); 3*Psi (Pos+g+p)");
      stated = true;
    }
  }
  REQUIRE(stated);
  const ModelSpec model = test::small_model(4, 256, 8, 512, 128);
  const int64_t psi_bytes = 2 * count_parameters(model).total;  // 16-bit gradients/parameters
  for (const int64_t zero : {0, 1, 2, 3}) {
    INFO("zero " << zero);
    ParallelPlan plan = apply_framework(test::make_plan(4, 1, 1, 1, 4, 128), Framework::kDeepSpeed);
    plan.zero_stage = zero;
    const CompiledPlan compiled = test::compile_checked(model, plan);
    REQUIRE(compiled.validation.ok());
    // ZeRO-3 on one stage gathers a tied embedding table again for the LM head's forward and
    // backward (DeepSpeed fetches a shared parameter for each module that uses it).
    const int64_t table_bytes = model.tied_embeddings ? 2 * model.vocab * model.hidden : 0;
    CHECK(dp_volume_bytes(compiled.graph) ==
          (zero == 3 ? 3 * psi_bytes + 2 * table_bytes : 2 * psi_bytes));
  }
  ParallelPlan megatron = test::make_plan(4, 1, 1, 1, 4, 128);
  megatron.zero_stage = 1;
  CHECK(dp_volume_bytes(test::compile_checked(model, megatron).graph) == psi_bytes * 2 + psi_bytes);
}

// Megatron-LM (Narayanan et al. 2021, Sec. 3.3 / Shoeybi et al. 2019): tensor parallelism costs
// two all-reduces per layer in the forward and two in the backward; full recompute repeats the
// forward's two. With sequence parallelism each forward all-reduce becomes an all-gather and a
// reduce-scatter (Korthikanti et al. 2022, Sec. 4.2.2), and the backward gathers again.
TEST_CASE("TP collectives per layer and micro-batch", "[communication]") {
  const ModelSpec model = test::small_model(4, 256, 8, 512, 128);
  struct Case {
    bool sequence_parallel;
    RecomputeKind recompute;
    int all_reduces;
    int all_gathers;
    int reduce_scatters;
  };
  const Case cases[] = {{false, RecomputeKind::kNone, 4, 0, 0},
                        {false, RecomputeKind::kSelective, 4, 0, 0},
                        {false, RecomputeKind::kFull, 6, 0, 0},
                        {true, RecomputeKind::kNone, 0, 6, 4},
                        {true, RecomputeKind::kFull, 0, 8, 6}};
  for (const Case& c : cases) {
    INFO("sp " << c.sequence_parallel << " recompute " << to_string(c.recompute));
    ParallelPlan plan = test::make_plan(1, 4, 1, 1, 2, 128);
    plan.sequence_parallel = c.sequence_parallel;
    plan.recompute = c.recompute;
    const CompiledPlan compiled = test::compile_checked(model, plan);
    int counts[3] = {0, 0, 0};
    for (const Task& t : compiled.graph.tasks()) {
      if (t.kind != TaskKind::kCollective || t.layer != 1 || t.micro_batch != 0) continue;
      if (t.collective == CollectiveKind::kAllReduce) ++counts[0];
      if (t.collective == CollectiveKind::kAllGather) ++counts[1];
      if (t.collective == CollectiveKind::kReduceScatter) ++counts[2];
    }
    CHECK(counts[0] == c.all_reduces);
    CHECK(counts[1] == c.all_gathers);
    CHECK(counts[2] == c.reduce_scatters);
  }
}

// 1F1B pipelines send each micro-batch's activations forward and its gradient back across every
// stage boundary: 2 (p - 1) m messages, each s b h elements of 2 bytes.
TEST_CASE("pipeline messages per step", "[communication]") {
  const ModelSpec model = test::small_model(8, 256, 8, 512, 128);
  for (const int64_t pp : {2, 4, 8}) {
    const ParallelPlan plan = test::make_plan(1, 1, pp, 2, 16, 128);
    const CompiledPlan compiled = test::compile_checked(model, plan);
    int64_t sends = 0;
    for (const Task& t : compiled.graph.tasks()) {
      if (t.kind == TaskKind::kP2p && t.p2p == P2pKind::kSend) {
        ++sends;
        CHECK(t.bytes == 2 * 128 * 2 * 256);
      }
    }
    CHECK(sends == 2 * (pp - 1) * plan.micro_batches());
  }
}

// ZeRO-3 prefetches one block ahead: at most two layers' parameters are gathered at once.
TEST_CASE("ZeRO-3 keeps at most two gathered layers alive", "[communication][memory]") {
  const ModelSpec model = test::small_model(4, 256, 8, 512, 128);
  ParallelPlan plan = test::make_plan(4, 1, 1, 1, 8, 128);
  plan.zero_stage = 3;
  const CompiledPlan compiled = test::compile_checked(model, plan);
  const int64_t layer_bytes = 2 * count_parameters(model).per_layer;
  int64_t live = 0;
  int64_t peak = 0;
  for (const Task& t : compiled.graph.tasks()) {
    if (t.kind != TaskKind::kMemory || t.buffer != BufferClass::kGatheredParams) continue;
    live += t.memory == MemoryAction::kAlloc ? t.bytes : -t.bytes;
    peak = std::max(peak, live);
  }
  CHECK(live == 0);
  CHECK(peak >= 2 * layer_bytes);
  const int64_t edge_bytes =
      2 * (count_parameters(model).total - 4 * count_parameters(model).per_layer);
  CHECK(peak <= 2 * layer_bytes + edge_bytes);
}

}  // namespace
}  // namespace strata
