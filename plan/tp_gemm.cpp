#include "plan/tp_gemm.hpp"

namespace strata {

TaskId tp_collective(const LoweringContext& ctx, RankState& state, TaskRole role,
                     CollectiveKind kind, int64_t bytes, TaskId dep,
                     std::initializer_list<TensorUse> uses, ReduceOp reduce) {
  if (ctx.plan.tp == 1) return dep;
  const TaskId task =
      state.program.collective(role, Stream::kTpComm, kind, state.groups.tp, bytes, {dep}, uses);
  state.program.graph().set_reduce(task, reduce);
  return task;
}

std::pair<TaskId, TensorId> tp_reduce(const LoweringContext& ctx, RankState& state, TaskRole role,
                                      int64_t bytes, TaskId dep, TensorId partial, TensorId rows) {
  if (ctx.plan.tp == 1) return {dep, partial};
  if (ctx.plan.sequence_parallel) {
    return {tp_collective(ctx, state, role, CollectiveKind::kReduceScatter, bytes, dep,
                          {read(partial), write(rows)}),
            rows};
  }
  return {
      tp_collective(ctx, state, role, CollectiveKind::kAllReduce, bytes, dep, {update(partial)}),
      partial};
}

namespace {

// The uses of one product (or chunk) reading `first`, then `second` (backward), writing `out`.
TaskUses gemm_uses(const TpGemm& g, TensorId first, TensorId second, TensorId out) {
  TaskUses uses{read(first)};
  if (second != kNoTensor) uses.push_back(read(second));
  const bool forward = g.direction == Direction::kForward;
  size_t weight_reads = 0;
  while (weight_reads < g.weights.size() && g.weights[weight_reads].access() == Access::kRead)
    ++weight_reads;
  uses.append(g.weights.begin(), g.weights.begin() + weight_reads);
  if (out != kNoTensor) uses.push_back(g.accumulate ? update(out) : write(out));
  if (forward) {
    for (const TensorId copy : g.save_copy) uses.push_back(write(copy));
  }
  uses.append(g.weights.begin() + weight_reads, g.weights.end());
  return uses;
}

}  // namespace

GemmResult tp_gemm(const LoweringContext& ctx, RankState& state, const TpGemm& g, TaskId input) {
  RankProgram& p = state.program;
  const bool forward = g.direction == Direction::kForward;
  TensorId x = g.in;
  if (g.cast >= 0) {
    input = p.compute(TaskRole::kFp8Cast, g.cast, {input}, {read(x), write(g.cast_out)});
    x = g.cast_out;
  }
  const bool gathers = g.gather_in && ctx.plan.sequence_parallel;
  const TensorId gather_src = g.gather_saved ? g.saved_in : x;
  // The product's operands once gathered: the input (forward), or the output gradient and the
  // forward input (backward).
  const TensorId first = gathers && !g.gather_saved ? g.gathered : x;
  const TensorId second = forward ? kNoTensor : gathers && g.gather_saved ? g.gathered : g.saved_in;
  if (!ctx.plan.overlap.tp_comm) {
    const TaskId in =
        gathers ? tp_collective(ctx, state, g.role, CollectiveKind::kAllGather, g.gather_bytes,
                                input, {read(gather_src), write(g.gathered)})
                : input;
    const TaskUses uses = gemm_uses(g, first, second, g.out);
    const TaskId gemm =
        p.compute(g.role, forward ? g.whole.forward : g.whole.backward, {in, g.params}, uses);
    if (!g.reduce_out) return {gemm, g.out};
    const int64_t bytes = g.reduce_bytes > 0 ? g.reduce_bytes : ctx.tp_message_bytes;
    const auto [reduce, result] = tp_reduce(ctx, state, g.role, bytes, gemm, g.out, g.reduced);
    return {reduce, result};
  }
  const int64_t chunks = ctx.plan.tp;
  const int32_t chunk_op = forward ? g.chunk.forward : g.chunk.backward;
  // A chunk of s b / t rows of a gathered input or of the product's output.
  const auto chunk_tensor = [&](Slot slot, int64_t k, TensorId like) {
    TensorShape shape = p.graph().shape_of(like);
    shape.dims[0] /= chunks;
    return p.tensor(TensorKind::kScratch, ctx.slots.name[static_cast<size_t>(slot)],
                    p.graph().add_shape(shape), -1, p.micro_batch(), static_cast<int16_t>(k));
  };
  const auto exchange = [&](TaskId after, int64_t bytes, std::initializer_list<TensorUse> uses) {
    return p.collective(g.role, Stream::kTpComm, CollectiveKind::kRingExchange, state.groups.tp,
                        bytes / chunks, {after}, uses);
  };
  // The gathering exchanges start with the input, one after another; the reducing ones follow
  // each chunk's GEMM, behind them on the stream.
  std::vector<TaskId> arrived(static_cast<size_t>(chunks), input);
  std::vector<TensorId> pieces(static_cast<size_t>(chunks), gathers ? gather_src : kNoTensor);
  if (gathers) {
    for (int64_t k = 1; k < chunks; ++k) {
      pieces[static_cast<size_t>(k)] = chunk_tensor(Slot::kGathered, k, g.gathered);
      arrived[static_cast<size_t>(k)] =
          exchange(k == 1 ? input : kNoTask, g.gather_bytes,
                   {read(gather_src), write(pieces[static_cast<size_t>(k)])});
    }
  }
  TaskId gemm = kNoTask;
  TaskId reduced = kNoTask;
  TensorId last_chunk = kNoTensor;
  for (int64_t k = 0; k < chunks; ++k) {
    const TensorId piece = pieces[static_cast<size_t>(k)];
    const TensorId chunk_first = gathers && !g.gather_saved ? piece : first;
    const TensorId chunk_second = gathers && g.gather_saved ? piece : second;
    const TensorId chunk_out = g.reduce_out ? chunk_tensor(Slot::kProj, k, g.out) : g.out;
    gemm = p.compute(g.role, chunk_op, {arrived[static_cast<size_t>(k)], g.params},
                     gemm_uses(g, chunk_first, chunk_second, chunk_out));
    if (g.reduce_out && k + 1 < chunks) {
      // The first step starts the reduced rows; the later ones add into them.
      reduced = exchange(gemm, ctx.tp_message_bytes,
                         {read(chunk_out), k == 0 ? write(g.reduced) : update(g.reduced)});
    }
    last_chunk = chunk_out;
  }
  if (!g.reduce_out) return {gemm, g.out};
  return {reduced, g.reduced, last_chunk};
}

}  // namespace strata
