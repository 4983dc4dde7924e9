#pragma once
// The tensors the lowering names (internal to plan/; plan/tensor.hpp has the contract):
//  - a layer's stored activations per micro-batch (plan/activation_memory.hpp), allocated and
//    freed by the layer's memory tasks;
//  - the scratch of a pass (one forward or backward of a model chunk for one micro-batch), which
//    its layers reuse one after another: the residual stream and its gradient, a product's
//    output before its TP reduction, a gathered input, and a layer's tensors that the plan does
//    not keep (a full-recompute forward's, selective recompute's scores);
//  - the head's, the pipeline messages, and each block's parameters, gradients and optimizer
//    states.
// Each kind of tensor is a Slot with its name and per-rank shape, interned once per graph.

#include <array>
#include <cstdint>
#include <map>
#include <span>
#include <utility>
#include <vector>

#include <boost/container/small_vector.hpp>

#include "models/model_spec.hpp"
#include "plan/parallel_plan.hpp"
#include "plan/param_tensors.hpp"
#include "plan/rank_program.hpp"

namespace strata {

// The tensors one task uses, built per task and passed on as a span. Held inline up to 16 (a
// layer's tasks use at most 11); a longer list (a bucket's gradient reduction names each gradient
// it covers) moves to the heap. Appending is a compare and a store (boost's small_vector calls out
// of line for it), as the lowering builds one list per task.
class TaskUses {
 public:
  TaskUses() {}  // leaves the inline entries unwritten
  TaskUses(std::initializer_list<TensorUse> uses) { append(uses.begin(), uses.end()); }

  void push_back(TensorUse use) {
    if (size_ < kInline) {
      inline_[size_++] = use;
    } else {
      push_back_on_heap(use);
    }
  }
  void emplace_back(TensorId tensor, Access access) { push_back({tensor, access}); }
  template <typename Iterator>
  void append(Iterator first, Iterator last) {
    for (; first != last; ++first) push_back(*first);
  }
  void clear() {
    size_ = 0;
    heap_.clear();
  }

  size_t size() const { return heap_.empty() ? size_ : heap_.size(); }
  const TensorUse* data() const { return heap_.empty() ? inline_ : heap_.data(); }
  const TensorUse* begin() const { return data(); }
  const TensorUse* end() const { return data() + size(); }
  const TensorUse& operator[](size_t i) const { return data()[i]; }
  operator std::span<const TensorUse>() const { return {data(), size()}; }

 private:
  static constexpr size_t kInline = 16;

  // Past the inline entries: all of them on the heap from here on (out of line, so that
  // push_back stays small enough to inline).
  void push_back_on_heap(TensorUse use);

  // Not zeroed on construction (TensorUse is trivial): the lowering builds a list per task, and
  // zeroing them cost more than filling them.
  TensorUse inline_[kInline];
  size_t size_ = 0;  // inline entries, while the heap holds none
  std::vector<TensorUse> heap_;
};

enum class Slot : uint8_t {
  // A layer's stored activations (layer_stored_tensors), in its order of names.
  kNorm1In,
  kQkvIn,
  // Latent attention's: the query latent and its norm's output, the key-value latent (with the
  // rotary key) and its norm's output.
  kQLatent,
  kQUpIn,
  kKvLatent,
  kKvUpIn,
  kQkv,
  kQkNormIn,
  kLse,
  kScores,
  kScoresMask,
  kScoresDropped,
  kOutIn,
  kAttnMask,
  kPostAttnNormIn,
  kNorm2In,
  kUpIn,
  kActIn,
  kDownIn,
  // An MoE layer's (add_moe_mlp): router probabilities, the experts' input, up output,
  // activation output and output, the shared experts' activation input and output, and with
  // Qwen-MoE's gate the shared experts' reduced output and the gate.
  kRouterProbs,
  kExpertIn,
  kExpertActIn,
  kExpertDownIn,
  kExpertOut,
  kSharedActIn,
  kSharedDownIn,
  kSharedOut,
  kSharedGate,
  kMlpMask,
  kPostMlpNormIn,
  // Full recompute's checkpoint of the layer input; selective-op's rebuilt buffer.
  kCheckpoint,
  kRebuilt,
  // A pass's scratch, forward: the residual stream, the stream after the attention residual, a
  // row-parallel product's output (partial sums under TP), its reduce-scatter under sequence
  // parallelism, a sequence-parallel gathered input, a post-norm's output, the activation's
  // 16-bit output and the attention output cast to FP8 (FP8).
  kStream,
  kMid,
  kProj,
  kProjRows,
  kGathered,
  kBranch,
  kActOut,
  kOutInFp8,
  // Context parallelism's, forward (plan/cp_attention.cpp): a key-value block received on the
  // ring (p2p), the keys and values gathered over the cp group (all_gather, forward and
  // backward), the QKV product's output on the rank's tokens before the all-to-all to heads / cp
  // and the attention's output on those heads before the one back (a2a).
  kKvBlock,
  kKvGathered,
  kQkvLocal,
  kOutHeads,
  // Latent attention's, forward (plan/mla_lowering.cpp): the query and key-value latents and the
  // rotary key gathered over TP (sequence parallel), and the key-value up projection's output
  // before the keys and values are assembled from it.
  kQUpGathered,
  kKvUpGathered,
  kKPeGathered,
  kKvUpOut,
  // An MoE layer's, forward: the router's logits, the rank's tokens permuted by expert (T x k
  // rows), the tokens dispatched to the rank's experts (before the expert-TP gather), the tokens
  // the all-gather dispatcher gathers, the experts' products before the expert-TP reduction, the
  // unpermuted output (partial sums under the all-gather dispatcher) and its reduced rows.
  kRouterLogits,
  kMoeTokens,
  kMoeDispatched,
  kMoeGathered,
  kExpertProj,
  kMoeOut,
  kMoeRows,
  // Backward: the residual stream's gradient, a gathered output gradient, a post-norm's input
  // gradient, a dropped branch's output gradient (the stream's through the dropout mask), the
  // inner tensors' gradients, a column-parallel product's input gradient (partial
  // sums under TP) and its reduce-scatter, and the FP8 casts of the output gradients.
  kDStream,
  kDGathered,
  kDBranch,
  kDDropped,
  kDDownIn,
  kDActIn,
  kDOutIn,
  kDQkv,
  kDNormOut,
  kDNormRows,
  kDProjFp8,
  kDActInFp8,
  kDQkvFp8,
  // Context parallelism's, backward: a step's key and value gradients and the accumulator that
  // travels the ring with them (p2p), the gathered keys' and values' gradients before their
  // reduce-scatter (all_gather), and the output's and Q, K, V's gradients on heads / cp (a2a).
  kDKvStep,
  kDKvBlock,
  kDKvGathered,
  kDOutHeads,
  kDQkvHeads,
  // Latent attention's, backward: the gradients of the key-value up projection's output and of
  // the rotary key (summed over the rank's heads, then reduced over TP: `Rows` its reduce-scatter
  // under sequence parallelism), of the up projections' inputs (partial sums under TP, then
  // reduced), and of the down projections' outputs.
  kDKvUpOut,
  kDKPe,
  kDKPeRows,
  kDQUpIn,
  kDQUpRows,
  kDKvUpIn,
  kDKvUpRows,
  kDQLatent,
  kDKvLatent,
  // An MoE layer's, backward: the gradients of the router's probabilities (then its logits, in
  // place), of the permuted and dispatched tokens, of the experts' tensors, of the gathered tokens
  // (all-gather dispatcher), of the router's input from the experts' side, and of the shared
  // experts' tensors.
  kDRouterProbs,
  kDMoeTokens,
  kDMoeDispatched,
  kDExpertOut,
  kDExpertDownIn,
  kDExpertActIn,
  kDExpertIn,
  kDMoeGathered,
  kDUpIn,
  kDSharedDownIn,
  kDSharedActIn,
  kDSharedOut,
  // The head's stored tensors (the final norm's input and output, e sbh each, /t under sequence
  // parallelism, and the fp32 logits of the vocabulary shard, 4 sb v/t), and its scratch: the
  // gathered norm output (sequence parallel), the loss's per-token values and the logits'
  // gradient.
  kHeadIn,
  kLmIn,
  kLogits,
  kLmInGathered,
  kLossMax,
  kLossSum,
  kTargetLogit,
  kLosses,
  kDLogits,
  kDLmIn,
  kDLmRows,
  // The embedding's output before its TP reduction, and its dropout mask (stored, first stage);
  // a pipeline message.
  kEmbedOut,
  kEmbedMask,
  kMessage,
  kGradNorm,  // the step's: the rank's sum of squared gradients, then the global norm
  kCount,
};
inline constexpr int kSlotCount = static_cast<int>(Slot::kCount);
// The stored activations are the slots before kCheckpoint.
inline constexpr int kStoredSlotCount = static_cast<int>(Slot::kCheckpoint);

// A list of tensor ids the lowering builds per layer and pass (a layer's stored tensors, a
// block's parameters to gather), held inline up to every stored slot (a dense layer keeps at most
// 17, an MoE layer 23, 4 more with latent attention) or a layer block's 18 parameters so that
// building it does not allocate, passed on as a span.
class TensorIds : public boost::container::small_vector<TensorId, 30> {
 public:
  using small_vector::small_vector;
  operator std::span<const TensorId>() const { return {data(), size()}; }
};
static_assert(kStoredSlotCount <= 30, "a layer's stored tensors fit TensorIds inline");

// Names and shapes of the slots, interned in the graph.
struct SlotTable {
  SlotTable(const ModelSpec& model, const ParallelPlan& plan, TaskGraph& graph);

  std::array<uint8_t, kSlotCount> name{};
  std::array<int32_t, kSlotCount> shape{};
  // Which stored slots a layer keeps under the plan: all of layer_stored_tensors, a dense
  // layer's and an MoE layer's.
  std::array<bool, kStoredSlotCount> stored{};
  std::array<bool, kStoredSlotCount> moe_stored{};
  // Selective-op's saved tensors (op_selective_tensors), beside the rebuilt buffer.
  std::vector<std::pair<uint8_t, int32_t>> op_saved;
  int32_t rebuilt_shape = -1;
  // The FP8 weight copies of a layer (Transformer Engine keeps them beside the 16-bit weights)
  // and its FP8 scaling state (amax history).
  uint8_t fp8_weights = 0;
  uint8_t amax = 0;
  int32_t fp8_weights_shape = -1;
  int32_t amax_shape = -1;
};

// The tensors one execution of a layer's forward (or backward) reads and writes: per slot, a
// stored activation of (layer, micro-batch), or the pass's scratch.
using SlotTensors = std::array<TensorId, kSlotCount>;

// The names and shapes of a parameter block's tensors (plan/param_tensors.hpp), per parameter:
// the rank's parameter in the working dtype (its 1/dp shard under ZeRO 3), the gathered
// parameter (ZeRO 3: the whole; FP8 for GEMM weights under --fp8-param-gather), the gradient in
// its dtype (its shard under ZeRO 2 and 3), a micro-batch's whole gradient (ZeRO 2 and 3), and
// the optimizer's fp32 states (its shard under ZeRO 1 and more): Adam's m and v, and the master
// copy when the plan keeps one.
struct BlockSpec {
  BlockSpec() = default;
  BlockSpec(const std::vector<ParamTensorSpec>& specs, const ParallelPlan& plan, TaskGraph& graph);

  std::vector<uint8_t> name, gathered_name;
  std::vector<int32_t> param, gathered, grad, micro_batch_grad, states;
  // Per tensor: a routed expert's weight kept apart (ParamTensorSpec::expert); whether under
  // ZeRO 2 and 3 each micro-batch's gradient is a tensor of its own, which leaves the GPU after
  // the micro-batch: reduce-scattered over more than one rank, or copied to the host under
  // --offload-optimizer (else each micro-batch's gradient adds into the rank's own, which is the
  // whole); whether ZeRO 3 gathers it before use (sharded over more than one rank, or kept on the
  // host under --offload-param; else, the experts' over one expert-data-parallel rank, compute
  // reads the rank's own whole tensor).
  std::vector<uint8_t> expert, micro_batch_apart, gathers;
};

// A parameter block's tensors on one rank, in layer_param_specs (embedding_, head_) order.
struct BlockTensors {
  std::vector<TensorId> params;  // the rank's parameters (its ZeRO-3 shard under ZeRO 3)
  // ZeRO 3: the gathered parameters, allocated per gather; where BlockSpec::gathers is false,
  // the rank's own parameter (params[i]), neither allocated nor gathered.
  std::vector<TensorId> gathered;
  std::vector<TensorId> grads;   // accumulated over the step's micro-batches (its shard, ZeRO 2+)
  std::vector<TensorId> states;  // the optimizer's (its shard under ZeRO 1+)
  // ZeRO 2 and 3: per micro-batch, the gradient a backward produces and the bucket's
  // reduce-scatter reduces into the shard (created when first used).
  std::map<int64_t, std::vector<TensorId>> micro_batch_grads;
  bool per_micro_batch = false;
  TensorId fp8_weights = kNoTensor;  // FP8: the cast weights (without --fp8-param-gather)
  TensorId amax = kNoTensor;         // FP8: the layer's scaling state

  // The parameters compute reads: the gathered copy under ZeRO 3, else the rank's own.
  const std::vector<TensorId>& readable() const { return gathered.empty() ? params : gathered; }
  // The gradients a backward of `micro_batch` adds into: the step's, or under ZeRO 2 and 3 the
  // micro-batch's own (created on first use).
  const std::vector<TensorId>& grads_of(RankProgram& program, const BlockSpec& spec,
                                        int64_t micro_batch, int32_t layer);
};

// Creates a block's tensors on `program`'s rank: parameters, gradients and optimizer states,
// with gathered parameters when `gathers` (ZeRO 3; those of BlockSpec::gathers) and
// per-micro-batch gradients when `micro_batch_grads` (ZeRO 2 and 3).
BlockTensors make_block_tensors(RankProgram& program, const BlockSpec& spec, int32_t layer,
                                bool gathers, bool micro_batch_grads);

}  // namespace strata
