// Activation memory derived from the task graph's memory tasks against Korthikanti et al. 2022
// (data/reference/activation_memory_formulas.csv), for the GPT-3 175B configuration of
// korthikanti2022.csv (a 96, h 12288, s 2048, b 1, t 8, L 96, p 8). The paper's formulas are for
// the unfused attention Megatron-LM ran then (plan.attention = unfused); under flash attention the
// 5as/h term of the stored scores gives way to the fp32 log-sum-exp, 4abs/t bytes (Dao et al.
// 2022).

#include <catch2/catch.hpp>

#include <map>

#include "plan/activation_memory.hpp"
#include "tests/plan/plan_fixtures.hpp"
#include "tests/reference_csv.hpp"

namespace strata {
namespace {

constexpr double s = 2048, b = 1, h = 12288, a = 96;

// The formula rows, keyed by configuration; the test also checks the CSV still holds the
// expression transcribed below, so an edit of the reference file cannot go unnoticed.
std::map<std::string, std::string> formula_expressions() {
  std::map<std::string, std::string> expressions;
  for (const auto& row : test::read_reference_csv("activation_memory_formulas.csv")) {
    expressions[row.at("configuration")] = row.at("expression");
  }
  return expressions;
}

ModelSpec gpt3_175b() {
  ModelSpec model = load_model("gpt3-175b");
  model.vocab = 51200;  // korthikanti2022.csv vocab_size
  return model;
}

// Net bytes the graph keeps allocated after layer 0's forward of micro-batch 0 on stage 0:
// what that layer stores for its backward.
int64_t stored_by_layer_zero(const TaskGraph& graph) {
  int64_t bytes = 0;
  for (const Task& t : graph.tasks()) {
    if (t.kind != TaskKind::kMemory || t.rank != 0 || t.layer != 0 || t.micro_batch != 0 ||
        t.phase != Phase::kForward || !counts_as_activations(t.buffer)) {
      continue;
    }
    bytes += t.memory == MemoryAction::kAlloc ? t.bytes : -t.bytes;
  }
  return bytes;
}

struct Case {
  const char* configuration;
  const char* expression;
  int64_t tp;
  bool sequence_parallel;
  RecomputeKind recompute;
  double t;
  double expected;
};

ParallelPlan unfused(ParallelPlan plan) {
  plan.attention = AttentionKind::kUnfused;
  return plan;
}

TEST_CASE("per-layer activation memory from the graph equals Korthikanti's formulas",
          "[memory][reference]") {
  const auto expressions = formula_expressions();
  const double t = 8;
  const Case cases[] = {
      {"no parallelism", "s*b*h*(34 + 5*a*s/h)", 1, false, RecomputeKind::kNone, 1,
       s * b * h * (34 + 5 * a * s / h)},
      {"tensor parallel (baseline)", "s*b*h*(10 + 24/t + 5*a*s/(h*t))", 8, false,
       RecomputeKind::kNone, t, s * b * h * (10 + 24 / t + 5 * a * s / (h * t))},
      {"tensor + sequence parallel", "s*b*h*(34/t + 5*a*s/(h*t))", 8, true, RecomputeKind::kNone, t,
       s * b * h * (34 / t + 5 * a * s / (h * t))},
      {"tensor parallel + selective recompute", "s*b*h*(10 + 24/t)", 8, false,
       RecomputeKind::kSelective, t, s * b * h * (10 + 24 / t)},
      {"tensor + sequence parallel + selective recompute", "s*b*h*34/t", 8, true,
       RecomputeKind::kSelective, t, s * b * h * 34 / t},
      {"full activation recompute", "2*s*b*h", 1, false, RecomputeKind::kFull, 1, 2 * s * b * h},
  };
  const ModelSpec model = gpt3_175b();
  for (const Case& c : cases) {
    INFO(c.configuration);
    REQUIRE(expressions.at(c.configuration) == c.expression);
    ParallelPlan plan = unfused(test::make_plan(1, c.tp, 1, 1, 1, 2048));
    plan.sequence_parallel = c.sequence_parallel;
    plan.recompute = c.recompute;
    const CompiledPlan compiled = test::compile_checked(model, plan);
    REQUIRE(compiled.validation.ok());
    CHECK(static_cast<double>(stored_by_layer_zero(compiled.graph)) ==
          Approx(c.expected).epsilon(0.02));
  }
}

// Flash attention: the same configurations store the formulas without their 5as/h term, plus
// the fp32 log-sum-exp of each of the rank's a/t heads and tokens (4abs/t bytes); selective
// recompute has no scores left to drop, so it stores as much as no recompute.
TEST_CASE("per-layer activation memory under flash attention is sbh(34) without 5as/h, plus lse",
          "[memory][reference]") {
  const double t = 8;
  const Case cases[] = {
      {"no parallelism", "", 1, false, RecomputeKind::kNone, 1, s * b * h * 34 + 4 * a * b * s},
      {"tensor parallel", "", 8, false, RecomputeKind::kNone, t,
       s * b * h * (10 + 24 / t) + 4 * a * b * s / t},
      {"tensor + sequence parallel", "", 8, true, RecomputeKind::kNone, t,
       s * b * h * 34 / t + 4 * a * b * s / t},
      {"tensor + sequence parallel + selective recompute", "", 8, true, RecomputeKind::kSelective,
       t, s * b * h * 34 / t + 4 * a * b * s / t},
  };
  const ModelSpec model = gpt3_175b();
  for (const Case& c : cases) {
    INFO(c.configuration);
    ParallelPlan plan = test::make_plan(1, c.tp, 1, 1, 1, 2048);
    plan.attention = AttentionKind::kFlash;
    plan.sequence_parallel = c.sequence_parallel;
    plan.recompute = c.recompute;
    const CompiledPlan compiled = test::compile_checked(model, plan);
    REQUIRE(compiled.validation.ok());
    CHECK(static_cast<double>(stored_by_layer_zero(compiled.graph)) ==
          Approx(c.expected).epsilon(0.01));
    // Nothing is recomputed: no task of the recompute phase.
    for (const Task& task : compiled.graph.tasks()) CHECK(task.phase != Phase::kRecompute);
  }
}

// torchtitan's op-level policy on Llama 3 8B (h 4096, kv 1024, f 14336, 32 heads, GQA, SwiGLU)
// with s 8192, b 1, no TP: a layer keeps its input, the attention output and the outputs of the
// saved products Q, V, gate and down (every other one of Q K V O gate up down), e sb(h + h + h +
// kv + f + h), plus the fp32 log-sum-exp 4 a s b; before its backward it recomputes the norms, K,
// O, the up product and the activation: matrix FLOPs 2 sb h (kv + h + f) per layer and
// micro-batch, and nothing more is recomputed in the forward.
TEST_CASE("selective-op recompute keeps every other product's output and recomputes the rest",
          "[memory]") {
  const ModelSpec model = load_model("llama3-8b");
  ParallelPlan plan = test::make_plan(1, 1, 1, 1, 1, 8192);
  plan.recompute = RecomputeKind::kSelectiveOp;
  const CompiledPlan compiled = test::compile_checked(model, plan);
  REQUIRE(compiled.validation.ok());
  const double sb = 8192, hh = 4096, kv = 1024, f = 14336, heads = 32;
  CHECK(static_cast<double>(stored_by_layer_zero(compiled.graph)) ==
        2 * sb * (4 * hh + kv + f) + 4 * heads * sb);
  double recomputed_matrix_flops = 0;
  for (const Task& task : compiled.graph.tasks()) {
    if (task.kind != TaskKind::kCompute || task.phase != Phase::kRecompute || task.layer != 0)
      continue;
    const OpShape& op = compiled.graph.op(task.op);
    if (op.kind == OpKind::kMatmul) recomputed_matrix_flops += static_cast<double>(op.flops);
  }
  CHECK(recomputed_matrix_flops == 2 * sb * hh * (kv + hh + f));
  // Refused under the unfused attention, which the policy's SDPA-based save list does not fit.
  plan.attention = AttentionKind::kUnfused;
  CHECK_THROWS_WITH(validate_plan(plan, model, std::nullopt, "test"),
                    Catch::Contains("selective-op"));
}

// Eq. 5: under 1F1B the first stage holds p micro-batches of L/p layers, so its activations are
// sbhL/t (34 + 5as/h) with TP + SP whatever p is; the interleaved schedule multiplies that by
// 1 + (p - 1)/(p m) for m model chunks per stage.
TEST_CASE("first-stage activation peak under 1F1B and interleaved 1F1B (Eq. 5)",
          "[memory][reference]") {
  const auto expressions = formula_expressions();
  REQUIRE(expressions.at("first pipeline stage total (TP+SP, no recompute)") ==
          "s*b*h*L/t*(34 + 5*a*s/h)");
  const double t = 8, L = 96, p = 8;
  const double eq5 = s * b * h * L / t * (34 + 5 * a * s / h);
  ParallelPlan plan = unfused(test::make_plan(1, 8, 8, 1, 64, 2048));
  plan.sequence_parallel = true;
  const ModelSpec model = gpt3_175b();
  {
    const CompiledPlan compiled = test::compile_checked(model, plan);
    REQUIRE(compiled.validation.ok());
    CHECK(static_cast<double>(compiled.memory.stages[0].at_peak.activations) ==
          Approx(eq5).epsilon(0.02));
  }
  {
    plan.schedule = ScheduleKind::kInterleaved;
    plan.vpp = 3;
    const double m = 3;
    const CompiledPlan compiled = test::compile_checked(model, plan);
    REQUIRE(compiled.validation.ok());
    CHECK(static_cast<double>(compiled.memory.stages[0].at_peak.activations) ==
          Approx(eq5 * (1 + (p - 1) / (p * m))).epsilon(0.02));
  }
}

// GPipe keeps every micro-batch's activations until the backward begins: m x (L/p) layers.
TEST_CASE("GPipe holds all micro-batches in flight", "[memory]") {
  ParallelPlan plan = unfused(test::make_plan(1, 8, 8, 1, 16, 2048));
  plan.sequence_parallel = true;
  plan.schedule = ScheduleKind::kGpipe;
  const ModelSpec model = gpt3_175b();
  const CompiledPlan compiled = test::compile_checked(model, plan);
  const double per_layer = s * b * h * (34 / 8.0 + 5 * a * s / (h * 8));
  CHECK(static_cast<double>(compiled.memory.stages[0].at_peak.activations) ==
        Approx(16 * 12 * per_layer).epsilon(0.001));
}

// NVIDIA's Llama 3 8B example (Megatron-LM examples/llama/train_llama3_8b_h100_fp8.sh): tp 1,
// pp 1, 8 H100s, seq 8192, micro-batch 1, global batch 128, no recompute, the distributed
// optimizer with bf16 gradient reduction, FP8 hybrid with FP8 parameters, fused attention. It
// trains as published, so it must fit: with the unfused attention its (b, heads, s, s) scores
// alone would take 5as/h x sbh = 10.7 GB per layer.
TEST_CASE("NVIDIA's Llama 3 8B FP8 example plan fits on 8 H100s", "[memory]") {
  const ModelSpec model = load_model("llama3-8b");
  ParallelPlan plan = test::make_plan(8, 1, 1, 1, 128, 8192);
  plan.zero_stage = 1;
  plan.precision.fp32_grads = false;  // --grad-reduce-in-bf16
  plan.overlap.grad_reduce = true;
  plan.overlap.param_gather = true;
  plan.fp8 = Fp8Format::kHybrid;
  plan.fp8_param_gather = true;
  const CompiledPlan compiled = test::compile_checked(model, plan, GraphMode::kFolded, "dgx-h100");
  INFO("peak " << compiled.memory.peak_bytes / 1e9 << " GB");
  CHECK(compiled.memory.fits);
  plan.attention = AttentionKind::kUnfused;
  CHECK_FALSE(test::compile_checked(model, plan, GraphMode::kFolded, "dgx-h100").memory.fits);
}

}  // namespace
}  // namespace strata
