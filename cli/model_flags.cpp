#include "cli/model_flags.hpp"

#include <fmt/format.h>

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
}

bool any_model_flag(const ModelFlags& f) {
  return f.num_layers || f.hidden_size || f.num_attention_heads || f.ffn_hidden_size ||
         f.num_query_groups || f.kv_channels || f.max_position_embeddings || f.vocab_size ||
         f.make_vocab_size_divisible_by || f.group_query_attention || f.swiglu ||
         f.untie_embeddings || f.disable_bias_linear || f.add_qkv_bias || f.qk_layernorm ||
         f.use_rotary_position_embeddings || f.no_position_embedding || f.normalization ||
         f.position_embedding_type || f.attention_dropout || f.hidden_dropout;
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
