// Mixture-of-experts models (ModelSpec::experts): Mixtral, Qwen2-MoE and Qwen3-MoE read from
// config.json files shaped as released on the Hub (tests/models/data/), their total and active
// parameter counts against the figures their publishers state, the closed form of one expert that
// every token takes, and the refusals of what a ModelSpec cannot hold yet. Publishers round their
// figures differently (Mistral to the nearest 0.1B, Qwen3's model cards down to 0.1B), so each is
// checked the way it is printed. (That plans of MoE models are refused until the plan compiler
// lowers experts is the CLI refusal case moe_model_not_lowered.)

#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <utility>

#include "models/model_json.hpp"
#include "models/model_reader.hpp"
#include "models/model_spec.hpp"
#include "tests/input_error.hpp"

namespace strata {
namespace {

ModelSpec family(const std::string& file) {
  return load_model(std::string(STRATA_SOURCE_DIR) + "/tests/models/data/" + file);
}

double billions(int64_t parameters) { return static_cast<double>(parameters) / 1e9; }
// A count as a card that truncates to 0.1B prints it.
double truncated(int64_t parameters) { return std::floor(billions(parameters) * 10) / 10; }

// Mistral AI, "Mixtral of experts" (2023-12-11): "Mixtral has 46.7B total parameters but only
// uses 12.9B parameters per token." Eight SwiGLU experts of 14,336 per layer, two per token, no
// shared expert, every layer MoE, an untied head.
TEST_CASE("mixtral 8x7B: experts and the published total and active counts", "[models][moe]") {
  const ModelSpec mixtral = family("mixtral-8x7b.json");
  CHECK(mixtral.experts == 8);
  CHECK(mixtral.experts_per_token == 2);
  CHECK(mixtral.expert_ffn_hidden == 14336);
  CHECK(mixtral.shared_expert_ffn_hidden == 0);
  CHECK(mixtral.moe_layers() == 32);
  CHECK(mixtral.sliding_window == 0);  // "sliding_window": null
  const ParameterCount count = count_parameters(mixtral);
  CHECK(billions(count.total) == Approx(46.7).margin(0.05));
  CHECK(billions(count.active) == Approx(12.9).margin(0.05));
  // The router: h x experts per layer, no bias.
  CHECK(count.moe_mlp - 8 * 3 * 4096 * int64_t{14336} == 4096 * 8);
}

// Qwen2-MoE: one shared expert behind a sigmoid gate beside the routed ones. Qwen1.5-MoE-A2.7B's
// card: "14.3B parameters in total and 2.7B activated parameters during runtime"; Qwen2-57B-A14B's:
// 57B in total, 14B activated.
TEST_CASE("qwen2_moe: shared expert, gate and the model cards' counts", "[models][moe]") {
  const ModelSpec small = family("qwen1.5-moe-a2.7b.json");
  CHECK(small.experts == 60);
  CHECK(small.experts_per_token == 4);
  CHECK(small.expert_ffn_hidden == 1408);
  CHECK(small.shared_expert_ffn_hidden == 5632);
  CHECK(small.shared_expert_gate);
  CHECK(small.qkv_bias);
  const ParameterCount a27 = count_parameters(small);
  CHECK(billions(a27.total) == Approx(14.3).margin(0.05));
  CHECK(billions(a27.active) == Approx(2.7).margin(0.05));
  const ParameterCount a14 = count_parameters(family("qwen2-57b-a14b.json"));
  CHECK(billions(a14.total) == Approx(57).margin(0.5));
  CHECK(billions(a14.active) == Approx(14).margin(0.5));
}

// Qwen3-MoE: Qwen3's attention (head_dim 128, per-head QK-norm) and 128 experts, 8 per token, no
// shared expert. Qwen3-30B-A3B's card: "Number of Parameters: 30.5B in total and 3.3B activated";
// Qwen3-235B-A22B's: "235B in total and 22B activated".
TEST_CASE("qwen3_moe: the model cards' counts", "[models][moe]") {
  const ModelSpec a3b = family("qwen3-30b-a3b.json");
  CHECK(a3b.experts == 128);
  CHECK(a3b.experts_per_token == 8);
  CHECK(a3b.head_dim() == 128);
  CHECK(a3b.qk_norm == QkNorm::kPerHead);
  CHECK(a3b.first_dense_layers == 0);  // "mlp_only_layers": []
  const ParameterCount c30 = count_parameters(a3b);
  CHECK(truncated(c30.total) == Approx(30.5));
  CHECK(truncated(c30.active) == Approx(3.3));
  const ParameterCount c235 = count_parameters(family("qwen3-235b-a22b.json"));
  CHECK(std::floor(billions(c235.total)) == 235);
  CHECK(std::floor(billions(c235.active)) == 22);
}

// One expert that every token takes, as wide as the dense MLP, is the dense model plus the
// router's h weights per layer: the experts' count is the dense MLP's, without its biases.
TEST_CASE("one expert taken by every token counts as the dense MLP plus its router",
          "[models][moe]") {
  ModelSpec dense = load_model("llama3-8b");
  ModelSpec moe = dense;
  moe.experts = 1;
  moe.experts_per_token = 1;
  moe.expert_ffn_hidden = dense.ffn_hidden;
  validate_model(moe, "test");
  const ParameterCount d = count_parameters(dense);
  const ParameterCount m = count_parameters(moe);
  CHECK(m.moe_mlp == d.mlp + dense.hidden);
  CHECK(m.total == d.total + dense.layers * dense.hidden);
  CHECK(m.active == m.total);
  CHECK(d.active == d.total);
}

// Qwen's dense layers ("mlp_only_layers") as a prefix become first_dense_layers; a ModelSpec holds
// no other pattern, so the rest is refused by field.
TEST_CASE("qwen's dense layers: a prefix is read, other patterns are refused", "[models][moe]") {
  nlohmann::json config = nlohmann::json::parse(R"({
    "model_type": "qwen3_moe", "hidden_size": 64, "num_hidden_layers": 4,
    "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32,
    "intermediate_size": 128, "moe_intermediate_size": 16, "num_experts": 4,
    "num_experts_per_tok": 2, "vocab_size": 100, "max_position_embeddings": 64,
    "mlp_only_layers": [0, 1]})");
  const ModelSpec prefix = parse_model(config, "config.json");
  CHECK(prefix.first_dense_layers == 2);
  CHECK(prefix.moe_layers() == 2);
  CHECK(!prefix.is_moe_layer(1));
  CHECK(prefix.is_moe_layer(2));
  // Two dense layers of 3 x 64 x 128, two MoE layers of a router and 4 experts of 3 x 64 x 16.
  const ParameterCount count = count_parameters(prefix);
  CHECK(count.total - count.embedding - count.lm_head - count.final_norm ==
        2 * count.per_layer + 2 * (count.per_layer - count.mlp + 64 * 4 + 4 * 3 * 64 * 16));

  config["mlp_only_layers"] = {0, 2};
  const auto gap = test::input_error_of([&] { parse_model(config, "config.json"); });
  REQUIRE(gap);
  CHECK(gap->field() == "mlp_only_layers");
  config["mlp_only_layers"] = nlohmann::json::array();
  config["decoder_sparse_step"] = 2;
  const auto step = test::input_error_of([&] { parse_model(config, "config.json"); });
  REQUIRE(step);
  CHECK(step->field() == "decoder_sparse_step");
  config.erase("decoder_sparse_step");
  config.erase("head_dim");
  const auto head_dim = test::input_error_of([&] { parse_model(config, "config.json"); });
  REQUIRE(head_dim);
  CHECK(head_dim->field() == "head_dim");
}

// The native format holds experts and writes them back (model_to_json, only for MoE models); its
// experts' and router's fields are refused without experts, and a top-k above the experts is
// refused.
TEST_CASE("native experts: round trip and refusals", "[models][moe][errors]") {
  const ModelSpec qwen = family("qwen1.5-moe-a2.7b.json");
  const ModelSpec back = parse_model(model_to_json(qwen), "round trip");
  CHECK(back.experts == qwen.experts);
  CHECK(back.experts_per_token == qwen.experts_per_token);
  CHECK(back.expert_ffn_hidden == qwen.expert_ffn_hidden);
  CHECK(back.shared_expert_ffn_hidden == qwen.shared_expert_ffn_hidden);
  CHECK(back.shared_expert_gate == qwen.shared_expert_gate);
  CHECK(back.first_dense_layers == qwen.first_dense_layers);
  CHECK(back.router_score == RouterScore::kSoftmax);
  CHECK(count_parameters(back).total == count_parameters(qwen).total);
  const nlohmann::json dense = model_to_json(load_model("llama3-8b"));
  for (const char* key : {"experts", "router_score", "router_groups", "capacity_factor"}) {
    CHECK(!dense.contains(key));
  }

  nlohmann::json native = model_to_json(load_model("tiny-llama"));
  for (const auto& [key, value] : {std::pair{"experts_per_token", nlohmann::json(2)},
                                   std::pair{"router_score", nlohmann::json("sigmoid")},
                                   std::pair{"router_groups", nlohmann::json(2)},
                                   std::pair{"router_group_limit", nlohmann::json(1)},
                                   std::pair{"router_bias", nlohmann::json(true)},
                                   std::pair{"capacity_factor", nlohmann::json(1.25)}}) {
    nlohmann::json without_experts = native;
    without_experts[key] = value;
    const auto without = test::input_error_of([&] { parse_model(without_experts, "moe.json"); });
    REQUIRE(without);
    CHECK(without->field() == key);
    CHECK_THAT(std::string(without->what()), Catch::Contains("the model has none"));
  }
  native["experts"] = 2;
  native["experts_per_token"] = 3;
  native["expert_ffn_hidden"] = 64;
  const auto top_k = test::input_error_of([&] { parse_model(native, "moe.json"); });
  REQUIRE(top_k);
  CHECK(top_k->field() == "experts_per_token");
}

// The router's groups (DeepSeek's n_group, topk_group) divide the experts evenly, keep between 1
// and all of the groups, and leave each token at least its top k experts; the capacity factor is 0
// (dropless) or above 0 and at most experts / top-k, where an expert's capacity is every token of
// the step and nothing can be dropped.
TEST_CASE("native router: groups and capacity are checked", "[models][moe][errors]") {
  nlohmann::json native = model_to_json(load_model("tiny-llama"));
  native["experts"] = 8;
  native["experts_per_token"] = 2;
  native["expert_ffn_hidden"] = 64;
  native["router_groups"] = 4;
  native["router_group_limit"] = 2;
  native["capacity_factor"] = 4;  // 8 experts / 2 per token: the most that can drop tokens
  const ModelSpec grouped = parse_model(native, "moe.json");
  CHECK(grouped.router_groups == 4);
  CHECK(grouped.capacity_factor == 4);
  const ModelSpec back = parse_model(model_to_json(grouped), "round trip");
  CHECK(back.router_groups == 4);
  CHECK(back.router_group_limit == 2);
  CHECK(back.capacity_factor == 4);

  struct Case {
    const char* key;
    nlohmann::json value;
    const char* field;
  };
  const Case cases[] = {
      {"router_groups", 3, "router_groups"},            // 8 experts in 3 groups
      {"router_groups", 16, "router_groups"},           // more groups than experts
      {"router_group_limit", 5, "router_group_limit"},  // 5 of 4 groups
      {"router_group_limit", 0, "router_group_limit"},  // no group to route to
      // The best 1 of 4 groups holds 2 experts: a top 3 cannot come from it.
      {"experts_per_token", 3, "experts_per_token"},
      {"capacity_factor", 4.5, "capacity_factor"},
  };
  for (const Case& c : cases) {
    INFO(c.key << " = " << c.value);
    nlohmann::json wrong = native;
    wrong[c.key] = c.value;
    if (std::string(c.key) == "experts_per_token") wrong["router_group_limit"] = 1;
    const auto error = test::input_error_of([&] { parse_model(wrong, "moe.json"); });
    REQUIRE(error);
    CHECK(error->field() == c.field);
  }
  nlohmann::json limit_alone = native;
  limit_alone["router_groups"] = 0;
  const auto limit = test::input_error_of([&] { parse_model(limit_alone, "moe.json"); });
  REQUIRE(limit);
  CHECK(limit->field() == "router_group_limit");
  CHECK_THAT(std::string(limit->what()), Catch::Contains("router_groups is 0"));
}

}  // namespace
}  // namespace strata
