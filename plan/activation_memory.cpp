#include "plan/activation_memory.hpp"

namespace strata {

namespace {

struct Dims {
  int64_t sb;   // tokens per micro-batch
  int64_t e;    // bytes per activation element
  int64_t t;    // tensor-parallel size
  int64_t rep;  // divisor of the "replicated" terms: t with sequence parallel, else 1
};

Dims dims_of(const ParallelPlan& plan) {
  return {plan.seq_len * plan.micro_batch, bytes_per_element(plan.dtype), plan.tp,
          plan.sequence_parallel ? plan.tp : 1};
}

}  // namespace

LayerActivations layer_activations(const ModelSpec& model, const ParallelPlan& plan) {
  const Dims d = dims_of(plan);
  const int64_t h = model.hidden;
  const int64_t q = model.q_hidden();
  const int64_t kv = model.kv_hidden();
  const int64_t f = model.ffn_hidden;
  const int64_t mask = model.dropout ? 1 : 0;  // 1-byte dropout masks
  LayerActivations act;
  // Each norm keeps its input (Korthikanti et al.: two per layer; Gemma's sandwich four), and a
  // QK-norm its inputs, Q and K before the norm.
  act.norms = model.norms_per_layer() * d.e * d.sb * h / d.rep;
  if (model.qk_norm != QkNorm::kNone) act.norms += d.e * d.sb * (q + kv) / d.t;
  // Under FP8 Transformer Engine saves the GEMM inputs it cast for the weight gradients in FP8:
  // the QKV, MLP-up and MLP-down inputs (the attention output stays 16-bit, flash keeps it).
  const int64_t gemm_in = plan.fp8 != Fp8Format::kNone ? 1 : d.e;
  act.attention = gemm_in * d.sb * h / d.rep     // QKV input
                  + d.e * d.sb * (q + kv) / d.t  // Q and K
                  + d.e * d.sb * kv / d.t        // V
                  + d.e * d.sb * q / d.t         // attention-output input
                  + mask * d.sb * h / d.rep;     // attention dropout mask
  if (plan.attention == AttentionKind::kFlash) {
    act.softmax_lse = 4 * model.heads * d.sb / d.t;  // fp32, one per head and token
  } else {
    // a s^2 b / t score elements: the softmax output, and with dropout its mask and output.
    const int64_t scores = model.heads * plan.seq_len * d.sb / d.t;
    act.attention_scores = d.e * scores + mask * (scores + d.e * scores);
  }
  const int64_t up_outputs = model.gated_mlp() ? 2 : 1;
  // A parallel block's MLP reads the tensor the QKV product read when the two share a norm.
  const int64_t mlp_input = model.block == LayerBlock::kParallel ? 0 : gemm_in * d.sb * h / d.rep;
  act.mlp = mlp_input                            // MLP-up input
            + up_outputs * d.e * d.sb * f / d.t  // activation input(s)
            + gemm_in * d.sb * f / d.t           // MLP-down input
            + mask * d.sb * h / d.rep;           // MLP dropout mask
  return act;
}

std::vector<BlockProduct> block_products(const ModelSpec& model) {
  if (model.gated_mlp()) {
    return {BlockProduct::kQ,    BlockProduct::kK,  BlockProduct::kV,   BlockProduct::kO,
            BlockProduct::kGate, BlockProduct::kUp, BlockProduct::kDown};
  }
  return {BlockProduct::kQ, BlockProduct::kK,  BlockProduct::kV,
          BlockProduct::kO, BlockProduct::kUp, BlockProduct::kDown};
}

bool op_selective_saves(size_t index_in_block) { return index_in_block % 2 == 0; }

namespace {

// torchtitan's op-level policy: the block input (the checkpoint), every saved product's output,
// and the attention kernel's output with its fp32 log-sum-exp.
int64_t op_selective_bytes(const ModelSpec& model, const ParallelPlan& plan) {
  const Dims d = dims_of(plan);
  const int64_t h = model.hidden;
  // input, attention output
  int64_t elements = d.sb * h / d.rep + d.sb * model.q_hidden() / d.t;
  const std::vector<BlockProduct> products = block_products(model);
  for (size_t i = 0; i < products.size(); ++i) {
    if (!op_selective_saves(i)) continue;
    switch (products[i]) {
      case BlockProduct::kQ:
        elements += d.sb * model.q_hidden() / d.t;
        break;
      case BlockProduct::kK:
      case BlockProduct::kV:
        elements += d.sb * model.kv_hidden() / d.t;
        break;
      case BlockProduct::kO:
      case BlockProduct::kDown:
        elements += d.sb * h / d.rep;
        break;
      case BlockProduct::kGate:
      case BlockProduct::kUp:
        elements += d.sb * model.ffn_hidden / d.t;
        break;
    }
  }
  return d.e * elements + layer_activations(model, plan).softmax_lse;
}

}  // namespace

int64_t stored_layer_activation_bytes(const ModelSpec& model, const ParallelPlan& plan) {
  const LayerActivations act = layer_activations(model, plan);
  switch (plan.recompute) {
    case RecomputeKind::kNone:
      return act.total();
    case RecomputeKind::kSelective:
      return act.total() - act.attention_scores;
    case RecomputeKind::kFull:
      return layer_input_bytes(model, plan);
    case RecomputeKind::kSelectiveOp:
      return op_selective_bytes(model, plan);
  }
  return act.total();
}

int64_t layer_input_bytes(const ModelSpec& model, const ParallelPlan& plan) {
  const Dims d = dims_of(plan);
  return d.e * d.sb * model.hidden / d.rep;
}

int64_t head_activation_bytes(const ModelSpec& model, const ParallelPlan& plan) {
  const Dims d = dims_of(plan);
  const int64_t vocab_shard = (model.vocab + d.t - 1) / d.t;
  return 2 * d.e * d.sb * model.hidden / d.rep + 4 * d.sb * vocab_shard;
}

// Megatron-LM's scatter/gather optimization (Narayanan et al. 2021, Sec. 4.1): the TP ranks of a
// stage hold the same boundary activation, so each sends only its 1/t slice (over its own NIC)
// and the receiver all-gathers the slices over NVLink; with sequence parallelism the slice is
// what each rank holds anyway.
int64_t pipeline_message_bytes(const ModelSpec& model, const ParallelPlan& plan) {
  const Dims d = dims_of(plan);
  return d.e * d.sb * model.hidden / d.t;
}

}  // namespace strata
