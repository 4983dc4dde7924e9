#include "models/model_json.hpp"

namespace strata {

// Every field of the native format (models/README.md), defaults written out, so the output reads
// back through parse_native_model to the same ModelSpec. Parameter counts are derived, never
// stored, so they are not written here.
nlohmann::json model_to_json(const ModelSpec& model) {
  nlohmann::json json{
      {"name", model.name},
      {"layers", model.layers},
      {"hidden", model.hidden},
      {"heads", model.heads},
      {"kv_heads", model.kv_heads},
      {"ffn_hidden", model.ffn_hidden},
      {"vocab", model.vocab},
      {"max_seq", model.max_seq},
      {"norm", to_string(model.norm)},
      {"mlp", to_string(model.mlp)},
      {"position", to_string(model.position)},
      {"block", to_string(model.block)},
      {"qk_norm", to_string(model.qk_norm)},
      {"tied_embeddings", model.tied_embeddings},
      {"qkv_bias", model.qkv_bias},
      {"out_bias", model.out_bias},
      {"linear_bias", model.linear_bias},
      {"head_bias", model.head_bias},
      {"dropout", model.dropout},
      {"sliding_window", model.sliding_window},
      {"global_every", model.global_every},
      {"rope_theta", model.rope_theta},
  };
  // Latent attention states its head widths in its own fields (below), and refuses head_dim.
  if (!model.latent_attention()) json["head_dim"] = model.head_dim();
  // The rates mean something only with dropout, and the reader takes them only then.
  if (model.dropout) {
    json["hidden_dropout"] = model.hidden_dropout;
    json["attention_dropout"] = model.attention_dropout;
  }
  // Experts are written for MoE models only, so that a dense model's file is unchanged.
  if (model.moe()) {
    json["experts"] = model.experts;
    json["experts_per_token"] = model.experts_per_token;
    json["expert_ffn_hidden"] = model.expert_ffn_hidden;
    json["shared_expert_ffn_hidden"] = model.shared_expert_ffn_hidden;
    json["shared_expert_gate"] = model.shared_expert_gate;
    json["first_dense_layers"] = model.first_dense_layers;
    json["router_score"] = to_string(model.router_score);
    json["router_groups"] = model.router_groups;
    json["router_group_limit"] = model.router_group_limit;
    json["router_bias"] = model.router_bias;
    json["capacity_factor"] = model.capacity_factor;
  }
  // Latent attention's fields for latent-attention models only, and multi-token prediction for
  // models that have it, for the same reason.
  if (model.latent_attention()) {
    json["q_lora_rank"] = model.q_lora_rank;
    json["kv_lora_rank"] = model.kv_lora_rank;
    json["qk_nope_head_dim"] = model.qk_nope_head_dim;
    json["qk_rope_head_dim"] = model.qk_rope_head_dim;
    json["v_head_dim"] = model.v_head_dim;
  }
  if (model.mtp_layers > 0) json["mtp_layers"] = model.mtp_layers;
  return json;
}

}  // namespace strata
