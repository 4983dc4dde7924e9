#pragma once
// ModelSpec: a decoder-only transformer as the plan compiler sees it. Parameter counts and FLOPs
// are computed from these fields, never stored.

#include <cstdint>
#include <string>

namespace strata {

enum class NormKind { kLayerNorm, kRmsNorm };
enum class MlpKind { kGelu, kSwiGlu };  // GELU: up, act, down. SwiGLU: gate and up, silu*, down.
enum class PositionKind { kLearned, kRotary };

struct ModelSpec {
  std::string name;
  int64_t layers = 0;
  int64_t hidden = 0;      // h, the model width
  int64_t heads = 0;       // attention (query) heads
  int64_t kv_heads = 0;    // key/value heads; == heads for multi-head, fewer for GQA
  int64_t ffn_hidden = 0;  // MLP inner width (4h for GPT, 14336 for Llama-3 8B)
  int64_t vocab = 0;
  int64_t max_seq = 0;  // longest sequence (learned position table size)
  NormKind norm = NormKind::kLayerNorm;
  MlpKind mlp = MlpKind::kGelu;
  PositionKind position = PositionKind::kLearned;
  bool tied_embeddings = true;  // LM head shares the token embedding
  bool qkv_bias = true;         // bias on the Q, K, V projections
  bool linear_bias = true;      // bias on the attention output and MLP projections
  bool dropout = true;          // GPT-style dropout after attention softmax and each block
  // Sliding-window attention (Mistral 7B v0.1, Jiang et al. 2023): each query attends to at most
  // this many keys, itself and the ones before it. 0: the whole causal prefix.
  int64_t sliding_window = 0;

  int64_t head_dim() const { return hidden / heads; }
  int64_t kv_hidden() const { return kv_heads * head_dim(); }  // width of K (and of V)
};

// Parameters of one transformer layer and of the whole model, by part. Counts, not bytes.
struct ParameterCount {
  int64_t attention = 0;  // Q, K, V, output projections with their biases
  int64_t mlp = 0;        // MLP projections with their biases
  int64_t norms = 0;      // the two norms of a layer (weight, and bias for LayerNorm)
  int64_t per_layer = 0;  // attention + mlp + norms
  int64_t embedding = 0;  // token embedding (+ learned position table)
  int64_t final_norm = 0;
  int64_t lm_head = 0;  // 0 when tied to the embedding
  int64_t total = 0;
};

ParameterCount count_parameters(const ModelSpec& model);

// Throws InputError naming `where` and the field when the spec is inconsistent (a count below 1,
// hidden not divisible by heads, heads not divisible by kv_heads).
void validate_model(const ModelSpec& model, const std::string& where);

const char* to_string(NormKind kind);
const char* to_string(MlpKind kind);
const char* to_string(PositionKind kind);

}  // namespace strata
