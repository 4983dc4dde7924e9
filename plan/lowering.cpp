// The lowering driver: per rank, walk the stage's schedule and emit each forward or backward pass
// of a model chunk (pipeline receive, embedding, layers, head and loss, pipeline send), then the
// optimizer step.

#include "plan/lowering.hpp"

#include <algorithm>
#include <deque>
#include <numeric>
#include <optional>

#include "plan/activation_memory.hpp"
#include "plan/framework.hpp"
#include "plan/lowering_context.hpp"
#include "plan/op_shapes.hpp"
#include "plan/schedule.hpp"

namespace strata {

namespace {

OpPair intern(TaskGraph& graph, const OpShapePair& shapes) {
  return {graph.add_op(shapes.forward), graph.add_op(shapes.backward)};
}

OpTable build_op_table(const ModelSpec& model, const ParallelPlan& plan, TaskGraph& graph) {
  const PlanOpShapes shapes = plan_op_shapes(model, plan);
  OpTable ops;
  ops.norm = intern(graph, shapes.norm);
  ops.qkv = intern(graph, shapes.qkv);
  ops.attention = intern(graph, shapes.attention);
  ops.attn_out = intern(graph, shapes.attn_out);
  ops.residual = intern(graph, shapes.residual);
  ops.mlp_up = intern(graph, shapes.mlp_up);
  ops.mlp_act = intern(graph, shapes.mlp_act);
  ops.mlp_down = intern(graph, shapes.mlp_down);
  if (plan.fp8 != Fp8Format::kNone) {
    ops.fp8_cast_attn_out_in = graph.add_op(shapes.fp8_cast_attn_out_in);
    ops.fp8_cast_mlp_down_in = graph.add_op(shapes.fp8_cast_mlp_down_in);
    ops.fp8_grad_qkv = graph.add_op(shapes.fp8_grad_qkv);
    ops.fp8_grad_attn_out = graph.add_op(shapes.fp8_grad_attn_out);
    ops.fp8_grad_mlp_up = graph.add_op(shapes.fp8_grad_mlp_up);
    ops.fp8_grad_mlp_down = graph.add_op(shapes.fp8_grad_mlp_down);
    if (!plan.fp8_param_gather) ops.fp8_weight_cast = graph.add_op(shapes.fp8_weight_cast);
  }
  if (model.position == PositionKind::kRotary) ops.rotary = intern(graph, shapes.rotary);
  if (model.global_every > 0) ops.attention_global = intern(graph, shapes.attention_global);
  if (model.qk_norm != QkNorm::kNone) ops.qk_norm = intern(graph, shapes.qk_norm);
  if (plan.recompute == RecomputeKind::kSelectiveOp) {
    ops.k_product = graph.add_op(shapes.k_product);
    ops.mlp_up_half = graph.add_op(shapes.mlp_up_half);
  }
  if (plan.overlap.tp_comm) {
    ops.qkv_chunk = intern(graph, shapes.qkv_chunk);
    ops.attn_out_chunk = intern(graph, shapes.attn_out_chunk);
    ops.mlp_up_chunk = intern(graph, shapes.mlp_up_chunk);
    ops.mlp_down_chunk = intern(graph, shapes.mlp_down_chunk);
  }
  ops.embedding = intern(graph, shapes.embedding);
  ops.final_norm = intern(graph, shapes.final_norm);
  ops.lm_head = intern(graph, shapes.lm_head);
  ops.loss = intern(graph, shapes.loss);
  for (const OpShape& optimizer : shapes.optimizer)
    ops.optimizer.push_back(graph.add_op(optimizer));
  // Horovod: a ready bucket waits for the background thread's next wake, which the simulator
  // times from plan.cycle_time_ns (the op itself costs nothing).
  if (plan.cycle_time_ns > 0) ops.cycle_wait = graph.add_op(host_dispatch_op(0, 0, 0, 0));
  return ops;
}

std::vector<int32_t> as_ranks(const std::vector<int64_t>& ranks) {
  return {ranks.begin(), ranks.end()};
}

RankGroups rank_groups(const LoweringContext& ctx, TaskGraph& graph, int64_t rank) {
  const ParallelPlan& plan = ctx.plan;
  const RankLayout& layout = ctx.layout;
  const auto along = [&](GroupKind kind) {
    return graph.add_group(kind, as_ranks(layout.group(rank, group_axes(kind))));
  };
  const RankCoord c = layout.coord(rank);
  RankGroups groups;
  if (plan.tp > 1) groups.tp = along(GroupKind::kTp);
  if (plan.dp > 1) groups.dp = along(GroupKind::kDp);
  const bool edge_stage = c.pp == 0 || c.pp == plan.pp - 1;
  if (plan.pp > 1 && ctx.model.tied_embeddings && edge_stage) {
    groups.embedding =
        graph.add_group(GroupKind::kEmbedding,
                        {static_cast<int32_t>(layout.rank_of(c.with(Axis::kPp, 0))),
                         static_cast<int32_t>(layout.rank_of(c.with(Axis::kPp, plan.pp - 1)))});
  }
  if (plan.fp8 != Fp8Format::kNone && layout.axes().product(kReplicaAxes) > 1) {
    groups.stage = along(GroupKind::kStage);
  }
  if (plan.zero_stage == 0 && plan.tp * plan.pp > 1) {
    groups.grad_norm = along(GroupKind::kModelParallel);
  } else if (plan.zero_stage > 0 && layout.world_size() > 1) {
    groups.grad_norm = along(GroupKind::kWorld);
  }
  return groups;
}

// A pipeline message is identified by its receiver's virtual stage, micro-batch and direction.
int32_t message_tag(const ParallelPlan& plan, WorkKind kind, int64_t micro_batch,
                    int64_t receiver_virtual_stage) {
  const int64_t direction = kind == WorkKind::kForward ? 0 : 1;
  return static_cast<int32_t>((micro_batch * plan.pp * plan.vpp + receiver_virtual_stage) * 2 +
                              direction);
}

// ZeRO 3: a pass's layer gathers, issued prefetch_layers layers ahead of the layer computing,
// from `from` to `to` (downward in the backward).
class LayerGathers {
 public:
  LayerGathers(const LoweringContext& ctx, RankState& state, int64_t from, int64_t to)
      : ctx_(ctx), state_(state), next_(from), to_(to), step_(to >= from ? 1 : -1) {}

  // The gather of `layer`, after issuing the gathers up to prefetch_layers beyond it. The
  // framework's pre-forward (pre-backward) hook issues them from the host thread (FSDP2's and
  // DeepSpeed's module hooks): a host-dispatch block of its own.
  TaskId take(int64_t layer) {
    const int64_t through = layer + step_ * ctx_.prefetch_layers;
    std::optional<RankState::HostBlock> hook;
    if (gathers_layer_parameters(ctx_) && next_within(through)) hook.emplace(state_);
    for (; next_within(through); next_ += step_) issue(next_);
    hook.reset();
    const TaskId gathered = pending_.front();
    pending_.pop_front();
    return gathered;
  }

 private:
  void issue(int64_t layer) {
    state_.program.set_layer(static_cast<int32_t>(layer));
    pending_.push_back(gather_params(ctx_, state_, ctx_.layer_param_bytes));
  }

  // Whether the next layer to gather is still within the pass and not beyond `last`.
  bool next_within(int64_t last) const {
    return step_ > 0 ? next_ <= std::min(last, to_) : next_ >= std::max(last, to_);
  }

  const LoweringContext& ctx_;
  RankState& state_;
  int64_t next_;
  int64_t to_;
  int64_t step_;
  std::deque<TaskId> pending_;
};

class PassLowering {
 public:
  PassLowering(const LoweringContext& ctx, RankState& state, const RankCoord& coord)
      : ctx_(ctx), state_(state), coord_(coord) {}

  void forward(const PipelineWork& work);
  void backward(const PipelineWork& work);
  // The latest backward that wrote a copy of the (tied) embedding's gradient: the embedding on
  // the first stage, the LM head on the last.
  TaskId embedding_grads() const { return embedding_grads_; }

 private:
  int32_t stage_rank(int64_t stage) const {
    return static_cast<int32_t>(ctx_.layout.rank_of(coord_.with(Axis::kPp, stage)));
  }
  int64_t virtual_stage(int64_t chunk) const { return chunk * ctx_.plan.pp + state_.stage; }
  // Pipeline p2p as Megatron-LM's schedules run it. 1F1B and GPipe (forward_backward_pipelining_
  // without_interleaving) send each pass's output in a blocking call, batched with the receive of
  // the next pass's input: the compute waits for the send. The interleaved schedule with
  // --overlap-p2p-communication posts receives ahead on their own stream and waits for sends only
  // before reusing their buffers; without the flag it batches a forward-backward pair's sends and
  // receives into one blocking exchange, which this graph approximates by posting each receive
  // when the schedule reaches it and not waiting for sends.
  bool overlaps_p2p() const {
    return ctx_.plan.overlap.p2p && ctx_.plan.schedule == ScheduleKind::kInterleaved;
  }
  Stream receive_stream() const { return overlaps_p2p() ? Stream::kPpRecv : Stream::kCompute; }
  void wait_unless_overlapped(TaskId send) {
    if (ctx_.plan.schedule != ScheduleKind::kInterleaved)
      state_.program.block_next_compute_on(send);
  }
  // FP8 delayed scaling: after each forward and backward pass of a model chunk Transformer Engine
  // all-reduces the amaxes of its FP8 tensors over the stage's data- and tensor-parallel ranks
  // (Megatron's amax reduction group), a blocking call on the main stream.
  void reduce_amaxes(int64_t chunk) {
    if (state_.groups.stage < 0) return;
    RankProgram& p = state_.program;
    const int64_t bytes = ctx_.amax_bytes * ctx_.chunk_layers(state_.stage, chunk);
    p.block_next_compute_on(p.collective(TaskRole::kAmaxReduce, Stream::kTpComm,
                                         CollectiveKind::kAllReduce, state_.groups.stage, bytes,
                                         {p.last_compute()}));
  }
  // The parameters a block's forward waits for: its ZeRO-3 gather, or under
  // --overlap-param-gather its bucket's all-gather in the step's first forward.
  TaskId block_params(int64_t zero3_bytes, ParamBlock block, const PipelineWork& work) {
    const TaskId gathered = gather_params(ctx_, state_, zero3_bytes);
    if (gathered != kNoTask) return gathered;
    return await_param_gather(ctx_, state_, work.chunk, block, work.micro_batch);
  }
  // Without sequence parallelism each TP rank received a 1/t slice of the boundary tensor
  // (pipeline_message_bytes); the slices are all-gathered over the TP group.
  TaskId gather_pipeline_slices(TaskRole role, TaskId received) {
    if (ctx_.plan.sequence_parallel) return received;
    return tp_collective(ctx_, state_, role, CollectiveKind::kAllGather, ctx_.tp_message_bytes,
                         received);
  }

  const LoweringContext& ctx_;
  RankState& state_;
  RankCoord coord_;
  TaskId embedding_grads_ = kNoTask;
};

void PassLowering::forward(const PipelineWork& work) {
  RankProgram& p = state_.program;
  const OpTable& op = ctx_.ops;
  const ParallelPlan& plan = ctx_.plan;
  const int64_t stage = state_.stage;
  const int64_t vs = virtual_stage(work.chunk);
  p.label(Phase::kForward, -1, static_cast<int32_t>(work.micro_batch),
          static_cast<int16_t>(work.chunk));
  // The host issues the pass's work before its layers, each layer (layer_lowering.cpp), and
  // what follows them, as blocks.
  std::optional<RankState::HostBlock> issued;
  issued.emplace(state_);

  TaskId input = kNoTask;
  const bool receives = !ctx_.first_virtual_stage(stage, work.chunk);
  if (receives) {
    // The receive is posted when the schedule reaches it (Megatron-LM's p2p calls run in
    // schedule order on the main thread), into a buffer allocated there.
    const TaskId buffer = p.alloc(receive_stream(), BufferClass::kPipelineBuffer, ctx_.pipe_bytes);
    input = p.recv(TaskRole::kPipeActivation, stage_rank((stage + plan.pp - 1) % plan.pp),
                   message_tag(plan, WorkKind::kForward, work.micro_batch, vs), ctx_.pipe_bytes,
                   {buffer});
    input = gather_pipeline_slices(TaskRole::kPipeActivation, input);
  } else {
    const TaskId params = block_params(ctx_.embedding_param_bytes, {ParamBlock::kEmbedding}, work);
    input = p.compute(TaskRole::kEmbedding, op.embedding.forward, {params});
    release_params(ctx_, state_, ctx_.embedding_param_bytes, input);
    input = tp_collective(
        ctx_, state_, TaskRole::kEmbedding,
        plan.sequence_parallel ? CollectiveKind::kReduceScatter : CollectiveKind::kAllReduce,
        ctx_.tp_message_bytes, input);
  }
  issued.reset();
  const int64_t first = ctx_.first_layer(stage, work.chunk);
  const int64_t count = ctx_.chunk_layers(stage, work.chunk);
  p.set_layer(static_cast<int32_t>(first));
  LayerGathers gathers(ctx_, state_, first, first + count - 1);
  for (int64_t layer = first; layer < first + count; ++layer) {
    TaskId params = gathers.take(layer);
    if (params == kNoTask) {
      p.set_layer(static_cast<int32_t>(layer));
      params = await_param_gather(ctx_, state_, work.chunk, {ParamBlock::kLayer, layer},
                                  work.micro_batch);
    }
    input = lower_layer_forward(ctx_, state_, layer, input, params);
    release_params(ctx_, state_, ctx_.layer_param_bytes, input);
  }
  p.set_layer(-1);
  issued.emplace(state_);
  reduce_amaxes(work.chunk);
  if (receives) p.release(Stream::kCompute, BufferClass::kPipelineBuffer, ctx_.pipe_bytes);

  if (ctx_.last_virtual_stage(stage, work.chunk)) {
    const TaskId params = block_params(ctx_.head_gather_bytes, {ParamBlock::kHead}, work);
    p.alloc(Stream::kCompute, BufferClass::kHeadActivations, ctx_.head_bytes);
    const TaskId norm = p.compute(TaskRole::kFinalNorm, op.final_norm.forward, {params});
    const TaskId head_in = plan.sequence_parallel ? tp_collective(ctx_, state_, TaskRole::kLmHead,
                                                                  CollectiveKind::kAllGather,
                                                                  ctx_.tp_message_bytes, norm)
                                                  : norm;
    p.compute(TaskRole::kLmHead, op.lm_head.forward, {head_in});
    TaskId loss = p.compute(TaskRole::kLoss, op.loss.forward);
    release_params(ctx_, state_, ctx_.head_gather_bytes, loss);
    // Vocabulary-parallel cross-entropy: all-reduce the max logit, the target logit and the sum
    // of exponentials over the vocabulary shards (fp32, one value per token each).
    const int64_t per_token = 4 * plan.seq_len * plan.micro_batch;
    for (int i = 0; i < 3; ++i) {
      loss =
          tp_collective(ctx_, state_, TaskRole::kLoss, CollectiveKind::kAllReduce, per_token, loss);
    }
    return;
  }
  const TaskId buffer = p.alloc(Stream::kCompute, BufferClass::kPipelineBuffer, ctx_.pipe_bytes);
  wait_unless_overlapped(p.send(TaskRole::kPipeActivation, stage_rank((stage + 1) % plan.pp),
                                message_tag(plan, WorkKind::kForward, work.micro_batch, vs + 1),
                                ctx_.pipe_bytes, {input, buffer}));
  p.release(Stream::kPpSend, BufferClass::kPipelineBuffer, ctx_.pipe_bytes);
}

void PassLowering::backward(const PipelineWork& work) {
  RankProgram& p = state_.program;
  const OpTable& op = ctx_.ops;
  const ParallelPlan& plan = ctx_.plan;
  const int64_t stage = state_.stage;
  const int64_t vs = virtual_stage(work.chunk);
  p.label(Phase::kBackward, -1, static_cast<int32_t>(work.micro_batch),
          static_cast<int16_t>(work.chunk));
  auto& done = state_.backwards_done[static_cast<size_t>(work.chunk)];
  const bool last_pass = ++done == plan.micro_batches();
  std::optional<RankState::HostBlock> issued;
  issued.emplace(state_);

  TaskId grad = kNoTask;
  const bool receives = !ctx_.last_virtual_stage(stage, work.chunk);
  if (receives) {
    const TaskId buffer = p.alloc(receive_stream(), BufferClass::kPipelineBuffer, ctx_.pipe_bytes);
    grad = p.recv(TaskRole::kPipeGradient, stage_rank((stage + 1) % plan.pp),
                  message_tag(plan, WorkKind::kBackward, work.micro_batch, vs), ctx_.pipe_bytes,
                  {buffer});
    grad = gather_pipeline_slices(TaskRole::kPipeGradient, grad);
  } else {
    const TaskId params = gather_params(ctx_, state_, ctx_.head_gather_bytes);
    p.compute(TaskRole::kLoss, op.loss.backward);
    const TaskId head = p.compute(TaskRole::kLmHead, op.lm_head.backward, {params});
    embedding_grads_ = head;
    const TaskId reduced = tp_collective(
        ctx_, state_, TaskRole::kLmHead,
        plan.sequence_parallel ? CollectiveKind::kReduceScatter : CollectiveKind::kAllReduce,
        ctx_.tp_message_bytes, head);
    grad = p.compute(TaskRole::kFinalNorm, op.final_norm.backward, {reduced});
    release_params(ctx_, state_, ctx_.head_gather_bytes, grad);
    // The head's block (final norm and LM head) is complete once the final norm's backward ran.
    sync_gradients(ctx_, state_, work.chunk, {ParamBlock::kHead}, last_pass, grad);
    p.release(Stream::kCompute, BufferClass::kHeadActivations, ctx_.head_bytes);
  }
  issued.reset();
  const int64_t first = ctx_.first_layer(stage, work.chunk);
  const int64_t last = first + ctx_.chunk_layers(stage, work.chunk) - 1;
  p.set_layer(static_cast<int32_t>(last));
  LayerGathers gathers(ctx_, state_, last, first);
  for (int64_t layer = last; layer >= first; --layer) {
    const TaskId params = gathers.take(layer);
    grad = lower_layer_backward(ctx_, state_, layer, grad, params);
    release_params(ctx_, state_, ctx_.layer_param_bytes, grad);
    sync_gradients(ctx_, state_, work.chunk, {ParamBlock::kLayer, layer}, last_pass, grad);
  }
  p.set_layer(-1);
  issued.emplace(state_);
  reduce_amaxes(work.chunk);
  if (receives) p.release(Stream::kCompute, BufferClass::kPipelineBuffer, ctx_.pipe_bytes);

  if (ctx_.first_virtual_stage(stage, work.chunk)) {
    const TaskId grad_in =
        plan.sequence_parallel
            ? tp_collective(ctx_, state_, TaskRole::kEmbedding, CollectiveKind::kAllGather,
                            ctx_.tp_message_bytes, grad)
            : grad;
    const TaskId params = gather_params(ctx_, state_, ctx_.embedding_param_bytes);
    const TaskId embedding =
        p.compute(TaskRole::kEmbedding, op.embedding.backward, {grad_in, params});
    release_params(ctx_, state_, ctx_.embedding_param_bytes, embedding);
    sync_gradients(ctx_, state_, work.chunk, {ParamBlock::kEmbedding}, last_pass, embedding);
    embedding_grads_ = embedding;
    return;
  }
  const TaskId buffer = p.alloc(Stream::kCompute, BufferClass::kPipelineBuffer, ctx_.pipe_bytes);
  wait_unless_overlapped(p.send(TaskRole::kPipeGradient,
                                stage_rank((stage + plan.pp - 1) % plan.pp),
                                message_tag(plan, WorkKind::kBackward, work.micro_batch, vs - 1),
                                ctx_.pipe_bytes, {grad, buffer}));
  p.release(Stream::kPpSend, BufferClass::kPipelineBuffer, ctx_.pipe_bytes);
}

}  // namespace

LoweringContext::LoweringContext(const ModelSpec& model, const ParallelPlan& plan,
                                 int64_t gpus_per_node, TaskGraph& graph)
    : model(model),
      plan(plan),
      layout(plan, gpus_per_node),
      sizes(shard_sizes(model, plan)),
      stage_layers(layers_per_stage(plan, model)),
      chunks(chunk_layout(plan, model)),
      stage_params(stage_parameters(model, plan)) {
  const int64_t e = bytes_per_element(plan.dtype);
  ops = build_op_table(model, plan, graph);
  tp_message_bytes = e * plan.seq_len * plan.micro_batch * model.hidden;
  const LayerActivations act = layer_activations(model, plan);
  stored_bytes = stored_layer_activation_bytes(model, plan);
  full_layer_bytes = act.total();
  scores_bytes = act.attention_scores;
  layer_input_bytes = strata::layer_input_bytes(model, plan);
  head_bytes = head_activation_bytes(model, plan);
  pipe_bytes = pipeline_message_bytes(model, plan);
  fp8_gemm_weights = sizes.layer_gemm_weights;
  // --fp8-param-gather: the GEMM weights are kept and gathered in FP8 (1 byte).
  layer_param_bytes = sizes.layer * e - (plan.fp8_param_gather ? fp8_gemm_weights * (e - 1) : 0);
  // Delayed scaling's amaxes: input, weight and gradient of each FP8 GEMM, fp32, per layer.
  amax_bytes = 4 * 3 * 4;
  embedding_param_bytes = sizes.embedding * e;
  head_param_bytes = sizes.head * e;
  // A tied LM head on the embedding's own stage uses the embedding's table: ZeRO 3 gathers it
  // with the final norm.
  const bool shares_table = model.tied_embeddings && plan.pp == 1;
  head_gather_bytes = head_param_bytes + (shares_table ? sizes.vocab_shard * model.hidden * e : 0);
  prefetch_layers = prefetch_window_layers(plan, sizes.layer);
}

TaskGraph lower_to_task_graph(const ModelSpec& model, const ParallelPlan& plan,
                              int64_t gpus_per_node, GraphMode mode) {
  TaskGraph graph(mode, plan.axes());
  const LoweringContext ctx(model, plan, gpus_per_node, graph);
  std::vector<StageSchedule> schedules;
  for (int64_t stage = 0; stage < plan.pp; ++stage)
    schedules.push_back(build_schedule(plan, stage));

  HostDispatchBlocks host(graph, plan.host_dispatch);
  std::vector<int64_t> ranks;
  if (mode == GraphMode::kFull) {
    for (int64_t rank = 0; rank < ctx.layout.world_size(); ++rank) ranks.push_back(rank);
  } else {
    for (int64_t stage = 0; stage < plan.pp; ++stage)
      ranks.push_back(ctx.layout.rank_of(RankCoord{}.with(Axis::kPp, stage)));
  }
  for (const int64_t rank : ranks) {
    const RankCoord c = ctx.layout.coord(rank);
    graph.add_rank({static_cast<int32_t>(rank), static_cast<int32_t>(c.pp)});
    RankProgram program(graph, static_cast<int32_t>(rank));
    RankState state(program, c.pp, rank_groups(ctx, graph, rank));
    state.host = &host;
    state.backwards_done.assign(static_cast<size_t>(plan.vpp), 0);
    state.param_gathers.resize(static_cast<size_t>(plan.vpp));
    for (int64_t chunk = 0; chunk < plan.vpp; ++chunk)
      state.buckets.push_back(chunk_buckets(ctx, graph, c.pp, chunk));
    PassLowering passes(ctx, state, c);
    for (const PipelineWork& work : schedules[static_cast<size_t>(c.pp)]) {
      if (work.kind == WorkKind::kForward) {
        passes.forward(work);
      } else {
        passes.backward(work);
      }
    }
    {
      program.label(Phase::kOptimizer, -1, -1, 0);
      const RankState::HostBlock issued(state);
      lower_optimizer_step(ctx, state, passes.embedding_grads());
    }
  }
  return graph;
}

}  // namespace strata
