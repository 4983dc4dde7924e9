#include "plan/shard_sizes.hpp"

namespace strata {

ShardSizes shard_sizes(const ModelSpec& model, const ParallelPlan& plan) {
  const int64_t h = model.hidden;
  const int64_t t = plan.tp;
  const int64_t kv = model.kv_hidden();
  const int64_t f = model.ffn_hidden;
  const int64_t up_matrices = model.mlp == MlpKind::kSwiGlu ? 2 : 1;
  ShardSizes sizes;
  sizes.vocab_shard = (model.vocab + t - 1) / t;
  int64_t layer = h * (h + 2 * kv) / t + (h / t) * h + up_matrices * h * (f / t) + (f / t) * h;
  sizes.layer_gemm_weights = layer;
  if (model.qkv_bias) layer += (h + 2 * kv) / t;
  if (model.linear_bias) layer += h + up_matrices * (f / t) + h;
  const int64_t norm = model.norm == NormKind::kLayerNorm ? 2 * h : h;
  sizes.layer = layer + 2 * norm;
  sizes.embedding = sizes.vocab_shard * h;
  if (model.position == PositionKind::kLearned) sizes.embedding += model.max_seq * h;
  const bool head_matrix = !model.tied_embeddings || plan.pp > 1;
  sizes.head = norm + (head_matrix ? sizes.vocab_shard * h : 0);
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
