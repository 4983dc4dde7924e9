// Reading models: Hugging Face and GPT-2 config.json files as released (fields copied from the
// Hub), the native format's round trip, format detection, and the error messages users see.

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include <unistd.h>

#include "common/error.hpp"
#include "common/json_input.hpp"
#include "models/model_json.hpp"
#include "models/model_reader.hpp"
#include "models/model_spec.hpp"
#include "tests/input_error.hpp"

namespace strata {
namespace {

ModelSpec parse_text(const std::string& text) {
  return parse_model(parse_json_text(text, "test.json"), "test.json");
}

using test::input_error_of;

std::optional<InputError> parse_error_of(const std::string& text) {
  return input_error_of([&] { parse_text(text); });
}

// Every architectural field (not the name) of two specs.
void check_same_architecture(const ModelSpec& a, const ModelSpec& b) {
  CHECK(a.layers == b.layers);
  CHECK(a.hidden == b.hidden);
  CHECK(a.heads == b.heads);
  CHECK(a.kv_heads == b.kv_heads);
  CHECK(a.ffn_hidden == b.ffn_hidden);
  CHECK(a.vocab == b.vocab);
  CHECK(a.max_seq == b.max_seq);
  CHECK(a.norm == b.norm);
  CHECK(a.mlp == b.mlp);
  CHECK(a.position == b.position);
  CHECK(a.tied_embeddings == b.tied_embeddings);
  CHECK(a.qkv_bias == b.qkv_bias);
  CHECK(a.out_bias == b.out_bias);
  CHECK(a.linear_bias == b.linear_bias);
  CHECK(a.head_bias == b.head_bias);
  CHECK(a.dropout == b.dropout);
  if (a.dropout && b.dropout) {  // the rates mean something only with dropout
    CHECK(a.hidden_dropout == b.hidden_dropout);
    CHECK(a.attention_dropout == b.attention_dropout);
  }
  CHECK(a.head_dim() == b.head_dim());
  CHECK(a.block == b.block);
  CHECK(a.qk_norm == b.qk_norm);
  CHECK(a.sliding_window == b.sliding_window);
  CHECK(a.global_every == b.global_every);
  CHECK(a.rope_theta == b.rope_theta);
}

// meta-llama/Meta-Llama-3-8B/config.json as released.
constexpr const char* kLlama3_8bConfig = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": 128001,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 8192,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "rope_theta": 500000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.40.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
})";

// openai-community/gpt2/config.json as released (task_specific_params left out).
constexpr const char* kGpt2Config = R"({
  "activation_function": "gelu_new",
  "architectures": ["GPT2LMHeadModel"],
  "attn_pdrop": 0.1,
  "bos_token_id": 50256,
  "embd_pdrop": 0.1,
  "eos_token_id": 50256,
  "initializer_range": 0.02,
  "layer_norm_epsilon": 1e-05,
  "model_type": "gpt2",
  "n_ctx": 1024,
  "n_embd": 768,
  "n_head": 12,
  "n_layer": 12,
  "n_positions": 1024,
  "resid_pdrop": 0.1,
  "summary_activation": null,
  "summary_first_dropout": 0.1,
  "summary_proj_to_labels": true,
  "summary_type": "cls_index",
  "summary_use_proj": true,
  "vocab_size": 50257
})";

// The Llama-3-8B config.json describes the same architecture as the zoo's llama3-8b: GQA with 8
// KV heads, SwiGLU 14336, RMSNorm, rotary, untied head, no biases.
TEST_CASE("HF Llama-3-8B config.json reads as the zoo llama3-8b", "[models]") {
  const ModelSpec from_hf = parse_text(kLlama3_8bConfig);
  const ModelSpec zoo = load_model("llama3-8b");
  check_same_architecture(from_hf, zoo);
  CHECK(from_hf.name == "llama");  // no "_name_or_path": the model_type names it
  CHECK(count_parameters(from_hf).total == count_parameters(zoo).total);
}

// "_name_or_path", written by save_pretrained, names the model.
TEST_CASE("HF _name_or_path names the model", "[models]") {
  nlohmann::json config = nlohmann::json::parse(kLlama3_8bConfig);
  config["_name_or_path"] = "meta-llama/Meta-Llama-3-8B";
  CHECK(parse_model(config, "test.json").name == "meta-llama/Meta-Llama-3-8B");
}

struct HfCase {
  const char* what;
  const char* config;
  int64_t parameters;  // as reported for the released checkpoint
};

// Released configs of the other supported model types parse to their published parameter
// counts, exactly, which checks the per-type bias, norm, MLP and tying rules of parse_hf_config:
//  - Mistral-7B-v0.1: 7,241,732,096 (no biases, untied);
//  - Qwen2-0.5B: 494,032,768 (Q/K/V biases only, tied embeddings);
//  - Pythia-160m (gpt_neox): 162,322,944 (LayerNorm, GELU, biases, untied embed_out).
TEST_CASE("HF Mistral, Qwen2 and GPT-NeoX configs parse to their published counts", "[models]") {
  const HfCase cases[] = {
      {"mistralai/Mistral-7B-v0.1", R"({
        "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
        "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
        "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
        "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
        "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
        "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_cache": true,
        "vocab_size": 32000})",
       7'241'732'096},
      {"Qwen/Qwen2-0.5B", R"({
        "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
        "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896,
        "initializer_range": 0.02, "intermediate_size": 4864, "max_position_embeddings": 131072,
        "max_window_layers": 24, "model_type": "qwen2", "num_attention_heads": 14,
        "num_hidden_layers": 24, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": true,
        "torch_dtype": "bfloat16", "use_cache": true, "use_sliding_window": false,
        "vocab_size": 151936})",
       494'032'768},
      {"EleutherAI/pythia-160m", R"({
        "architectures": ["GPTNeoXForCausalLM"], "bos_token_id": 0, "eos_token_id": 0,
        "hidden_act": "gelu", "hidden_size": 768, "initializer_range": 0.02,
        "intermediate_size": 3072, "layer_norm_eps": 1e-05, "max_position_embeddings": 2048,
        "model_type": "gpt_neox", "num_attention_heads": 12, "num_hidden_layers": 12,
        "rotary_emb_base": 10000, "rotary_pct": 0.25, "tie_word_embeddings": false,
        "torch_dtype": "float16", "use_cache": true, "use_parallel_residual": true,
        "vocab_size": 50304})",
       162'322'944},
  };
  for (const auto& hf : cases) {
    INFO(hf.what);
    CHECK(count_parameters(parse_text(hf.config)).total == hf.parameters);
  }
  // Mistral-7B-v0.1 attends to a 4096-token window in every layer; Qwen2 ignores its
  // sliding_window unless use_sliding_window is true (transformers' Qwen2Attention).
  CHECK(parse_text(cases[0].config).sliding_window == 4096);
  const ModelSpec qwen = parse_text(cases[1].config);
  CHECK(qwen.sliding_window == 0);
  CHECK(qwen.qkv_bias);
  CHECK_FALSE(qwen.linear_bias);
  CHECK(qwen.kv_heads == 2);
  const ModelSpec neox = parse_text(cases[2].config);
  CHECK(neox.norm == NormKind::kLayerNorm);
  CHECK(neox.mlp == MlpKind::kGelu);
  CHECK(neox.position == PositionKind::kRotary);
  CHECK(neox.kv_heads == neox.heads);
}

// GPT-2's config.json reads as the zoo gpt2-124m: 124,439,808 parameters.
TEST_CASE("GPT-2 config.json reads as the zoo gpt2-124m", "[models]") {
  const ModelSpec from_config = parse_text(kGpt2Config);
  check_same_architecture(from_config, load_model("gpt2-124m"));
  CHECK(count_parameters(from_config).total == 124'439'808);
}

// Older GPT-2-style configs carry "n_ctx" without "n_positions", and no "model_type".
TEST_CASE("GPT-2 config without model_type and n_positions uses n_ctx", "[models]") {
  const ModelSpec model =
      parse_text(R"({"n_embd": 64, "n_layer": 2, "n_head": 4, "n_ctx": 128, "vocab_size": 100})");
  CHECK(model.max_seq == 128);
  CHECK(model.ffn_hidden == 256);  // n_inner absent: 4 * n_embd
}

// Each zoo model is found by its file name and names itself the same way, dots included
// ("gpt2-1.5b.json" is "gpt2-1.5b": cmake/embed.cmake strips only the last extension).
TEST_CASE("zoo models are named as their files", "[models]") {
  const auto names = zoo_model_names();
  REQUIRE(names.size() == 18);
  for (const auto& name : names) {
    INFO(name);
    CHECK(load_model(name).name == name);
  }
}

// model_to_json writes the native format; reading it back gives the same spec, for every zoo
// model.
TEST_CASE("native JSON round trip through model_to_json", "[models]") {
  for (const auto& name : zoo_model_names()) {
    INFO(name);
    const ModelSpec model = load_model(name);
    const ModelSpec back = parse_model(model_to_json(model), "round trip");
    check_same_architecture(back, model);
    CHECK(back.name == model.name);
  }
}

// The native format's defaults: kv_heads = heads, ffn_hidden = 4 * hidden, GPT-2 style
// (layernorm, gelu, learned, tied, biases, dropout), name from the file name.
TEST_CASE("native format defaults", "[models]") {
  const ModelSpec model =
      parse_text(R"({"layers": 2, "hidden": 64, "heads": 4, "vocab": 100, "max_seq": 32})");
  CHECK(model.name == "test");
  CHECK(model.kv_heads == 4);
  CHECK(model.ffn_hidden == 256);
  CHECK(model.norm == NormKind::kLayerNorm);
  CHECK(model.mlp == MlpKind::kGelu);
  CHECK(model.position == PositionKind::kLearned);
  CHECK(model.tied_embeddings);
  CHECK(model.qkv_bias);
  CHECK(model.linear_bias);
  CHECK(model.dropout);
  CHECK(model.rope_theta == 10000);  // RoFormer's and HF LlamaConfig's default base
}

// A rotary model's base (HF "rope_theta"): read as given, refused unless positive.
TEST_CASE("native rope_theta is read, and refused unless positive", "[models]") {
  const std::string model =
      R"({"layers": 2, "hidden": 64, "heads": 4, "vocab": 100, "max_seq": 32, )"
      R"("position": "rotary", "rope_theta": )";
  CHECK(parse_text(model + "500000}").rope_theta == 500000);
  const auto error = parse_error_of(model + "0}");
  REQUIRE(error.has_value());
  CHECK(std::string(error->what()).find("rope_theta") != std::string::npos);
}

// Dropout rates: 0.1 each by default (GPT-2's resid_pdrop and attn_pdrop, Megatron-LM's
// --hidden-dropout and --attention-dropout), read as given, refused from 1 up and without dropout.
TEST_CASE("native dropout rates", "[models]") {
  const std::string model =
      R"({"layers": 2, "hidden": 64, "heads": 4, "vocab": 100, "max_seq": 32, )";
  const ModelSpec defaults = parse_text(model + R"("dropout": true})");
  CHECK(defaults.hidden_dropout == 0.1);
  CHECK(defaults.attention_dropout == 0.1);
  const ModelSpec given = parse_text(model + R"("hidden_dropout": 0.2, "attention_dropout": 0})");
  CHECK(given.hidden_dropout == 0.2);
  CHECK(given.attention_dropout == 0);
  for (const auto& [text, field] :
       {std::pair{R"("hidden_dropout": 1})", "hidden_dropout"},
        std::pair{R"("attention_dropout": -0.1})", "attention_dropout"},
        std::pair{R"("dropout": false, "hidden_dropout": 0.1})", "hidden_dropout"}}) {
    const auto error = parse_error_of(model + text);
    REQUIRE(error.has_value());
    CHECK(std::string(error->what()).find(field) != std::string::npos);
  }
}

// Hugging Face rates: GPT-2's resid_pdrop and attn_pdrop, GPT-NeoX's hidden_dropout and
// attention_dropout; a config with every rate 0 trains without dropout. The embedding is dropped at
// the branches' rate (Megatron-LM's), so GPT-2's embd_pdrop must equal resid_pdrop.
TEST_CASE("HF dropout rates", "[models]") {
  nlohmann::json gpt2 = nlohmann::json::parse(kGpt2Config);
  gpt2["resid_pdrop"] = 0.05;
  const auto embd_error = parse_error_of(gpt2.dump());  // embd_pdrop 0.1
  REQUIRE(embd_error.has_value());
  CHECK(std::string(embd_error->what()).find("embd_pdrop") != std::string::npos);
  gpt2["embd_pdrop"] = 0.05;
  gpt2["attn_pdrop"] = 0.0;
  const ModelSpec from_gpt2 = parse_model(gpt2, "test.json");
  CHECK(from_gpt2.dropout);
  CHECK(from_gpt2.hidden_dropout == 0.05);
  CHECK(from_gpt2.attention_dropout == 0);
  gpt2["resid_pdrop"] = gpt2["embd_pdrop"] = 0.0;
  CHECK_FALSE(parse_model(gpt2, "test.json").dropout);
  gpt2["attn_pdrop"] = 1.5;
  const auto error = parse_error_of(gpt2.dump());
  REQUIRE(error.has_value());
  CHECK(std::string(error->what()).find("attn_pdrop") != std::string::npos);
  nlohmann::json llama = nlohmann::json::parse(kLlama3_8bConfig);
  llama["model_type"] = "gpt_neox";
  llama["hidden_dropout"] = 0.1;
  const ModelSpec neox = parse_model(llama, "test.json");
  CHECK(neox.dropout);
  CHECK(neox.hidden_dropout == 0.1);
  CHECK(neox.attention_dropout == 0);  // the Llama config's attention_dropout 0.0
}

// The format is detected from the keys (models/model_reader.hpp).
TEST_CASE("model format detection", "[models]") {
  const auto detect = [](const char* text) {
    return detect_model_format(parse_json_text(text, "test.json"), "test.json");
  };
  CHECK(detect(kLlama3_8bConfig) == ModelFormat::kHuggingFace);
  CHECK(detect(R"({"model_type": "gpt_neox"})") == ModelFormat::kHuggingFace);
  CHECK(detect(kGpt2Config) == ModelFormat::kGpt2);
  CHECK(detect(R"({"n_embd": 768, "n_layer": 12})") == ModelFormat::kGpt2);
  CHECK(detect(R"({"layers": 2, "hidden": 64})") == ModelFormat::kNative);
  const auto error = input_error_of([&] { detect(R"({"d_model": 512})"); });
  REQUIRE(error);
  CHECK_THAT(std::string(error->what()), Catch::Contains("native"));
}

// Malformed JSON: the message gives the line (and column) of the mistake, here a missing ':' on
// line 3.
TEST_CASE("malformed JSON reports line and column", "[models][errors]") {
  const auto error = parse_error_of("{\n  \"layers\": 2,\n  \"hidden\" 64\n}");
  REQUIRE(error);
  CHECK_THAT(std::string(error->what()), Catch::Contains("line 3"));
  CHECK_THAT(std::string(error->what()), Catch::Contains("column"));
}

// A missing required field is named by its name in the user's format.
TEST_CASE("missing HF field is named", "[models][errors]") {
  nlohmann::json config = nlohmann::json::parse(kLlama3_8bConfig);
  config.erase("hidden_size");
  const auto error = input_error_of([&] { parse_model(config, "config.json"); });
  REQUIRE(error);
  CHECK(error->field() == "hidden_size");
  CHECK_THAT(std::string(error->what()), Catch::Contains("config.json"));
}

// A negative count is refused, naming the field.
TEST_CASE("negative layers are refused", "[models][errors]") {
  const auto error =
      parse_error_of(R"({"layers": -2, "hidden": 64, "heads": 4, "vocab": 100, "max_seq": 32})");
  REQUIRE(error);
  CHECK(error->field() == "layers");
  CHECK_THAT(std::string(error->what()), Catch::Contains("must be at least 1, found -2"));
}

// A model_type Strata does not read (e.g. DBRX's) names the field and lists the supported types.
TEST_CASE("unknown model_type lists the supported ones", "[models][errors]") {
  const auto error = parse_error_of(R"({"model_type": "dbrx", "d_model": 6144})");
  REQUIRE(error);
  CHECK(error->field() == "model_type");
  CHECK_THAT(std::string(error->what()), Catch::Contains("dbrx"));
  CHECK_THAT(std::string(error->what()), Catch::Contains("llama"));
  CHECK_THAT(std::string(error->what()), Catch::Contains("gpt2"));
}

// An unknown --model value that is neither a zoo name nor a file lists the zoo.
TEST_CASE("unknown zoo name lists the zoo", "[models][errors]") {
  const auto error = input_error_of([] { load_model("llama3-9b"); });
  REQUIRE(error);
  CHECK(error->field() == "--model");
  CHECK_THAT(std::string(error->what()), Catch::Contains("llama3-9b"));
  CHECK_THAT(std::string(error->what()), Catch::Contains("llama3-8b"));
  CHECK_THAT(std::string(error->what()), Catch::Contains("gpt2-124m"));
}

// hidden must split evenly into heads (head_dim = hidden / heads).
TEST_CASE("hidden not divisible by heads names heads", "[models][errors]") {
  const auto error =
      parse_error_of(R"({"layers": 2, "hidden": 100, "heads": 3, "vocab": 100, "max_seq": 32})");
  REQUIRE(error);
  CHECK(error->field() == "heads");
}

// The same mistake in an HF config names the HF field.
TEST_CASE("HF heads not dividing hidden_size names num_attention_heads", "[models][errors]") {
  nlohmann::json config = nlohmann::json::parse(kLlama3_8bConfig);
  config["num_attention_heads"] = 30;
  const auto error = input_error_of([&] { parse_model(config, "config.json"); });
  REQUIRE(error);
  CHECK(error->field() == "num_attention_heads");
}

// A stated head_dim sets the query, key and value widths (Mistral-Nemo: hidden 5120, 32 heads of
// 128, so Q is 4096 wide and the output projection 4096 x 5120), and heads no longer need to
// divide hidden_size.
TEST_CASE("HF head_dim other than hidden / heads sets the attention widths", "[models]") {
  nlohmann::json config = nlohmann::json::parse(kLlama3_8bConfig);
  config["head_dim"] = 128;
  CHECK(parse_model(config, "config.json").q_hidden() == 4096);
  config["hidden_size"] = 5120;
  config["num_attention_heads"] = 32;
  const ModelSpec nemo_like = parse_model(config, "config.json");
  CHECK(nemo_like.head_dim() == 128);
  CHECK(nemo_like.q_hidden() == 4096);
  CHECK(nemo_like.kv_hidden() == 8 * 128);
  // Q 5120 x 4096, K and V 5120 x 1024 each, output 4096 x 5120.
  CHECK(count_parameters(nemo_like).attention == 2 * 5120 * 4096 + 2 * 5120 * 1024);
}

// Qwen2's sliding window covers the layers from max_window_layers on: a per-layer window a
// ModelSpec does not hold, refused rather than applied to every layer.
TEST_CASE("HF Qwen2 with use_sliding_window is refused, naming the field", "[models][errors]") {
  nlohmann::json config = nlohmann::json::parse(R"({"model_type": "qwen2", "hidden_size": 896,
      "intermediate_size": 4864, "max_position_embeddings": 131072, "num_attention_heads": 14,
      "num_hidden_layers": 24, "num_key_value_heads": 2, "sliding_window": 4096,
      "max_window_layers": 21, "vocab_size": 151936})");
  CHECK_NOTHROW(parse_model(config, "config.json"));
  config["use_sliding_window"] = true;
  const auto error = input_error_of([&] { parse_model(config, "config.json"); });
  REQUIRE(error);
  CHECK(error->field() == "use_sliding_window");
}

// A typo in a native file is an error naming the unknown key, not a silently ignored field;
// "source" and "note" are documentation.
TEST_CASE("unknown native key is refused, documentation keys are not", "[models][errors]") {
  const auto error = parse_error_of(
      R"({"layers": 2, "hidden": 64, "hiden": 64, "heads": 4, "vocab": 100, "max_seq": 32})");
  REQUIRE(error);
  CHECK(error->field() == "hiden");
  CHECK_NOTHROW(parse_text(R"({"layers": 2, "hidden": 64, "heads": 4, "vocab": 100,
                               "max_seq": 32, "source": "a paper", "note": "a caveat"})"));
}

// A wrong type or an unknown choice names the field and the accepted values.
TEST_CASE("wrong type and unknown choice are named", "[models][errors]") {
  const auto wrong_type =
      parse_error_of(R"({"layers": "two", "hidden": 64, "heads": 4, "vocab": 100, "max_seq": 32})");
  REQUIRE(wrong_type);
  CHECK(wrong_type->field() == "layers");
  const auto bad_choice = parse_error_of(
      R"({"layers": 2, "hidden": 64, "heads": 4, "vocab": 100, "max_seq": 32, "norm": "batch"})");
  REQUIRE(bad_choice);
  CHECK(bad_choice->field() == "norm");
  CHECK_THAT(std::string(bad_choice->what()), Catch::Contains("rmsnorm"));
}

// --model also takes a path; the file's errors name the path.
TEST_CASE("load_model reads a file path", "[models]") {
  const auto path = std::filesystem::temp_directory_path() /
                    ("strata_model_test_" + std::to_string(::getpid()) + ".json");
  {
    std::ofstream out(path);
    out << model_to_json(load_model("tiny-gpt")).dump(2);
  }
  CHECK(count_parameters(load_model(path.string())).total ==
        count_parameters(load_model("tiny-gpt")).total);
  {
    std::ofstream out(path);
    out << R"({"layers": 0, "hidden": 64, "heads": 4, "vocab": 100, "max_seq": 32})";
  }
  const auto error = input_error_of([&] { load_model(path.string()); });
  std::filesystem::remove(path);
  REQUIRE(error);
  CHECK(error->where() == path.string());
  CHECK(error->field() == "layers");
}

}  // namespace
}  // namespace strata
