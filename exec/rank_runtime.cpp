// RankRuntime: issuing a rank's tasks in order, its memory tasks, its collectives and pipeline
// messages. The compute tasks are in exec/runtime_compute.cpp.

#include "exec/rank_runtime.hpp"

#include <cmath>

#include <fmt/format.h>

#include "common/error.hpp"
#include "exec/runtime_state.hpp"
#include "plan/rank_layout.hpp"

namespace strata {

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The parameter block a compute role belongs to, for tasks outside a layer.
BlockKind block_of_role(TaskRole role) {
  return role == TaskRole::kEmbedding ? BlockKind::kEmbedding : BlockKind::kHead;
}

}  // namespace

RankRuntime::Impl::Impl(const CompiledPlan& compiled, int32_t rank, Backend& backend,
                        Communicator& comm, const TextDataset& data,
                        const OptimizerConfig& optimizer, ParamStore& params)
    : compiled(compiled),
      graph(compiled.graph),
      plan(compiled.plan),
      rank(rank),
      backend(backend),
      comm(comm),
      data(data),
      optimizer(optimizer),
      params(params) {
  const ModelSpec& m = compiled.model;
  const RankCoord coord = RankLayout(plan, compiled.cluster.gpus_per_node).coord(rank);
  stage = coord.pp;
  dp_rank = coord.dp;
  s.b = plan.micro_batch;
  s.t = plan.seq_len;
  s.n = s.b * s.t;
  s.tp = plan.tp;
  s.tp_rank = coord.tp;
  s.sequence_parallel = plan.sequence_parallel && plan.tp > 1;
  s.r = s.sequence_parallel ? s.n / s.tp : s.n;
  s.c = m.hidden;
  s.heads = m.heads / s.tp;
  s.head_dim = m.head_dim();
  s.qkv = 3 * s.c / s.tp;
  s.attn = s.c / s.tp;
  s.ffn = m.ffn_hidden / s.tp;
  s.vocab = m.vocab / s.tp;

  resid = DeviceTensor(backend, s.n * s.c);
  dresid = DeviceTensor(backend, s.n * s.c);
  full = DeviceTensor(backend, s.n * s.c);
  partial = DeviceTensor(backend, s.n * s.c);
  rows = DeviceTensor(backend, s.n * s.c);
  dfull = DeviceTensor(backend, s.n * s.c);
  datty = DeviceTensor(backend, s.n * s.attn);
  dqkv = DeviceTensor(backend, s.n * s.qkv);
  dfch = DeviceTensor(backend, s.n * s.ffn);
  dfch_gelu = DeviceTensor(backend, s.n * s.ffn);

  // This rank's program, and the block each DP task outside a layer acts on: a gradient
  // reduction names the compute it follows (its dependency), a ZeRO-3 gather the compute that
  // waits for it, a release the compute before it on the compute stream.
  std::map<TaskId, size_t> index;
  TaskId last_compute = -1;
  for (TaskId id = 0; id < graph.size(); ++id) {
    const Task& task = graph.task(id);
    if (task.rank != rank) continue;
    index[id] = program.size();
    program.push_back(id);
    for (const TaskId dep : graph.deps(id)) {
      const Task& before = graph.task(dep);
      if (task.kind == TaskKind::kCompute && before.role == TaskRole::kParamGather &&
          before.layer < 0 && !edge_blocks.contains(dep)) {
        edge_blocks[dep] = block_of_role(task.role);
      }
    }
    if (task.kind == TaskKind::kMemory && task.buffer == BufferClass::kGatheredParams &&
        task.memory == MemoryAction::kFree && task.layer < 0) {
      STRATA_ASSERT(last_compute >= 0, "a release follows the compute that used the block");
      edge_blocks[id] = block_of_role(graph.task(last_compute).role);
    }
    if (task.kind == TaskKind::kCompute) last_compute = id;
  }
}

RankGroup RankRuntime::Impl::group(const Task& task) const { return graph.group(task.group).ranks; }

BlockState& RankRuntime::Impl::edge_block(TaskId id) {
  const auto found = edge_blocks.find(id);
  STRATA_ASSERT(found != edge_blocks.end(), fmt::format("task {} names no parameter block", id));
  BlockState* block = found->second == BlockKind::kEmbedding ? params.embedding() : params.head();
  STRATA_ASSERT(block != nullptr, fmt::format("task {}: this rank holds no such block", id));
  return *block;
}

std::vector<BlockState*> RankRuntime::Impl::gathered_blocks(TaskId id, const Task& task) {
  if (task.layer >= 0) return {&params.layer(task.layer)};
  BlockState& block = edge_block(id);
  // A tied LM head on the embedding's stage reads the embedding's table: gathered with it.
  if (block.kind == BlockKind::kHead && compiled.model.tied_embeddings && plan.pp == 1)
    return {&block, params.embedding()};
  return {&block};
}

std::vector<BlockState*> RankRuntime::Impl::bucket_blocks(const Task& task) {
  STRATA_ASSERT(task.bucket >= 0, fmt::format("{} names no bucket", task_name(graph, task)));
  const ParamBucket& bucket = graph.bucket(task.bucket);
  std::vector<BlockState*> blocks;
  if (bucket.head) blocks.push_back(params.head());
  for (int32_t layer = bucket.first_layer + bucket.layers - 1; layer >= bucket.first_layer; --layer)
    blocks.push_back(&params.layer(layer));
  if (bucket.embedding) blocks.push_back(params.embedding());
  for (const BlockState* block : blocks) {
    STRATA_ASSERT(block != nullptr, fmt::format("{}: this rank holds no block of its bucket",
                                                task_name(graph, task)));
  }
  return blocks;
}

void RankRuntime::Impl::run_task(TaskId id) {
  const Task& task = graph.task(id);
  // Dependencies on other streams: the backend orders them with events (a no-op on the CPU,
  // where every call has finished when it returns).
  for (const TaskId dep : graph.deps(id)) {
    if (graph.task(dep).rank == rank) backend.wait_event(task.stream, dep);
  }
  backend.set_stream(task.stream);
  switch (task.kind) {
    case TaskKind::kCompute:
      run_compute(task);
      break;
    case TaskKind::kCollective:
      run_collective(id, task);
      break;
    case TaskKind::kP2p:
      run_p2p(task);
      break;
    case TaskKind::kMemory:
      run_memory(id, task);
      break;
    case TaskKind::kCopy:
      STRATA_ASSERT(false, "offload plans are refused before they run (check_executable_model)");
      break;
  }
  backend.record_event(task.stream, id);
}

void RankRuntime::Impl::run_memory(TaskId id, const Task& task) {
  const bool alloc = task.memory == MemoryAction::kAlloc;
  switch (task.buffer) {
    case BufferClass::kActivations:
    case BufferClass::kLayerInput:
    case BufferClass::kAttentionScores: {
      const auto key = std::make_pair(task.layer, task.micro_batch);
      LayerActivations& a = layer_acts[key];
      const bool full_recompute = plan.recompute == RecomputeKind::kFull;
      const bool selective = plan.recompute == RecomputeKind::kSelective;
      if (task.buffer == BufferClass::kLayerInput) {
        if (alloc) {
          a.x_in = DeviceTensor(backend, s.r * s.c);
        } else {
          layer_acts.erase(key);
        }
        return;
      }
      if (task.buffer == BufferClass::kAttentionScores) {
        if (alloc) {
          a.att = DeviceTensor(backend, s.b * s.heads * s.t * s.t);
        } else {
          a.att.reset();
        }
        return;
      }
      if (!alloc) {
        if (full_recompute) {
          DeviceTensor x_in = std::move(a.x_in);
          a = LayerActivations{};
          a.x_in = std::move(x_in);
        } else {
          layer_acts.erase(key);
        }
        return;
      }
      const auto ensure = [&](DeviceTensor& t, int64_t elements) {
        if (!t.allocated()) t = DeviceTensor(backend, elements);
      };
      ensure(a.x_in, s.r * s.c);
      ensure(a.ln1, s.r * s.c);
      ensure(a.ln1_mean, s.r);
      ensure(a.ln1_rstd, s.r);
      ensure(a.qkv, s.n * s.qkv);
      // Only the unfused attention without recompute keeps its probabilities; flash attention's
      // backward recomputes them (exec/runtime_compute.cpp).
      if (!selective && plan.attention == AttentionKind::kUnfused)
        ensure(a.att, s.b * s.heads * s.t * s.t);
      ensure(a.atty, s.n * s.attn);
      ensure(a.x_mid, s.r * s.c);
      ensure(a.ln2, s.r * s.c);
      ensure(a.ln2_mean, s.r);
      ensure(a.ln2_rstd, s.r);
      ensure(a.fch, s.n * s.ffn);
      ensure(a.fch_gelu, s.n * s.ffn);
      return;
    }
    case BufferClass::kHeadActivations:
      if (alloc) {
        HeadActivations& h = head_acts[task.micro_batch];
        h.x = DeviceTensor(backend, s.r * s.c);
        h.lnf = DeviceTensor(backend, s.r * s.c);
        h.lnf_mean = DeviceTensor(backend, s.r);
        h.lnf_rstd = DeviceTensor(backend, s.r);
        h.lnf_full = DeviceTensor(backend, s.n * s.c);
        h.logits = DeviceTensor(backend, s.n * s.vocab);
        h.maxes = DeviceTensor(backend, s.n);
        h.sums = DeviceTensor(backend, s.n);
        h.target_logits = DeviceTensor(backend, s.n);
        h.losses = DeviceTensor(backend, s.n);
      } else {
        head_acts.erase(task.micro_batch);
      }
      return;
    case BufferClass::kPipelineBuffer:
      // A rank's passes run one after another, and each releases its message buffer before
      // the next pass allocates one: one buffer at a time.
      if (alloc) {
        STRATA_ASSERT(!pipe_buffer.allocated(), "one pipeline buffer at a time");
        pipe_buffer = DeviceTensor(backend, s.n * s.c / s.tp);
      } else {
        pipe_buffer.reset();
      }
      return;
    case BufferClass::kGatheredParams:
      // ZeRO-3's gathers allocate the block's params (ParamStore::gather_params); the release
      // frees them.
      if (!alloc) {
        for (BlockState* block : gathered_blocks(id, task)) params.release_params(*block);
      }
      return;
  }
}

void RankRuntime::Impl::reduce_rows(const Task& task, float* in, float* out) {
  const RankGroup members = group(task);
  if (s.sequence_parallel) {
    comm.reduce_scatter(std::span<const float>(in, static_cast<size_t>(s.n * s.c)),
                        std::span(out, static_cast<size_t>(s.r * s.c)), members);
    return;
  }
  backend.copy(out, in, s.n * s.c);
  comm.all_reduce(std::span(out, static_cast<size_t>(s.n * s.c)), members, ReduceOp::kSum);
}

void RankRuntime::Impl::gather_rows(const Task& task, const float* in, float* out) {
  comm.all_gather(std::span<const float>(in, static_cast<size_t>(s.r * s.c)),
                  std::span(out, static_cast<size_t>(s.n * s.c)), group(task));
}

void RankRuntime::Impl::run_collective(TaskId id, const Task& task) {
  const bool gather = task.collective == CollectiveKind::kAllGather;
  switch (task.role) {
    case TaskRole::kQkv:
    case TaskRole::kMlpUp: {
      LayerActivations& a = acts(task);
      if (gather) {  // the norm's output, for the product (forward) or its weight gradient
        const auto field =
            task.role == TaskRole::kQkv ? &LayerActivations::ln1 : &LayerActivations::ln2;
        gather_rows(task, stored(field, a), full.data());
      } else {  // backward: the input gradient's partial sums
        reduce_rows(task, dfull.data(), rows.data());
      }
      return;
    }
    case TaskRole::kAttnOut:
    case TaskRole::kMlpDown:
    case TaskRole::kEmbedding:
      if (gather) {  // backward: the residual gradient, for a row-parallel product
        gather_rows(task, dresid.data(), dfull.data());
      } else if (task.role == TaskRole::kEmbedding) {
        reduce_rows(task, partial.data(), resid.data());
      } else {
        reduce_rows(task, partial.data(), rows.data());
      }
      return;
    case TaskRole::kLmHead:
      if (gather) {
        HeadActivations& h = head(task);
        gather_rows(task, h.lnf.data(), h.lnf_full.data());
      } else {
        reduce_rows(task, dfull.data(), rows.data());
      }
      return;
    case TaskRole::kLoss:
      run_loss_collective(task);
      return;
    case TaskRole::kPipeActivation:
    case TaskRole::kPipeGradient: {
      // Each TP rank received its 1/t slice of the boundary tensor; gather the whole.
      float* whole = task.role == TaskRole::kPipeActivation ? resid.data() : dresid.data();
      comm.all_gather(
          std::span<const float>(pipe_buffer.data(), static_cast<size_t>(s.n * s.c / s.tp)),
          std::span(whole, static_cast<size_t>(s.n * s.c)), group(task));
      return;
    }
    case TaskRole::kGradSync:
      for (BlockState* block : bucket_blocks(task))
        params.reduce_gradients(*block, comm, group(task));
      return;
    case TaskRole::kParamGather: {
      // A bucket's updated parameters (ZeRO 1 and 2), or ZeRO-3's gather of one block.
      const std::vector<BlockState*> blocks =
          task.bucket >= 0 ? bucket_blocks(task) : gathered_blocks(id, task);
      for (BlockState* block : blocks) params.gather_params(*block, comm, group(task));
      return;
    }
    case TaskRole::kEmbeddingGradSync: {
      // The two copies of a tied embedding: the first stage's and the last stage's.
      BlockState* block = params.embedding();
      ParamState& wte = block != nullptr ? block->params[kWte] : params.head()->params[kHeadWte];
      comm.all_reduce(
          std::span(params.reduced_grad(wte), static_cast<size_t>(params.reduced_size(wte))),
          group(task), ReduceOp::kSum);
      return;
    }
    case TaskRole::kSequenceParallelGradSync:
      for (BlockState& block : params.blocks()) {
        if (block.kind == BlockKind::kEmbedding) continue;
        for (ParamState& p : block.params) {
          if (p.spec.shard != TpShard::kReplicated) continue;
          comm.all_reduce(
              std::span(params.reduced_grad(p), static_cast<size_t>(params.reduced_size(p))),
              group(task), ReduceOp::kSum);
        }
      }
      return;
    case TaskRole::kGradNorm: {
      double sum = params.gradient_sum_of_squares();
      comm.all_reduce(std::span(&sum, 1), group(task), ReduceOp::kSum);
      grad_norm = std::sqrt(sum);
      grad_norm_reduced = true;
      return;
    }
    default:
      STRATA_ASSERT(false, fmt::format("no collective for task {}", task_name(graph, task)));
  }
}

void RankRuntime::Impl::run_p2p(const Task& task) {
  const int64_t elements = s.n * s.c / s.tp;
  if (task.p2p == P2pKind::kRecv) {
    comm.recv(std::span(pipe_buffer.data(), static_cast<size_t>(elements)), task.peer, task.tag);
    // Under sequence parallelism the message is this rank's rows already: no gather follows.
    if (s.sequence_parallel || s.tp == 1) {
      float* whole = task.role == TaskRole::kPipeActivation ? resid.data() : dresid.data();
      backend.copy(whole, pipe_buffer.data(), elements);
    }
    return;
  }
  // Send this TP rank's slice (rows tp_rank/t of the boundary tensor), or its own rows under
  // sequence parallelism.
  const float* whole = task.role == TaskRole::kPipeActivation ? resid.data() : dresid.data();
  const int64_t offset = s.sequence_parallel ? 0 : s.tp_rank * elements;
  backend.copy(pipe_buffer.data(), whole + offset, elements);
  comm.send(std::span<const float>(pipe_buffer.data(), static_cast<size_t>(elements)), task.peer,
            task.tag);
}

RankRuntime::RankRuntime(const CompiledPlan& compiled, int32_t rank, Backend& backend,
                         Communicator& comm, const TextDataset& data,
                         const OptimizerConfig& optimizer, uint64_t seed)
    : rank_(rank) {
  const RankCoord coord = RankLayout(compiled.plan, compiled.cluster.gpus_per_node).coord(rank);
  params_ = std::make_unique<ParamStore>(
      backend, rank_param_blocks(compiled.model, compiled.plan, coord.pp, coord.tp),
      compiled.plan.zero_stage, compiled.plan.dp, coord.dp, compiled.plan.tp, coord.tp, seed);
  impl_ = std::make_unique<Impl>(compiled, rank, backend, comm, data, optimizer, *params_);
}

RankRuntime::~RankRuntime() = default;

StepMeasurement RankRuntime::run_step(int64_t step) {
  Impl& impl = *impl_;
  impl.step = step;
  impl.first_sequence = step * impl.plan.global_batch;
  impl.measurement = StepMeasurement{};
  impl.measurement.tasks.reserve(impl.program.size());
  impl.step_tokens.clear();
  impl.grad_norm_reduced = false;
  const int64_t start = now_ns();
  for (const TaskId id : impl.program) {
    const int64_t begin = now_ns();
    impl.run_task(id);
    impl.measurement.tasks.push_back({id, begin - start, now_ns() - start});
  }
  impl.backend.synchronize();
  impl.measurement.grad_norm = impl.grad_norm;
  return std::move(impl.measurement);
}

}  // namespace strata
