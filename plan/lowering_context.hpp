#pragma once
// What the lowering files share (internal to plan/): the op table interned once per graph, the
// sizes of buffers and messages, and the per-rank state the step's tasks depend on.

#include <cstdint>
#include <optional>
#include <vector>

#include <boost/container/deque.hpp>
#include <boost/container/options.hpp>

#include "models/model_spec.hpp"
#include "plan/host_dispatch.hpp"
#include "plan/lowering_tensors.hpp"
#include "plan/moe_dims.hpp"
#include "plan/parallel_plan.hpp"
#include "plan/param_tensors.hpp"
#include "plan/rank_layout.hpp"
#include "plan/rank_program.hpp"
#include "plan/shard_sizes.hpp"

namespace strata {

struct OpPair {
  int32_t forward = -1;
  int32_t backward = -1;
};

struct OpTable {
  OpPair norm, qkv, attention, attn_out, residual, mlp_up, mlp_act, mlp_down;  // a layer
  OpPair rotary;            // rotary position models only
  OpPair cp_block;          // cp > 1, p2p: a later step of the ring (PlanOpShapes::cp_block)
  int32_t cp_dkv_add = -1;  // cp > 1, p2p: the backward's add into the travelling dK, dV
  OpPair attention_global;  // windowed models with global layers: those layers' attention
  OpPair qk_norm;           // QK-norm models only
  OpPair qkv_chunk, attn_out_chunk, mlp_up_chunk, mlp_down_chunk;  // --tp-comm-overlap only
  // FP8 only: forward input casts, backward gradient casts (PlanOpShapes), the weight cast.
  int32_t fp8_cast_attn_out_in = -1, fp8_cast_mlp_down_in = -1;
  int32_t fp8_grad_qkv = -1, fp8_grad_attn_out = -1, fp8_grad_mlp_up = -1, fp8_grad_mlp_down = -1;
  int32_t fp8_weight_cast = -1;
  int32_t k_product = -1, mlp_up_half = -1;  // selective-op recompute only
  // An MoE layer's (PlanOpShapes), MoE models only.
  OpPair router, routing, permute, unpermute, experts_up, experts_act, experts_down;
  OpPair shared_up, shared_act, shared_down, shared_gate;
  // Latent attention's (PlanOpShapes), latent-attention models only, in place of `qkv`; `q_down`
  // and `q_latent_norm` with a query latent only.
  OpPair q_down, q_latent_norm, q_up, kv_down, kv_latent_norm, kv_up, latent_key_value;
  OpPair embedding, final_norm, lm_head, loss;  // first, last stage
  OpPair embedding_dropout;                     // with dropout: the first stage's
  int32_t loss_max = -1, loss_partials = -1;    // tp > 1: the loss forward's two passes
  std::vector<int32_t> optimizer;               // per stage
  int32_t cycle_wait = -1;                      // Horovod: the background thread's wake
};

// Where each parameter of a layer block sits in layer_param_specs, -1 when the model has none.
struct LayerParams {
  explicit LayerParams(const std::vector<ParamTensorSpec>& specs);

  int norm1_w = -1, norm1_b = -1, qkv_w = -1, qkv_b = -1, q_norm_w = -1, k_norm_w = -1;
  int out_w = -1, out_b = -1, post_attn_norm_w = -1, post_attn_norm_b = -1;
  int norm2_w = -1, norm2_b = -1, up_w = -1, up_b = -1, down_w = -1, down_b = -1;
  int post_mlp_norm_w = -1, post_mlp_norm_b = -1;
  // An MoE layer's (plan/param_tensors.cpp, add_moe).
  int router_w = -1, router_b = -1, experts_up_w = -1, experts_down_w = -1;
  int shared_up_w = -1, shared_down_w = -1, shared_gate_w = -1;
  // Latent attention's (plan/param_tensors.cpp, add_latent_attention): q_w is linear_q_proj, the
  // query's projection when it has no latent.
  int q_down_w = -1, q_down_b = -1, q_layernorm_w = -1, q_up_w = -1, q_w = -1;
  int kv_down_w = -1, kv_down_b = -1, kv_layernorm_w = -1, kv_up_w = -1;
};

// What the lowering keeps per kind of layer (dense, MoE): its parameters' specs, where each sits,
// their tensors' names and shapes, and the bytes the layer stores for its backward.
struct LayerKindSpec {
  LayerKindSpec(const ModelSpec& model, const ParallelPlan& plan, bool moe, TaskGraph& graph);

  std::vector<ParamTensorSpec> specs;
  LayerParams params;
  BlockSpec block;
  int64_t stored_bytes = 0;      // what a layer keeps for its backward (recompute mode)
  int64_t full_layer_bytes = 0;  // everything a layer stores without recompute
};

struct LoweringContext {
  LoweringContext(const ModelSpec& model, const ParallelPlan& plan, int64_t gpus_per_node,
                  TaskGraph& graph);

  const ModelSpec& model;
  const ParallelPlan& plan;
  RankLayout layout;
  ShardSizes sizes;
  std::vector<int64_t> stage_layers;
  std::vector<ChunkLayers> chunks;  // per virtual stage (chunk_layout)
  std::vector<int64_t> stage_params;
  OpTable ops;
  SlotTable slots;
  LayerKindSpec dense;
  std::optional<LayerKindSpec> moe;  // MoE models only
  MoeDims moe_sizes;                 // MoE models only
  // ep > 1, the all-to-all dispatcher's traffic matrices over the ep group (moe_dispatch_matrix):
  // the dispatch of the tokens' rows (and, in the backward, of their gradients) and the combine.
  std::vector<int64_t> moe_dispatch, moe_combine;
  BlockSpec embedding_block, head_block;
  int64_t tp_message_bytes = 0;   // a (s b h) activation crossing a TP collective
  int64_t layer_input_bytes = 0;  // the full-recompute checkpoint
  int64_t pipe_bytes = 0;         // one pipeline message
  int64_t fp8_gemm_weights = 0;   // a layer's GEMM weights on one TP rank (FP8 when fp8)
  int64_t amax_bytes = 0;         // FP8: one layer's amaxes, reduced after each pass
  int64_t prefetch_layers = 1;    // ZeRO 3: layer gathers run ahead (prefetch_window_layers)
  // The final norm's parameters, first in the head block: weight and bias (LayerNorm) or weight.
  size_t final_norm_params = 1;

  // The kind of layer `layer` (0-based) is: MoE or dense.
  const LayerKindSpec& kind_of(int64_t layer) const {
    return model.is_moe_layer(layer) ? *moe : dense;
  }
  // First global layer and layer count of model chunk `chunk` on `stage`.
  int64_t first_layer(int64_t stage, int64_t chunk) const {
    return chunks[static_cast<size_t>(chunk * plan.pp + stage)].first;
  }
  // Whether `layer` of model chunk `chunk` on `stage` recomputes its forward in full.
  bool recomputes(int64_t stage, int64_t chunk, int64_t layer) const {
    return recomputes_layer(plan, layer - first_layer(stage, chunk));
  }
  int64_t chunk_layers(int64_t stage, int64_t chunk) const {
    return chunks[static_cast<size_t>(chunk * plan.pp + stage)].count;
  }
  bool first_virtual_stage(int64_t stage, int64_t chunk) const { return stage == 0 && chunk == 0; }
  bool last_virtual_stage(int64_t stage, int64_t chunk) const {
    return stage == plan.pp - 1 && chunk == plan.vpp - 1;
  }
};

// Groups of the rank being lowered (-1 where the group would have one member).
struct RankGroups {
  int32_t tp = -1;
  int32_t cp = -1;
  int32_t dp = -1;
  int32_t ep = -1;         // an MoE layer's all-to-all token dispatcher's
  int32_t tp_ep = -1;      // an MoE layer's all-gather token dispatcher's (etp x ep)
  int32_t expert_tp = -1;  // the experts' tensor-parallel group (tp's unless etp < tp)
  int32_t expert_dp = -1;  // the experts' weights kept apart: their gradient reduction
  int32_t embedding = -1;
  int32_t grad_norm = -1;
  int32_t stage = -1;  // FP8's amax reduction group
};

// A parameter block whose gradients a backward pass completes.
struct ParamBlock {
  enum Kind : uint8_t { kLayer, kEmbedding, kHead } kind = kLayer;
  int64_t layer = -1;  // kLayer: the global layer
};

// One data-parallel bucket of a model chunk (graph bucket index and parameters on this rank).
struct RankBucket {
  int16_t index = -1;
  int64_t parameters = 0;
};

// Dropout's draw sites, each one random stream of the graph (TaskGraph::set_random_stream): the
// embedding's output (layer -1), and per layer its attention probabilities and the branches before
// their residual adds (a parallel block's one, the MLP's).
enum class DropSite { kEmbedding, kProbabilities, kAttentionBranch, kMlpBranch };
inline int32_t dropout_stream(int64_t layer, DropSite site) {
  return static_cast<int32_t>((layer + 1) * 4 + static_cast<int>(site) + 1);
}

// Per-rank state while its program is emitted.
struct RankState {
  RankState(RankProgram& program, int64_t stage, RankGroups groups)
      : program(program), stage(stage), groups(groups) {}

  RankProgram& program;
  int64_t stage;
  RankGroups groups;
  std::vector<TaskId> grad_syncs;       // DP gradient collectives the optimizer waits for
  TaskId last_gathered_free = kNoTask;  // ZeRO-3: release of the most recently freed layer
  std::vector<int64_t> backwards_done;  // per chunk: backward passes emitted so far
  // Per chunk, its gradient buckets in backward order (lower_to_task_graph fills them).
  std::vector<std::vector<RankBucket>> buckets;
  // --overlap-param-gather: per chunk, the all-gather of each bucket at the step's start, in
  // forward order (the reverse of `buckets`), once emitted.
  std::vector<std::vector<TaskId>> param_gathers;
  HostDispatchBlocks* host = nullptr;  // the graph's host-dispatch blocks

  // Tensors (plan/lowering_tensors.hpp): the rank's parameter blocks; per (layer, micro-batch)
  // the stored activations; the pass's scratch; the layer execution being emitted (its stored
  // tensors, kNoTensor where it uses scratch); the residual stream and its gradient now.
  std::vector<BlockTensors> layer_blocks;  // by global layer; empty for the other stages' layers
  BlockTensors embedding_block, head_block;
  // A layer forward's stored tensors, from its forward to its backward: per slot (kNoTensor where
  // not stored), and what the forward's memory task allocated, which the backward frees.
  struct StoredLayer {
    // None stored yet. (A constructor, so that the slots are filled once rather than zeroed first.)
    explicit StoredLayer(int64_t micro_batch) : micro_batch(micro_batch) { slots.fill(kNoTensor); }

    int64_t micro_batch;
    SlotTensors slots;
    TensorIds kept;
  };
  // Per global layer, the stored tensors of its forwards still waiting for their backward, oldest
  // first: every schedule runs a chunk's backwards in the order of its forwards. A block holds 16
  // forwards (std::deque's 512-byte blocks would hold one: an allocation per forward), and an
  // empty queue allocates nothing (the layers of the other stages).
  using StoredQueue =
      boost::container::deque<StoredLayer, void,
                              boost::container::deque_options_t<boost::container::block_size<16>>>;
  std::vector<StoredQueue> stored;
  // The embedding dropout's masks, from the forward to the backward, oldest first.
  boost::container::deque<TensorId> embedding_masks;
  SlotTensors scratch;
  SlotTensors current;
  TensorId stream = kNoTensor;
  TensorId dstream = kNoTensor;

  // A forward of `layer` in the current micro-batch begins: its (empty) stored tensors.
  StoredLayer& begin_store(int64_t layer) {
    return stored[static_cast<size_t>(layer)].emplace_back(program.micro_batch());
  }
  // A backward of `layer` in the current micro-batch: its forward's stored tensors.
  StoredLayer& stored_for_backward(int64_t layer);
  // A fresh pass: no scratch yet.
  void begin_pass() { scratch.fill(kNoTensor); }
  // The pass's scratch tensor of `slot`, created on first use.
  TensorId scratch_of(const SlotTable& slots, Slot slot) {
    const TensorId made = scratch[static_cast<size_t>(slot)];
    return made != kNoTensor ? made : make_scratch(slots, slot);
  }
  // The tensor of `slot` in the layer execution being emitted: stored, or the pass's scratch.
  TensorId at(const SlotTable& slots, Slot slot) {
    const TensorId mine = current[static_cast<size_t>(slot)];
    return mine != kNoTensor ? mine : scratch_of(slots, slot);
  }

  // Creates the pass's scratch tensor of `slot` (out of line: scratch_of finds it made most times).
  TensorId make_scratch(const SlotTable& slots, Slot slot);

  // A block of work issued by the host thread (plan/host_dispatch.hpp), from here to end().
  class HostBlock {
   public:
    explicit HostBlock(RankState& state)
        : state_(state), block_(state.host->begin(state.program)) {}
    ~HostBlock() { state_.host->end(state_.program, block_); }
    HostBlock(const HostBlock&) = delete;
    HostBlock& operator=(const HostBlock&) = delete;

   private:
    RankState& state_;
    HostDispatchBlock block_;
  };
};

// Layer lowering (layer_lowering.cpp), with the layer's memory tasks and recompute. Each returns
// the task that produces the layer's output (forward) or its input gradient (backward).
// `params` is the ZeRO-3 gather of the layer's parameters (kNoTask without ZeRO-3).
TaskId lower_layer_forward(const LoweringContext& ctx, RankState& state, int64_t layer,
                           TaskId input, TaskId params);
TaskId lower_layer_backward(const LoweringContext& ctx, RankState& state, int64_t layer,
                            TaskId grad, TaskId params);

// Data-parallel and step lowering (step_lowering.cpp).
// Whether each block's parameters are gathered before use: ZeRO 3 over dp, or copied up from host
// memory under --offload-param.
bool gathers_layer_parameters(const LoweringContext& ctx);
// The parameters one ZeRO-3 gather covers: the rank's shards and the gathered tensors, a layer's,
// the embedding's, or the head's (with the embedding's table when a tied head shares its stage).
// The routed experts' weights kept apart (ep > 1) come last, `experts` of them, gathered over the
// expert-data-parallel group; an MoE layer's others over the data-parallel one. Tensors that are
// not gathered (BlockSpec::gathers) are not in the set.
struct GatherSet {
  TensorIds shards;
  TensorIds gathered;
  size_t experts = 0;
};
GatherSet layer_gather(const LoweringContext& ctx, RankState& state, int64_t layer);
GatherSet embedding_gather(const LoweringContext& ctx, RankState& state);
GatherSet head_gather(const LoweringContext& ctx, RankState& state);
// ZeRO-3: allocate and all-gather a block's parameters, gated on the most recent release: issued
// `prefetch_layers` layers ahead of the layer computing, at most prefetch_layers + 1 layers are
// gathered at once. An MoE layer with ep > 1 gathers in two parts on the dp-comm stream, as
// torchtitan's FSDP2 units (the block over dp x cp, its experts over dp x cp / ep) and DeepSpeed's
// expert-data-parallel partitions do: the rest of the layer over the data-parallel group, then
// its experts over the expert-data-parallel group; the returned task ends after both. Under
// --offload-param each part's shard is first copied up from host memory. kNoTask without ZeRO-3.
TaskId gather_params(const LoweringContext& ctx, RankState& state, const GatherSet& set);
void release_params(const LoweringContext& ctx, RankState& state, const GatherSet& set,
                    TaskId after);
// The gradient buckets of `chunk` on `stage`, in backward order (data_parallel buckets).
std::vector<RankBucket> chunk_buckets(const LoweringContext& ctx, TaskGraph& graph, int64_t stage,
                                      int64_t chunk);
// The backward of `block` (model chunk `chunk`) ended with `after`: its bucket's gradient
// reduction when the block completes the bucket and the reduction is due this micro-batch.
void sync_gradients(const LoweringContext& ctx, RankState& state, int64_t chunk, ParamBlock block,
                    bool last_pass, TaskId after);
// --overlap-param-gather: before the first forward of `chunk` reaches `block`, wait for its
// bucket's parameter all-gather (dispatched one bucket ahead, as Megatron-Core's forward
// pre-hooks do). Returns the gather the block's first compute waits for, or kNoTask.
TaskId await_param_gather(const LoweringContext& ctx, RankState& state, int64_t chunk,
                          ParamBlock block, int64_t micro_batch);
// Embedding all-reduce, gradient norm, optimizer step and the ZeRO 1/2 parameter all-gather.
void lower_optimizer_step(const LoweringContext& ctx, RankState& state, TaskId embedding_grads);

}  // namespace strata
