#include "plan/shard_sizes.hpp"

namespace strata {

ShardSizes shard_sizes(const ModelSpec& model, const ParallelPlan& plan) {
  const int64_t h = model.hidden;
  const int64_t t = plan.tp;
  const int64_t q = model.q_hidden();
  const int64_t kv = model.kv_hidden();
  const int64_t f = model.ffn_hidden;
  const int64_t up_matrices = model.gated_mlp() ? 2 : 1;
  ShardSizes sizes;
  sizes.vocab_shard = (model.vocab + t - 1) / t;
  int64_t layer = h * (q + 2 * kv) / t + (q / t) * h + up_matrices * h * (f / t) + (f / t) * h;
  sizes.layer_gemm_weights = layer;
  if (model.qkv_bias) layer += (q + 2 * kv) / t;
  if (model.out_bias) layer += h;
  if (model.linear_bias) layer += up_matrices * (f / t) + h;
  const int64_t norm = model.norm == NormKind::kLayerNorm ? 2 * h : h;
  // QK-norms: per head, replicated on every rank; over the whole width, split with the heads.
  int64_t qk_norm = 0;
  if (model.qk_norm == QkNorm::kPerHead) qk_norm = 2 * model.head_dim();
  if (model.qk_norm == QkNorm::kWhole) qk_norm = (q + kv) / t;
  sizes.layer = layer + model.norms_per_layer() * norm + qk_norm;
  sizes.embedding = sizes.vocab_shard * h;
  if (model.position == PositionKind::kLearned) sizes.embedding += model.max_seq * h;
  const bool head_matrix = !model.tied_embeddings || plan.pp > 1;
  sizes.head = norm + (head_matrix ? sizes.vocab_shard * h : 0);
  if (model.head_bias && head_matrix) sizes.head += sizes.vocab_shard;
  return sizes;
}

std::vector<int64_t> stage_parameters(const ModelSpec& model, const ParallelPlan& plan) {
  const ShardSizes sizes = shard_sizes(model, plan);
  const auto layers = layers_per_stage(plan, model);
  std::vector<int64_t> params(layers.size());
  for (size_t s = 0; s < layers.size(); ++s) params[s] = layers[s] * sizes.layer;
  params.front() += sizes.embedding;
  params.back() += sizes.head;
  return params;
}

}  // namespace strata
