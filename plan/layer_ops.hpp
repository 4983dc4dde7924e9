#pragma once
// The ops of one transformer layer (internal to plan/): LayerOps emits a layer's forward,
// recompute and backward tasks on the tensors they use; layer_lowering.cpp holds the dense layer's
// and the entry points, moe_lowering.cpp an MoE layer's MLP, mla_lowering.cpp latent attention's
// projections.

#include <map>
#include <vector>

#include <boost/container/small_vector.hpp>

#include "plan/lowering_context.hpp"
#include "plan/tp_gemm.hpp"

namespace strata {

// Where a block's norms sit (ModelSpec::block).
inline bool norm_before(const ModelSpec& m) { return m.block != LayerBlock::kPostNorm; }
inline bool norm_after(const ModelSpec& m) {
  return m.block == LayerBlock::kPostNorm || m.block == LayerBlock::kSandwich;
}
// A norm of the MLP's own before it: pre-norm, sandwich, and a parallel block with two norms.
inline bool norm_before_mlp(const ModelSpec& m) {
  return m.block != LayerBlock::kPostNorm && m.block != LayerBlock::kParallel;
}

// Under FP8, Transformer Engine gathers the inputs of column-parallel GEMMs in FP8 (the norm
// writes them cast): half the bytes.
inline int64_t column_input_bytes(const LoweringContext& ctx) {
  return ctx.plan.fp8 != Fp8Format::kNone ? ctx.tp_message_bytes / 2 : ctx.tp_message_bytes;
}

// The ops of one layer on the tensors they use: its parameters (plan/lowering_tensors.hpp) and,
// per slot, the tensor of this execution (RankState::at).
class LayerOps {
 public:
  LayerOps(const LoweringContext& ctx, RankState& state, int64_t layer,
           RankState::StoredLayer& entry)
      : entry_(entry),
        ctx_(ctx),
        state_(state),
        p_(state.program),
        op_(ctx.ops),
        m_(ctx.model),
        lp_(ctx.kind_of(layer).params),
        layer_(layer),
        block_(state.layer_blocks[static_cast<size_t>(layer)]) {}

  // Creates stored tensors of this (layer, micro-batch) for the slots `wanted` keeps, makes them
  // the slots of this execution and returns them.
  TensorIds store(bool (*wanted)(const LoweringContext&, int)) {
    SlotTensors& mine = entry_.slots;
    TensorIds made;
    const auto& kept = m_.is_moe_layer(layer_) ? ctx_.slots.moe_stored : ctx_.slots.stored;
    for (int s = 0; s < kStoredSlotCount; ++s) {
      if (!kept[static_cast<size_t>(s)] || !wanted(ctx_, s)) continue;
      const TensorId t =
          tensor(ctx_.slots.name[static_cast<size_t>(s)], ctx_.slots.shape[static_cast<size_t>(s)]);
      mine[static_cast<size_t>(s)] = t;
      state_.current[static_cast<size_t>(s)] = t;
      made.push_back(t);
    }
    return made;
  }
  TensorId tensor(uint8_t name, int32_t shape) {
    return p_.tensor(TensorKind::kActivation, name, shape, static_cast<int32_t>(layer_),
                     p_.micro_batch());
  }
  // The layer's stored tensors of this micro-batch, made the slots of this execution.
  void use_stored() {
    for (int s = 0; s < kStoredSlotCount; ++s)
      state_.current[static_cast<size_t>(s)] = entry_.slots[static_cast<size_t>(s)];
  }

  TaskId forward(TaskId input, TaskId params, TensorId layer_in);
  // An MoE layer's MLP from the norm's output (kUpIn), and its residual add into the stream.
  TaskId moe_forward(TaskId mlp_in, TensorId mid);
  // Its backward from the branch's output gradient `dout` after the residual add `grad_in`,
  // through the norm's backward, which adds into the stream's gradient.
  void moe_backward(TensorId dout, TaskId grad_in);
  // Latent attention's projections in place of the QKV product: forward from the norm's output
  // (kQkvIn, written by `input`) to Q, K and V in `qkv` (kQkv, or kQkvLocal before context
  // parallelism's a2a), which the rotary embedding and the attention then read as a dense
  // layer's; backward from their gradients in kDQkv (complete after `grad`) to the norm's output
  // gradient, which the returned result holds.
  void mla_forward(TaskId input, TensorId qkv);
  GemmResult mla_backward(TaskId grad);
  void recompute_unsaved(TaskId params, TensorId rebuilt);
  TaskId backward(TaskId grad, TaskId params);
  // Context parallelism's attention core (plan/cp_attention.cpp), by --cp-comm-type: forward
  // from Q, K and V in `qkv` (the rank's tokens; on heads / cp under a2a, moved there first) to
  // the output in kOutIn and the log-sum-exp in kLse; backward from kDOutIn into kDQkv. Each
  // returns the task after which its result is complete.
  TaskId cp_attention_forward(const OpPair& op, TensorId qkv);
  TaskId cp_attention_backward(const OpPair& op);
  // A dense layer's MLP backward from the branch's output gradient `dout` after the residual add
  // `grad_in`, through its norm's backward (when the MLP has a norm of its own); returns the
  // MLP-up product's result, whose input gradient a post-norm block's stream joins.
  GemmResult dense_mlp_backward(TensorId dout, TaskId grad_in);
  // The residual add that ends the layer: `uses` (the residual's and the MLP branch's reads) into
  // the stream, through the branch's dropout mask, after `deps`; the stream becomes the layer's
  // output.
  TaskId mlp_residual(TaskUses& uses, std::initializer_list<TaskId> deps);

  // Selective-op: the products whose outputs the policy saves write them (op_selective_tensors).
  std::map<TaskRole, std::vector<TensorId>> saved_products;
  RankState::StoredLayer& entry_;  // this (layer, micro-batch)'s stored tensors

 private:
  TensorId at(Slot slot) { return state_.at(ctx_.slots, slot); }
  // A parameter read, or nothing for one the model lacks.
  void weight(TaskUses& uses, int index) const {
    if (index >= 0) uses.push_back(read(block_.readable()[static_cast<size_t>(index)]));
  }
  // A GEMM's weight: the FP8 copy Transformer Engine casts, or the parameter.
  void gemm_weight(TaskUses& uses, int index) const {
    if (block_.fp8_weights != kNoTensor) {
      uses.push_back(read(block_.fp8_weights));
    } else {
      weight(uses, index);
    }
  }
  // A gradient the backward adds into.
  void add_grad(TaskUses& uses, int index) {
    if (index < 0) return;
    const std::vector<TensorId>& grads = block_.grads_of(
        p_, ctx_.kind_of(layer_).block, p_.micro_batch(), static_cast<int32_t>(layer_));
    uses.push_back(update(grads[static_cast<size_t>(index)]));
  }
  boost::container::small_vector<TensorId, 4> saved(TaskRole role) const {
    const auto found = saved_products.find(role);
    if (found == saved_products.end()) return {};
    return {found->second.begin(), found->second.end()};
  }
  // A column-parallel product's backward into the norm's output gradient: `dout_of` through the
  // product `op` (weight `weight_index`) whose input was the norm's output `saved_in`, gathered
  // again over TP for the weight gradient, the input gradient reduced back to the rank's rows
  // (kDNormOut, kDNormRows); after `after`. Latent attention's plain query projection and the
  // shared experts' up product, neither with FP8 nor the TP overlap.
  GemmResult norm_input_backward(TaskRole role, const OpPair& op, TensorId dout_of,
                                 TensorId saved_in, int weight_index, TaskId after);
  // A branch's (reduced) output, read by the op after it: under the TP overlap in two parts.
  static void branch_reads(TaskUses& uses, const GemmResult& branch) {
    uses.push_back(read(branch.out));
    if (branch.last_chunk != kNoTensor) uses.push_back(read(branch.last_chunk));
  }
  // Post-norm and sandwich blocks: the norm over a branch's output, which keeps its input in
  // `saved`; other blocks: the branch's output itself.
  GemmResult post_norm(const GemmResult& branch, int weight_index, int bias_index, Slot saved) {
    if (!norm_after(m_)) return branch;
    TaskUses uses;
    branch_reads(uses, branch);
    weight(uses, weight_index);
    weight(uses, bias_index);
    uses.push_back(write(at(Slot::kBranch)));
    uses.push_back(write(at(saved)));
    const TaskId norm = p_.compute(TaskRole::kPostNorm, op_.norm.forward, {branch.task}, uses);
    return {norm, at(Slot::kBranch)};
  }
  // The post-norm's backward from its output's gradient `dout` into the branch's (kDBranch).
  TaskId post_norm_backward(TensorId dout, int weight_index, int bias_index, Slot saved) {
    TaskUses uses{read(dout), read(at(saved))};
    weight(uses, weight_index);
    uses.push_back(write(at(Slot::kDBranch)));
    add_grad(uses, weight_index);
    add_grad(uses, bias_index);
    return p_.compute(TaskRole::kPostNorm, op_.norm.backward, {}, uses);
  }
  // Under dropout, names the site whose mask task `id` draws; returns `id`.
  TaskId draws(TaskId id, DropSite site) {
    if (m_.dropout) p_.graph().set_random_stream(id, dropout_stream(layer_, site));
    return id;
  }
  // A residual add's backward under dropout reads the branch's mask and writes the branch's
  // output gradient, which it returns; without dropout that gradient is the stream's.
  TensorId dropped_gradient(TaskUses& uses, Slot mask) {
    if (!m_.dropout) return state_.dstream;
    uses.push_back(read(at(mask)));
    uses.push_back(write(at(Slot::kDDropped)));
    return at(Slot::kDDropped);
  }
  // The attention's saved outputs: the log-sum-exp (flash), or the scores with their dropout.
  void attention_state(TaskUses& uses, Access access) {
    if (ctx_.plan.attention == AttentionKind::kFlash) {
      uses.emplace_back(at(Slot::kLse), access);
      return;
    }
    uses.emplace_back(at(Slot::kScores), access);
    if (m_.dropout) {
      uses.emplace_back(at(Slot::kScoresMask), access);
      uses.emplace_back(at(Slot::kScoresDropped), access);
    }
  }

  const LoweringContext& ctx_;
  RankState& state_;
  RankProgram& p_;
  const OpTable& op_;
  const ModelSpec& m_;
  const LayerParams& lp_;
  int64_t layer_;
  BlockTensors& block_;
};

}  // namespace strata
