#include "cli/model_flags.hpp"

#include <fmt/format.h>

#include "cli/moe_layer_freq.hpp"
#include "common/error.hpp"

namespace strata::cli {

namespace {

constexpr const char* kCommandLine = "command line";

// The GPT-2 BPE tokenizer's vocabulary (gpt2-vocab.json), which Megatron-LM's GPT2BPETokenizer
// reads: 50,257 tokens.
constexpr int64_t kGpt2BpeVocab = 50257;

[[noreturn]] void refuse(const char* flag, const std::string& problem, const std::string& fix) {
  throw InputError(kCommandLine, flag, problem, fix);
}

int64_t required(std::optional<int64_t> value, const char* flag) {
  if (!value) {
    refuse(flag, "missing: a model given by Megatron-LM's flags needs it",
           fmt::format("give {} (or --model NAME for a zoo or config.json model)", flag));
  }
  return *value;
}

void refuse_below(std::optional<int64_t> value, int64_t low, const char* flag, const char* fix) {
  if (value && *value < low)
    refuse(flag, fmt::format("must be at least {}, found {}", low, *value), fix);
}

// Megatron-LM's MoE flags (arguments.py, _add_moe_args), in the model's group.
void add_moe_flags(CLI::App& command, ModelFlags& flags, const std::string& group) {
  const auto option = [&](const char* name, auto& value, const char* help) {
    command.add_option(name, value, help)->group(group);
  };
  option("--num-experts", flags.num_experts, "Routed experts per MoE layer (none: a dense model)");
  option("--moe-router-topk", flags.moe_router_topk, "Experts each token is routed to (default 2)");
  option("--moe-ffn-hidden-size", flags.moe_ffn_hidden_size,
         "Width of each routed expert (default --ffn-hidden-size)");
  option("--moe-shared-expert-intermediate-size", flags.moe_shared_expert_intermediate_size,
         "Width of the shared experts in all (default none)");
  option("--moe-layer-freq", flags.moe_layer_freq,
         "1 (every layer MoE) or a list such as \"([0]*3+[1]*58)\" (the first 3 dense)");
  option("--moe-expert-capacity-factor", flags.moe_expert_capacity_factor,
         "Tokens an expert takes, over its balanced share (default: dropless)");
  option("--moe-router-score-function", flags.moe_router_score_function,
         "softmax (default) or sigmoid");
  option("--moe-router-num-groups", flags.moe_router_num_groups,
         "Expert groups for group-limited routing");
  option("--moe-router-group-topk", flags.moe_router_group_topk,
         "Groups each token's experts come from (group-limited routing)");
  command
      .add_flag("--moe-router-enable-expert-bias", flags.moe_router_enable_expert_bias,
                "A balancing bias per expert (aux-loss-free routing)")
      ->group(group);
}

// The first MoE flag given, for a refusal on a dense model; nullptr when none is.
const char* first_moe_flag(const ModelFlags& f) {
  const std::pair<bool, const char*> flags[] = {
      {f.moe_router_topk.has_value(), "--moe-router-topk"},
      {f.moe_ffn_hidden_size.has_value(), "--moe-ffn-hidden-size"},
      {f.moe_shared_expert_intermediate_size.has_value(), "--moe-shared-expert-intermediate-size"},
      {f.moe_layer_freq.has_value(), "--moe-layer-freq"},
      {f.moe_expert_capacity_factor.has_value(), "--moe-expert-capacity-factor"},
      {f.moe_router_score_function.has_value(), "--moe-router-score-function"},
      {f.moe_router_num_groups.has_value(), "--moe-router-num-groups"},
      {f.moe_router_group_topk.has_value(), "--moe-router-group-topk"},
      {f.moe_router_enable_expert_bias, "--moe-router-enable-expert-bias"}};
  for (const auto& [given, flag] : flags) {
    if (given) return flag;
  }
  return nullptr;
}

// The router's flags over an MoE model: its scoring, group-limited routing, balancing bias and
// capacity. Consistency across fields (groups dividing the experts, a limit that leaves each token
// its top k, a capacity at most experts / top-k) is validate_model's.
ModelSpec with_router_flags(const ModelFlags& f, ModelSpec model) {
  if (f.moe_router_score_function) {
    const std::string& score = *f.moe_router_score_function;
    if (score != "softmax" && score != "sigmoid") {
      refuse("--moe-router-score-function", fmt::format("'{}' is not softmax or sigmoid", score),
             "use softmax or sigmoid");
    }
    model.router_score = score == "softmax" ? RouterScore::kSoftmax : RouterScore::kSigmoid;
  }
  refuse_below(f.moe_router_num_groups, 1, "--moe-router-num-groups",
               "give the expert groups, e.g. 8 (DeepSeek-V3's 256 experts in 8)");
  refuse_below(f.moe_router_group_topk, 1, "--moe-router-group-topk",
               "give the groups each token's experts come from, e.g. 4");
  if (f.moe_router_num_groups) model.router_groups = *f.moe_router_num_groups;
  if (f.moe_router_group_topk) model.router_group_limit = *f.moe_router_group_topk;
  // Megatron-Core's router limits the groups only when --moe-router-group-topk is given
  // (moe_utils.py, topk_softmax_with_capacity: `if group_topk:`); groups alone route over all.
  if (model.router_groups > 0 && model.router_group_limit == 0) model.router_groups = 0;
  if (model.router_group_limit > 0 && model.router_groups == 0) {
    refuse("--moe-router-group-topk",
           "limits the expert groups a token is routed to, but the experts are in no groups",
           "give --moe-router-num-groups too (Megatron-LM divides the experts by it)");
  }
  if (f.moe_router_enable_expert_bias) model.router_bias = true;
  if (f.moe_expert_capacity_factor) {
    if (!(*f.moe_expert_capacity_factor > 0)) {
      refuse("--moe-expert-capacity-factor",
             fmt::format("must be > 0, found {}", *f.moe_expert_capacity_factor),
             "give the tokens an expert takes over its balanced share, e.g. 1.0, or leave it out "
             "for dropless routing (Megatron-LM's default)");
    }
    model.capacity_factor = *f.moe_expert_capacity_factor;
  }
  return model;
}

// Megatron-LM's MoE flags over `model`, with the defaults its arguments.py and validate_args give
// a model that has experts: top-k 2, experts as wide as the dense MLP, every layer MoE, softmax
// scores, no groups, no bias, dropless. Over a --model they override its fields. Megatron has no
// flag for Qwen-MoE's shared-expert gate (its layer spec sets it), so a --model's gate is kept.
ModelSpec with_moe_flags(const ModelFlags& f, ModelSpec model) {
  refuse_below(f.num_experts, 1, "--num-experts",
               "give the routed experts per MoE layer, e.g. 8, or leave it out for a dense model");
  if (f.num_experts) model.experts = *f.num_experts;
  if (!model.moe()) {
    if (const char* flag = first_moe_flag(f)) {
      refuse(flag, "describes experts, but the model has none",
             "give --num-experts N (the routed experts per MoE layer), or drop it");
    }
    return model;
  }
  // --moe-router-topk: "Number of experts to route to for each token. The default is 2."
  if (f.moe_router_topk) {
    model.experts_per_token = *f.moe_router_topk;
  } else if (model.experts_per_token == 0) {
    model.experts_per_token = 2;
  }
  if (model.experts_per_token < 1 || model.experts_per_token > model.experts) {
    refuse("--moe-router-topk",
           fmt::format("must be from 1 to the {} experts, found {}", model.experts,
                       model.experts_per_token),
           "give the experts each token is routed to, e.g. 2");
  }
  // validate_args: "moe_ffn_hidden_size is not set, using ffn_hidden_size for MoE instead".
  refuse_below(f.moe_ffn_hidden_size, 1, "--moe-ffn-hidden-size",
               "give each routed expert's width, e.g. 2048");
  if (f.moe_ffn_hidden_size) {
    model.expert_ffn_hidden = *f.moe_ffn_hidden_size;
  } else if (model.expert_ffn_hidden == 0) {
    model.expert_ffn_hidden = model.ffn_hidden;
  }
  // --moe-shared-expert-intermediate-size: the shared experts' width in all; None, no shared one.
  refuse_below(f.moe_shared_expert_intermediate_size, 0, "--moe-shared-expert-intermediate-size",
               "give the shared experts' total width, e.g. 2048");
  if (f.moe_shared_expert_intermediate_size) {
    model.shared_expert_ffn_hidden = *f.moe_shared_expert_intermediate_size;
    if (model.shared_expert_ffn_hidden == 0) model.shared_expert_gate = false;
  }
  if (f.moe_layer_freq)
    model.first_dense_layers = first_dense_layers_of(*f.moe_layer_freq, model.layers);
  return with_router_flags(f, model);
}

}  // namespace

void add_model_flags(CLI::App& command, ModelFlags& flags) {
  const std::string group = "Model (Megatron-LM's flags; over --model when given)";
  const auto option = [&](const char* name, auto& value, const char* help) {
    command.add_option(name, value, help)->group(group);
  };
  const auto flag = [&](const char* name, bool& value, const char* help) {
    command.add_flag(name, value, help)->group(group);
  };
  option("--num-layers", flags.num_layers, "Transformer layers");
  option("--hidden-size", flags.hidden_size, "Model width");
  option("--num-attention-heads", flags.num_attention_heads, "Attention (query) heads");
  option("--ffn-hidden-size", flags.ffn_hidden_size,
         "MLP width (default 4 x hidden; with --swiglu 8/3 x hidden down to a multiple of 64)");
  flag("--group-query-attention", flags.group_query_attention,
       "Grouped-query attention with --num-query-groups K/V heads");
  option("--num-query-groups", flags.num_query_groups, "K/V heads under --group-query-attention");
  option("--kv-channels", flags.kv_channels, "Width of each head (default hidden / heads)");
  flag("--swiglu", flags.swiglu, "SwiGLU MLP");
  option("--normalization", flags.normalization, "LayerNorm or RMSNorm");
  option("--position-embedding-type", flags.position_embedding_type,
         "learned_absolute, rope or none");
  flag("--use-rotary-position-embeddings", flags.use_rotary_position_embeddings,
       "Older Megatron-LM: rotary positions");
  flag("--no-position-embedding", flags.no_position_embedding,
       "Older Megatron-LM: no learned position table");
  flag("--untie-embeddings-and-output-weights", flags.untie_embeddings,
       "An LM head of its own (default: tied to the embedding)");
  option("--max-position-embeddings", flags.max_position_embeddings,
         "Learned position table size (default: --seq-length)");
  option("--vocab-size", flags.vocab_size, "Vocabulary before padding");
  option("--tokenizer-type", flags.tokenizer_type,
         "GPT2BPETokenizer gives the 50,257-token vocabulary; others need --vocab-size");
  option("--make-vocab-size-divisible-by", flags.make_vocab_size_divisible_by,
         "Pad the vocabulary to a multiple of this x tp (default 128)");
  flag("--disable-bias-linear", flags.disable_bias_linear, "No biases on the linear layers");
  flag("--add-qkv-bias", flags.add_qkv_bias, "Biases on Q, K and V only (with the above)");
  flag("--qk-layernorm", flags.qk_layernorm, "A norm over each query and key head");
  option("--attention-dropout", flags.attention_dropout, "Dropout after the softmax (default 0.1)");
  option("--hidden-dropout", flags.hidden_dropout, "Dropout after each block (default 0.1)");
  add_moe_flags(command, flags, group);
  option("--mtp-num-layers", flags.mtp_num_layers,
         "Multi-token-prediction modules trained with the model (DeepSeek-V3's config has 1; 0 "
         "plans it without them)");
}

bool any_model_flag(const ModelFlags& f) {
  return f.num_layers || f.hidden_size || f.num_attention_heads || f.ffn_hidden_size ||
         f.num_query_groups || f.kv_channels || f.max_position_embeddings || f.vocab_size ||
         f.make_vocab_size_divisible_by || f.group_query_attention || f.swiglu ||
         f.untie_embeddings || f.disable_bias_linear || f.add_qkv_bias || f.qk_layernorm ||
         f.use_rotary_position_embeddings || f.no_position_embedding || f.normalization ||
         f.position_embedding_type || f.attention_dropout || f.hidden_dropout || f.num_experts ||
         f.mtp_num_layers || first_moe_flag(f) != nullptr;
}

ModelSpec megatron_model(const ModelFlags& f, const std::optional<ModelSpec>& base, int64_t seq_len,
                         int64_t tp) {
  ModelSpec model;
  if (base) {
    model = *base;
  } else {
    // Megatron-LM's defaults (arguments.py): LayerNorm, GELU, learned_absolute positions, tied
    // embeddings, add_bias_linear, attention and hidden dropout 0.1 (ModelSpec's defaults).
    model.name = "megatron-flags";
    model.layers = required(f.num_layers, "--num-layers");
    model.hidden = required(f.hidden_size, "--hidden-size");
    model.heads = required(f.num_attention_heads, "--num-attention-heads");
    model.kv_heads = model.heads;
    if (f.vocab_size) {
      model.vocab = *f.vocab_size;
    } else if (f.tokenizer_type.value_or("GPT2BPETokenizer") == "GPT2BPETokenizer") {
      // Megatron-LM's GPT examples give a GPT-2 vocabulary file and no --tokenizer-type, which
      // was GPT2BPETokenizer by default.
      model.vocab = kGpt2BpeVocab;
    } else {
      refuse(
          "--vocab-size",
          fmt::format("missing: the vocabulary of {} is in its tokenizer files, which Strata "
                      "does not read",
                      f.tokenizer_type ? "--tokenizer-type " + *f.tokenizer_type : "the tokenizer"),
          "give --vocab-size N (the tokenizer's vocabulary, before Megatron's padding)");
    }
    model.max_seq = f.max_position_embeddings.value_or(seq_len);
  }
  if (f.num_layers) model.layers = *f.num_layers;
  if (f.hidden_size) model.hidden = *f.hidden_size;
  if (f.num_attention_heads) model.heads = model.kv_heads = *f.num_attention_heads;
  if (f.vocab_size) model.vocab = *f.vocab_size;
  if (f.max_position_embeddings) model.max_seq = *f.max_position_embeddings;
  if (f.group_query_attention) {
    model.kv_heads = f.num_query_groups ? *f.num_query_groups : 1;  // Megatron's default: 1
  }
  if (f.kv_channels) model.head_size = *f.kv_channels;
  if (f.swiglu) model.mlp = MlpKind::kSwiGlu;
  // Megatron-LM: with --swiglu and no --ffn-hidden-size, int((4 h * 2 / 3) / 64) * 64.
  if (f.ffn_hidden_size) {
    model.ffn_hidden = *f.ffn_hidden_size;
  } else if (!base || f.hidden_size || f.swiglu) {
    model.ffn_hidden =
        model.mlp == MlpKind::kSwiGlu ? (4 * model.hidden * 2 / 3) / 64 * 64 : 4 * model.hidden;
  }
  if (f.normalization) {
    if (*f.normalization != "LayerNorm" && *f.normalization != "RMSNorm") {
      refuse("--normalization", fmt::format("'{}' is not LayerNorm or RMSNorm", *f.normalization),
             "use LayerNorm or RMSNorm");
    }
    model.norm = *f.normalization == "LayerNorm" ? NormKind::kLayerNorm : NormKind::kRmsNorm;
  }
  if (f.use_rotary_position_embeddings) model.position = PositionKind::kRotary;
  if (f.position_embedding_type) {
    const std::string& type = *f.position_embedding_type;
    if (type != "learned_absolute" && type != "rope" && type != "none") {
      refuse("--position-embedding-type",
             fmt::format("'{}' is not modelled (learned_absolute, rope and none are)", type),
             "use learned_absolute, rope or none");
    }
    // "none" has no position parameters, as rotary has none: the same count and step.
    model.position = type == "learned_absolute" ? PositionKind::kLearned : PositionKind::kRotary;
  }
  if (f.no_position_embedding && model.position == PositionKind::kLearned)
    model.position = PositionKind::kRotary;
  if (f.untie_embeddings) model.tied_embeddings = false;
  if (f.disable_bias_linear) model.out_bias = model.linear_bias = model.qkv_bias = false;
  if (f.add_qkv_bias) model.qkv_bias = true;
  if (f.qk_layernorm) model.qk_norm = QkNorm::kPerHead;
  if (f.mtp_num_layers) model.mtp_layers = *f.mtp_num_layers;
  for (const auto& [value, flag] : {std::pair{f.attention_dropout, "--attention-dropout"},
                                    std::pair{f.hidden_dropout, "--hidden-dropout"}}) {
    if (value && !(*value >= 0 && *value < 1)) {
      refuse(flag, fmt::format("must be in [0, 1), found {}", *value), "give a probability");
    }
  }
  if (f.attention_dropout || f.hidden_dropout) {
    // A rate not given is the model's (or Megatron's), or 0 for a model without dropout.
    model.attention_dropout =
        f.attention_dropout.value_or(model.dropout ? model.attention_dropout : 0.0);
    model.hidden_dropout = f.hidden_dropout.value_or(model.dropout ? model.hidden_dropout : 0.0);
    model.dropout = model.attention_dropout > 0 || model.hidden_dropout > 0;
  }
  model = with_moe_flags(f, model);
  validate_model(model, kCommandLine);  // sizes in bounds before the padding's arithmetic
  // _vocab_size_with_padding: the next multiple of divisible x tp.
  if (!base || f.make_vocab_size_divisible_by) {
    const int64_t divisible = f.make_vocab_size_divisible_by.value_or(128);
    if (divisible < 1 || divisible > (int64_t{1} << 20)) {
      refuse("--make-vocab-size-divisible-by",
             fmt::format("must be from 1 to 1048576, found {}", divisible), "give e.g. 128");
    }
    const int64_t multiple = divisible * tp;
    model.vocab = (model.vocab + multiple - 1) / multiple * multiple;
  }
  validate_model(model, kCommandLine);
  return model;
}

}  // namespace strata::cli
