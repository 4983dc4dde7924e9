// Data-parallel communication and the optimizer step: ZeRO stages 0-3 (Rajbhandari et al. 2020)
// as Megatron-LM's distributed optimizer, DeepSpeed, FSDP2 and PyTorch DDP run them, by gradient
// bucket (Megatron-Core's DistributedDataParallel and its _ParamAndGradBuffer).

#include <algorithm>
#include <limits>
#include <optional>
#include <span>

#include "plan/framework.hpp"
#include "plan/lowering_context.hpp"
#include "plan/memory_plan.hpp"

namespace strata {

namespace {

// ZeRO 1 and 2 all-gather each bucket's updated parameters (16-bit) after the optimizer step.
bool gathers_updated_parameters(const LoweringContext& ctx) {
  return (ctx.plan.zero_stage == 1 || ctx.plan.zero_stage == 2) && ctx.plan.data_shards() > 1;
}

const ParamBucket& bucket_of(const RankState& state, const RankBucket& bucket) {
  return state.program.graph().bucket(bucket.index);
}

// The group a bucket is reduced and gathered over (-1: one rank, nothing to communicate): the
// data-parallel ranks, or the experts' for their weights kept apart.
int32_t bucket_group(const RankState& state, const ParamBucket& bucket) {
  return bucket.experts ? state.groups.expert_dp : state.groups.dp;
}

// The ranks a bucket's ZeRO shards are spread over: dp x cp, or the experts' dp x cp / ep.
int64_t bucket_shards(const LoweringContext& ctx, const ParamBucket& bucket) {
  return bucket.experts ? ctx.plan.expert_data_shards() : ctx.plan.data_shards();
}

bool contains(const ParamBucket& bucket, ParamBlock block) {
  switch (block.kind) {
    case ParamBlock::kEmbedding:
      return bucket.embedding;
    case ParamBlock::kHead:
      return bucket.head;
    case ParamBlock::kLayer:
      return block.layer >= bucket.first_layer && block.layer < bucket.first_layer + bucket.layers;
  }
  return false;
}

// The block whose backward completes the bucket: the last in backward order (head, layers from
// the last down, embedding).
bool completes(const ParamBucket& bucket, ParamBlock block) {
  if (bucket.embedding) return block.kind == ParamBlock::kEmbedding;
  if (bucket.layers > 0)
    return block.kind == ParamBlock::kLayer && block.layer == bucket.first_layer;
  return block.kind == ParamBlock::kHead;
}

// The block whose forward comes first in the bucket (embedding, layers upward, head).
bool opens(const ParamBucket& bucket, ParamBlock block) {
  if (bucket.embedding) return block.kind == ParamBlock::kEmbedding;
  if (bucket.layers > 0)
    return block.kind == ParamBlock::kLayer && block.layer == bucket.first_layer;
  return block.kind == ParamBlock::kHead;
}

// A bucket's updated parameters in their working precision; under --fp8-param-gather its layers'
// GEMM weights in FP8.
int64_t gathered_bytes(const LoweringContext& ctx, const RankState& state,
                       const RankBucket& bucket) {
  const int64_t e = bytes_per_element(ctx.plan.dtype);
  const int64_t fp8_weights =
      ctx.plan.fp8_param_gather ? bucket_of(state, bucket).layers * ctx.fp8_gemm_weights : 0;
  return bucket.parameters * e - fp8_weights * (e - 1);
}

// A bucket's blocks on this rank, with the specs of their tensors and which of them the bucket
// holds: the experts' weights kept apart (true), the others (false), or all (nullopt).
struct BucketBlock {
  BlockTensors* tensors;
  const BlockSpec* spec;
  int32_t layer;
  std::optional<bool> experts;

  bool holds(size_t i) const { return !experts || spec->expert[i] == *experts; }
};
std::vector<BucketBlock> blocks_of(const LoweringContext& ctx, RankState& state,
                                   const ParamBucket& bucket) {
  std::vector<BucketBlock> blocks;
  const bool experts = bucket.experts;
  if (bucket.head) blocks.push_back({&state.head_block, &ctx.head_block, -1, experts});
  for (int32_t layer = bucket.first_layer + bucket.layers - 1; layer >= bucket.first_layer; --layer)
    blocks.push_back({&state.layer_blocks[static_cast<size_t>(layer)], &ctx.kind_of(layer).block,
                      layer, experts});
  if (bucket.embedding)
    blocks.push_back({&state.embedding_block, &ctx.embedding_block, -1, experts});
  return blocks;
}

// The uses of `tensors` of a bucket's blocks (those each block holds), each with `access`.
TaskUses bucket_uses(const std::vector<BucketBlock>& blocks,
                     std::vector<TensorId> BlockTensors::*tensors, Access access) {
  TaskUses uses;
  for (const BucketBlock& b : blocks) {
    const std::vector<TensorId>& of_block = b.tensors->*tensors;
    for (size_t i = 0; i < of_block.size(); ++i) {
      if (b.holds(i)) uses.emplace_back(of_block[i], access);
    }
  }
  return uses;
}

}  // namespace

bool gathers_layer_parameters(const LoweringContext& ctx) {
  return ctx.plan.zero_stage == 3 && (ctx.plan.data_shards() > 1 || ctx.plan.offload.params);
}

namespace {

// Buckets of `limit` parameters or more over a chunk's blocks in backward order (the head, the
// layers from the last down, the embedding), as Megatron-Core's _ParamAndGradBuffer cuts them:
// `of_layer` gives a layer's parameters in the buffer (0: none), `head` and `embedding` the
// edge blocks' (-1: not in it).
template <typename OfLayer>
std::vector<RankBucket> cut_buckets(const LoweringContext& ctx, TaskGraph& graph, int64_t stage,
                                    int64_t chunk, bool experts, OfLayer of_layer, int64_t head,
                                    int64_t embedding) {
  const int64_t limit = gradient_bucket_parameters(ctx.plan);
  std::vector<RankBucket> buckets;
  ParamBucket open;
  open.experts = experts;
  int64_t parameters = 0;
  const auto close = [&] {
    if (parameters == 0) return;
    buckets.push_back({graph.add_bucket(open), parameters});
    open = ParamBucket{};
    open.experts = experts;
    parameters = 0;
  };
  const auto add = [&](int64_t block_parameters) {
    parameters += block_parameters;
    if (parameters >= limit) close();
  };
  if (ctx.last_virtual_stage(stage, chunk) && head >= 0) {
    open.head = true;
    add(head);
  }
  const int64_t first = ctx.first_layer(stage, chunk);
  for (int64_t layer = first + ctx.chunk_layers(stage, chunk) - 1; layer >= first; --layer) {
    const int64_t layer_parameters = of_layer(layer);
    if (layer_parameters == 0) continue;
    open.first_layer = static_cast<int32_t>(layer);
    ++open.layers;
    add(layer_parameters);
  }
  if (ctx.first_virtual_stage(stage, chunk) && embedding >= 0) {
    open.embedding = true;
    add(embedding);
  }
  close();
  return buckets;
}

// Where a bucket completes in the backward: after the head, then each layer downward, then the
// embedding.
int64_t backward_position(const ParamBucket& bucket) {
  if (bucket.head) return -1;
  if (bucket.layers > 0) return -2 - bucket.first_layer;
  return std::numeric_limits<int64_t>::min();
}

}  // namespace

std::vector<RankBucket> chunk_buckets(const LoweringContext& ctx, TaskGraph& graph, int64_t stage,
                                      int64_t chunk) {
  const ShardSizes& sizes = ctx.sizes;
  const auto experts_of = [&](int64_t layer) {
    return ctx.model.is_moe_layer(layer) ? sizes.moe_layer_experts : 0;
  };
  std::vector<RankBucket> buckets = cut_buckets(
      ctx, graph, stage, chunk, false,
      [&](int64_t layer) { return sizes.of_layer(ctx.model, layer) - experts_of(layer); },
      sizes.head, sizes.embedding);
  if (sizes.moe_layer_experts == 0) return buckets;
  // With ep > 1 the experts' weights fill buffers of their own (Megatron-Core's
  // expert_parallel_buffers), cut the same way; both lists merge in backward order (the experts'
  // bucket first where both complete at one layer: an MoE layer's backward ends with attention).
  const std::vector<RankBucket> expert_buckets =
      cut_buckets(ctx, graph, stage, chunk, true, experts_of, -1, -1);
  std::vector<RankBucket> merged;
  std::merge(expert_buckets.begin(), expert_buckets.end(), buckets.begin(), buckets.end(),
             std::back_inserter(merged), [&](const RankBucket& a, const RankBucket& b) {
               return backward_position(graph.bucket(a.index)) >
                      backward_position(graph.bucket(b.index));
             });
  return merged;
}

namespace {

// A block's gathered tensors (BlockSpec::gathers), the routed experts' last.
GatherSet block_gather(const BlockTensors& block, const BlockSpec& spec) {
  GatherSet set;
  for (const bool experts : {false, true}) {
    for (size_t i = 0; i < block.gathered.size(); ++i) {
      if (!spec.gathers[i] || static_cast<bool>(spec.expert[i]) != experts) continue;
      set.shards.push_back(block.params[i]);
      set.gathered.push_back(block.gathered[i]);
      if (experts) ++set.experts;
    }
  }
  return set;
}

// One part of a ZeRO-3 gather, over `group` of `ranks` ranks: the gathered buffer allocated, the
// rank's shard copied up from host memory under --offload-param, then all-gathered.
TaskId gather_part(const LoweringContext& ctx, RankState& state, std::span<const TensorId> shards,
                   std::span<const TensorId> gathered, int64_t ranks, int32_t group) {
  RankProgram& p = state.program;
  TaskId ready =
      p.alloc(Stream::kDpComm, BufferClass::kGatheredParams, gathered, {state.last_gathered_free});
  const int64_t bytes = p.graph().task(ready).bytes;
  TaskUses uses;
  for (const TensorId shard : shards) uses.push_back(read(shard));
  if (ctx.plan.offload.params) {
    // The shard comes up from host memory into its part of the gathered buffer.
    TaskUses copy_uses;
    for (const TensorId t : gathered) copy_uses.push_back(write(t));
    ready = p.copy(TaskRole::kParamsToDevice, CopyDirection::kToDevice, sharded(bytes, ranks),
                   {ready}, copy_uses);
    uses.clear();
    for (const TensorId t : gathered) uses.push_back(update(t));
  } else {
    for (const TensorId t : gathered) uses.push_back(write(t));
  }
  if (ranks == 1) return ready;
  return p.collective(TaskRole::kParamGather, Stream::kDpComm, CollectiveKind::kAllGather, group,
                      bytes, {ready}, uses);
}

}  // namespace

GatherSet layer_gather(const LoweringContext& ctx, RankState& state, int64_t layer) {
  return block_gather(state.layer_blocks[static_cast<size_t>(layer)], ctx.kind_of(layer).block);
}

GatherSet embedding_gather(const LoweringContext& ctx, RankState& state) {
  return block_gather(state.embedding_block, ctx.embedding_block);
}

GatherSet head_gather(const LoweringContext& ctx, RankState& state) {
  GatherSet set = block_gather(state.head_block, ctx.head_block);
  // A tied LM head on the embedding's own stage uses the embedding's table: gathered with it.
  if (ctx.model.tied_embeddings && ctx.plan.pp == 1 && !state.embedding_block.gathered.empty()) {
    set.shards.push_back(state.embedding_block.params.front());
    set.gathered.push_back(state.embedding_block.gathered.front());
  }
  return set;
}

TaskId gather_params(const LoweringContext& ctx, RankState& state, const GatherSet& set) {
  if (!gathers_layer_parameters(ctx)) return kNoTask;
  const size_t dense = set.gathered.size() - set.experts;
  const auto part = [&](size_t first, size_t count, int64_t ranks, int32_t group) {
    return gather_part(ctx, state, std::span<const TensorId>(set.shards).subspan(first, count),
                       std::span<const TensorId>(set.gathered).subspan(first, count), ranks, group);
  };
  const TaskId gathered = part(0, dense, ctx.plan.data_shards(), state.groups.dp);
  if (set.experts == 0) return gathered;
  // The experts' part follows on the same stream: it ends after the rest of the layer's.
  return part(dense, set.experts, ctx.plan.expert_data_shards(), state.groups.expert_dp);
}

void release_params(const LoweringContext& ctx, RankState& state, const GatherSet& set,
                    TaskId after) {
  if (!gathers_layer_parameters(ctx)) return;
  state.last_gathered_free =
      state.program.release(Stream::kCompute, BufferClass::kGatheredParams, set.gathered, {after});
}

// ZeRO 0 all-reduces and ZeRO 1 reduce-scatters each bucket once, after its last micro-batch;
// ZeRO 2 and 3 keep only a gradient shard, so they reduce-scatter after every micro-batch. A
// bucket is reduced once the backward of its last block (in backward order) ran, in the
// gradients' dtype; without --overlap-grad-reduce the compute stream waits for it.
void sync_gradients(const LoweringContext& ctx, RankState& state, int64_t chunk, ParamBlock block,
                    bool last_pass, TaskId after) {
  const int64_t zero = ctx.plan.zero_stage;
  if (zero < 2 && !last_pass) return;
  for (const RankBucket& bucket : state.buckets[static_cast<size_t>(chunk)]) {
    const ParamBucket& blocks = bucket_of(state, bucket);
    const int32_t group = bucket_group(state, blocks);
    // Under ZeRO-Offload the experts' gradients go to the host even where one rank holds them
    // (one expert-data-parallel rank: nothing to reduce).
    const bool copies_alone = group < 0 && blocks.experts && ctx.plan.offload.optimizer;
    if ((group < 0 && !copies_alone) || !contains(blocks, block) || !completes(blocks, block))
      continue;
    const CollectiveKind kind =
        zero == 0 ? CollectiveKind::kAllReduce : CollectiveKind::kReduceScatter;
    const int64_t grad_bytes = state_bytes_per_parameter(ctx.plan.dtype, ctx.plan.precision).grads;
    const int64_t bytes = bucket.parameters * grad_bytes;
    // ZeRO 0 and 1 reduce the step's gradients in place; ZeRO 2 and 3 the micro-batch's, into
    // the rank's shard.
    const std::vector<BucketBlock> members = blocks_of(ctx, state, blocks);
    TaskUses partials;
    TaskUses uses;
    for (const BucketBlock& b : members) {
      const std::vector<TensorId>& partial =
          b.tensors->grads_of(state.program, *b.spec, state.program.micro_batch(), b.layer);
      for (size_t i = 0; i < partial.size(); ++i) {
        if (!b.holds(i)) continue;
        partials.push_back(read(partial[i]));
        if (zero >= 2) uses.push_back(read(partial[i]));
      }
      for (size_t i = 0; i < b.tensors->grads.size(); ++i) {
        if (b.holds(i)) uses.push_back(update(b.tensors->grads[i]));
      }
    }
    if (copies_alone) {
      // The micro-batch's gradients (ZeRO 2 and 3), or the step's (ZeRO 1), whole.
      state.grad_syncs.push_back(state.program.copy(TaskRole::kGradToHost, CopyDirection::kToHost,
                                                    bytes, {after}, partials));
      continue;
    }
    // Horovod's background thread launches the reduction at its next cycle.
    const TaskId launch = ctx.ops.cycle_wait >= 0
                              ? state.program.background_wait(ctx.ops.cycle_wait, {after})
                              : after;
    const TaskId reduce =
        state.program.bucket_collective(TaskRole::kGradSync, kind, group, bytes, bucket.index,
                                        std::initializer_list<TaskId>{launch}, uses);
    if (!ctx.plan.overlap.grad_reduce) state.program.block_next_compute_on(reduce);
    // ZeRO-Offload: the reduced shard goes down to the host's gradient buffer as it is reduced
    // (DeepSpeed's stage 1/2 async copy to the pinned fp32 buffer).
    state.grad_syncs.push_back(
        ctx.plan.offload.optimizer
            ? state.program.copy(TaskRole::kGradToHost, CopyDirection::kToHost,
                                 sharded(bytes, bucket_shards(ctx, blocks)), {reduce},
                                 bucket_uses(members, &BlockTensors::grads, Access::kRead))
            : reduce);
  }
}

TaskId await_param_gather(const LoweringContext& ctx, RankState& state, int64_t chunk,
                          ParamBlock block, int64_t micro_batch) {
  if (!ctx.plan.overlap.param_gather || !gathers_updated_parameters(ctx) || micro_batch != 0) {
    return kNoTask;
  }
  const std::vector<RankBucket>& buckets = state.buckets[static_cast<size_t>(chunk)];
  std::vector<TaskId>& gathers = state.param_gathers[static_cast<size_t>(chunk)];
  // Forward order is the reverse of the buckets' backward order. A bucket with nothing to gather
  // (the experts' over one rank) counts as gathered.
  const auto in_forward_order = [&](size_t forward_index) -> const RankBucket& {
    return buckets[buckets.size() - 1 - forward_index];
  };
  const auto dispatch = [&](size_t forward_index) {
    if (forward_index >= buckets.size() || forward_index < gathers.size()) return;
    const RankBucket& bucket = in_forward_order(forward_index);
    const ParamBucket& blocks = bucket_of(state, bucket);
    const int32_t group = bucket_group(state, blocks);
    gathers.push_back(group < 0 ? kNoTask
                                : state.program.bucket_collective(
                                      TaskRole::kParamGather, CollectiveKind::kAllGather, group,
                                      gathered_bytes(ctx, state, bucket), bucket.index,
                                      std::initializer_list<TaskId>{state.program.last_compute()},
                                      bucket_uses(blocks_of(ctx, state, blocks),
                                                  &BlockTensors::params, Access::kUpdate)));
  };
  // The block opens one bucket, or with ep > 1 an MoE layer two (its experts' and the rest):
  // their forward pre-hooks wait for their gathers (dispatching them if the previous bucket's
  // hook has not) and dispatch the next bucket's. The gathers share the dp-comm stream, so the
  // last one dispatched waits for the others.
  std::optional<size_t> last;
  for (size_t i = 0; i < buckets.size(); ++i) {
    const ParamBucket& blocks = bucket_of(state, in_forward_order(i));
    if (contains(blocks, block) && opens(blocks, block)) last = i;
  }
  if (!last) return kNoTask;
  for (size_t i = gathers.size(); i <= *last + 1; ++i) dispatch(i);
  for (size_t i = *last + 1; i-- > 0;) {
    if (gathers[i] != kNoTask) return gathers[i];
  }
  return kNoTask;
}

void lower_optimizer_step(const LoweringContext& ctx, RankState& state, TaskId embedding_grads) {
  RankProgram& p = state.program;
  // Gradients are summed in their own dtype (fp32 main gradients under Megatron's bf16).
  const int64_t e = state_bytes_per_parameter(ctx.plan.dtype, ctx.plan.precision).grads;
  p.label(Phase::kOptimizer, -1, -1, 0);
  state.begin_pass();
  // Every block of the rank: its layers, the embedding (first stage), the head (last stage).
  std::vector<BucketBlock> blocks;
  for (size_t layer = 0; layer < state.layer_blocks.size(); ++layer) {
    BlockTensors& block = state.layer_blocks[layer];
    if (!block.params.empty())
      blocks.push_back({&block, &ctx.kind_of(static_cast<int64_t>(layer)).block,
                        static_cast<int32_t>(layer), std::nullopt});
  }
  if (!state.embedding_block.params.empty())
    blocks.push_back({&state.embedding_block, &ctx.embedding_block, -1, std::nullopt});
  if (!state.head_block.params.empty())
    blocks.push_back({&state.head_block, &ctx.head_block, -1, std::nullopt});
  // The first and last stage each hold a copy of a tied embedding; their gradients are summed
  // (Megatron-LM's embedding group): the table's, or the last stage's copy after the final norm.
  if (state.groups.embedding >= 0) {
    const bool first = !state.embedding_block.params.empty();
    const size_t copy = ctx.final_norm_params;  // the head's table follows the final norm
    const TensorId grads =
        first ? state.embedding_block.grads.front() : state.head_block.grads[copy];
    state.grad_syncs.push_back(p.collective(TaskRole::kEmbeddingGradSync, Stream::kDpComm,
                                            CollectiveKind::kAllReduce, state.groups.embedding,
                                            ctx.sizes.vocab_shard * ctx.model.hidden * e,
                                            {embedding_grads}, {update(grads)}));
  }
  // Sequence parallelism leaves each TP rank with the norm and bias gradients of its own
  // sequence shard: they are summed over the TP group before the step (Megatron-LM's
  // _allreduce_layernorm_grads): the layer's norms (weight and bias) and its row-parallel biases
  // (attention output and MLP down), and the final norm on the last stage. A per-head QK-norm's
  // weights, shared by heads that TP splits, need the same sum with or without sequence
  // parallelism (the same function sums them whenever config.qk_layernorm is set).
  const ModelSpec& m = ctx.model;
  const bool sp = ctx.plan.sequence_parallel;
  const bool qk_norm = m.qk_norm == QkNorm::kPerHead;
  if ((sp || qk_norm) && ctx.plan.tp > 1) {
    const int64_t norm = m.norm == NormKind::kLayerNorm ? 2 * m.hidden : m.hidden;
    int64_t elements = 0;
    std::vector<TaskId> after = state.grad_syncs;
    after.push_back(p.last_compute());
    TaskUses uses;
    // An MoE layer's router and shared-expert gate are replicated too (Megatron-Core marks the
    // router's weight sequence_parallel).
    for (size_t layer = 0; layer < state.layer_blocks.size(); ++layer) {
      const BlockTensors& block = state.layer_blocks[layer];
      if (block.params.empty()) continue;
      const LayerKindSpec& kind = ctx.kind_of(static_cast<int64_t>(layer));
      for (size_t i = 0; i < kind.specs.size(); ++i) {
        const int index = static_cast<int>(i);
        const bool qk_weight = index == kind.params.q_norm_w || index == kind.params.k_norm_w;
        if (kind.specs[i].replicated && (sp || qk_weight)) {
          uses.push_back(update(block.grads[i]));
          elements += kind.specs[i].elements();
        }
      }
    }
    if (sp && state.stage == ctx.plan.pp - 1) elements += norm;
    if (sp && !state.head_block.grads.empty()) {
      const size_t norm_params = ctx.final_norm_params;
      for (size_t i = 0; i < norm_params; ++i) uses.push_back(update(state.head_block.grads[i]));
    }
    state.grad_syncs.push_back(p.collective(TaskRole::kSequenceParallelGradSync, Stream::kTpComm,
                                            CollectiveKind::kAllReduce, state.groups.tp,
                                            elements * e, after, uses));
  }
  // Gradient clipping needs the global norm: a scalar all-reduce over the ranks holding distinct
  // gradient shards.
  TaskId ready = kNoTask;
  const TensorId norm = state.scratch_of(ctx.slots, Slot::kGradNorm);
  TaskUses grads = bucket_uses(blocks, &BlockTensors::grads, Access::kRead);
  if (state.groups.grad_norm >= 0) {
    TaskUses uses = grads;
    uses.push_back(write(norm));
    // The norm is of the finished gradients: after their reductions, and after the last backward
    // (the only thing it waits for when nothing reduces them: dp 1).
    std::vector<TaskId> after = state.grad_syncs;
    after.push_back(p.last_compute());
    ready = p.collective(TaskRole::kGradNorm, Stream::kDpComm, CollectiveKind::kAllReduce,
                         state.groups.grad_norm, 4, after, uses);
    grads.push_back(read(norm));
  }
  // The step reads the gradients (and the global norm) and updates the parameters and the
  // optimizer's states.
  TaskUses step_uses = grads;
  for (std::vector<TensorId> BlockTensors::*updated :
       {&BlockTensors::params, &BlockTensors::states}) {
    const TaskUses more = bucket_uses(blocks, updated, Access::kUpdate);
    step_uses.append(more.begin(), more.end());
  }
  const int32_t optimizer_op = ctx.ops.optimizer[static_cast<size_t>(state.stage)];
  std::vector<TaskId> step_after = ready != kNoTask ? std::vector<TaskId>{ready} : state.grad_syncs;
  TaskId step = kNoTask;
  if (ctx.plan.offload.optimizer) {
    // ZeRO-Offload: the host runs the step on its shard (DeepSpeed's CPU Adam) once the last
    // backward and the gradient copies are done, then the updated 16-bit shard goes back up,
    // unless --offload-param keeps the parameters on the host.
    step_after.push_back(p.last_compute());
    step = p.host_compute(TaskRole::kOptimizer, optimizer_op, step_after);
    if (!ctx.plan.offload.params) {
      const int64_t shard = p.graph().op(optimizer_op).dims[0];
      step = p.copy(TaskRole::kParamsToDevice, CopyDirection::kToDevice,
                    shard * bytes_per_element(ctx.plan.dtype), {step},
                    bucket_uses(blocks, &BlockTensors::params, Access::kUpdate));
    }
  } else {
    step = p.compute(TaskRole::kOptimizer, optimizer_op, step_after, step_uses);
  }
  // ZeRO 1 and 2: each rank updated its shard; gather the updated parameters bucket by bucket,
  // after the step unless --overlap-param-gather moved them into the next step's forward.
  if (gathers_updated_parameters(ctx) && !ctx.plan.overlap.param_gather) {
    for (const std::vector<RankBucket>& buckets : state.buckets) {
      for (auto bucket = buckets.rbegin(); bucket != buckets.rend(); ++bucket) {
        const ParamBucket& blocks = bucket_of(state, *bucket);
        const int32_t group = bucket_group(state, blocks);
        if (group < 0) continue;
        p.set_layer(blocks.layers > 0 ? blocks.first_layer : -1);
        p.bucket_collective(
            TaskRole::kParamGather, CollectiveKind::kAllGather, group,
            gathered_bytes(ctx, state, *bucket), bucket->index, std::initializer_list<TaskId>{step},
            bucket_uses(blocks_of(ctx, state, blocks), &BlockTensors::params, Access::kUpdate));
      }
    }
    p.set_layer(-1);
  }
}

}  // namespace strata
