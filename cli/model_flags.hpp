#pragma once
// A model given by Megatron-LM's flags (megatron/training/arguments.py), alone or over a --model
// it adjusts: what a Megatron-LM or Megatron-DeepSpeed launch script says about the model.

#include <cstdint>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "models/model_spec.hpp"

namespace strata::cli {

// What was given; nullopt (or false) where a flag was not.
struct ModelFlags {
  std::optional<int64_t> num_layers, hidden_size, num_attention_heads, ffn_hidden_size;
  std::optional<int64_t> num_query_groups, kv_channels, max_position_embeddings, vocab_size;
  std::optional<int64_t> make_vocab_size_divisible_by, mtp_num_layers;
  bool group_query_attention = false, swiglu = false, untie_embeddings = false;
  bool disable_bias_linear = false, add_qkv_bias = false, qk_layernorm = false;
  bool use_rotary_position_embeddings = false, no_position_embedding = false;
  std::optional<std::string> normalization, position_embedding_type, tokenizer_type;
  std::optional<double> attention_dropout, hidden_dropout;
  // Mixture of experts (arguments.py, _add_moe_args).
  std::optional<int64_t> num_experts, moe_router_topk, moe_ffn_hidden_size;
  std::optional<int64_t> moe_shared_expert_intermediate_size;
  std::optional<int64_t> moe_router_num_groups, moe_router_group_topk;
  std::optional<std::string> moe_layer_freq, moe_router_score_function;
  std::optional<double> moe_expert_capacity_factor;
  bool moe_router_enable_expert_bias = false;
};

void add_model_flags(CLI::App& command, ModelFlags& flags);

// Whether any flag that describes the model was given.
bool any_model_flag(const ModelFlags& flags);

// The model the flags describe: over `base` (a --model) when given, else over Megatron-LM's
// defaults (GPT: LayerNorm, GELU, learned positions, tied embeddings, biases, dropout 0.1), where
// --num-layers, --hidden-size, --num-attention-heads and the vocabulary (--vocab-size, or the
// GPT-2 BPE tokenizer's 50,257) are required; the positions default to `seq_len` as there. Megatron
// pads the vocabulary to a multiple of --make-vocab-size-divisible-by (default 128) x tp
// (_vocab_size_with_padding): applied to a model from flags, or to a --model when the flag is
// given. The MoE flags set the experts as Megatron's validate_args fills them in (top-k 2,
// experts as wide as --ffn-hidden-size) or override the --model's. Throws InputError naming the
// flag at fault.
ModelSpec megatron_model(const ModelFlags& flags, const std::optional<ModelSpec>& base,
                         int64_t seq_len, int64_t tp);

}  // namespace strata::cli
