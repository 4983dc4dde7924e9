#include "plan/param_tensors.hpp"

#include "plan/moe_dims.hpp"

namespace strata {

namespace {

void add_norm(std::vector<ParamTensorSpec>& specs, const ModelSpec& model, const std::string& name,
              int64_t width) {
  specs.push_back({name + "_w", width, 1, false, true});
  if (model.norm == NormKind::kLayerNorm) specs.push_back({name + "_b", width, 1, false, true});
}

// An MoE layer's MLP: the router (replicated over TP: each rank routes its own tokens), V3's
// balancing bias, the rank's local experts with each product's weights stacked by expert (split
// over expert tensor parallelism as a dense MLP over TP), and the shared experts as a dense MLP
// with their gate. No biases (every released MoE family).
void add_moe(std::vector<ParamTensorSpec>& specs, const ModelSpec& model,
             const ParallelPlan& plan) {
  const int64_t h = model.hidden;
  const MoeDims d = moe_dims(model, plan);
  specs.push_back({"router_w", model.experts, h, false, true});
  if (model.router_bias) specs.push_back({"router_b", model.experts, 1, false, true});
  const bool apart = plan.ep > 1;
  specs.push_back({"experts_up_w", d.local_experts * d.expert_up, h, true, false, apart});
  specs.push_back({"experts_down_w", h, d.local_experts * d.expert_ffn, true, false, apart});
  if (d.shared_ffn > 0) {
    specs.push_back({"shared_up_w", d.shared_up, h, true, false});
    specs.push_back({"shared_down_w", h, d.shared_ffn, true, false});
    if (model.shared_expert_gate) specs.push_back({"shared_gate_w", 1, h, false, true});
  }
}

// Multi-head latent attention's projections (ModelSpec::kv_lora_rank) as Megatron-Core's
// MLASelfAttention holds them (megatron/core/transformer/multi_latent_attention.py): the down
// projections linear_q_down_proj (h -> q_lora_rank) and linear_kv_down_proj (h -> kv_lora_rank +
// qk_rope_head_dim) built "duplicated" (TELinear with parallel_mode "duplicated"): whole on every
// TP rank, their gradients summed over TP under sequence parallelism as a norm's are (TELinear
// marks them sequence_parallel); the latents' RMSNorms q_layernorm and kv_layernorm, whole; the
// column-parallel up projections linear_q_up_proj (q_lora_rank -> heads x (nope + rope)) and
// linear_kv_up_proj (kv_lora_rank -> heads x (nope + v)), the rank's heads / tp; with q_lora_rank
// 0 the column-parallel linear_q_proj (h -> heads x (nope + rope)) instead of the query's down
// and up projections. HF's "attention_bias" (qkv_bias here) biases the two down projections. The
// output projection is the layer's out_w, heads x v_head_dim wide.
void add_latent_attention(std::vector<ParamTensorSpec>& specs, const ModelSpec& model,
                          const ParallelPlan& plan) {
  const int64_t h = model.hidden;
  const int64_t heads = model.heads / plan.tp;
  const int64_t q_head = model.qk_nope_head_dim + model.qk_rope_head_dim;
  const int64_t kv_down = model.kv_lora_rank + model.qk_rope_head_dim;
  if (model.q_lora_rank > 0) {
    specs.push_back({"q_down_w", model.q_lora_rank, h, true, true});
    if (model.qkv_bias) specs.push_back({"q_down_b", model.q_lora_rank, 1, false, true});
    specs.push_back({"q_layernorm_w", model.q_lora_rank, 1, false, true});
    specs.push_back({"q_up_w", heads * q_head, model.q_lora_rank, true, false});
  } else {
    specs.push_back({"q_w", heads * q_head, h, true, false});
  }
  specs.push_back({"kv_down_w", kv_down, h, true, true});
  if (model.qkv_bias) specs.push_back({"kv_down_b", kv_down, 1, false, true});
  specs.push_back({"kv_layernorm_w", model.kv_lora_rank, 1, false, true});
  specs.push_back({"kv_up_w", heads * (model.qk_nope_head_dim + model.v_head_dim),
                   model.kv_lora_rank, true, false});
}

}  // namespace

std::vector<ParamTensorSpec> layer_param_specs(const ModelSpec& model, const ParallelPlan& plan,
                                               bool moe) {
  const int64_t h = model.hidden;
  const int64_t t = plan.tp;
  const int64_t qkv = (model.q_hidden() + 2 * model.kv_hidden()) / t;
  const int64_t f = model.ffn_hidden / t;
  const int64_t up = (model.gated_mlp() ? 2 : 1) * f;
  const bool post = model.block == LayerBlock::kPostNorm || model.block == LayerBlock::kSandwich;
  std::vector<ParamTensorSpec> specs;
  if (model.block != LayerBlock::kPostNorm) add_norm(specs, model, "norm1", h);
  if (model.latent_attention()) {
    add_latent_attention(specs, model, plan);
  } else {
    specs.push_back({"qkv_w", qkv, h, true, false});
    if (model.qkv_bias) specs.push_back({"qkv_b", qkv, 1, false, false});
  }
  // QK-norm: per head, one head_dim vector each for Q and K on every rank; over the whole width,
  // split with the heads.
  if (model.qk_norm == QkNorm::kPerHead) {
    specs.push_back({"q_norm_w", model.head_dim(), 1, false, true});
    specs.push_back({"k_norm_w", model.head_dim(), 1, false, true});
  } else if (model.qk_norm == QkNorm::kWhole) {
    specs.push_back({"q_norm_w", model.q_hidden() / t, 1, false, false});
    specs.push_back({"k_norm_w", model.kv_hidden() / t, 1, false, false});
  }
  specs.push_back({"out_w", h, model.context_hidden() / t, true, false});
  if (model.out_bias) specs.push_back({"out_b", h, 1, false, true});
  if (post) add_norm(specs, model, "post_attn_norm", h);
  if (model.block != LayerBlock::kPostNorm && model.block != LayerBlock::kParallel)
    add_norm(specs, model, "norm2", h);
  if (moe) {
    add_moe(specs, model, plan);
  } else {
    specs.push_back({"up_w", up, h, true, false});
    if (model.linear_bias) specs.push_back({"up_b", up, 1, false, false});
    specs.push_back({"down_w", h, f, true, false});
    if (model.linear_bias) specs.push_back({"down_b", h, 1, false, true});
  }
  if (post) add_norm(specs, model, "post_mlp_norm", h);
  return specs;
}

std::vector<ParamTensorSpec> embedding_param_specs(const ModelSpec& model,
                                                   const ParallelPlan& plan) {
  const int64_t vocab_shard = (model.vocab + plan.tp - 1) / plan.tp;
  std::vector<ParamTensorSpec> specs{{"wte", vocab_shard, model.hidden, false, false}};
  if (model.position == PositionKind::kLearned)
    specs.push_back({"wpe", model.max_seq, model.hidden, false, true});
  return specs;
}

std::vector<ParamTensorSpec> head_param_specs(const ModelSpec& model, const ParallelPlan& plan) {
  const int64_t vocab_shard = (model.vocab + plan.tp - 1) / plan.tp;
  std::vector<ParamTensorSpec> specs;
  add_norm(specs, model, "final_norm", model.hidden);
  if (!model.tied_embeddings || plan.pp > 1) {
    specs.push_back({"head_w", vocab_shard, model.hidden, false, false});
    if (model.head_bias) specs.push_back({"head_b", vocab_shard, 1, false, false});
  }
  return specs;
}

}  // namespace strata
