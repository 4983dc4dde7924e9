#include "plan/activation_memory.hpp"

#include "plan/moe_dims.hpp"

namespace strata {

namespace {

struct Dims {
  int64_t sb;   // tokens per micro-batch
  int64_t e;    // bytes per activation element
  int64_t t;    // tensor-parallel size
  int64_t rep;  // divisor of the "replicated" terms: t with sequence parallel, else 1
};

Dims dims_of(const ParallelPlan& plan) {
  return {plan.local_seq_len() * plan.micro_batch, bytes_per_element(plan.dtype), plan.tp,
          plan.sequence_parallel ? plan.tp : 1};
}

// An MoE layer's MLP (Megatron-Core's MoELayer, what autograd keeps for the backward): the
// router's input (the norm's output, which the shared experts read too) and its fp32
// probabilities over the experts (the softmax's or sigmoid's output, T x E), the experts' input
// after dispatch, their up products' output and the activation's, the experts' outputs the
// unpermutation weights by the probabilities (whose gradient needs them: back at the rank's
// T x k token slots under the all-to-all dispatcher, on the expert rows under the all-gather
// one), and the shared experts' activation input and output as a dense MLP's, with the gated
// output and the fp32 gate of Qwen-MoE's shared-expert gate.
void add_moe_mlp(const ModelSpec& model, const ParallelPlan& plan, std::vector<StoredTensor>& out) {
  const DType e = plan.dtype;
  const int64_t h = model.hidden;
  const MoeDims m = moe_dims(model, plan);
  const int64_t sb = plan.local_seq_len() * plan.micro_batch;
  const auto add = [&](const char* name, int64_t r, int64_t c, DType dtype) {
    out.push_back({name, {{r, c, 1, 1}, dtype}, ActivationPart::kMlp});
  };
  add("up_in", m.tokens, h, e);
  add("router_probs", m.tokens, model.experts, DType::kFp32);
  add("expert_in", m.expert_rows, h, e);
  add("expert_act_in", m.expert_rows, m.expert_up, e);
  add("expert_down_in", m.expert_rows, m.expert_ffn, e);
  const bool all_to_all = plan.moe_dispatcher == MoeDispatcher::kAllToAll;
  add("expert_out", all_to_all ? m.tokens * model.experts_per_token : m.expert_rows, h, e);
  if (m.shared_ffn == 0) return;
  add("shared_act_in", sb, m.shared_up, e);
  add("shared_down_in", sb, m.shared_ffn, e);
  if (!model.shared_expert_gate) return;
  add("shared_out", m.tokens, h, e);
  add("shared_gate", m.tokens, 1, DType::kFp32);
}

// Latent attention's tensors between the layer's input norm and Q, K and V (Megatron-Core's
// MLASelfAttention; what autograd keeps for the backward): the query latent, the down projection's
// output, which q_layernorm keeps as its input, and the norm's output, which linear_q_up_proj
// keeps as its input (both absent with q_lora_rank 0, whose linear_q_proj reads the layer's
// norm output, "qkv_in"); the key-value down projection's output, the key-value latent with the
// rotary key beside it (kv_layernorm keeps its input, a view that holds the whole output), and
// the norm's output, linear_kv_up_proj's input. They are the rank's rows (s b / t under sequence
// parallelism, as "qkv_in"): the up projections gather them again for their weight gradients.
// Nothing else: the up projections' outputs feed the rotary embedding and the key-value assembly,
// whose backwards need no saved values, and the attention keeps Q, K and V ("qkv").
void add_latent_attention(const ModelSpec& model, const ParallelPlan& plan, int64_t rows,
                          std::vector<StoredTensor>& out) {
  const DType e = plan.dtype;
  const auto add = [&](const char* name, int64_t c, ActivationPart part) {
    out.push_back({name, {{rows, c, 1, 1}, e}, part});
  };
  if (model.q_lora_rank > 0) {
    add("q_latent", model.q_lora_rank, ActivationPart::kNorms);
    add("q_up_in", model.q_lora_rank, ActivationPart::kAttention);
  }
  add("kv_latent", model.kv_lora_rank + model.qk_rope_head_dim, ActivationPart::kNorms);
  add("kv_up_in", model.kv_lora_rank, ActivationPart::kAttention);
}

}  // namespace

std::vector<StoredTensor> layer_stored_tensors(const ModelSpec& model, const ParallelPlan& plan,
                                               bool moe) {
  const Dims d = dims_of(plan);
  const DType e = plan.dtype;
  const int64_t h = model.hidden;
  const int64_t q = model.q_hidden() / d.t;
  const int64_t kv = model.kv_hidden() / d.t;
  const int64_t v = model.v_hidden() / d.t;
  const int64_t context = model.context_hidden() / d.t;  // the attention's output
  const int64_t f = model.ffn_hidden / d.t;
  const int64_t rows = d.sb / d.rep;  // the residual stream's rows on this rank
  // Under context parallelism's a2a the attention kernel keeps Q, K and V and its log-sum-exp
  // after the all-to-all: the whole sequence on heads / cp, as many bytes as the rank's tokens on
  // every head (its other tensors are the rank's tokens').
  const int64_t heads_split = plan.cp_comm == CpComm::kAllToAll ? plan.cp : 1;
  const int64_t attended = heads_split > 1 ? plan.seq_len : plan.local_seq_len();
  const int64_t heads = model.heads / d.t / heads_split;
  // Under FP8 Transformer Engine saves the GEMM inputs it cast for the weight gradients in FP8:
  // the QKV, MLP-up and MLP-down inputs (the attention output stays 16-bit, flash keeps it).
  const DType gemm_in = plan.fp8 != Fp8Format::kNone ? DType::kFp8 : e;
  const bool dropout = model.dropout;  // 1-byte masks
  const LayerBlock block = model.block;
  const bool post_norms = block == LayerBlock::kPostNorm || block == LayerBlock::kSandwich;
  const auto matrix = [](int64_t r, int64_t c, DType dtype) {
    return TensorShape{{r, c, 1, 1}, dtype};
  };
  std::vector<StoredTensor> out;
  const auto add = [&](const char* name, TensorShape shape, ActivationPart part) {
    out.push_back({name, shape, part});
  };
  using P = ActivationPart;
  // Each norm keeps its input (Korthikanti et al.: two per layer; Gemma's sandwich four), and a
  // QK-norm its inputs, Q and K before the norm.
  if (block != LayerBlock::kPostNorm) add("norm1_in", matrix(rows, h, e), P::kNorms);
  add("qkv_in", matrix(rows, h, gemm_in), P::kAttention);
  if (model.latent_attention()) add_latent_attention(model, plan, rows, out);
  add("qkv", matrix(attended * plan.micro_batch, (q + kv + v) / heads_split, e),
      P::kAttention);  // Q and K, V
  if (model.qk_norm != QkNorm::kNone) add("qk_norm_in", matrix(d.sb, q + kv, e), P::kNorms);
  if (plan.attention == AttentionKind::kFlash) {
    // fp32, one per head and token
    add("lse", {{plan.micro_batch, heads, attended, 1}, DType::kFp32}, P::kSoftmaxLse);
  } else {
    // a s^2 b / t score elements: the softmax output, and with dropout its mask and output.
    const TensorShape scores{{plan.micro_batch, heads, attended, attended}, e};
    add("scores", scores, P::kScores);
    if (dropout) {
      add("scores_mask", {scores.dims, DType::kU8}, P::kScores);
      add("scores_dropped", scores, P::kScores);
    }
  }
  add("out_in", matrix(d.sb, context, e), P::kAttention);
  // A parallel block drops its summed branches through one mask (the MLP's).
  if (dropout && !model.parallel_block())
    add("attn_mask", matrix(rows, h, DType::kU8), P::kAttention);
  if (post_norms) add("post_attn_norm_in", matrix(rows, h, e), P::kNorms);
  if (block != LayerBlock::kPostNorm && block != LayerBlock::kParallel)
    add("norm2_in", matrix(rows, h, e), P::kNorms);
  if (moe) {
    add_moe_mlp(model, plan, out);
  } else {
    // A parallel block's MLP reads the tensor the QKV product read when the two share a norm.
    if (block != LayerBlock::kParallel) add("up_in", matrix(rows, h, gemm_in), P::kMlp);
    add("act_in", matrix(d.sb, (model.gated_mlp() ? 2 : 1) * f, e), P::kMlp);  // the activation's
    add("down_in", matrix(d.sb, f, gemm_in), P::kMlp);
  }
  if (dropout) add("mlp_mask", matrix(rows, h, DType::kU8), P::kMlp);
  if (post_norms) add("post_mlp_norm_in", matrix(rows, h, e), P::kNorms);
  return out;
}

LayerActivations layer_activations(const ModelSpec& model, const ParallelPlan& plan, bool moe) {
  LayerActivations act;
  for (const StoredTensor& t : layer_stored_tensors(model, plan, moe)) {
    const int64_t bytes = t.shape.bytes();
    switch (t.part) {
      case ActivationPart::kNorms:
        act.norms += bytes;
        break;
      case ActivationPart::kAttention:
        act.attention += bytes;
        break;
      case ActivationPart::kScores:
        act.attention_scores += bytes;
        break;
      case ActivationPart::kSoftmaxLse:
        act.softmax_lse += bytes;
        break;
      case ActivationPart::kMlp:
        act.mlp += bytes;
        break;
    }
  }
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

std::vector<StoredTensor> op_selective_tensors(const ModelSpec& model, const ParallelPlan& plan) {
  const Dims d = dims_of(plan);
  const DType e = plan.dtype;
  const int64_t rows = d.sb / d.rep;
  const auto matrix = [&](int64_t r, int64_t c) { return TensorShape{{r, c, 1, 1}, e}; };
  using P = ActivationPart;
  std::vector<StoredTensor> out{{"norm1_in", matrix(rows, model.hidden), P::kNorms}};
  const std::vector<BlockProduct> products = block_products(model);
  for (size_t i = 0; i < products.size(); ++i) {
    if (!op_selective_saves(i)) continue;
    switch (products[i]) {
      case BlockProduct::kQ:
        out.push_back({"q", matrix(d.sb, model.q_hidden() / d.t), P::kAttention});
        break;
      case BlockProduct::kK:
        out.push_back({"k", matrix(d.sb, model.kv_hidden() / d.t), P::kAttention});
        break;
      case BlockProduct::kV:
        out.push_back({"v", matrix(d.sb, model.kv_hidden() / d.t), P::kAttention});
        break;
      case BlockProduct::kO:
        out.push_back({"attn_proj", matrix(rows, model.hidden), P::kAttention});
        break;
      case BlockProduct::kDown:
        out.push_back({"mlp_proj", matrix(rows, model.hidden), P::kMlp});
        break;
      case BlockProduct::kGate:
        out.push_back({"gate", matrix(d.sb, model.ffn_hidden / d.t), P::kMlp});
        break;
      case BlockProduct::kUp:
        out.push_back({"up", matrix(d.sb, model.ffn_hidden / d.t), P::kMlp});
        break;
    }
  }
  out.push_back({"out_in", matrix(d.sb, model.q_hidden() / d.t), P::kAttention});
  for (const StoredTensor& t : layer_stored_tensors(model, plan, false)) {
    if (t.part == P::kSoftmaxLse) out.push_back(t);
  }
  return out;
}

namespace {

int64_t total_bytes(const std::vector<StoredTensor>& tensors) {
  int64_t bytes = 0;
  for (const StoredTensor& t : tensors) bytes += t.shape.bytes();
  return bytes;
}

}  // namespace

int64_t stored_layer_activation_bytes(const ModelSpec& model, const ParallelPlan& plan, bool moe) {
  const LayerActivations act = layer_activations(model, plan, moe);
  switch (plan.recompute) {
    case RecomputeKind::kNone:
      return act.total();
    case RecomputeKind::kSelective:
      return act.total() - act.attention_scores;
    case RecomputeKind::kFull:
      return layer_input_bytes(model, plan);
    case RecomputeKind::kSelectiveOp:
      return total_bytes(op_selective_tensors(model, plan));
  }
  return act.total();
}

int64_t layer_input_bytes(const ModelSpec& model, const ParallelPlan& plan) {
  const Dims d = dims_of(plan);
  return d.e * d.sb * model.hidden / d.rep;
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
