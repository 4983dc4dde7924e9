// Megatron-LM's MoE model flags (cli/model_flags.hpp; arguments.py, _add_moe_args): the models
// they describe against the Hugging Face configs of the same models (tests/models/data/), the
// defaults Megatron fills in, overriding a --model, and the refusals naming the flag.

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "cli/model_flags.hpp"
#include "models/model_reader.hpp"
#include "tests/cli/parse_flags.hpp"
#include "tests/input_error.hpp"

namespace strata {
namespace {

ModelSpec family(const std::string& file) {
  return load_model(std::string(STRATA_SOURCE_DIR) + "/tests/models/data/" + file);
}

// Mixtral 8x7B's transformer as Megatron-LM's flags give it (its examples/mixtral script): 32
// layers of 4096, 32 heads over 8 K/V groups, SwiGLU of 14336, RMSNorm, rotary, untied, no
// biases, a 32,000-token vocabulary (a multiple of 128, so unpadded at tp 1).
const std::vector<std::string> kMixtralModel = {"--num-layers",
                                                "32",
                                                "--hidden-size",
                                                "4096",
                                                "--ffn-hidden-size",
                                                "14336",
                                                "--num-attention-heads",
                                                "32",
                                                "--group-query-attention",
                                                "--num-query-groups",
                                                "8",
                                                "--swiglu",
                                                "--normalization",
                                                "RMSNorm",
                                                "--position-embedding-type",
                                                "rope",
                                                "--untie-embeddings-and-output-weights",
                                                "--disable-bias-linear",
                                                "--vocab-size",
                                                "32000"};

ModelSpec model_by_flags(std::vector<std::string> args, const std::optional<ModelSpec>& base = {}) {
  const cli::PlanFlags flags = test::parse_plan_flags(std::move(args));
  CHECK(cli::any_model_flag(flags.model_flags));
  return cli::megatron_model(flags.model_flags, base, 4096, 1);
}

std::vector<std::string> mixtral_with(std::vector<std::string> moe) {
  std::vector<std::string> args = kMixtralModel;
  args.insert(args.end(), moe.begin(), moe.end());
  return args;
}

// --num-experts 8 --moe-router-topk 2 over that transformer is Mixtral 8x7B: the parameters its
// config.json gives, 46.70B in all and 12.88B active (Jiang et al. 2024: 47B and 13B). The experts
// are --ffn-hidden-size wide, Megatron's default without --moe-ffn-hidden-size.
TEST_CASE("Megatron's MoE flags for Mixtral 8x7B give its config.json's model", "[cli][moe]") {
  const ModelSpec model =
      model_by_flags(mixtral_with({"--num-experts", "8", "--moe-router-topk", "2"}));
  const ModelSpec hf = family("mixtral-8x7b.json");
  CHECK(model.experts == 8);
  CHECK(model.experts_per_token == 2);
  CHECK(model.expert_ffn_hidden == 14336);
  CHECK(model.first_dense_layers == 0);
  CHECK(model.router_score == RouterScore::kSoftmax);
  CHECK(model.capacity_factor == 0);  // dropless: Megatron's default
  const ParameterCount counts = count_parameters(model);
  CHECK(counts.total == count_parameters(hf).total);
  CHECK(counts.active == count_parameters(hf).active);
  // Top-k defaults to 2 in Megatron-LM ("The default is 2").
  CHECK(model_by_flags(mixtral_with({"--num-experts", "8"})).experts_per_token == 2);
}

// DeepSeek-V3's MoE as Megatron-LM's recipes give it: 256 experts of 2048, top 8, one shared
// expert of 2048, the first 3 of 61 layers dense ("([0]*3+[1]*58)"), sigmoid scores with the
// balancing bias, 8 groups of which 4 per token. Its parameters without latent attention and MTP:
// HF's config with plain attention (kv_lora_rank 0) counts the same routed and shared experts.
TEST_CASE("DeepSeek-style MoE flags give dense first layers and group-limited routing",
          "[cli][moe]") {
  const ModelSpec model = model_by_flags({"--num-layers",
                                          "61",
                                          "--hidden-size",
                                          "7168",
                                          "--ffn-hidden-size",
                                          "18432",
                                          "--num-attention-heads",
                                          "128",
                                          "--swiglu",
                                          "--normalization",
                                          "RMSNorm",
                                          "--position-embedding-type",
                                          "rope",
                                          "--untie-embeddings-and-output-weights",
                                          "--disable-bias-linear",
                                          "--vocab-size",
                                          "129280",
                                          "--num-experts",
                                          "256",
                                          "--moe-router-topk",
                                          "8",
                                          "--moe-ffn-hidden-size",
                                          "2048",
                                          "--moe-shared-expert-intermediate-size",
                                          "2048",
                                          "--moe-layer-freq",
                                          "([0]*3+[1]*58)",
                                          "--moe-router-score-function",
                                          "sigmoid",
                                          "--moe-router-enable-expert-bias",
                                          "--moe-router-num-groups",
                                          "8",
                                          "--moe-router-group-topk",
                                          "4"});
  const ModelSpec hf = family("deepseek-v3.json");
  CHECK(model.first_dense_layers == hf.first_dense_layers);
  CHECK(model.first_dense_layers == 3);
  CHECK(model.moe_layers() == 58);
  CHECK(model.experts == hf.experts);
  CHECK(model.experts_per_token == hf.experts_per_token);
  CHECK(model.expert_ffn_hidden == hf.expert_ffn_hidden);
  CHECK(model.shared_expert_ffn_hidden == hf.shared_expert_ffn_hidden);
  CHECK(model.router_score == RouterScore::kSigmoid);
  CHECK(model.router_bias);
  CHECK(model.router_groups == 8);
  CHECK(model.router_group_limit == 4);
  // An MoE layer's MLP, router and its bias included, is HF's: the attention is what differs.
  CHECK(count_parameters(model).moe_mlp == count_parameters(hf).moe_mlp);
}

// Over a --model the flags override its fields and keep the rest; Megatron routes without groups
// when --moe-router-group-topk is not given (topk_softmax_with_capacity: `if group_topk:`).
TEST_CASE("MoE flags over a --model override its fields", "[cli][moe]") {
  const ModelSpec mixtral = family("mixtral-8x7b.json");
  const ModelSpec top1 =
      model_by_flags({"--moe-router-topk", "1", "--moe-expert-capacity-factor", "1.25"}, mixtral);
  CHECK(top1.experts_per_token == 1);
  CHECK(top1.capacity_factor == 1.25);
  CHECK(top1.experts == 8);
  CHECK(top1.expert_ffn_hidden == 14336);
  CHECK(top1.vocab == mixtral.vocab);  // no --make-vocab-size-divisible-by: not padded again
  // A dense --model made MoE: the experts as wide as its MLP, top-k 2.
  const ModelSpec llama = load_model("llama3-8b");
  const ModelSpec moe = model_by_flags({"--num-experts", "4"}, llama);
  CHECK(moe.experts == 4);
  CHECK(moe.experts_per_token == 2);
  CHECK(moe.expert_ffn_hidden == llama.ffn_hidden);
  const ModelSpec ungrouped = model_by_flags({"--moe-router-num-groups", "4"}, mixtral);
  CHECK(ungrouped.router_groups == 0);
}

TEST_CASE("MoE model flags with bad values are refused naming the flag", "[cli][moe]") {
  const auto field = [](std::vector<std::string> args, const std::optional<ModelSpec>& base) {
    const auto error = test::input_error_of([&] { model_by_flags(std::move(args), base); });
    REQUIRE(error);
    return error->field();
  };
  const ModelSpec mixtral = family("mixtral-8x7b.json");
  const ModelSpec dense = load_model("llama3-8b");
  CHECK(field({"--moe-router-topk", "2"}, dense) == "--moe-router-topk");
  CHECK(field({"--moe-layer-freq", "([0]*3+[1]*29)"}, dense) == "--moe-layer-freq");
  CHECK(field({"--num-experts", "0"}, dense) == "--num-experts");
  CHECK(field({"--moe-router-topk", "9"}, mixtral) == "--moe-router-topk");
  CHECK(field({"--moe-ffn-hidden-size", "0"}, mixtral) == "--moe-ffn-hidden-size");
  CHECK(field({"--moe-expert-capacity-factor", "0"}, mixtral) == "--moe-expert-capacity-factor");
  CHECK(field({"--moe-router-score-function", "relu"}, mixtral) == "--moe-router-score-function");
  CHECK(field({"--moe-router-group-topk", "2"}, mixtral) == "--moe-router-group-topk");
  CHECK(field({"--moe-layer-freq", "2"}, mixtral) == "--moe-layer-freq");
}

}  // namespace
}  // namespace strata
