#include "models/model_spec.hpp"

#include <tuple>
#include <utility>

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

namespace {

// Multi-head latent attention's projections, as HF's DeepseekV3Attention (and DeepseekV2Attention)
// holds them: the query through a latent of q_lora_rank (q_a_proj, q_b_proj) or directly (q_proj
// when q_lora_rank is 0), the key-value latent with the shared rotary key (kv_a_proj_with_mqa), the
// latent's up-projection to each head's positionless key and value (kv_b_proj), and o_proj.
// "attention_bias" biases q_a_proj, kv_a_proj_with_mqa and o_proj, never q_proj, q_b_proj or
// kv_b_proj: qkv_bias and out_bias stand for it here. Worked example, DeepSeek-V3 (h 7168, 128
// heads, ranks 1536 and 512, qk 128 + 64, v 128): 11.0M + 37.7M + 4.1M + 16.8M + 117.4M = 187.1M.
int64_t latent_attention_parameters(const ModelSpec& model) {
  const int64_t h = model.hidden;
  const int64_t q_head = model.qk_nope_head_dim + model.qk_rope_head_dim;
  const int64_t kv_down = model.kv_lora_rank + model.qk_rope_head_dim;
  int64_t params = model.q_lora_rank > 0
                       ? h * model.q_lora_rank + model.q_lora_rank * model.heads * q_head
                       : h * model.heads * q_head;
  params += h * kv_down;
  params += model.kv_lora_rank * model.heads * (model.qk_nope_head_dim + model.v_head_dim);
  params += model.heads * model.v_head_dim * h;
  if (model.qkv_bias) params += model.q_lora_rank + kv_down;
  if (model.out_bias) params += h;
  return params;
}

}  // namespace

ParameterCount count_parameters(const ModelSpec& model) {
  const int64_t h = model.hidden;
  const int64_t q = model.q_hidden();
  const int64_t kv = model.kv_hidden();
  const int64_t f = model.ffn_hidden;
  ParameterCount count;
  if (model.latent_attention()) {
    count.attention = latent_attention_parameters(model);
  } else {
    // Q (h x q), K and V (h x kv each), output (q x h).
    count.attention = h * q + 2 * h * kv + q * h;
    if (model.qkv_bias) count.attention += q + 2 * kv;
    if (model.out_bias) count.attention += h;
  }
  // GELU: up (h x f) and down (f x h). Gated: gate and up (h x f each) and down (f x h).
  const int64_t up_matrices = model.gated_mlp() ? 2 : 1;
  count.mlp = up_matrices * h * f + f * h;
  if (model.linear_bias) count.mlp += up_matrices * f + h;
  const int64_t norm_params = model.norm == NormKind::kLayerNorm ? 2 * h : h;
  count.norms = model.norms_per_layer() * norm_params;
  // QK-norms are RMSNorms (weights only) in every family that has them.
  if (model.qk_norm == QkNorm::kPerHead) count.norms += 2 * model.head_dim();
  if (model.qk_norm == QkNorm::kWhole) count.norms += q + kv;
  // Latent attention's RMSNorms of its latents (q_a_layernorm, kv_a_layernorm).
  if (model.latent_attention()) count.norms += model.q_lora_rank + model.kv_lora_rank;
  count.per_layer = count.attention + count.mlp + count.norms;
  if (model.moe()) {
    // Router (h x experts, and DeepSeek-V3's e_score_correction_bias of `experts`), each expert's
    // products without biases, the shared experts' (as one MLP of their total width) and their
    // gate (h x 1).
    const int64_t expert = (up_matrices + 1) * h * model.expert_ffn_hidden;
    const int64_t shared =
        (up_matrices + 1) * h * model.shared_expert_ffn_hidden + (model.shared_expert_gate ? h : 0);
    const int64_t router = h * model.experts + (model.router_bias ? model.experts : 0);
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
  // Each multi-token-prediction module (DeepSeek-V3 Sec. 2.2, and its checkpoint's layer 61:
  // enorm, hnorm, eh_proj, the layer, shared_head.norm): two norms of its inputs, the 2h x h
  // projection without bias, one layer as the model's last, and the norm before the shared head.
  const int64_t mtp_layer = model.moe() ? moe_layer_rest + count.moe_mlp : count.per_layer;
  count.mtp = model.mtp_layers * (3 * norm_params + 2 * h * h + mtp_layer);
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

namespace {

void require_range(const std::string& where, int64_t value, const char* field, int64_t low,
                   int64_t high) {
  if (value < low || value > high) {
    throw InputError(where, field, fmt::format("must be from {} to {}, found {}", low, high, value),
                     fmt::format("give a whole number from {} to {}", low, high));
  }
}

// Multi-head latent attention's ranks and head widths (ModelSpec::kv_lora_rank): none of them
// without the key-value latent; with it, positive head widths, a rotary part of pairs, and the
// widths it replaces (kv_heads, head_dim) unset or equal to what the latent gives. Its products'
// widths stay within kMaxWidth, as a dense model's do.
void validate_latent_attention(const ModelSpec& model, const std::string& where) {
  const std::pair<int64_t, const char*> fields[] = {{model.q_lora_rank, "q_lora_rank"},
                                                    {model.kv_lora_rank, "kv_lora_rank"},
                                                    {model.qk_nope_head_dim, "qk_nope_head_dim"},
                                                    {model.qk_rope_head_dim, "qk_rope_head_dim"},
                                                    {model.v_head_dim, "v_head_dim"}};
  for (const auto& [value, field] : fields) require_range(where, value, field, 0, kMaxWidth);
  if (!model.latent_attention()) {
    for (const auto& [value, field] : fields) {
      if (value != 0) {
        throw InputError(where, field,
                         "describes multi-head latent attention, but kv_lora_rank is 0",
                         "state \"kv_lora_rank\" (the width of the key-value latent), or remove "
                         "it");
      }
    }
    return;
  }
  require_range(where, model.qk_nope_head_dim, "qk_nope_head_dim", 1, kMaxWidth);
  require_range(where, model.qk_rope_head_dim, "qk_rope_head_dim", 1, kMaxWidth);
  require_range(where, model.v_head_dim, "v_head_dim", 1, kMaxWidth);
  if (model.qk_rope_head_dim % 2 != 0) {
    throw InputError(where, "qk_rope_head_dim",
                     fmt::format("must be even, found {}", model.qk_rope_head_dim),
                     "give an even width: rotary embeddings turn pairs of dimensions");
  }
  if (model.kv_heads != model.heads) {
    throw InputError(where, "kv_heads",
                     fmt::format("is {}, but multi-head latent attention gives each of the {} "
                                 "heads its own key and value, up-projected from the latent",
                                 model.kv_heads, model.heads),
                     fmt::format("set kv_heads to heads ({}), or remove it", model.heads));
  }
  if (model.head_size != 0) {
    throw InputError(where, "head_dim",
                     "is stated, but with multi-head latent attention a query or key head is "
                     "qk_nope_head_dim + qk_rope_head_dim wide and a value head v_head_dim",
                     "remove head_dim");
  }
  if (model.qk_norm != QkNorm::kNone) {
    throw InputError(where, "qk_norm",
                     "is not modelled with multi-head latent attention, which normalizes its "
                     "latents instead (q_a_layernorm, kv_a_layernorm; no released model has both)",
                     "set qk_norm to \"none\"");
  }
  // The widest products: q_b_proj's (or q_proj's) output, kv_b_proj's, kv_a_proj_with_mqa's.
  const int64_t q_width = model.heads * (model.qk_nope_head_dim + model.qk_rope_head_dim);
  const int64_t kv_up_width = model.heads * (model.qk_nope_head_dim + model.v_head_dim);
  const int64_t kv_down_width = model.kv_lora_rank + model.qk_rope_head_dim;
  for (const auto& [width, field, what] :
       {std::tuple{q_width, "qk_nope_head_dim", "heads x (qk_nope_head_dim + qk_rope_head_dim)"},
        std::tuple{kv_up_width, "v_head_dim", "heads x (qk_nope_head_dim + v_head_dim)"},
        std::tuple{kv_down_width, "kv_lora_rank", "kv_lora_rank + qk_rope_head_dim"}}) {
    if (width > kMaxWidth) {
      throw InputError(where, field, fmt::format("{} is {}, above {}", what, width, kMaxWidth),
                       fmt::format("keep {} within {}", what, kMaxWidth));
    }
  }
}

// The router's fields of an MoE model (ModelSpec::router_groups, router_group_limit,
// capacity_factor): groups of equal size, a limit among them that leaves a token at least its
// top k experts, and a capacity that can drop tokens.
void validate_router(const ModelSpec& model, const std::string& where) {
  require_range(where, model.router_groups, "router_groups", 0, model.experts);
  if (model.router_groups == 0 && model.router_group_limit != 0) {
    throw InputError(where, "router_group_limit",
                     "limits the expert groups a token is routed to, but router_groups is 0",
                     "state \"router_groups\", or remove it");
  }
  if (model.router_groups > 0) {
    if (model.experts % model.router_groups != 0) {
      throw InputError(where, "router_groups",
                       fmt::format("{} experts do not fall into {} groups of equal size",
                                   model.experts, model.router_groups),
                       "choose router_groups that divide experts (DeepSeek-V3: 256 in 8)");
    }
    require_range(where, model.router_group_limit, "router_group_limit", 1, model.router_groups);
    const int64_t reachable = model.router_group_limit * (model.experts / model.router_groups);
    if (model.experts_per_token > reachable) {
      throw InputError(where, "experts_per_token",
                       fmt::format("sends each token to {} experts, but its best {} groups hold "
                                   "{} experts",
                                   model.experts_per_token, model.router_group_limit, reachable),
                       fmt::format("give at most {} experts per token, or raise "
                                   "router_group_limit",
                                   reachable));
    }
  }
  // An expert takes capacity_factor x tokens x top-k / experts tokens per step. At experts /
  // top-k that is every token of the step, the most it can be sent (a token picks an expert at
  // most once), so nothing is dropped: a factor above it means the same as 0, which says so.
  const double dropless = static_cast<double>(model.experts) / model.experts_per_token;
  if (!(model.capacity_factor >= 0 && model.capacity_factor <= dropless)) {
    throw InputError(
        where, "capacity_factor",
        fmt::format("must be 0 (dropless) or in (0, {:g}], found {}", dropless,
                    model.capacity_factor),
        fmt::format("give the tokens an expert takes over its balanced share, above 0 and at most "
                    "experts / experts_per_token ({:g}, where no token is dropped), or 0 for "
                    "dropless routing",
                    dropless));
  }
}

}  // namespace

void validate_model(const ModelSpec& model, const std::string& where) {
  const auto require_range = [&](int64_t value, const char* field, int64_t low, int64_t high) {
    strata::require_range(where, value, field, low, high);
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
  require_range(model.mtp_layers, "mtp_layers", 0, kMaxLayers);
  validate_latent_attention(model, where);
  if (!model.latent_attention() && model.head_size == 0 && model.hidden % model.heads != 0) {
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
    validate_router(model, where);
  } else {
    for (const auto& [value, field] :
         {std::pair{model.experts_per_token, "experts_per_token"},
          std::pair{model.expert_ffn_hidden, "expert_ffn_hidden"},
          std::pair{model.shared_expert_ffn_hidden, "shared_expert_ffn_hidden"},
          std::pair{model.first_dense_layers, "first_dense_layers"},
          std::pair{int64_t{model.shared_expert_gate}, "shared_expert_gate"},
          std::pair{int64_t{model.router_score != RouterScore::kSoftmax}, "router_score"},
          std::pair{model.router_groups, "router_groups"},
          std::pair{model.router_group_limit, "router_group_limit"},
          std::pair{int64_t{model.router_bias}, "router_bias"},
          std::pair{int64_t{model.capacity_factor != 0}, "capacity_factor"}}) {
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
