#pragma once
// How many parameters each rank holds under tensor parallelism (Megatron-LM's sharding):
// column-parallel QKV and MLP-up (weights and biases split), row-parallel attention output and
// MLP-down (weights split, biases replicated), norms replicated, vocabulary-parallel embedding and
// LM head (rows split, rounded up as Megatron pads the vocabulary), learned positions replicated.
// Latent attention: its down projections and the latents' norms whole, its up projections split
// by heads (plan/param_tensors.cpp).

#include <cstdint>
#include <vector>

#include "models/model_spec.hpp"
#include "plan/parallel_plan.hpp"

namespace strata {

struct ShardSizes {
  int64_t layer = 0;  // one dense transformer layer, per TP rank
  // One MoE layer (ModelSpec::experts): its attention and norms as a dense layer's, the router,
  // the rank's E / ep local experts split over expert TP, and the shared experts split over TP.
  int64_t moe_layer = 0;
  // Of which the routed experts' weights kept apart from the dense parameters (ParamTensorSpec::
  // expert: with ep > 1; 0 at ep 1).
  int64_t moe_layer_experts = 0;
  // Of which the GEMMs' weight matrices (FP8 under fp8): the four of a layer, or with latent
  // attention its projections' and the MLP's.
  int64_t layer_gemm_weights = 0;
  int64_t embedding = 0;    // token embedding shard (+ positions) on the first stage
  int64_t head = 0;         // final norm + LM head shard on the last stage (a tied embedding's
                            // copy there when pp > 1, as Megatron keeps one)
  int64_t vocab_shard = 0;  // vocabulary rows per TP rank

  // Layer `layer`'s (0-based), MoE or dense.
  int64_t of_layer(const ModelSpec& model, int64_t layer) const {
    return model.is_moe_layer(layer) ? moe_layer : this->layer;
  }
};

ShardSizes shard_sizes(const ModelSpec& model, const ParallelPlan& plan);

// Parameters held by one rank of each pipeline stage (before ZeRO sharding).
std::vector<int64_t> stage_parameters(const ModelSpec& model, const ParallelPlan& plan);
// Of those, the routed experts' weights kept apart (ShardSizes::moe_layer_experts), which ZeRO
// shards over the expert-data-parallel group.
std::vector<int64_t> stage_expert_parameters(const ModelSpec& model, const ParallelPlan& plan);

}  // namespace strata
