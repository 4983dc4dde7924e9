#pragma once
// ModelSpec: a decoder-only transformer as the plan compiler sees it. Parameter counts and FLOPs
// are computed from these fields, never stored.

#include <cstdint>
#include <string>

namespace strata {

enum class NormKind { kLayerNorm, kRmsNorm };
// GELU: up, act, down. SwiGLU: gate and up, silu(gate) * up, down. GeGLU (Gemma): the same gated
// shape with gelu(gate) * up.
enum class MlpKind { kGelu, kSwiGlu, kGeGlu };
enum class PositionKind { kLearned, kRotary };

// Where a layer's norms sit, each over the hidden width.
enum class LayerBlock {
  kPreNorm,   // x + attn(norm(x)), then + mlp(norm(.)): GPT-2, Llama (2 norms)
  kPostNorm,  // x + norm(attn(x)), then + norm(mlp(.)): OLMo 2 (2 norms)
  kSandwich,  // x + norm(attn(norm(x))), then the same around the MLP: Gemma 2 and 3 (4 norms)
  // Attention and MLP read the same input and both outputs join the residual, x + attn(n(x)) +
  // mlp(n(x)) (GPT-J, Falcon 7B: 1 norm); under tensor parallelism one reduction serves both.
  kParallel,
  kParallelTwoNorms,  // the same with a norm of its own per branch (Falcon 40B/180B: 2 norms)
};

// A norm over each query and key head before the scores (QK-norm): per head, weights of head_dim
// shared by every head (Qwen3, Gemma 3), or over all the heads' width at once (OLMo 2).
enum class QkNorm { kNone, kPerHead, kWhole };

// How an MoE router scores the experts before it takes each token's top k (ModelSpec::experts):
// a softmax over the experts' logits (Mixtral, Qwen-MoE, DeepSeek-V2: "scoring_func" softmax), or
// a sigmoid per expert (DeepSeek-V3: "scoring_func" sigmoid, with its e_score_correction_bias).
enum class RouterScore { kSoftmax, kSigmoid };

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
  LayerBlock block = LayerBlock::kPreNorm;
  QkNorm qk_norm = QkNorm::kNone;
  bool tied_embeddings = true;  // LM head shares the token embedding
  bool qkv_bias = true;         // bias on the Q, K, V projections
  bool out_bias = true;         // bias on the attention output projection
  bool linear_bias = true;      // bias on the MLP projections
  bool head_bias = false;       // bias on an untied LM head (GPT-J)
  bool dropout = true;          // GPT-style dropout after attention softmax and each block
  // With dropout, the probability that an element is dropped: of the embedding's output and of
  // each block's branch output before the residual add (Megatron-LM's --hidden-dropout, GPT-2's
  // resid_pdrop and embd_pdrop) and of the attention probabilities (--attention-dropout,
  // attn_pdrop); 0.1 in both (GPT-2, GPT-3, Megatron-LM's defaults). The step's cost does not
  // depend on them; the executor's masks do.
  double hidden_dropout = 0.1;
  double attention_dropout = 0.1;
  // Per-head width when a config states one that differs from hidden / heads (Qwen3, Gemma:
  // "head_dim"). 0: hidden / heads.
  int64_t head_size = 0;
  // Sliding-window attention (Mistral 7B v0.1, Jiang et al. 2023): each query attends to at most
  // this many keys, itself and the ones before it. 0: the whole causal prefix.
  int64_t sliding_window = 0;
  // With a sliding window, every `global_every`-th layer (layers n-1, 2n-1, ... counting from 0)
  // attends to the whole prefix instead: Gemma 2 alternates (2), Gemma 3 has one global layer in
  // six (6). 0: every layer is windowed.
  int64_t global_every = 0;
  // Rotary models: the base of the rotation frequencies, theta^(-2i/d) (Su et al. 2021; HF's
  // "rope_theta", 10000 by default, 500000 in Llama 3). The step's cost does not depend on it;
  // the executor's rotary kernel does.
  double rope_theta = 10000;
  // Mixture of experts (Shazeer et al. 2017; Mixtral, Jiang et al. 2024; Qwen-MoE; DeepSeekMoE,
  // Dai et al. 2024). An MoE layer's MLP is a router (an h x experts product, no bias), `experts`
  // routed experts of `expert_ffn_hidden` each, of which each token passes through
  // `experts_per_token` (top-k), and shared experts every token passes through,
  // `shared_expert_ffn_hidden` wide in all (0: none), with Qwen-MoE's sigmoid gate on their output
  // (h weights) when `shared_expert_gate`. Experts are MLPs of the model's kind (`mlp`) without
  // biases, as in every released MoE family. The first `first_dense_layers` layers keep the dense
  // MLP of `ffn_hidden` (DeepSeek's first_k_dense_replace); every later one is MoE. 0 experts: a
  // dense model.
  int64_t experts = 0;
  int64_t experts_per_token = 0;
  int64_t expert_ffn_hidden = 0;
  int64_t shared_expert_ffn_hidden = 0;
  bool shared_expert_gate = false;
  int64_t first_dense_layers = 0;
  RouterScore router_score = RouterScore::kSoftmax;
  // Group-limited routing (DeepSeek-V2/V3's "n_group", "topk_group"): the experts fall into
  // `router_groups` groups and each token's top k come from its best `router_group_limit` groups.
  // 0: no groups.
  int64_t router_groups = 0;
  int64_t router_group_limit = 0;
  // DeepSeek-V3's auxiliary-loss-free balancing: a bias per routed expert added to the scores for
  // the choice (e_score_correction_bias; DeepSeek-AI 2024, Sec. 2.1.2), `experts` parameters per
  // MoE layer, updated by the balancing rule rather than by gradients.
  bool router_bias = false;
  // The tokens an expert takes per step, as a multiple of its balanced share (Fedus et al. 2021's
  // capacity factor; Megatron's --moe-expert-capacity-factor): tokens routed beyond it are dropped.
  // 0: dropless (every token reaches its experts: Mixtral, DeepSeek, Qwen-MoE).
  double capacity_factor = 0;
  // Multi-head latent attention (DeepSeek-V2, DeepSeek-AI 2024, Sec. 2.1): keys and values come
  // from one compressed latent of `kv_lora_rank` per token (with its RMSNorm), queries from one of
  // `q_lora_rank` (0: a plain query projection, as DeepSeek-V2-Lite); each head's query and key
  // have `qk_nope_head_dim` positionless and `qk_rope_head_dim` rotary dimensions (the rotary key
  // shared by the heads, projected from the layer input with the latent), and its value
  // `v_head_dim`. 0 kv_lora_rank: the attention of heads, kv_heads and head_dim. Every head has
  // its own key and value (kv_heads == heads), and head_size is not used (0).
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  // Multi-token prediction (DeepSeek-V3, DeepSeek-AI 2024, Sec. 2.2; HF "num_nextn_predict_layers",
  // Megatron's --mtp-num-layers): `mtp_layers` sequential modules, each predicting one more future
  // token during training from the previous depth's hidden state and the next token's embedding:
  // an RMSNorm of each, a 2h x h projection of the two joined, one transformer layer (MoE when the
  // model's later layers are) and a norm before the output head; embedding and output head are the
  // model's own. Dropped for inference, and outside the published total (DeepSeek-V3: 671B without
  // it); its parameters are ParameterCount::mtp.
  int64_t mtp_layers = 0;

  // The width of each query and key head: head_dim, or hidden / heads; with latent attention,
  // qk_nope_head_dim + qk_rope_head_dim (the width its scores are taken over).
  int64_t head_dim() const {
    if (latent_attention()) return qk_nope_head_dim + qk_rope_head_dim;
    return head_size > 0 ? head_size : hidden / heads;
  }
  // The width of each value head, and so of each head's share of the attention's output: v_head_dim
  // with latent attention (128 for DeepSeek-V3, whose query and key heads are 192 wide), else
  // head_dim().
  int64_t value_head_dim() const { return latent_attention() ? v_head_dim : head_dim(); }
  // Width of Q, and of K. With latent attention, the widths of Q and of K as the heads see them
  // after the up-projections (the rotary key broadcast to every head).
  int64_t q_hidden() const { return heads * head_dim(); }
  int64_t kv_hidden() const { return kv_heads * head_dim(); }
  // Width of V, and of the attention's output (the context, the output projection's input): as
  // kv_hidden() and q_hidden() but with latent attention, whose value heads are v_head_dim wide.
  int64_t v_hidden() const { return kv_heads * value_head_dim(); }
  int64_t context_hidden() const { return heads * value_head_dim(); }
  bool gated_mlp() const { return mlp != MlpKind::kGelu; }  // two up products (gate and up)
  bool parallel_block() const {
    return block == LayerBlock::kParallel || block == LayerBlock::kParallelTwoNorms;
  }
  int64_t norms_per_layer() const;
  // The window of layer `layer` (0-based): sliding_window, or 0 on the global layers.
  int64_t window_of(int64_t layer) const;
  // Layers with a window and layers attending globally, over the whole model.
  int64_t windowed_layers() const;
  bool moe() const { return experts > 0; }
  bool is_moe_layer(int64_t layer) const { return moe() && layer >= first_dense_layers; }
  int64_t moe_layers() const { return moe() ? layers - first_dense_layers : 0; }
  bool latent_attention() const { return kv_lora_rank > 0; }
};

// Parameters of one transformer layer and of the whole model, by part. Counts, not bytes.
struct ParameterCount {
  // Q, K, V, output projections with their biases. With latent attention (HF's
  // DeepseekV3Attention): q_a_proj (h x q_lora_rank) and q_b_proj (q_lora_rank x heads x
  // (qk_nope + qk_rope)), or q_proj (h x heads x (qk_nope + qk_rope)) when q_lora_rank is 0;
  // kv_a_proj_with_mqa (h x (kv_lora_rank + qk_rope)); kv_b_proj (kv_lora_rank x heads x (qk_nope
  // + v_head_dim)); o_proj (heads x v_head_dim x h).
  int64_t attention = 0;
  int64_t mlp = 0;  // a dense layer's MLP projections with their biases
  // The layer's norms (weight, and bias for LayerNorm), its QK-norms, and latent attention's
  // RMSNorms of its two latents (q_a_layernorm, kv_a_layernorm: weights of q_lora_rank and
  // kv_lora_rank). HF's checkpoints hold the latent norms inside self_attn, but they are counted
  // here, as the QK-norms are, so that `attention` is the projections alone: a norm's weights are
  // whole on every tensor-parallel rank, where the projections split (Megatron-LM's MLA keeps the
  // down-projections whole too).
  int64_t norms = 0;
  int64_t per_layer = 0;  // a dense layer's: attention + mlp + norms
  // An MoE layer's MLP (ModelSpec::experts): router, routed experts, shared experts and their
  // gate; and the part one token passes through, with its top-k routed experts. 0 when dense.
  int64_t moe_mlp = 0;
  int64_t moe_active_mlp = 0;
  int64_t embedding = 0;  // token embedding (+ learned position table)
  int64_t final_norm = 0;
  int64_t lm_head = 0;  // 0 when tied to the embedding
  int64_t total = 0;
  // The parameters one token passes through (MoE models' "active" count: every one but the
  // routed experts it is not sent to); the total when dense.
  int64_t active = 0;
  // The multi-token-prediction modules' own parameters (ModelSpec::mtp_layers): their norms,
  // projections and layers, without the embedding and output head they share with the model. Not
  // in `total` or `active`.
  int64_t mtp = 0;
};

ParameterCount count_parameters(const ModelSpec& model);

// Throws InputError naming `where` and the field when the spec is inconsistent (a count below 1,
// hidden not divisible by heads, heads not divisible by kv_heads, a router or latent-attention
// field without experts or a latent, a top-k the router groups cannot give).
void validate_model(const ModelSpec& model, const std::string& where);

const char* to_string(NormKind kind);
const char* to_string(MlpKind kind);
const char* to_string(PositionKind kind);
const char* to_string(LayerBlock kind);
const char* to_string(QkNorm kind);
const char* to_string(RouterScore score);

}  // namespace strata
