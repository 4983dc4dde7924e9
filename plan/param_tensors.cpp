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
  specs.push_back({"qkv_w", qkv, h, true, false});
  if (model.qkv_bias) specs.push_back({"qkv_b", qkv, 1, false, false});
  // QK-norm: per head, one head_dim vector each for Q and K on every rank; over the whole width,
  // split with the heads.
  if (model.qk_norm == QkNorm::kPerHead) {
    specs.push_back({"q_norm_w", model.head_dim(), 1, false, true});
    specs.push_back({"k_norm_w", model.head_dim(), 1, false, true});
  } else if (model.qk_norm == QkNorm::kWhole) {
    specs.push_back({"q_norm_w", model.q_hidden() / t, 1, false, false});
    specs.push_back({"k_norm_w", model.kv_hidden() / t, 1, false, false});
  }
  specs.push_back({"out_w", h, model.q_hidden() / t, true, false});
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
