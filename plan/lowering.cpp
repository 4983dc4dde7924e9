// The lowering driver: per rank, walk the stage's schedule and emit each forward or backward pass
// of a model chunk (pipeline receive, embedding, layers, head and loss, pipeline send), then the
// optimizer step.

#include "plan/lowering.hpp"

#include <algorithm>
#include <numeric>
#include <optional>

#include <boost/container/small_vector.hpp>

#include "plan/lowering_context.hpp"
#include "plan/schedule.hpp"
#include "plan/tp_gemm.hpp"

namespace strata {

namespace {

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
  if (plan.expert_tp() > 1) {
    groups.expert_tp = plan.expert_tp() == plan.tp ? groups.tp : along(GroupKind::kExpertTp);
  }
  if (plan.cp > 1) groups.cp = along(GroupKind::kCp);
  if (plan.data_shards() > 1) groups.dp = along(GroupKind::kDp);
  if (plan.ep > 1) {
    groups.ep = along(GroupKind::kEp);
    groups.tp_ep = plan.tp > 1 ? along(GroupKind::kTpEp) : groups.ep;
    if (plan.expert_data_shards() > 1) groups.expert_dp = along(GroupKind::kExpertDp);
  }
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
  if (plan.zero_stage == 0 && plan.tp * plan.ep_from_dp() * plan.pp > 1) {
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
    pending_.erase(pending_.begin());
    return gathered;
  }

 private:
  void issue(int64_t layer) {
    state_.program.set_layer(static_cast<int32_t>(layer));
    pending_.push_back(gather_params(ctx_, state_, layer_gather(ctx_, state_, layer)));
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
  // Gathers issued and not yet taken, oldest first: at most prefetch_layers + 1.
  boost::container::small_vector<TaskId, 4> pending_;
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
    const int64_t first = ctx_.first_layer(state_.stage, chunk);
    const int64_t count = ctx_.chunk_layers(state_.stage, chunk);
    TaskUses uses;
    for (int64_t layer = first; layer < first + count; ++layer)
      uses.push_back(update(state_.layer_blocks[static_cast<size_t>(layer)].amax));
    p.block_next_compute_on(p.collective(
        TaskRole::kAmaxReduce, Stream::kTpComm, CollectiveKind::kAllReduce, state_.groups.stage,
        ctx_.amax_bytes * count, std::vector<TaskId>{p.last_compute()}, uses));
  }
  // The parameters a block's forward waits for: its ZeRO-3 gather, or under
  // --overlap-param-gather its bucket's all-gather in the step's first forward.
  TaskId block_params(const GatherSet& set, ParamBlock block, const PipelineWork& work) {
    const TaskId gathered = gather_params(ctx_, state_, set);
    if (gathered != kNoTask) return gathered;
    return await_param_gather(ctx_, state_, work.chunk, block, work.micro_batch);
  }
  // The LM head's input: the final norm's output `lm_in`, which under sequence parallelism holds
  // this rank's rows, gathered after `after` (the forward; the backward gathers them again for the
  // weight gradient, as Megatron-LM's column-parallel linear does). Returns the task the head
  // waits for and the tensor it reads.
  std::pair<TaskId, TensorId> lm_head_input(TensorId lm_in, TaskId after) {
    if (!ctx_.plan.sequence_parallel) return {after, lm_in};
    const TensorId gathered = state_.scratch_of(ctx_.slots, Slot::kLmInGathered);
    return {tp_collective(ctx_, state_, TaskRole::kLmHead, CollectiveKind::kAllGather,
                          ctx_.tp_message_bytes, after, {read(lm_in), write(gathered)}),
            gathered};
  }
  // The embedding's dropout (GPT-2's embd_pdrop; Megatron-LM's embedding dropout, at the hidden
  // rate) on the reduced output, in place (under sequence parallelism the rank's rows), with its
  // mask stored for the backward.
  TaskId drop_embedding(TaskId input) {
    RankProgram& p = state_.program;
    const auto slot = static_cast<size_t>(Slot::kEmbedMask);
    const TensorId mask = p.tensor(TensorKind::kActivation, ctx_.slots.name[slot],
                                   ctx_.slots.shape[slot], -1, p.micro_batch());
    p.alloc(Stream::kCompute, BufferClass::kActivations, std::span<const TensorId>(&mask, 1));
    state_.embedding_masks.push_back(mask);
    const TaskId dropped = p.compute(TaskRole::kEmbedding, ctx_.ops.embedding_dropout.forward,
                                     {input}, {update(state_.stream), write(mask)});
    p.graph().set_random_stream(dropped, dropout_stream(-1, DropSite::kEmbedding));
    return dropped;
  }
  // Its backward: the stream's gradient through the mask, which is then freed.
  TaskId embedding_dropout_backward(TaskId grad) {
    RankProgram& p = state_.program;
    const TensorId mask = state_.embedding_masks.front();
    state_.embedding_masks.pop_front();
    const TaskId task = p.compute(TaskRole::kEmbedding, ctx_.ops.embedding_dropout.backward, {grad},
                                  {read(mask), update(state_.dstream)});
    p.release(Stream::kCompute, BufferClass::kActivations, std::span<const TensorId>(&mask, 1));
    return task;
  }
  // The LM head's weights: the last stage's matrix (and bias), or the embedding's table when a
  // tied head shares the embedding's stage.
  std::vector<TensorId> head_weights() const {
    const size_t norm_params = ctx_.final_norm_params;
    const std::vector<TensorId>& head = state_.head_block.readable();
    if (head.size() > norm_params)
      return {head.begin() + static_cast<long>(norm_params), head.end()};
    return {state_.embedding_block.readable().front()};
  }
  // The gradients the LM head's backward adds into, for `micro_batch`.
  std::vector<TensorId> head_grads(int64_t micro_batch) {
    RankProgram& p = state_.program;
    const size_t norm_params = ctx_.final_norm_params;
    const std::vector<TensorId>& head =
        state_.head_block.grads_of(p, ctx_.head_block, micro_batch, -1);
    if (head.size() > norm_params)
      return {head.begin() + static_cast<long>(norm_params), head.end()};
    return {state_.embedding_block.grads_of(p, ctx_.embedding_block, micro_batch, -1).front()};
  }
  // A pipeline message of this pass.
  TensorId message() {
    return state_.program.tensor(
        TensorKind::kCommBuffer, ctx_.slots.name[static_cast<size_t>(Slot::kMessage)],
        ctx_.slots.shape[static_cast<size_t>(Slot::kMessage)], -1, state_.program.micro_batch());
  }
  // Receives a pass's input (or output gradient) into `stream`, the pass's scratch. Without
  // sequence parallelism each TP rank received a 1/t slice of the boundary tensor
  // (pipeline_message_bytes), which the slices' all-gather over the TP group assembles; else the
  // message is the rank's rows and the receive copies it over.
  TaskId receive(TaskRole role, int32_t peer, int32_t tag, Slot stream) {
    RankProgram& p = state_.program;
    const TensorId into = state_.scratch_of(ctx_.slots, stream);
    const TensorId buffer = message();
    received_ = buffer;
    const TaskId alloc = p.alloc(receive_stream(), BufferClass::kPipelineBuffer,
                                 std::span<const TensorId>(&buffer, 1));
    const bool gathers = !ctx_.plan.sequence_parallel && ctx_.plan.tp > 1;
    const TaskId received =
        gathers ? p.recv(role, peer, tag, ctx_.pipe_bytes, {alloc}, {write(buffer)})
                : p.recv(role, peer, tag, ctx_.pipe_bytes, {alloc}, {write(buffer), write(into)});
    if (!gathers) return received;
    return tp_collective(ctx_, state_, role, CollectiveKind::kAllGather, ctx_.tp_message_bytes,
                         received, {read(buffer), write(into)});
  }
  // Sends this rank's slice of `stream` (its rows under sequence parallelism) to `peer`, through a
  // message buffer freed once it is sent.
  void send(TaskRole role, int32_t peer, int32_t tag, TaskId after, TensorId stream) {
    RankProgram& p = state_.program;
    const TensorId buffer = message();
    const std::span<const TensorId> tensors(&buffer, 1);
    const TaskId alloc = p.alloc(Stream::kCompute, BufferClass::kPipelineBuffer, tensors);
    wait_unless_overlapped(
        p.send(role, peer, tag, ctx_.pipe_bytes, {after, alloc}, {read(stream), write(buffer)}));
    p.release(Stream::kPpSend, BufferClass::kPipelineBuffer, tensors);
  }
  // Frees the pass's received message, once its layers ran.
  void release_received() {
    state_.program.release(Stream::kCompute, BufferClass::kPipelineBuffer,
                           std::span<const TensorId>(&received_, 1));
  }

  const LoweringContext& ctx_;
  RankState& state_;
  RankCoord coord_;
  TaskId embedding_grads_ = kNoTask;
  TensorId received_ = kNoTensor;  // the message the pass received
  // Per micro-batch, the head's stored tensors, from its forward to its backward.
  std::map<int64_t, std::vector<TensorId>> head_kept_;
  // Per micro-batch, the loss's per-token max, target logit and sum of exponentials.
  std::map<int64_t, std::vector<TensorId>> loss_kept_;
  std::map<int64_t, TaskId> loss_done_;  // per micro-batch, the loss's last forward task
};

void PassLowering::forward(const PipelineWork& work) {
  RankProgram& p = state_.program;
  const OpTable& op = ctx_.ops;
  const ParallelPlan& plan = ctx_.plan;
  const SlotTable& slots = ctx_.slots;
  const int64_t stage = state_.stage;
  const int64_t vs = virtual_stage(work.chunk);
  p.label(Phase::kForward, -1, static_cast<int32_t>(work.micro_batch),
          static_cast<int16_t>(work.chunk));
  state_.begin_pass();
  // The host issues the pass's work before its layers, each layer (layer_lowering.cpp), and
  // what follows them, as blocks.
  std::optional<RankState::HostBlock> issued;
  issued.emplace(state_);

  TaskId input = kNoTask;
  const bool receives = !ctx_.first_virtual_stage(stage, work.chunk);
  if (receives) {
    // The receive is posted when the schedule reaches it (Megatron-LM's p2p calls run in
    // schedule order on the main thread), into a buffer allocated there.
    input = receive(TaskRole::kPipeActivation, stage_rank((stage + plan.pp - 1) % plan.pp),
                    message_tag(plan, WorkKind::kForward, work.micro_batch, vs), Slot::kStream);
    state_.stream = state_.scratch_of(slots, Slot::kStream);
  } else {
    const GatherSet set = embedding_gather(ctx_, state_);
    const TaskId params = block_params(set, {ParamBlock::kEmbedding}, work);
    // The vocabulary shard's rows (and, on every TP rank, the positions), summed over TP.
    const TensorId out = state_.scratch_of(slots, Slot::kEmbedOut);
    TaskUses uses;
    for (const TensorId t : state_.embedding_block.readable()) uses.push_back(read(t));
    uses.push_back(write(out));
    input = p.compute(TaskRole::kEmbedding, op.embedding.forward, {params}, uses);
    release_params(ctx_, state_, set, input);
    std::tie(input, state_.stream) =
        tp_reduce(ctx_, state_, TaskRole::kEmbedding, ctx_.tp_message_bytes, input, out,
                  state_.scratch_of(slots, Slot::kStream));
    if (ctx_.model.dropout) input = drop_embedding(input);
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
    release_params(ctx_, state_, layer_gather(ctx_, state_, layer), input);
  }
  p.set_layer(-1);
  issued.emplace(state_);
  reduce_amaxes(work.chunk);
  if (receives) release_received();

  if (ctx_.last_virtual_stage(stage, work.chunk)) {
    const GatherSet set = head_gather(ctx_, state_);
    const TaskId params = block_params(set, {ParamBlock::kHead}, work);
    // The head keeps the final norm's input and output and the fp32 logits for its backward.
    std::vector<TensorId> kept;
    for (const Slot slot : {Slot::kHeadIn, Slot::kLmIn, Slot::kLogits}) {
      kept.push_back(p.tensor(TensorKind::kActivation, slots.name[static_cast<size_t>(slot)],
                              slots.shape[static_cast<size_t>(slot)], -1, p.micro_batch()));
    }
    head_kept_[work.micro_batch] = kept;
    const auto [head_in, lm_in, logits] = std::tuple(kept[0], kept[1], kept[2]);
    p.alloc(Stream::kCompute, BufferClass::kHeadActivations, kept);
    const std::vector<TensorId>& head = state_.head_block.readable();
    TaskUses norm_uses{read(state_.stream)};
    const size_t norm_params = ctx_.final_norm_params;
    for (size_t i = 0; i < norm_params; ++i) norm_uses.push_back(read(head[i]));
    norm_uses.push_back(write(lm_in));
    norm_uses.push_back(write(head_in));
    const TaskId norm = p.compute(TaskRole::kFinalNorm, op.final_norm.forward, {params}, norm_uses);
    const auto [head_ready, lm_input] = lm_head_input(lm_in, norm);
    TaskUses head_uses{read(lm_input)};
    for (const TensorId t : head_weights()) head_uses.push_back(read(t));
    head_uses.push_back(write(logits));
    p.compute(TaskRole::kLmHead, op.lm_head.forward, {head_ready}, head_uses);
    // Vocabulary-parallel cross-entropy (Megatron-LM's vocab_parallel_cross_entropy): the max
    // logit of each token, all-reduced (max) over the vocabulary shards, then the target's logit
    // and the sum of exponentials, all-reduced (sum); fp32, one value per token each, kept for
    // the backward beside the logits (too small for the memory plan to count). With one shard,
    // one pass computes all three.
    std::vector<TensorId>& statistics = loss_kept_[work.micro_batch];
    for (const Slot slot : {Slot::kLossMax, Slot::kTargetLogit, Slot::kLossSum}) {
      statistics.push_back(p.tensor(TensorKind::kActivation, slots.name[static_cast<size_t>(slot)],
                                    slots.shape[static_cast<size_t>(slot)], -1, p.micro_batch()));
    }
    const auto [max, target, sum] = std::tuple(statistics[0], statistics[1], statistics[2]);
    const int64_t per_token = 4 * plan.local_seq_len() * plan.micro_batch;
    TaskId loss = kNoTask;
    if (plan.tp == 1) {
      loss = p.compute(TaskRole::kLoss, op.loss.forward, {},
                       {read(logits), write(max), write(target), write(sum)});
      release_params(ctx_, state_, set, loss);
    } else {
      loss = p.compute(TaskRole::kLoss, op.loss_max, {}, {read(logits), write(max)});
      release_params(ctx_, state_, set, loss);
      loss = tp_collective(ctx_, state_, TaskRole::kLoss, CollectiveKind::kAllReduce, per_token,
                           loss, {update(max)}, ReduceOp::kMax);
      loss = p.compute(TaskRole::kLoss, op.loss_partials, {loss},
                       {read(logits), read(max), write(target), write(sum)});
      for (const TensorId reduced : {target, sum}) {
        loss = tp_collective(ctx_, state_, TaskRole::kLoss, CollectiveKind::kAllReduce, per_token,
                             loss, {update(reduced)});
      }
    }
    loss_done_[work.micro_batch] = loss;
    return;
  }
  send(TaskRole::kPipeActivation, stage_rank((stage + 1) % plan.pp),
       message_tag(plan, WorkKind::kForward, work.micro_batch, vs + 1), input, state_.stream);
}

void PassLowering::backward(const PipelineWork& work) {
  RankProgram& p = state_.program;
  const OpTable& op = ctx_.ops;
  const ParallelPlan& plan = ctx_.plan;
  const SlotTable& slots = ctx_.slots;
  const int64_t stage = state_.stage;
  const int64_t vs = virtual_stage(work.chunk);
  p.label(Phase::kBackward, -1, static_cast<int32_t>(work.micro_batch),
          static_cast<int16_t>(work.chunk));
  state_.begin_pass();
  auto& done = state_.backwards_done[static_cast<size_t>(work.chunk)];
  const bool last_pass = ++done == plan.micro_batches();
  std::optional<RankState::HostBlock> issued;
  issued.emplace(state_);

  TaskId grad = kNoTask;
  const bool receives = !ctx_.last_virtual_stage(stage, work.chunk);
  state_.dstream = state_.scratch_of(slots, Slot::kDStream);
  if (receives) {
    grad = receive(TaskRole::kPipeGradient, stage_rank((stage + 1) % plan.pp),
                   message_tag(plan, WorkKind::kBackward, work.micro_batch, vs), Slot::kDStream);
  } else {
    const GatherSet set = head_gather(ctx_, state_);
    const TaskId params = gather_params(ctx_, state_, set);
    const std::vector<TensorId> kept = head_kept_.at(work.micro_batch);
    head_kept_.erase(work.micro_batch);
    const auto [head_in, lm_in, logits] = std::tuple(kept[0], kept[1], kept[2]);
    const TensorId dlogits = state_.scratch_of(slots, Slot::kDLogits);
    const std::vector<TensorId> statistics = loss_kept_.at(work.micro_batch);
    loss_kept_.erase(work.micro_batch);
    // The backward starts from the reduced statistics: after the forward's last all-reduce.
    const TaskId loss =
        p.compute(TaskRole::kLoss, op.loss.backward, {loss_done_.at(work.micro_batch)},
                  {read(logits), read(statistics[0]), read(statistics[1]), read(statistics[2]),
                   write(dlogits)});
    loss_done_.erase(work.micro_batch);
    const auto [gathered, lm_input] = lm_head_input(lm_in, loss);
    TaskUses head_uses{read(dlogits), read(lm_input)};
    for (const TensorId t : head_weights()) head_uses.push_back(read(t));
    const TensorId dlm_in = state_.scratch_of(slots, Slot::kDLmIn);
    head_uses.push_back(write(dlm_in));
    for (const TensorId t : head_grads(work.micro_batch)) head_uses.push_back(update(t));
    const TaskId head =
        p.compute(TaskRole::kLmHead, op.lm_head.backward, {params, gathered}, head_uses);
    embedding_grads_ = head;
    const auto [reduced, dnorm] = tp_reduce(ctx_, state_, TaskRole::kLmHead, ctx_.tp_message_bytes,
                                            head, dlm_in, state_.scratch_of(slots, Slot::kDLmRows));
    TaskUses norm_uses{read(dnorm), read(head_in)};
    const size_t norm_params = ctx_.final_norm_params;
    const std::vector<TensorId>& weights = state_.head_block.readable();
    norm_uses.push_back(read(weights[0]));
    norm_uses.push_back(write(state_.dstream));
    const std::vector<TensorId>& grads =
        state_.head_block.grads_of(p, ctx_.head_block, work.micro_batch, -1);
    for (size_t i = 0; i < norm_params; ++i) norm_uses.push_back(update(grads[i]));
    grad = p.compute(TaskRole::kFinalNorm, op.final_norm.backward, {reduced}, norm_uses);
    release_params(ctx_, state_, set, grad);
    // The head's block (final norm and LM head) is complete once the final norm's backward ran.
    sync_gradients(ctx_, state_, work.chunk, {ParamBlock::kHead}, last_pass, grad);
    p.release(Stream::kCompute, BufferClass::kHeadActivations, kept);
  }
  issued.reset();
  const int64_t first = ctx_.first_layer(stage, work.chunk);
  const int64_t last = first + ctx_.chunk_layers(stage, work.chunk) - 1;
  p.set_layer(static_cast<int32_t>(last));
  LayerGathers gathers(ctx_, state_, last, first);
  for (int64_t layer = last; layer >= first; --layer) {
    const TaskId params = gathers.take(layer);
    grad = lower_layer_backward(ctx_, state_, layer, grad, params);
    release_params(ctx_, state_, layer_gather(ctx_, state_, layer), grad);
    sync_gradients(ctx_, state_, work.chunk, {ParamBlock::kLayer, layer}, last_pass, grad);
  }
  p.set_layer(-1);
  issued.emplace(state_);
  reduce_amaxes(work.chunk);
  if (receives) release_received();

  if (ctx_.first_virtual_stage(stage, work.chunk)) {
    TensorId dout = state_.dstream;
    TaskId grad_in = ctx_.model.dropout ? embedding_dropout_backward(grad) : grad;
    if (plan.sequence_parallel) {
      dout = state_.scratch_of(slots, Slot::kDGathered);
      grad_in = tp_collective(ctx_, state_, TaskRole::kEmbedding, CollectiveKind::kAllGather,
                              ctx_.tp_message_bytes, grad_in, {read(state_.dstream), write(dout)});
    }
    const GatherSet set = embedding_gather(ctx_, state_);
    const TaskId params = gather_params(ctx_, state_, set);
    TaskUses uses{read(dout)};
    for (const TensorId t :
         state_.embedding_block.grads_of(p, ctx_.embedding_block, work.micro_batch, -1))
      uses.push_back(update(t));
    const TaskId embedding =
        p.compute(TaskRole::kEmbedding, op.embedding.backward, {grad_in, params}, uses);
    release_params(ctx_, state_, set, embedding);
    sync_gradients(ctx_, state_, work.chunk, {ParamBlock::kEmbedding}, last_pass, embedding);
    embedding_grads_ = embedding;
    return;
  }
  send(TaskRole::kPipeGradient, stage_rank((stage + plan.pp - 1) % plan.pp),
       message_tag(plan, WorkKind::kBackward, work.micro_batch, vs - 1), grad, state_.dstream);
}

}  // namespace

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
  for (size_t r = 0; r < ranks.size(); ++r) {
    const int64_t rank = ranks[r];
    const RankCoord c = ctx.layout.coord(rank);
    graph.add_rank({static_cast<int32_t>(rank), static_cast<int32_t>(c.pp)});
    RankProgram program(graph, static_cast<int32_t>(rank));
    RankState state(program, c.pp, rank_groups(ctx, graph, rank));
    state.host = &host;
    state.backwards_done.assign(static_cast<size_t>(plan.vpp), 0);
    state.param_gathers.resize(static_cast<size_t>(plan.vpp));
    state.layer_blocks.resize(static_cast<size_t>(model.layers));
    state.stored.resize(static_cast<size_t>(model.layers));
    // The rank's parameter blocks: its layers over every chunk, the embedding on the first stage,
    // the head on the last.
    const bool gathers = gathers_layer_parameters(ctx);
    const bool micro_batch_grads = plan.zero_stage >= 2 && plan.data_shards() > 1;
    for (int64_t chunk = 0; chunk < plan.vpp; ++chunk) {
      const int64_t first = ctx.first_layer(c.pp, chunk);
      for (int64_t layer = first; layer < first + ctx.chunk_layers(c.pp, chunk); ++layer) {
        BlockTensors block =
            make_block_tensors(program, ctx.kind_of(layer).block, static_cast<int32_t>(layer),
                               gathers, micro_batch_grads);
        if (plan.fp8 != Fp8Format::kNone) {
          // Transformer Engine's FP8 weight copies (unless kept in FP8) and scaling state, both
          // kept from step to step as a module's buffers are.
          if (ctx.ops.fp8_weight_cast >= 0) {
            block.fp8_weights =
                program.tensor(TensorKind::kParameter, ctx.slots.fp8_weights,
                               ctx.slots.fp8_weights_shape, static_cast<int32_t>(layer), -1);
          }
          block.amax = program.tensor(TensorKind::kParameter, ctx.slots.amax, ctx.slots.amax_shape,
                                      static_cast<int32_t>(layer), -1);
        }
        state.layer_blocks[static_cast<size_t>(layer)] = std::move(block);
      }
    }
    if (c.pp == 0) {
      state.embedding_block =
          make_block_tensors(program, ctx.embedding_block, -1, gathers, micro_batch_grads);
    }
    if (c.pp == plan.pp - 1) {
      state.head_block =
          make_block_tensors(program, ctx.head_block, -1, gathers, micro_batch_grads);
    }
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
    // Once the first rank is lowered, room for every rank at its size, and for the stages that
    // hold more layers than the first (uneven splits): the graph then grows without copying.
    if (r == 0 && ranks.size() > 1) {
      const int64_t most = *std::max_element(ctx.stage_layers.begin(), ctx.stage_layers.end());
      const double scale = static_cast<double>(ranks.size()) * static_cast<double>(most) /
                           static_cast<double>(std::max<int64_t>(1, ctx.stage_layers.front())) *
                           1.02;
      const auto room = [&](int64_t first_rank) {
        return static_cast<int64_t>(static_cast<double>(first_rank) * scale);
      };
      graph.reserve(room(graph.size()), room(graph.dep_count()), room(graph.use_count()),
                    room(graph.tensor_count()));
    }
  }
  return graph;
}

}  // namespace strata
