#include "models/model_spec.hpp"

#include <fmt/format.h>

#include "common/error.hpp"

namespace strata {

ParameterCount count_parameters(const ModelSpec& model) {
  const int64_t h = model.hidden;
  const int64_t kv = model.kv_hidden();
  const int64_t f = model.ffn_hidden;
  ParameterCount count;
  // Q (h x h), K and V (h x kv each), output (h x h).
  count.attention = h * h + 2 * h * kv + h * h;
  if (model.qkv_bias) count.attention += h + 2 * kv;
  if (model.linear_bias) count.attention += h;
  // GELU: up (h x f) and down (f x h). SwiGLU: gate and up (h x f each) and down (f x h).
  const int64_t up_matrices = model.mlp == MlpKind::kSwiGlu ? 2 : 1;
  count.mlp = up_matrices * h * f + f * h;
  if (model.linear_bias) count.mlp += up_matrices * f + h;
  const int64_t norm_params = model.norm == NormKind::kLayerNorm ? 2 * h : h;
  count.norms = 2 * norm_params;
  count.per_layer = count.attention + count.mlp + count.norms;
  count.embedding = model.vocab * h;
  if (model.position == PositionKind::kLearned) count.embedding += model.max_seq * h;
  count.final_norm = norm_params;
  count.lm_head = model.tied_embeddings ? 0 : model.vocab * h;
  count.total = model.layers * count.per_layer + count.embedding + count.final_norm + count.lm_head;
  return count;
}

void validate_model(const ModelSpec& model, const std::string& where) {
  const auto require_positive = [&](int64_t value, const char* field) {
    if (value < 1) {
      throw InputError(where, field, fmt::format("must be at least 1, found {}", value),
                       "give a positive whole number");
    }
  };
  require_positive(model.layers, "layers");
  require_positive(model.hidden, "hidden");
  require_positive(model.heads, "heads");
  require_positive(model.kv_heads, "kv_heads");
  require_positive(model.ffn_hidden, "ffn_hidden");
  require_positive(model.vocab, "vocab");
  require_positive(model.max_seq, "max_seq");
  if (model.hidden % model.heads != 0) {
    throw InputError(
        where, "heads",
        fmt::format("hidden {} is not divisible by heads {}", model.hidden, model.heads),
        "choose heads that divide the hidden size");
  }
  if (model.heads % model.kv_heads != 0) {
    throw InputError(
        where, "kv_heads",
        fmt::format("heads {} is not divisible by kv_heads {}", model.heads, model.kv_heads),
        "choose kv_heads that divide heads (grouped-query attention)");
  }
}

const char* to_string(NormKind kind) {
  return kind == NormKind::kLayerNorm ? "layernorm" : "rmsnorm";
}
const char* to_string(MlpKind kind) { return kind == MlpKind::kGelu ? "gelu" : "swiglu"; }
const char* to_string(PositionKind kind) {
  return kind == PositionKind::kLearned ? "learned" : "rotary";
}

}  // namespace strata
