#include "models/deepseek_config.hpp"

#include <string>
#include <string_view>

#include <fmt/format.h>

namespace strata {

namespace {

// A width the config must state, null meaning none ("q_lora_rank": null in DeepSeek-V2-Lite,
// "n_shared_experts": null in a config without shared experts). An absent key is refused rather
// than defaulted: DeepSeek's configuration files and transformers' config classes default it
// differently (q_lora_rank 1536, n_shared_experts None in V2 and 1 in V3), and a wrong guess would
// change the count silently.
int64_t stated_or_null(const JsonFields& fields, std::string_view key, const char* null_means) {
  if (!fields.json().contains(std::string(key))) {
    fields.fail(
        key, "missing",
        fmt::format("state \"{}\" (null: {}), as every released config does", key, null_means));
  }
  return fields.has(key) ? fields.non_negative_int(key) : 0;
}

// Multi-head latent attention (DeepSeek-V2 paper Sec. 2.1; DeepseekV2Attention,
// DeepseekV3Attention): "q_lora_rank" (null: q_proj, DeepSeek-V2-Lite), "kv_lora_rank",
// "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", all required, with biases on the
// down-projections and o_proj when "attention_bias" (default false, as released). Every head has
// its own key and value, up-projected from the latent: the modeling files read neither
// "num_key_value_heads" nor "head_dim" (transformers' DeepseekV3Config sets head_dim to
// qk_rope_head_dim, the rotary embedding's width), and neither is read here.
void read_latent_attention(const JsonFields& fields, ModelSpec& model) {
  model.kv_heads = model.heads;
  model.head_size = 0;
  model.q_lora_rank = stated_or_null(fields, "q_lora_rank", "a plain query projection");
  model.kv_lora_rank = fields.positive_int("kv_lora_rank");
  model.qk_nope_head_dim = fields.positive_int("qk_nope_head_dim");
  model.qk_rope_head_dim = fields.positive_int("qk_rope_head_dim");
  model.v_head_dim = fields.positive_int("v_head_dim");
  model.qkv_bias = model.out_bias = fields.boolean("attention_bias", false);
}

// DeepSeekMoE (Dai et al. 2024; DeepseekV2MoE, DeepseekV3MoE): "n_routed_experts" routed experts
// of "moe_intermediate_size", "num_experts_per_tok" per token, "n_shared_experts" shared ones of
// the same width that every token passes through (one MLP of n_shared_experts x
// moe_intermediate_size, no gate), and the first "first_k_dense_replace" layers dense with
// "intermediate_size". A layer is MoE when layer_idx >= first_k_dense_replace and layer_idx %
// "moe_layer_freq" == 0: only a step of 1 (every released model) leaves the dense layers a prefix.
// The router ("MoEGate", DeepseekV3TopkRouter) scores with "scoring_func" (V2 softmax, V3
// sigmoid by default) and chooses by "topk_method": "greedy" takes the top k of all experts;
// "group_limited_greedy" (V2) and "noaux_tc" (V3) first keep the best "topk_group" of "n_group"
// groups, and noaux_tc adds e_score_correction_bias to the scores for the choice. Its defaults are
// DeepSeek's configuration files' (V2 greedy, V3 noaux_tc; transformers' DeepseekV3 always routes
// as noaux_tc). "norm_topk_prob" and "routed_scaling_factor" scale the chosen experts' weights,
// "aux_loss_alpha" and "seq_aux" weigh the balancing loss, "ep_size" splits experts for the
// modeling file's inference: none changes the parameters or the step's products, so none is read.
void read_deepseek_experts(const JsonFields& fields, const std::string& type, ModelSpec& model) {
  model.experts = fields.positive_int("n_routed_experts");
  model.experts_per_token = fields.positive_int("num_experts_per_tok");
  if (model.experts_per_token > model.experts) {
    fields.fail(
        "num_experts_per_tok",
        fmt::format("sends each token to {} of {} experts", model.experts_per_token, model.experts),
        "give at most as many experts per token as there are experts");
  }
  model.expert_ffn_hidden = fields.positive_int("moe_intermediate_size");
  model.shared_expert_ffn_hidden =
      stated_or_null(fields, "n_shared_experts", "no shared experts") * model.expert_ffn_hidden;
  model.first_dense_layers = fields.non_negative_int("first_k_dense_replace");
  if (fields.has("moe_layer_freq") && fields.positive_int("moe_layer_freq") != 1) {
    fields.fail("moe_layer_freq",
                "makes every n-th layer MoE, and Strata models dense layers only before the "
                "first MoE layer",
                "set \"moe_layer_freq\": 1 (every released DeepSeek-V2 and V3 model)");
  }
  const bool v3 = type == "deepseek_v3";
  const std::string scoring = fields.has("scoring_func")
                                  ? fields.choice("scoring_func", {"softmax", "sigmoid"})
                                  : (v3 ? "sigmoid" : "softmax");
  model.router_score = scoring == "softmax" ? RouterScore::kSoftmax : RouterScore::kSigmoid;
  const std::string method =
      fields.has("topk_method")
          ? fields.choice("topk_method", {"greedy", "group_limited_greedy", "noaux_tc"})
          : (v3 ? "noaux_tc" : "greedy");
  model.router_bias = method == "noaux_tc";
  if (method == "greedy") return;  // n_group and topk_group are not used (V2-Lite states 1 and 1)
  model.router_groups = fields.positive_int("n_group");
  model.router_group_limit = fields.positive_int("topk_group");
  if (model.experts % model.router_groups != 0) {
    fields.fail("n_group",
                fmt::format("{} routed experts do not fall into {} groups of equal size",
                            model.experts, model.router_groups),
                "choose n_group dividing n_routed_experts (DeepSeek-V3: 256 in 8)");
  }
  if (model.router_group_limit > model.router_groups) {
    fields.fail("topk_group",
                fmt::format("keeps {} of {} groups", model.router_group_limit, model.router_groups),
                "give at most n_group groups");
  }
}

}  // namespace

// DeepseekV2ForCausalLM and DeepseekV3ForCausalLM (DeepSeek's modeling_deepseek.py on the Hub and
// transformers' deepseek_v2 and deepseek_v3): RMSNorm before attention and MLP, SwiGLU MLPs
// without biases (the dense layers' of "intermediate_size"), rotary positions, an untied LM head
// ("tie_word_embeddings" default false), latent attention (read_latent_attention) and DeepSeekMoE
// (read_deepseek_experts). "rope_scaling" (YaRN in every release) stretches the rotary frequencies
// and the softmax scale, without parameters or products; "quantization_config" (V3's FP8 release)
// is how the published weights are stored, while a plan chooses its own precision: neither is read.
// "num_nextn_predict_layers" (V3: 1) is the multi-token-prediction modules trained with the model
// (ModelSpec::mtp_layers): counted apart from the total (ParameterCount::mtp), as DeepSeek's 671B
// excludes them, and refused by validate_plan until the plan compiler lowers them; absent, none
// (transformers builds none and drops their weights).
ModelSpec parse_deepseek_config(const JsonFields& fields, ModelSpec model) {
  const std::string type = fields.string("model_type");
  model.ffn_hidden = fields.positive_int("intermediate_size");
  model.max_seq = fields.positive_int("max_position_embeddings");
  model.tied_embeddings = fields.boolean("tie_word_embeddings", false);
  model.norm = NormKind::kRmsNorm;
  model.mlp = MlpKind::kSwiGlu;
  model.block = LayerBlock::kPreNorm;
  model.linear_bias = false;
  read_latent_attention(fields, model);
  read_deepseek_experts(fields, type, model);
  if (fields.has("num_nextn_predict_layers")) {
    model.mtp_layers = fields.non_negative_int("num_nextn_predict_layers");
  }
  return model;
}

}  // namespace strata
