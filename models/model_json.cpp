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
      {"head_dim", model.head_dim()},
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
  }
  return json;
}

}  // namespace strata
