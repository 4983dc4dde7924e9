#pragma once
// Bytes of activations one rank stores per transformer layer and micro-batch for the backward
// pass, following Korthikanti et al. 2022 (arXiv:2205.05198) Sec. 4.1, generalized to
// grouped-query attention, SwiGLU MLPs and models without dropout. With 16-bit activations, MHA,
// d_ff = 4h and dropout this is exactly the paper's sbh(34 + 5as/h), its tensor-parallel variant
// sbh(10 + 24/t + 5as/(ht)), with sequence parallelism sbh(34/t + 5as/(ht)), with selective
// recompute sbh(10 + 24/t) (data/reference/activation_memory_formulas.csv).
//
// Per term (s sequence, b micro-batch, h hidden, a heads, t tp; e bytes per element, 2 in 16-bit;
// "rep" terms are replicated over TP ranks unless sequence parallel splits them too):
//   norm1 input e sbh (rep) | QKV input e sbh (rep) | Q and K e sb(h + kv)/t | V e sb kv/t
//   softmax output e as^2b/t | softmax dropout mask as^2b/t | dropout output e as^2b/t
//   attention-output input e sbh/t | attention dropout mask sbh (rep)
//   norm2 input e sbh (rep) | MLP-up input e sbh (rep) | activation input e sbf/t (x2 for SwiGLU:
//   gate and up) | MLP-down input e sbf/t | MLP dropout mask sbh (rep)
//
// Under FP8 (plan.fp8) the QKV, MLP-up and MLP-down inputs are stored as the 1-byte FP8 copies
// Transformer Engine keeps for the weight gradients.
// Under flash attention (plan.attention) the three s^2 terms are not stored: the kernel keeps the
// softmax's fp32 log-sum-exp, 4 abs/t bytes, and regenerates the dropout mask from its seed, so a
// layer stores sbh(34) + 4abs/t in the paper's setting (Dao et al. 2022, Sec. 3.1).
// A parallel block (attention and MLP side by side) drops the sum of its branches through one
// mask, the MLP's.
// Under context parallelism (plan.cp) s is the rank's tokens, seq_len / cp: every term divides
// by cp (Megatron-Core with Transformer Engine keeps each rank's tokens' tensors; the ring's
// backward starts from a received key-value block as large as the rank's own).
// Latent attention (ModelSpec::kv_lora_rank) keeps its latents besides: the query and key-value
// down projections' outputs and their norms' outputs, e sb(2 q_lora_rank + 2 kv_lora_rank +
// qk_rope_head_dim) (/t with sequence parallel, replicated otherwise), and its Q, K and V are
// heads x (2(qk_nope + qk_rope) + v_head_dim) wide, its attention output heads x v_head_dim
// (activation_memory.cpp, add_latent_attention).

#include <cstdint>
#include <vector>

#include "models/model_spec.hpp"
#include "plan/parallel_plan.hpp"
#include "plan/tensor.hpp"

namespace strata {

struct LayerActivations {
  int64_t attention = 0;         // linear-in-s terms of the attention block
  int64_t attention_scores = 0;  // the s^2 terms (softmax, its dropout mask and output)
  int64_t softmax_lse = 0;       // flash attention's fp32 log-sum-exp per head and token
  int64_t mlp = 0;
  int64_t norms = 0;  // inputs of the two norms

  int64_t total() const { return attention + attention_scores + softmax_lse + mlp + norms; }
};

// One tensor a layer stores for its backward, a term above, named after the op input it is
// (plan/tensor.hpp): "norm1_in", "qkv_in", latent attention's "q_latent", "q_up_in", "kv_latent"
// and "kv_up_in", "qkv" (Q, K and V), "qk_norm_in", "scores",
// "scores_mask", "scores_dropped", "lse", "out_in", "attn_mask", "post_attn_norm_in",
// "norm2_in", "up_in", "act_in" (the MLP-up outputs), "down_in", "mlp_mask", "post_mlp_norm_in".
enum class ActivationPart : uint8_t { kNorms, kAttention, kScores, kSoftmaxLse, kMlp };
struct StoredTensor {
  const char* name;
  TensorShape shape;
  ActivationPart part;
};
// Every tensor one layer stores without recompute, per rank and micro-batch, in forward order: a
// dense layer's, or with `moe` an MoE layer's, whose MLP part is the router's, the experts' and
// the shared experts' (activation_memory.cpp, add_moe_mlp).
std::vector<StoredTensor> layer_stored_tensors(const ModelSpec& model, const ParallelPlan& plan,
                                               bool moe);

// Everything one layer stores without recompute, per rank and micro-batch: the sums of
// layer_stored_tensors by part.
LayerActivations layer_activations(const ModelSpec& model, const ParallelPlan& plan, bool moe);

// The matrix products of a transformer block in forward order, as torchtitan's Llama runs them:
// Q, K, V, the attention output, the MLP's gate (SwiGLU only), up and down products.
enum class BlockProduct : uint8_t { kQ, kK, kV, kO, kGate, kUp, kDown };
std::vector<BlockProduct> block_products(const ModelSpec& model);
// torchtitan's op-level selective checkpoint (torchtitan/models/llama3/infra/parallelize.py,
// _custom_policy) saves every other product's output, the first, third, ...: the block recomputes
// K, O and the SwiGLU up product (a GELU MLP's down product).
bool op_selective_saves(size_t index_in_block);
// What a layer keeps under the op-level policy: the block input ("norm1_in"), each saved
// product's output ("q", "v", "gate" or "up", "mlp_proj", ...), the attention kernel's output
// ("out_in") and its log-sum-exp ("lse").
std::vector<StoredTensor> op_selective_tensors(const ModelSpec& model, const ParallelPlan& plan);

// What one layer keeps between its forward and backward under the plan's recompute mode:
// none: total(); selective: total() minus the attention scores (none are stored under flash
// attention, so selective keeps total() there); full: the layer input; selective-op: the layer
// input, the saved products' outputs and the attention kernel's output and log-sum-exp (the
// policy's _save_list: mm, the SDPA kernels, reduce_scatter and max).
int64_t stored_layer_activation_bytes(const ModelSpec& model, const ParallelPlan& plan, bool moe);

// The layer input kept as the checkpoint under full recompute: e sbh (/t with sequence parallel).
int64_t layer_input_bytes(const ModelSpec& model, const ParallelPlan& plan);

// One pipeline message (activations or their gradient): e sbh, /t with sequence parallel.
int64_t pipeline_message_bytes(const ModelSpec& model, const ParallelPlan& plan);

}  // namespace strata
