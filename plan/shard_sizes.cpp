#include "plan/shard_sizes.hpp"

#include "plan/moe_dims.hpp"

namespace strata {

namespace {

// Latent attention's projections on one TP rank (plan/param_tensors.cpp, add_latent_attention):
// the down projections whole, the up projections (or the plain query projection) and the output
// projection over the rank's heads / tp.
struct LatentAttentionShard {
  int64_t gemm_weights = 0;
  int64_t biases = 0;  // the down projections' (attention_bias), whole
  int64_t norms = 0;   // the latents' RMSNorms, whole
};

LatentAttentionShard latent_attention_shard(const ModelSpec& model, int64_t t) {
  const int64_t h = model.hidden;
  const int64_t heads = model.heads / t;
  const int64_t q_head = model.qk_nope_head_dim + model.qk_rope_head_dim;
  const int64_t kv_down = model.kv_lora_rank + model.qk_rope_head_dim;
  LatentAttentionShard shard;
  shard.gemm_weights = model.q_lora_rank > 0
                           ? h * model.q_lora_rank + heads * q_head * model.q_lora_rank
                           : heads * q_head * h;
  shard.gemm_weights += h * kv_down +
                        heads * (model.qk_nope_head_dim + model.v_head_dim) * model.kv_lora_rank +
                        h * model.context_hidden() / t;
  if (model.qkv_bias) shard.biases = model.q_lora_rank + kv_down;
  shard.norms = model.q_lora_rank + model.kv_lora_rank;
  return shard;
}

}  // namespace

ShardSizes shard_sizes(const ModelSpec& model, const ParallelPlan& plan) {
  const int64_t h = model.hidden;
  const int64_t t = plan.tp;
  const int64_t q = model.q_hidden();
  const int64_t kv = model.kv_hidden();
  const int64_t f = model.ffn_hidden;
  const int64_t up_matrices = model.gated_mlp() ? 2 : 1;
  ShardSizes sizes;
  sizes.vocab_shard = (model.vocab + t - 1) / t;
  const bool latent = model.latent_attention();
  const LatentAttentionShard mla =
      latent ? latent_attention_shard(model, t) : LatentAttentionShard{};
  const int64_t attention = latent ? mla.gemm_weights : h * (q + 2 * kv) / t + (q / t) * h;
  int64_t layer = attention + up_matrices * h * (f / t) + (f / t) * h;
  sizes.layer_gemm_weights = layer;
  if (model.qkv_bias) layer += latent ? mla.biases : (q + 2 * kv) / t;
  if (model.out_bias) layer += h;
  if (model.linear_bias) layer += up_matrices * (f / t) + h;
  const int64_t norm = model.norm == NormKind::kLayerNorm ? 2 * h : h;
  // QK-norms: per head, replicated on every rank; over the whole width, split with the heads.
  int64_t qk_norm = 0;
  if (model.qk_norm == QkNorm::kPerHead) qk_norm = 2 * model.head_dim();
  if (model.qk_norm == QkNorm::kWhole) qk_norm = (q + kv) / t;
  sizes.layer = layer + model.norms_per_layer() * norm + qk_norm + mla.norms;
  if (model.moe()) {
    // The dense MLP's products and biases out, the MoE layer's in (plan/param_tensors.cpp).
    const MoeDims d = moe_dims(model, plan);
    int64_t mlp = up_matrices * h * (f / t) + (f / t) * h;
    if (model.linear_bias) mlp += up_matrices * (f / t) + h;
    const int64_t experts = d.local_experts * (d.expert_up + d.expert_ffn) * h;
    if (plan.ep > 1) sizes.moe_layer_experts = experts;
    int64_t moe = model.experts * h + experts + (d.shared_up + d.shared_ffn) * h;
    if (model.router_bias) moe += model.experts;
    if (d.shared_ffn > 0 && model.shared_expert_gate) moe += h;
    sizes.moe_layer = sizes.layer - mlp + moe;
  }
  sizes.embedding = sizes.vocab_shard * h;
  if (model.position == PositionKind::kLearned) sizes.embedding += model.max_seq * h;
  const bool head_matrix = !model.tied_embeddings || plan.pp > 1;
  sizes.head = norm + (head_matrix ? sizes.vocab_shard * h : 0);
  if (model.head_bias && head_matrix) sizes.head += sizes.vocab_shard;
  return sizes;
}

std::vector<int64_t> stage_parameters(const ModelSpec& model, const ParallelPlan& plan) {
  const ShardSizes sizes = shard_sizes(model, plan);
  std::vector<int64_t> params =
      sum_over_stage_layers(plan, model, [&](int64_t l) { return sizes.of_layer(model, l); });
  params.front() += sizes.embedding;
  params.back() += sizes.head;
  return params;
}

std::vector<int64_t> stage_expert_parameters(const ModelSpec& model, const ParallelPlan& plan) {
  const ShardSizes sizes = shard_sizes(model, plan);
  return sum_over_stage_layers(
      plan, model, [&](int64_t l) { return model.is_moe_layer(l) ? sizes.moe_layer_experts : 0; });
}

}  // namespace strata
