// The Hugging Face families beyond Llama: each read from a config.json shaped as released on the
// Hub (tests/models/data/, fields copied with their values), its architecture as transformers'
// modeling file builds it, and its parameter count against the total the model's publisher
// states. Exact figures come from the model's technical report where it prints them; model cards
// round, so those are checked to the precision they print.

#include <catch2/catch.hpp>

#include <string>

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

// What the Qwen and Gemma reports call non-embedding parameters: the layers and the final norm,
// without the token embedding and an untied LM head.
int64_t non_embedding(const ParameterCount& count) {
  return count.total - count.embedding - count.lm_head;
}

// Qwen3 (Qwen/Qwen3-8B and Qwen3-0.6B model cards: "Number of Parameters: 8.2B, Non-Embedding:
// 6.95B"; "0.6B, Non-Embedding: 0.44B"). head_dim 128 is not hidden / heads in the 0.6B (1024 /
// 16 = 64), and each layer has a per-head RMSNorm on Q and K (2 x 128 weights).
TEST_CASE("qwen3: head_dim, QK-norm and the model cards' totals", "[models]") {
  const ModelSpec qwen8 = family("qwen3-8b.json");
  CHECK(qwen8.name == "Qwen/Qwen3-8B");
  CHECK(qwen8.qk_norm == QkNorm::kPerHead);
  CHECK(!qwen8.qkv_bias);
  CHECK(!qwen8.tied_embeddings);
  const ParameterCount c8 = count_parameters(qwen8);
  CHECK(billions(c8.total) == Approx(8.2).margin(0.05));
  CHECK(billions(non_embedding(c8)) == Approx(6.95).margin(0.005));

  const ModelSpec qwen06 = family("qwen3-0.6b.json");
  CHECK(qwen06.head_dim() == 128);
  CHECK(qwen06.q_hidden() == 2048);
  const ParameterCount c06 = count_parameters(qwen06);
  CHECK(billions(c06.total) == Approx(0.6).margin(0.05));
  CHECK(billions(non_embedding(c06)) == Approx(0.44).margin(0.005));
  // Per layer: Q 1024 x 2048, K and V 1024 x 1024 each, O 2048 x 1024, QK-norm 2 x 128.
  CHECK(c06.attention == 1024 * 2048 * 2 + 2 * 1024 * 1024);
  CHECK(c06.norms == 2 * 1024 + 2 * 128);
}

// Gemma 2 (Gemma Team 2024, "Gemma 2", Table 1: non-embedding parameters 2,024,517,888 for 2B and
// 8,324,201,984 for 9B, counting the final norm; the report's embedding column uses a 256,128-row
// table where the released configs have 256,000). Four RMSNorms per layer (sandwich), GeGLU,
// head_dim 256, every other layer windowed to 4096 keys.
TEST_CASE("gemma2: the report's non-embedding counts exactly, sandwich norms, alternating windows",
          "[models]") {
  const ModelSpec gemma2b = family("gemma2-2b.json");
  const ModelSpec gemma9b = family("gemma2-9b.json");
  CHECK(non_embedding(count_parameters(gemma2b)) == 2'024'517'888);
  CHECK(non_embedding(count_parameters(gemma9b)) == 8'324'201'984);
  CHECK(gemma9b.block == LayerBlock::kSandwich);
  CHECK(gemma9b.mlp == MlpKind::kGeGlu);
  CHECK(gemma9b.tied_embeddings);
  CHECK(gemma9b.window_of(0) == 4096);  // Gemma2Attention: layer_idx % 2 == 0 is local
  CHECK(gemma9b.window_of(1) == 0);
  CHECK(gemma9b.windowed_layers() == 21);
  // The Hub lists google/gemma-2-9b at 9.24B parameters.
  CHECK(billions(count_parameters(gemma9b).total) == Approx(9.24).margin(0.005));
}

// Gemma 3 (Gemma Team 2025, "Gemma 3 Technical Report", Table 1: the 1B model has 302M embedding
// and 698M non-embedding parameters). Per-head QK-norm, 5 local layers (512 keys) per global one.
TEST_CASE("gemma3_text: the report's 1B split, QK-norm, one global layer in six", "[models]") {
  const ModelSpec gemma = family("gemma3-1b.json");
  const ParameterCount count = count_parameters(gemma);
  CHECK(count.embedding / 1'000'000 == 301);  // 262,144 x 1,152 = 301.99M
  CHECK(billions(non_embedding(count)) == Approx(0.698).margin(0.0005));
  CHECK(gemma.qk_norm == QkNorm::kPerHead);
  CHECK(gemma.window_of(4) == 512);
  CHECK(gemma.window_of(5) == 0);
  CHECK(gemma.windowed_layers() == 26 - 4);
}

// Phi-3-mini (Abdin et al. 2024, "Phi-3 Technical Report": "phi-3-mini, a 3.8 billion parameter
// language model"; the Hub lists 3,821,079,552). No biases, untied head, 2047-key window.
TEST_CASE("phi3: the mini model's 3.8B exactly as the Hub lists it", "[models]") {
  const ModelSpec phi = family("phi3-mini-4k.json");
  CHECK(count_parameters(phi).total == 3'821'079'552);
  CHECK(phi.sliding_window == 2047);
  CHECK(phi.global_every == 0);
}

// OLMo 2 7B (OLMo et al. 2024, "2 OLMo 2 Furious": 7B; the Hub lists allenai/OLMo-2-1124-7B at
// 7.3B). Norms after attention and the MLP (two per layer), RMSNorm over all of Q and of K.
TEST_CASE("olmo2: post-norm block and whole-width QK-norm", "[models]") {
  const ModelSpec olmo = family("olmo2-7b.json");
  CHECK(olmo.block == LayerBlock::kPostNorm);
  CHECK(olmo.qk_norm == QkNorm::kWhole);
  const ParameterCount count = count_parameters(olmo);
  CHECK(count.norms == 2 * 4096 + 4096 + 4096);
  CHECK(billions(count.total) == Approx(7.30).margin(0.005));
}

// Falcon (Almazrouei et al. 2023, "The Falcon Series of Open Language Models": Falcon-7B and -40B).
// 7B: multi-query (one K/V head), attention and MLP in parallel after one LayerNorm, no biases,
// LM head tied to the embedding (the config's default). 40B: the new decoder architecture, 8 K/V
// heads and a LayerNorm per branch.
TEST_CASE("falcon: multi-query and parallel blocks, 7B and 40B", "[models]") {
  const ModelSpec falcon7 = family("falcon-7b.json");
  CHECK(falcon7.kv_heads == 1);
  CHECK(falcon7.block == LayerBlock::kParallel);
  CHECK(falcon7.max_seq == 2048);
  CHECK(!falcon7.linear_bias);
  // Per layer: QKV 4544 x (4544 + 2 x 64), dense 4544 x 4544, MLP 2 x 4544 x 18176, one LayerNorm.
  const ParameterCount c7 = count_parameters(falcon7);
  CHECK(c7.per_layer == 4544 * 4672 + 4544 * 4544 + 2 * 4544 * 18176 + 2 * 4544);
  CHECK(billions(c7.total) == Approx(7).margin(0.1));

  const ModelSpec falcon40 = family("falcon-40b.json");
  CHECK(falcon40.kv_heads == 8);
  CHECK(falcon40.block == LayerBlock::kParallelTwoNorms);
  CHECK(billions(count_parameters(falcon40).total) == Approx(41.3).margin(0.05));
}

// GPT-J-6B (Wang and Komatsuzaki 2021, "6B"): GPT-2's key names, rotary, attention and MLP in
// parallel after one LayerNorm, no attention biases, an untied LM head with a bias.
TEST_CASE("gptj: parallel block and the LM head's bias", "[models]") {
  const ModelSpec gptj = family("gptj-6b.json");
  CHECK(gptj.block == LayerBlock::kParallel);
  CHECK(gptj.position == PositionKind::kRotary);
  CHECK(gptj.head_bias);
  const ParameterCount count = count_parameters(gptj);
  CHECK(count.lm_head == 50400 * 4096 + 50400);
  CHECK(billions(count.total) == Approx(6.05).margin(0.005));
}

// StarCoder2-3B (Lozhkov et al. 2024, "StarCoder 2 and The Stack v2": 3B; the Hub lists 3.03B).
// LayerNorm, GELU, biases everywhere, grouped-query attention with 2 K/V heads, a 4096-key window
// on every layer, dropout 0.1.
TEST_CASE("starcoder2: biases, GQA, window and dropout", "[models]") {
  const ModelSpec star = family("starcoder2-3b.json");
  CHECK(star.kv_heads == 2);
  CHECK(star.sliding_window == 4096);
  CHECK(star.dropout);
  CHECK(star.qkv_bias);
  CHECK(star.out_bias);
  CHECK(billions(count_parameters(star).total) == Approx(3.03).margin(0.005));
}

// Every family reads back through the native format unchanged (model_to_json writes head_dim,
// the block, QK-norm, the biases and the window pattern).
TEST_CASE("every family round-trips through the native format", "[models]") {
  for (const char* file : {"qwen3-8b.json", "qwen3-0.6b.json", "gemma2-9b.json", "gemma3-1b.json",
                           "phi3-mini-4k.json", "olmo2-7b.json", "falcon-7b.json",
                           "falcon-40b.json", "gptj-6b.json", "starcoder2-3b.json"}) {
    INFO(file);
    const ModelSpec model = family(file);
    const ModelSpec back = parse_model(model_to_json(model), "round trip");
    CHECK(count_parameters(back).total == count_parameters(model).total);
    CHECK(back.block == model.block);
    CHECK(back.qk_norm == model.qk_norm);
    CHECK(back.head_dim() == model.head_dim());
    CHECK(back.window_of(5) == model.window_of(5));
  }
}

// Mixture-of-experts families whose configs are not read yet (DBRX's fused experts) are refused
// by name, and Gemma 3's image-and-text config points at its text part.
TEST_CASE("MoE and multimodal Gemma 3 configs are refused with a way forward", "[models][errors]") {
  const auto refusal = [](const std::string& type) {
    nlohmann::json config = {{"model_type", type}};
    return test::input_error_of([&] { parse_model(config, "config.json"); });
  };
  const auto moe = refusal("dbrx");
  REQUIRE(moe);
  CHECK(moe->field() == "model_type");
  CHECK_THAT(std::string(moe->what()), Catch::Contains("mixture-of-experts"));
  const auto gemma3 = refusal("gemma3");
  REQUIRE(gemma3);
  CHECK_THAT(std::string(gemma3->what()), Catch::Contains("gemma3_text"));
}

// "layer_types" (newer transformers configs) states the pattern; one that is not "a global layer
// every n" is refused, naming the layer that breaks it.
TEST_CASE("layer_types sets or refuses the window pattern", "[models][errors]") {
  nlohmann::json config = nlohmann::json::parse(R"({
    "model_type": "gemma3_text", "hidden_size": 64, "num_hidden_layers": 4,
    "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32,
    "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 64,
    "sliding_window": 16})");
  config["layer_types"] = {"sliding_attention", "sliding_attention", "sliding_attention",
                           "full_attention"};
  CHECK(parse_model(config, "config.json").global_every == 4);
  config["layer_types"] = {"full_attention", "sliding_attention", "full_attention",
                           "sliding_attention"};
  const auto error = test::input_error_of([&] { parse_model(config, "config.json"); });
  REQUIRE(error);
  CHECK(error->field() == "layer_types");
}

}  // namespace
}  // namespace strata
