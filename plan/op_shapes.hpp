#pragma once
// The shapes of every op one rank runs under a plan (s the rank's tokens of a sequence, seq_len /
// cp, b micro-batch, t tp; sequence parallelism splits the norms and residual adds over t): a
// transformer layer's ops, the first stage's embedding, the last stage's head and loss, and each
// stage's optimizer step. The lowering attaches them to compute tasks; the search prices them
// without building a graph.

#include <cstdint>
#include <vector>

#include "models/model_spec.hpp"
#include "models/ops.hpp"
#include "plan/parallel_plan.hpp"

namespace strata {

struct OpShapePair {
  OpShape forward;
  OpShape backward;
};

struct PlanOpShapes {
  OpShapePair norm, qkv, attention, attn_out, residual, mlp_up, mlp_act, mlp_down;  // a layer
  OpShapePair rotary;  // rotary position models only: on the query and key values
  // The attention core (flash attention) by context parallelism (plan/cp_attention.cpp), S the
  // sequence, s = S / cp the rank's tokens in two chunks of s/2 (Megatron-Core's load-balanced
  // order: rank i holds chunks i and 2cp - 1 - i):
  //  - cp 1: the causal attention of the S queries over their keys;
  //  - p2p: `attention` is the ring's step 0, the rank's queries over its own keys, causal;
  //    `cp_block` each later step, half a block under the load-balanced order (Transformer
  //    Engine's AttnFuncWithCPAndKVP2P: all s queries over the first half of the received keys,
  //    or the second half of the queries over all of them; both s^2/2 pairs, priced as the
  //    second), and `cp_dkv_add` the backward's add of a step's key and value gradients into the
  //    accumulator that travels the ring. Every rank does the same work, s(S + 1)/2 pairs in all,
  //    and the model FLOPs count the rank's queries over every key, 4 b s S heads d per layer;
  //  - all_gather: `attention` the rank's queries over the gathered keys before them: TE's two
  //    kernels (one per chunk) as one op of s(S + 1)/2 pairs;
  //  - a2a: `attention` the causal attention over the whole sequence on heads / cp.
  OpShapePair cp_block;
  OpShape cp_dkv_add;
  // Windowed models with global layers (model.global_every): the global layers' attention, while
  // `attention` is the windowed layers'. QK-norm models: the norm over Q and K.
  OpShapePair attention_global, qk_norm;
  // --tp-comm-overlap: the four TP-sharded products split into tp chunks of s b / t rows each.
  OpShapePair qkv_chunk, attn_out_chunk, mlp_up_chunk, mlp_down_chunk;
  OpShapePair embedding, final_norm, lm_head, loss;  // first stage, last stage
  OpShapePair embedding_dropout;                     // with dropout: the first stage's
  OpShape loss_max, loss_partials;                   // tp > 1: the loss forward's two passes
  // FP8 (plan.fp8): Transformer Engine's memory-bound work around the FP8 GEMMs. Forward: the
  // GEMM inputs no fused norm casts (attention-output and MLP-down), cast to FP8 (read 2 bytes,
  // write 1 per element). Backward, per GEMM: its output gradient cast to FP8 with a transposed
  // copy (2 + 1 + 1 bytes) and its saved FP8 input transposed (1 + 1) for the Hopper-only TN
  // layout of FP8 GEMMs. Once per step, a layer's GEMM weights cast to FP8 and transposed.
  OpShape fp8_cast_attn_out_in, fp8_cast_mlp_down_in;
  OpShape fp8_grad_qkv, fp8_grad_attn_out, fp8_grad_mlp_up, fp8_grad_mlp_down;
  OpShape fp8_weight_cast;
  // Selective-op recompute: the K product alone and one of SwiGLU's two up products, which the
  // fused QKV and MLP-up ops hold together.
  OpShape k_product, mlp_up_half;
  std::vector<OpShape> optimizer;  // per pipeline stage
  // An MoE layer (ModelSpec::experts; plan/moe_dims.hpp has the rows): the router's product
  // (T x E over h) and its scoring and top-k over the fp32 logits; the permutation of tokens by
  // expert (a gather of the rows each expert takes) and its inverse, weighting each expert's output
  // by its probability and summing a token's k; the experts' up product, activation and down
  // product on the rank's expert rows, one grouped GEMM per product (--moe-grouped-gemm) or one
  // product per local expert on its share; the shared experts as a dense MLP over TP, and
  // Qwen-MoE's sigmoid gate on their output.
  OpShapePair router, routing, permute, unpermute, experts_up, experts_act, experts_down;
  OpShapePair shared_up, shared_act, shared_down, shared_gate;
  // Multi-head latent attention (ModelSpec::kv_lora_rank; plan/mla_lowering.cpp), in place of the
  // QKV product (`qkv` is empty): the query and key-value down projections on the rank's rows
  // (whole on every TP rank), the RMSNorms of their latents, the column-parallel up projections
  // over the rank's heads (`q_up` is linear_q_proj from the layer's norm output when q_lora_rank
  // is 0, and `q_down` and `q_latent_norm` are empty), and the keys and values assembled from the
  // key-value up projection's output and the rotary key. `rotary` turns the queries' rotary part,
  // `attention` has value heads of v_head_dim and `attn_out` reads heads x v_head_dim.
  OpShapePair q_down, q_latent_norm, q_up, kv_down, kv_latent_norm, kv_up, latent_key_value;
};

PlanOpShapes plan_op_shapes(const ModelSpec& model, const ParallelPlan& plan);

}  // namespace strata
