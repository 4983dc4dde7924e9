#pragma once
// The parameter tensors of each block (a transformer layer, the first stage's embedding, the last
// stage's head) as one rank holds them under tensor parallelism, in a fixed order: the parameter,
// gradient and optimizer-state tensors of the task graph (plan/tensor.hpp). Megatron-LM's
// sharding, as plan/shard_sizes.hpp counts it: column-parallel QKV and MLP-up products split
// their weights' rows and biases, row-parallel attention output and MLP-down products their
// weights' columns (biases replicated), norms replicated, the vocabulary-parallel embedding and
// LM head their rows. The MLP-up weight of a gated MLP holds the gate and up rows together
// (Megatron's fused linear_fc1); QKV holds Q, K and V rows together. Latent attention has its
// down and up projections and the latents' norms in place of QKV (param_tensors.cpp,
// add_latent_attention).

#include <cstdint>
#include <string>
#include <vector>

#include "models/model_spec.hpp"
#include "plan/parallel_plan.hpp"

namespace strata {

struct ParamTensorSpec {
  std::string name;  // "norm1_w", "qkv_w", "wte", ...
  int64_t rows = 0;  // per TP rank; vectors have cols 1
  int64_t cols = 1;
  bool gemm_weight = false;  // a GEMM's weight matrix (FP8 under --fp8-param-gather)
  // The same values on every TP rank (norms, row-parallel biases, positions, latent attention's
  // down projections): under sequence parallelism each rank's gradient covers its own rows and is
  // summed over TP.
  bool replicated = false;
  // A routed expert's weight that Megatron-Core keeps out of the dense gradient buffers: with
  // expert parallelism (ep > 1) its gradient is reduced, and ZeRO shards it, over the
  // expert-data-parallel group (experts.py sets `allreduce = not expert_parallel`); at ep 1 it is
  // reduced with the dense parameters.
  bool expert = false;

  int64_t elements() const { return rows * cols; }
};

// A dense layer's, or with `moe` an MoE layer's (ModelSpec::is_moe_layer), with its router and
// experts in place of the dense MLP.
std::vector<ParamTensorSpec> layer_param_specs(const ModelSpec& model, const ParallelPlan& plan,
                                               bool moe);
// The token embedding's shard, then learned positions.
std::vector<ParamTensorSpec> embedding_param_specs(const ModelSpec& model,
                                                   const ParallelPlan& plan);
// The final norm, then the LM head's matrix (an untied head, or a tied embedding's copy on the
// last stage when pp > 1) and its bias. A tied head on the embedding's own stage has no matrix
// here: it reads the embedding's table.
std::vector<ParamTensorSpec> head_param_specs(const ModelSpec& model, const ParallelPlan& plan);

}  // namespace strata
