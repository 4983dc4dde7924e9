#pragma once
// The state behind RankRuntime (internal to exec/): the sizes of one micro-batch's tensors on
// this rank, the activations each (layer, micro-batch) keeps, the head's per micro-batch, the
// residual stream of the pass running now, and scratch buffers.

#include <map>
#include <utility>
#include <vector>

#include "exec/rank_runtime.hpp"

namespace strata {

// Sizes under the plan: N = B*T tokens of a micro-batch, R the rows of the residual stream (N/t
// under sequence parallelism, else N), and the TP shards of the widths.
struct RuntimeShapes {
  int64_t b = 0, t = 0, n = 0, r = 0, c = 0;
  int64_t heads = 0, head_dim = 0;  // heads on this TP rank
  int64_t qkv = 0;                  // 3C/t
  int64_t attn = 0;                 // C/t
  int64_t ffn = 0;                  // F/t
  int64_t vocab = 0;                // V/t
  int64_t tp = 1, tp_rank = 0;
  bool sequence_parallel = false;
};

// What a layer keeps for its backward, for one micro-batch. A field is allocated by the memory
// tasks (kActivations, kLayerInput, kAttentionScores); a forward op whose field is not allocated
// writes a scratch buffer instead (what the recompute modes throw away).
struct LayerActivations {
  DeviceTensor x_in;                     // (R,C) the layer's input (the full-recompute checkpoint)
  DeviceTensor ln1, ln1_mean, ln1_rstd;  // (R,C) (R) (R)
  DeviceTensor qkv;                      // (N,3C/t)
  DeviceTensor att;                      // (B,NH/t,T,T) softmax probabilities
  DeviceTensor atty;                     // (N,C/t) attention output
  DeviceTensor x_mid;                    // (R,C) after the attention residual
  DeviceTensor ln2, ln2_mean, ln2_rstd;  // (R,C) (R) (R)
  DeviceTensor fch, fch_gelu;            // (N,F/t) MLP-up output, after GELU
};

// The last stage's head for one micro-batch (kHeadActivations).
struct HeadActivations {
  DeviceTensor x;                                   // (R,C) the final norm's input
  DeviceTensor lnf, lnf_mean, lnf_rstd;             // (R,C) (R) (R)
  DeviceTensor lnf_full;                            // (N,C) gathered under sequence parallelism
  DeviceTensor logits;                              // (N,V/t)
  DeviceTensor maxes, sums, target_logits, losses;  // (N)
};

struct RankRuntime::Impl {
  Impl(const CompiledPlan& compiled, int32_t rank, Backend& backend, Communicator& comm,
       const TextDataset& data, const OptimizerConfig& optimizer, ParamStore& params);

  void run_task(TaskId id);
  void run_memory(TaskId id, const Task& task);
  void run_collective(TaskId id, const Task& task);
  void run_p2p(const Task& task);
  void run_compute(const Task& task);
  void run_forward(const Task& task);
  void run_backward(const Task& task);
  void run_loss_collective(const Task& task);
  // The losses of a micro-batch, once the vocabulary shards' sums are in.
  void finish_loss(HeadActivations& h);

  // The activations of (layer, micro-batch); forward ops write `scratch_acts` where a field is
  // not allocated.
  LayerActivations& acts(const Task& task);
  float* out(DeviceTensor LayerActivations::*field, LayerActivations& a, int64_t elements);
  // A field as the last forward op wrote it: stored, or in the scratch.
  float* stored(DeviceTensor LayerActivations::*field, LayerActivations& a);
  HeadActivations& head(const Task& task);
  const int32_t* tokens(int64_t micro_batch, bool targets);
  // The parameter block a layer -1 DP task acts on (see the constructor).
  BlockState& edge_block(TaskId id);
  // The blocks a ZeRO-3 gather or release acts on.
  std::vector<BlockState*> gathered_blocks(TaskId id, const Task& task);
  // The blocks of a data-parallel bucket's gradient reduction or parameter all-gather.
  std::vector<BlockState*> bucket_blocks(const Task& task);
  RankGroup group(const Task& task) const;
  // TP reductions of a row-parallel product's partial sums (N,C) into the residual's rows
  // (R,C): all-reduce, or reduce-scatter under sequence parallelism.
  void reduce_rows(const Task& task, float* partial, float* out);
  void gather_rows(const Task& task, const float* rows, float* full);

  const CompiledPlan& compiled;
  const TaskGraph& graph;
  const ParallelPlan& plan;
  int32_t rank;
  Backend& backend;
  Communicator& comm;
  const TextDataset& data;
  OptimizerConfig optimizer;
  ParamStore& params;
  RuntimeShapes s;
  int64_t stage = 0, dp_rank = 0;
  std::vector<TaskId> program;              // this rank's tasks, in id order
  std::map<TaskId, BlockKind> edge_blocks;  // layer -1 DP tasks: the block they act on

  // The step being run.
  int64_t step = 0;
  int64_t first_sequence = 0;
  StepMeasurement measurement;
  double grad_norm = 0;
  bool grad_norm_reduced = false;  // a grad-norm collective ran this step
  int loss_collectives_seen = 0;   // of the current micro-batch's three
  // Per micro-batch of the step: input tokens (first stage) and targets (last stage).
  std::map<int64_t, std::pair<DeviceTokens, DeviceTokens>> step_tokens;

  std::map<std::pair<int32_t, int32_t>, LayerActivations> layer_acts;
  std::map<int32_t, HeadActivations> head_acts;
  LayerActivations scratch_acts;
  DeviceTensor resid;    // (R,C) the residual stream of the pass
  DeviceTensor dresid;   // (R,C) its gradient
  DeviceTensor full;     // (N,C) gathered rows (norm output or gradient)
  DeviceTensor partial;  // (N,C) a row-parallel product's partial sums
  DeviceTensor rows;     // (R,C) reduced rows
  DeviceTensor dfull;    // (N,C) the gradient of a column-parallel product's input
  DeviceTensor datty, dqkv, dfch, dfch_gelu;  // gradients of the layer's inner tensors
  DeviceTensor dlogits;                       // (N,V/t)
  DeviceTensor pipe_buffer;                   // a pipeline message (N*C/t)
};

}  // namespace strata
