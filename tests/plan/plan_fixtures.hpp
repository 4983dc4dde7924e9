#pragma once
// Shared set-up for the plan tests: zoo inputs and compiled plans.

#include <catch2/catch.hpp>

#include "models/model_reader.hpp"
#include "plan/activation_memory.hpp"
#include "plan/compile.hpp"
#include "topologies/cluster_spec.hpp"

namespace strata::test {

inline ParallelPlan make_plan(int64_t dp, int64_t tp, int64_t pp, int64_t micro_batch,
                              int64_t global_batch, int64_t seq_len) {
  ParallelPlan plan;
  plan.dp = dp;
  plan.tp = tp;
  plan.pp = pp;
  plan.micro_batch = micro_batch;
  plan.global_batch = global_batch;
  plan.seq_len = seq_len;
  return plan;
}

// A small GPT-style model (tiny-gpt's architecture) of the given shape, for graphs quick to
// compile and read.
inline ModelSpec small_model(int64_t layers, int64_t hidden, int64_t heads, int64_t vocab,
                             int64_t max_seq) {
  ModelSpec model = load_model("tiny-gpt");
  model.layers = layers;
  model.hidden = hidden;
  model.heads = heads;
  model.kv_heads = heads;
  model.ffn_hidden = 4 * hidden;
  model.vocab = vocab;
  model.max_seq = max_seq;
  return model;
}

// Validates the plan (throws InputError on a bad one) and compiles it.
inline CompiledPlan compile_checked(const ModelSpec& model, const ParallelPlan& plan,
                                    GraphMode mode = GraphMode::kFolded,
                                    const std::string& cluster = "dgx-a100") {
  validate_plan(plan, model, std::nullopt, "test");
  return compile_plan(model, load_cluster(cluster), plan, mode);
}

// small_model's sizes in Llama's layer: RMSNorm, SwiGLU, rotary positions, no biases, no
// dropout, an LM head of its own.
inline ModelSpec small_llama(int64_t layers, int64_t hidden, int64_t heads, int64_t vocab,
                             int64_t max_seq) {
  ModelSpec m = small_model(layers, hidden, heads, vocab, max_seq);
  m.norm = NormKind::kRmsNorm;
  m.mlp = MlpKind::kSwiGlu;
  m.position = PositionKind::kRotary;
  m.qkv_bias = m.out_bias = m.linear_bias = false;
  m.dropout = false;
  m.tied_embeddings = false;
  return m;
}

// Llama 3 8B's layer shape (h 4096, 32 heads over 8 key-value heads, SwiGLU FFN 14336, vocab
// 128256) in `layers` layers, its LM head tied to the embedding.
inline ModelSpec llama3_8b_layers(int64_t layers) {
  ModelSpec m = small_llama(layers, 4096, 32, 128256, 4096);
  m.kv_heads = 8;
  m.ffn_hidden = 14336;
  m.tied_embeddings = true;
  return m;
}

// `dense` as an MoE of one expert, as wide as its FFN, that every token takes (top-1).
inline ModelSpec one_expert_moe(const ModelSpec& dense) {
  ModelSpec moe = dense;
  moe.experts = 1;
  moe.experts_per_token = 1;
  moe.expert_ffn_hidden = dense.ffn_hidden;
  return moe;
}

// A Llama-style MoE of 4 layers (h 128), the first dense: 8 experts of 256, 2 per token.
inline ModelSpec small_moe() {
  ModelSpec m = small_llama(4, 128, 4, 256, 128);
  m.experts = 8;
  m.experts_per_token = 2;
  m.expert_ffn_hidden = 256;
  m.first_dense_layers = 1;
  return m;
}

// Compiles `plan` folded and full: both graphs pass the validator (data hazards included), with
// the same model FLOPs and peak memory.
inline void check_folded_and_full(const ModelSpec& model, const ParallelPlan& plan) {
  const CompiledPlan folded = compile_checked(model, plan, GraphMode::kFolded);
  const CompiledPlan full = compile_checked(model, plan, GraphMode::kFull);
  for (const auto& error : folded.validation.errors) FAIL_CHECK("folded: " << error);
  for (const auto& error : full.validation.errors) FAIL_CHECK("full: " << error);
  CHECK(full.flops.model == Approx(folded.flops.model).epsilon(1e-9));
  CHECK(full.memory.peak_bytes == folded.memory.peak_bytes);
}

// `split` (cp ranks of `one`'s sequence) stores exactly 1/cp of `one`'s layer activations, term by
// term (attention, log-sum-exp, MLP, norms) and in all (an MoE layer's with `moe`).
inline void check_activations_divide_by_cp(const ModelSpec& model, const ParallelPlan& one,
                                           const ParallelPlan& split, bool moe) {
  const int64_t cp = split.cp;
  const LayerActivations a = layer_activations(model, one, moe);
  const LayerActivations b = layer_activations(model, split, moe);
  CHECK(b.attention * cp == a.attention);
  CHECK(b.softmax_lse * cp == a.softmax_lse);
  CHECK(b.mlp * cp == a.mlp);
  CHECK(b.norms * cp == a.norms);
  CHECK(stored_layer_activation_bytes(model, split, moe) * cp ==
        stored_layer_activation_bytes(model, one, moe));
}

}  // namespace strata::test
