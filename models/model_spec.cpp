#include "models/model_spec.hpp"

#include <fmt/format.h>

#include "common/error.hpp"

namespace strata {

int64_t ModelSpec::norms_per_layer() const {
  switch (block) {
    case LayerBlock::kParallel:
      return 1;
    case LayerBlock::kSandwich:
      return 4;
    case LayerBlock::kPreNorm:
    case LayerBlock::kPostNorm:
    case LayerBlock::kParallelTwoNorms:
      return 2;
  }
  return 2;
}

int64_t ModelSpec::window_of(int64_t layer) const {
  if (global_every > 0 && (layer + 1) % global_every == 0) return 0;
  return sliding_window;
}

int64_t ModelSpec::windowed_layers() const {
  if (sliding_window == 0) return 0;
  return global_every > 0 ? layers - layers / global_every : layers;
}

ParameterCount count_parameters(const ModelSpec& model) {
  const int64_t h = model.hidden;
  const int64_t q = model.q_hidden();
  const int64_t kv = model.kv_hidden();
  const int64_t f = model.ffn_hidden;
  ParameterCount count;
  // Q (h x q), K and V (h x kv each), output (q x h).
  count.attention = h * q + 2 * h * kv + q * h;
  if (model.qkv_bias) count.attention += q + 2 * kv;
  if (model.out_bias) count.attention += h;
  // GELU: up (h x f) and down (f x h). Gated: gate and up (h x f each) and down (f x h).
  const int64_t up_matrices = model.gated_mlp() ? 2 : 1;
  count.mlp = up_matrices * h * f + f * h;
  if (model.linear_bias) count.mlp += up_matrices * f + h;
  const int64_t norm_params = model.norm == NormKind::kLayerNorm ? 2 * h : h;
  count.norms = model.norms_per_layer() * norm_params;
  // QK-norms are RMSNorms (weights only) in every family that has them.
  if (model.qk_norm == QkNorm::kPerHead) count.norms += 2 * model.head_dim();
  if (model.qk_norm == QkNorm::kWhole) count.norms += q + kv;
  count.per_layer = count.attention + count.mlp + count.norms;
  if (model.moe()) {
    // Router (h x experts), each expert's products without biases, the shared experts' (as one
    // MLP of their total width) and their gate (h x 1).
    const int64_t expert = (up_matrices + 1) * h * model.expert_ffn_hidden;
    const int64_t shared =
        (up_matrices + 1) * h * model.shared_expert_ffn_hidden + (model.shared_expert_gate ? h : 0);
    const int64_t router = h * model.experts;
    count.moe_mlp = router + model.experts * expert + shared;
    count.moe_active_mlp = router + model.experts_per_token * expert + shared;
  }
  count.embedding = model.vocab * h;
  if (model.position == PositionKind::kLearned) count.embedding += model.max_seq * h;
  count.final_norm = norm_params;
  count.lm_head = model.tied_embeddings ? 0 : model.vocab * h + (model.head_bias ? model.vocab : 0);
  const int64_t dense_layers = model.layers - model.moe_layers();
  const int64_t outside_layers = count.embedding + count.final_norm + count.lm_head;
  const int64_t moe_layer_rest = count.attention + count.norms;
  count.total = dense_layers * count.per_layer +
                model.moe_layers() * (moe_layer_rest + count.moe_mlp) + outside_layers;
  count.active = dense_layers * count.per_layer +
                 model.moe_layers() * (moe_layer_rest + count.moe_active_mlp) + outside_layers;
  return count;
}

// Upper bounds on a model's sizes, far above any model trained (Llama 3 405B: 126 layers, hidden
// 16,384, ffn 53,248, vocabulary 128,256), chosen so that parameter counts, FLOPs and bytes stay
// within 64-bit integers for every plan validate_plan_sizes accepts.
constexpr int64_t kMaxLayers = int64_t{1} << 16;
constexpr int64_t kMaxWidth = int64_t{1} << 20;  // hidden, ffn_hidden, q and kv widths
constexpr int64_t kMaxHeads = int64_t{1} << 14;
constexpr int64_t kMaxVocab = int64_t{1} << 24;
constexpr int64_t kMaxPositions = int64_t{1} << 24;  // max_seq and sliding_window
constexpr int64_t kMaxExperts = int64_t{1} << 14;    // DeepSeek-V3: 256; Qwen3-MoE: 128

void validate_model(const ModelSpec& model, const std::string& where) {
  const auto require_range = [&](int64_t value, const char* field, int64_t low, int64_t high) {
    if (value < low || value > high) {
      throw InputError(where, field,
                       fmt::format("must be from {} to {}, found {}", low, high, value),
                       fmt::format("give a whole number from {} to {}", low, high));
    }
  };
  require_range(model.layers, "layers", 1, kMaxLayers);
  require_range(model.hidden, "hidden", 1, kMaxWidth);
  require_range(model.heads, "heads", 1, kMaxHeads);
  require_range(model.kv_heads, "kv_heads", 1, kMaxHeads);
  require_range(model.ffn_hidden, "ffn_hidden", 1, kMaxWidth);
  require_range(model.vocab, "vocab", 1, kMaxVocab);
  require_range(model.max_seq, "max_seq", 1, kMaxPositions);
  require_range(model.head_size, "head_dim", 0, kMaxWidth);
  require_range(model.sliding_window, "sliding_window", 0, kMaxPositions);
  require_range(model.global_every, "global_every", 0, kMaxLayers);
  if (model.head_size == 0 && model.hidden % model.heads != 0) {
    throw InputError(
        where, "heads",
        fmt::format("hidden {} is not divisible by heads {}", model.hidden, model.heads),
        "choose heads that divide the hidden size, or state head_dim");
  }
  if (model.heads % model.kv_heads != 0) {
    throw InputError(
        where, "kv_heads",
        fmt::format("heads {} is not divisible by kv_heads {}", model.heads, model.kv_heads),
        "choose kv_heads that divide heads (grouped-query attention)");
  }
  require_range(model.q_hidden(), "head_dim", 1, kMaxWidth);
  require_range(model.experts, "experts", 0, kMaxExperts);
  if (model.moe()) {
    require_range(model.experts_per_token, "experts_per_token", 1, model.experts);
    require_range(model.expert_ffn_hidden, "expert_ffn_hidden", 1, kMaxWidth);
    // The routed experts' widths summed stay within one dense MLP's bound, so that counts do too
    // (DeepSeek-V3: 256 x 2048 = 2^19).
    if (model.experts * model.expert_ffn_hidden > kMaxWidth) {
      throw InputError(where, "expert_ffn_hidden",
                       fmt::format("{} experts of {} exceed {} in all", model.experts,
                                   model.expert_ffn_hidden, kMaxWidth),
                       fmt::format("keep experts x expert_ffn_hidden within {}", kMaxWidth));
    }
    require_range(model.first_dense_layers, "first_dense_layers", 0, model.layers - 1);
  } else {
    for (const auto& [value, field] :
         {std::pair{model.experts_per_token, "experts_per_token"},
          std::pair{model.expert_ffn_hidden, "expert_ffn_hidden"},
          std::pair{model.shared_expert_ffn_hidden, "shared_expert_ffn_hidden"},
          std::pair{model.first_dense_layers, "first_dense_layers"},
          std::pair{int64_t{model.shared_expert_gate}, "shared_expert_gate"}}) {
      if (value != 0) {
        throw InputError(where, field, "describes experts, but the model has none",
                         "state \"experts\" (the routed experts per MoE layer), or remove it");
      }
    }
  }
  require_range(model.shared_expert_ffn_hidden, "shared_expert_ffn_hidden", 0, kMaxWidth);
  if (model.shared_expert_gate && model.shared_expert_ffn_hidden == 0) {
    throw InputError(where, "shared_expert_gate", "gates shared experts, but the model has none",
                     "state \"shared_expert_ffn_hidden\", or remove the gate");
  }
  for (const auto& [rate, field] : {std::pair{model.hidden_dropout, "hidden_dropout"},
                                    std::pair{model.attention_dropout, "attention_dropout"}}) {
    if (!(rate >= 0 && rate < 1)) {
      throw InputError(where, field, fmt::format("must be in [0, 1), found {}", rate),
                       "give the probability that an element is dropped, e.g. 0.1");
    }
  }
}

const char* to_string(NormKind kind) {
  return kind == NormKind::kLayerNorm ? "layernorm" : "rmsnorm";
}
const char* to_string(MlpKind kind) {
  switch (kind) {
    case MlpKind::kGelu:
      return "gelu";
    case MlpKind::kSwiGlu:
      return "swiglu";
    case MlpKind::kGeGlu:
      return "geglu";
  }
  return "?";
}
const char* to_string(PositionKind kind) {
  return kind == PositionKind::kLearned ? "learned" : "rotary";
}

const char* to_string(LayerBlock kind) {
  switch (kind) {
    case LayerBlock::kPreNorm:
      return "pre_norm";
    case LayerBlock::kPostNorm:
      return "post_norm";
    case LayerBlock::kSandwich:
      return "sandwich";
    case LayerBlock::kParallel:
      return "parallel";
    case LayerBlock::kParallelTwoNorms:
      return "parallel_two_norms";
  }
  return "?";
}

const char* to_string(QkNorm kind) {
  switch (kind) {
    case QkNorm::kNone:
      return "none";
    case QkNorm::kPerHead:
      return "per_head";
    case QkNorm::kWhole:
      return "whole";
  }
  return "?";
}

const char* to_string(RouterScore score) {
  switch (score) {
    case RouterScore::kSoftmax:
      return "softmax";
    case RouterScore::kSigmoid:
      return "sigmoid";
  }
  return "?";
}

}  // namespace strata
