// FLOPs per step summed from the task graph against the closed forms of
// data/reference/stated_facts.csv, for the GPT-3-shaped models of korthikanti2022.csv:
//   model FLOPs (no recompute)         72 B L s h^2 (1 + s/(6h) + v/(12hL))   (Korthikanti App. A)
//   hardware FLOPs with full recompute 96 B s l h^2 (1 + s/(6h) + V/(16lh))   (Narayanan Eq. 3)

#include <catch2/catch.hpp>

#include <algorithm>

#include "tests/plan/plan_fixtures.hpp"
#include "tests/reference_csv.hpp"

namespace strata {
namespace {

// A GPT-3-shaped model from a korthikanti2022.csv row.
ModelSpec gpt_from_row(const test::CsvRow& row) {
  ModelSpec model = load_model("gpt3-175b");
  model.name = row.at("model");
  model.layers = std::stoll(row.at("layers"));
  model.hidden = std::stoll(row.at("hidden_size"));
  model.heads = std::stoll(row.at("attention_heads"));
  model.kv_heads = model.heads;
  model.ffn_hidden = 4 * model.hidden;
  model.vocab = std::stoll(row.at("vocab_size"));
  return model;
}

TEST_CASE("model and full-recompute hardware FLOPs equal the closed forms", "[flops][reference]") {
  for (const auto& row : test::read_reference_csv("korthikanti2022.csv")) {
    if (row.at("global_batch_size").empty()) continue;  // rows that only report throughput
    const ModelSpec model = gpt_from_row(row);
    const int64_t layers = model.layers;
    const int64_t pp = std::stoll(row.at("pp"));
    const int64_t global_batch = std::stoll(row.at("global_batch_size"));
    ParallelPlan plan =
        test::make_plan(1, std::stoll(row.at("tp")), pp, std::stoll(row.at("micro_batch_size")),
                        global_batch, std::stoll(row.at("seq_len")));
    plan.attention = AttentionKind::kUnfused;  // which executes the FLOPs the model counts
    INFO(model.name);
    const double B = static_cast<double>(global_batch);
    const double L = static_cast<double>(layers);
    const double s = static_cast<double>(plan.seq_len);
    const double h = static_cast<double>(model.hidden);
    const double v = static_cast<double>(model.vocab);
    const double model_flops = 72 * B * L * s * h * h * (1 + s / (6 * h) + v / (12 * h * L));
    const double full_recompute = 96 * B * s * L * h * h * (1 + s / (6 * h) + v / (16 * L * h));

    const CompiledPlan plain = test::compile_checked(model, plan);
    CHECK(plain.flops.model == Approx(model_flops).epsilon(0.005));
    CHECK(plain.flops.hardware == Approx(plain.flops.model).epsilon(1e-12));

    plan.recompute = RecomputeKind::kFull;
    const CompiledPlan recomputed = test::compile_checked(model, plan);
    CHECK(recomputed.flops.model == Approx(model_flops).epsilon(0.005));
    CHECK(recomputed.flops.hardware == Approx(full_recompute).epsilon(0.005));
  }
}

// Parallelism moves FLOPs between GPUs but does not change the step's total: the full graph of
// dp 2 x tp 2 x pp 2 sums to the serial plan's FLOPs (up to vocabulary padding, none here).
TEST_CASE("step FLOPs do not depend on the plan", "[flops]") {
  const ModelSpec model = load_model("gpt2-124m");
  const ParallelPlan serial = test::make_plan(1, 1, 1, 1, 8, 1024);
  ParallelPlan parallel = test::make_plan(2, 2, 2, 2, 8, 1024);
  parallel.sequence_parallel = true;
  ModelSpec even_vocab = model;
  even_vocab.vocab = 50304;  // divisible by tp, as Megatron pads it
  const double expected = test::compile_checked(even_vocab, serial).flops.model;
  CHECK(test::compile_checked(even_vocab, parallel, GraphMode::kFull).flops.model ==
        Approx(expected).epsilon(1e-9));
  CHECK(test::compile_checked(even_vocab, parallel, GraphMode::kFolded).flops.model ==
        Approx(expected).epsilon(1e-9));
}

// Selective recompute repeats the attention core's forward (QK^T and scores x V, 4 b s^2 h per
// layer and micro-batch). Korthikanti et al. count its HFU as 72BLsh^2(1 + s/(3h) + ...), whose
// extra 12 B s^2 h L is three times this (the attention core's forward and backward); we count
// the FLOPs the recompute actually executes.
TEST_CASE("selective recompute adds one attention-core forward per layer", "[flops]") {
  const ModelSpec model = load_model("gpt3-175b");
  ParallelPlan plan = test::make_plan(1, 8, 8, 1, 64, 2048);
  plan.attention = AttentionKind::kUnfused;
  plan.recompute = RecomputeKind::kSelective;
  const CompiledPlan compiled = test::compile_checked(model, plan);
  const double s = 2048, h = 12288;
  const double extra = 4.0 * 64 * s * s * h * 96;
  CHECK(compiled.flops.hardware - compiled.flops.model == Approx(extra).epsilon(1e-9));
}

// Flash attention executes the causal query-key pairs only, P = s(s+1)/2 per head (w(w+1)/2 +
// (s-w)w under a sliding window w), 4 P d FLOPs forward and 10 P d backward (five products: the
// scores again, dV, dP, dQ, dK; FlashAttention-2, Algorithm 2), where the model FLOPs count
// 4 s^2 d and 8 s^2 d (s x w under a window). Per layer and sequence, over all heads (a d = h):
//   hardware = model - 12 s span h + 14 P h.
TEST_CASE("flash attention's hardware FLOPs are the causal pairs plus the recomputed scores",
          "[flops]") {
  ModelSpec model = load_model("gpt3-175b");
  const double B = 64, L = 96, s = 2048, h = 12288;
  for (const int64_t window : {int64_t{0}, int64_t{512}}) {
    INFO("window " << window);
    model.sliding_window = window;
    ParallelPlan plan = test::make_plan(1, 8, 8, 1, 64, 2048);
    plan.attention = AttentionKind::kUnfused;
    const CompiledPlan unfused = test::compile_checked(model, plan);
    plan.attention = AttentionKind::kFlash;
    const CompiledPlan flash = test::compile_checked(model, plan);
    CHECK(flash.flops.model == unfused.flops.model);
    const double w = static_cast<double>(window);
    const double span = window > 0 ? w : s;
    const double pairs = window > 0 ? w * (w + 1) / 2 + (s - w) * w : s * (s + 1) / 2;
    const double expected = flash.flops.model - B * L * (12 * s * span * h - 14 * pairs * h);
    CHECK(flash.flops.hardware == Approx(expected).epsilon(1e-9));
    // Selective recompute under flash attention recomputes nothing.
    plan.recompute = RecomputeKind::kSelective;
    CHECK(test::compile_checked(model, plan).flops.hardware == Approx(expected).epsilon(1e-9));
  }
}

// NeMo reports model TFLOP/s per GPU beside tokens/s per GPU (nemo_h100_perf.csv): their ratio
// is its model FLOPs per token (Megatron's count: 6 x the matrices' parameters, 12 s h per layer
// for attention, 6 h V for the LM head). The zoo models Strata validates against those runs must
// count the same, within 1%: this checks their architectures (Nemotron's shapes are fixed by it).
TEST_CASE("zoo models' FLOPs per token equal NeMo's for its runs", "[flops][reference]") {
  const std::pair<const char*, const char*> zoo[] = {{"GPT3-5B", "gpt3-5b"},
                                                     {"GPT3-20B", "gpt3-20b"},
                                                     {"GPT3-175B", "gpt3-175b"},
                                                     {"LLAMA2-7B", "llama2-7b"},
                                                     {"LLAMA2-13B", "llama2-13b"},
                                                     {"LLAMA2-70B", "llama2-70b"},
                                                     {"LLAMA3-8B", "llama3-8b"},
                                                     {"LLAMA3-70B", "llama3-70b"},
                                                     {"Nemotron-8B", "nemotron-8b"},
                                                     {"Nemotron-22B", "nemotron-22b"},
                                                     {"Nemotron-340B", "nemotron-340b"}};
  int checked = 0;
  for (const auto& row : test::read_reference_csv("nemo_h100_perf.csv")) {
    const auto found = std::find_if(std::begin(zoo), std::end(zoo), [&](const auto& entry) {
      return row.at("model") == entry.first;
    });
    REQUIRE(found != std::end(zoo));
    INFO(row.at("model"));
    const ModelSpec model = load_model(found->second);
    const int64_t seq = std::stoll(row.at("seq_len"));
    const CompiledPlan compiled = test::compile_checked(model, test::make_plan(1, 1, 1, 1, 1, seq));
    const double nemo = std::stod(row.at("model_tflops_per_gpu")) * 1e12 /
                        std::stod(row.at("tokens_per_s_per_gpu"));
    CHECK(compiled.flops.model / static_cast<double>(seq) == Approx(nemo).epsilon(0.01));
    ++checked;
  }
  CHECK(checked == 12);
}

// Megatron's --recompute-method block --recompute-num-layers k recomputes the forward of the
// first k layers of each model chunk: the hardware FLOPs grow by k/L of full recompute's, and
// those layers keep only their input (the others everything).
TEST_CASE("block recompute of k layers recomputes k layers per chunk", "[flops][memory]") {
  const ModelSpec model = test::small_model(8, 256, 8, 64, 128);
  ParallelPlan plan = test::make_plan(1, 1, 2, 1, 4, 128);  // 4 layers per stage
  plan.attention = AttentionKind::kUnfused;
  const CompiledPlan none = test::compile_checked(model, plan);
  plan.recompute = RecomputeKind::kFull;
  const CompiledPlan all = test::compile_checked(model, plan);
  plan.recompute_layers = 1;
  const CompiledPlan one = test::compile_checked(model, plan);
  const double full_extra = all.flops.hardware - all.flops.model;
  CHECK(one.flops.hardware - one.flops.model == Approx(full_extra / 4));
  // In the forward of a micro-batch each stage's first layer allocates its input checkpoint and
  // the three others all their activations.
  int64_t inputs = 0, kept = 0;
  for (const Task& t : one.graph.tasks()) {
    if (t.kind != TaskKind::kMemory || t.phase != Phase::kForward || t.micro_batch != 0 ||
        t.memory != MemoryAction::kAlloc) {
      continue;
    }
    inputs += t.buffer == BufferClass::kLayerInput;
    kept += t.buffer == BufferClass::kActivations;
  }
  CHECK(inputs == 2);  // one per stage
  CHECK(kept == 6);
}

}  // namespace
}  // namespace strata
