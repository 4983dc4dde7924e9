// The parameter tensors of each block (plan/param_tensors.hpp) hold exactly the parameters that
// plan/shard_sizes.hpp counts per TP rank, which the parameter-count tests check against the
// published totals: every zoo model and every family of tests/models/data, at tp 1, 2 and 4 and
// with pp 1 and 2 (a tied head's copy on the last stage).

#include <catch2/catch.hpp>

#include <numeric>

#include "models/model_reader.hpp"
#include "models/model_spec.hpp"
#include "plan/param_tensors.hpp"
#include "plan/shard_sizes.hpp"

namespace strata {
namespace {

int64_t total(const std::vector<ParamTensorSpec>& specs) {
  return std::accumulate(specs.begin(), specs.end(), int64_t{0},
                         [](int64_t sum, const ParamTensorSpec& s) { return sum + s.elements(); });
}

int64_t gemm_weights(const std::vector<ParamTensorSpec>& specs) {
  int64_t sum = 0;
  for (const ParamTensorSpec& s : specs) sum += s.gemm_weight ? s.elements() : 0;
  return sum;
}

TEST_CASE("each block's parameter tensors hold its shard's parameters", "[params]") {
  std::vector<std::string> models = zoo_model_names();
  for (const char* family :
       {"deepseek-v2-lite", "deepseek-v3", "falcon-40b", "falcon-7b", "gemma2-2b", "gemma3-1b",
        "gptj-6b", "olmo2-7b", "phi3-mini-4k", "qwen3-0.6b", "starcoder2-3b"}) {
    models.push_back(std::string(STRATA_SOURCE_DIR) + "/tests/models/data/" + family + ".json");
  }
  for (const std::string& name : models) {
    const ModelSpec model = load_model(name);
    for (const int64_t tp : {1, 2, 4}) {
      if (model.heads % tp != 0 || model.kv_heads % tp != 0 || model.ffn_hidden % tp != 0) continue;
      for (const int64_t pp : {1, 2}) {
        ParallelPlan plan;
        plan.tp = tp;
        plan.pp = pp;
        const ShardSizes sizes = shard_sizes(model, plan);
        INFO(name << " tp " << tp << " pp " << pp);
        const std::vector<ParamTensorSpec> layer = layer_param_specs(model, plan, false);
        CHECK(total(layer) == sizes.layer);
        CHECK(gemm_weights(layer) == sizes.layer_gemm_weights);
        CHECK(total(embedding_param_specs(model, plan)) == sizes.embedding);
        CHECK(total(head_param_specs(model, plan)) == sizes.head);
      }
    }
  }
}

// An MoE layer's tensors on one rank (its router, its E / ep experts over expert TP, the shared
// experts over TP) hold what shard_sizes counts; over the whole expert-parallel and
// tensor-parallel group they hold the layer's count from the models library (ModelSpec's
// attention, norms and MoE MLP, checked there against Mistral's and Qwen's published totals),
// with the router and the replicated vectors once per TP rank.
TEST_CASE("an MoE layer's parameter tensors hold its shard and, over tp x ep, the layer",
          "[params][moe]") {
  for (const char* family : {"mixtral-8x7b", "qwen1.5-moe-a2.7b", "qwen3-30b-a3b"}) {
    const ModelSpec model =
        load_model(std::string(STRATA_SOURCE_DIR) + "/tests/models/data/" + family + ".json");
    const ParameterCount count = count_parameters(model);
    for (const int64_t tp : {1, 2, 4}) {
      for (const int64_t ep : {1, 2, 4}) {
        ParallelPlan plan;
        plan.tp = tp;
        plan.ep = ep;
        plan.dp = ep;
        INFO(family << " tp " << tp << " ep " << ep);
        const std::vector<ParamTensorSpec> specs = layer_param_specs(model, plan, true);
        CHECK(total(specs) == shard_sizes(model, plan).moe_layer);
        int64_t split = 0;       // the parts split over the group's ranks
        int64_t replicated = 0;  // the parts every TP rank holds whole
        for (const ParamTensorSpec& s : specs) {
          const bool expert = s.name.rfind("experts_", 0) == 0;
          (s.replicated ? replicated : split) += s.elements() * (expert ? ep : 1);
        }
        CHECK(tp * split + replicated == count.attention + count.norms + count.moe_mlp);
      }
    }
  }
}

// DeepSeek's latent attention (plan/param_tensors.cpp, add_latent_attention) over the TP group
// holds the layer's count from the models library (count_parameters, checked there against
// DeepSeek-V3's published 671B and V2-Lite's 15.7B): its up projections and output projection
// split over tp, its down projections and the latents' norms whole on every rank (Megatron-Core's
// "duplicated" TELinear), as the layer's norms are. V2-Lite has no query latent (q_proj); V3 has
// one. A dense layer (the first ones) with the dense MLP, an MoE layer with its experts over ep.
TEST_CASE("latent attention's tensors over tp hold the layer's parameters", "[params][mla]") {
  for (const char* family : {"deepseek-v2-lite", "deepseek-v3"}) {
    const ModelSpec model =
        load_model(std::string(STRATA_SOURCE_DIR) + "/tests/models/data/" + family + ".json");
    REQUIRE(model.latent_attention());
    const ParameterCount count = count_parameters(model);
    for (const int64_t tp : {1, 2, 4}) {
      for (const int64_t ep : {1, 8}) {
        ParallelPlan plan;
        plan.tp = tp;
        plan.ep = ep;
        plan.dp = ep;
        INFO(family << " tp " << tp << " ep " << ep);
        for (const bool moe : {false, true}) {
          const std::vector<ParamTensorSpec> specs = layer_param_specs(model, plan, moe);
          const ShardSizes sizes = shard_sizes(model, plan);
          CHECK(total(specs) == (moe ? sizes.moe_layer : sizes.layer));
          if (!moe) CHECK(gemm_weights(specs) == sizes.layer_gemm_weights);
          int64_t split = 0;
          int64_t replicated = 0;
          for (const ParamTensorSpec& s : specs) {
            const bool expert = s.name.rfind("experts_", 0) == 0;
            (s.replicated ? replicated : split) += s.elements() * (expert ? ep : 1);
          }
          const int64_t mlp = moe ? count.moe_mlp : count.mlp;
          CHECK(tp * split + replicated == count.attention + count.norms + mlp);
        }
      }
    }
  }
}

}  // namespace
}  // namespace strata
