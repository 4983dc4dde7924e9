// Context parallelism's attention core in the task graph, as Megatron-Core runs it through
// Transformer Engine (transformer_engine/pytorch/attention.py, the AttnFuncWithCP* functions,
// chosen by --cp-comm-type). Each sequence of S tokens is cut into 2 cp chunks and rank i holds
// chunks i and 2cp - 1 - i (Megatron-Core's get_batch_on_this_cp_rank), s = S / cp tokens, so that
// under the causal mask every rank does the same attention work; everything else in the layer
// runs on the rank's s tokens. The communication runs on the rank's cp-comm stream over its cp
// group; the attention kernels on the compute stream (plan/op_shapes.hpp has their shapes).
// K, V, Q and the output have the model's head widths: with multi-head latent attention K and Q
// are qk_nope_head_dim + qk_rope_head_dim and V and the output v_head_dim wide per head, as
// Megatron-Core's MLA hands Transformer Engine's DotProductAttention k_channels and v_channels,
// whose context-parallel functions exchange blocks of those widths.
//
//  - p2p (AttnFuncWithCPAndKVP2P): a ring of cp steps. Step 0 is the rank's queries over its own
//    keys and values (causal), step j over the block of the rank j hops back on the ring. The
//    rank sends the block it holds to the next rank while it computes with it, so the exchange
//    for step j + 1 runs beside step j's kernel, and step j + 1 waits for both. cp - 1 hops of the
//    rank's K and V forward. The backward runs the ring again, from the block the forward
//    received last (which it keeps) to the rank's own, causal, last. Hop i, beside step i, sends
//    on step i's block for the next rank's step i + 1 with the dK, dV summed so far for step
//    i - 1's block, and receives the previous rank's sum for step i's block, which step i's
//    gradients are added into once it has arrived; the last hop so brings every rank the sum for
//    its own block, whose last term its own step adds. cp hops, the first of K and V alone, the
//    last of dK and dV alone, those between of both.
//  - all_gather (AttnFuncWithCPAndKVAllGather, Llama 3's choice): the keys and values all-gathered
//    over the cp group, then the rank's queries over the keys before them; the backward gathers
//    them again and reduce-scatters their gradients. Not overlapped.
//  - a2a (AttnFuncWithCPAndQKVOA2A, DeepSpeed-Ulysses): an all-to-all moves Q, K and V from the
//    rank's tokens on its heads to the whole sequence on heads / cp, the attention runs there, and
//    an all-to-all moves the output back; the backward all-to-alls the output with its gradient,
//    and the gradients of Q, K and V back. Not overlapped.
//
// The blocks are scratch (not in the memory timeline, as a framework's transients are not): the
// layer's stored tensors stay the rank's Q, K, V, output and log-sum-exp
// (plan/activation_memory.hpp). The forward's output correction between ring steps (an
// elementwise rescale by the log-sum-exps) is left out.

#include <initializer_list>
#include <vector>

#include "common/error.hpp"
#include "plan/layer_ops.hpp"

namespace strata {

namespace {

// The rank's K and V (e s b (kv + v) / t bytes, kv and v the key and value heads' widths summed,
// each 2 kv_heads head_dim in all but latent attention, whose keys are nope + rope and values
// v_head_dim wide per head): what a ring hop carries.
int64_t kv_block_bytes(const LoweringContext& ctx) {
  const ParallelPlan& plan = ctx.plan;
  return bytes_per_element(plan.dtype) * plan.local_seq_len() * plan.micro_batch *
         (ctx.model.kv_hidden() + ctx.model.v_hidden()) / plan.tp;
}

// Q, K and V on the rank's tokens (e s b (q + kv + v) / t bytes): what a2a moves to the heads
// split and their gradients back.
int64_t qkv_bytes(const LoweringContext& ctx) {
  const ParallelPlan& plan = ctx.plan;
  const int64_t tokens = plan.local_seq_len() * plan.micro_batch;
  return bytes_per_element(plan.dtype) * tokens *
         (ctx.model.q_hidden() / plan.tp +
          (ctx.model.kv_hidden() + ctx.model.v_hidden()) / plan.tp);
}

// The attention's output on the rank's tokens (e s b heads value_head_dim / t bytes).
int64_t output_bytes(const LoweringContext& ctx) {
  const ParallelPlan& plan = ctx.plan;
  return bytes_per_element(plan.dtype) * plan.local_seq_len() * plan.micro_batch *
         (ctx.model.context_hidden() / plan.tp);
}

// An all-to-all over the cp group of `bytes` per member, spread evenly: each member sends
// bytes / cp to every member, itself included (the share it keeps).
TaskId uniform_all_to_all(const LoweringContext& ctx, RankState& state, int64_t bytes, TaskId after,
                          std::initializer_list<TensorUse> uses) {
  RankProgram& p = state.program;
  const int64_t cp = ctx.plan.cp;
  STRATA_ASSERT(bytes % cp == 0, "an a2a buffer splits evenly over the cp group");
  const TaskId task = p.collective(TaskRole::kAttention, Stream::kCpComm, CollectiveKind::kAllToAll,
                                   state.groups.cp, bytes, {after}, uses);
  const std::vector<int64_t> matrix(static_cast<size_t>(cp * cp), bytes / cp);
  p.graph().set_peer_bytes(task, matrix);
  return task;
}

}  // namespace

TaskId LayerOps::cp_attention_forward(const OpPair& op, TensorId qkv) {
  const int32_t group = state_.groups.cp;
  const int64_t cp = ctx_.plan.cp;
  const TaskId ready = p_.last_compute();  // the op that wrote Q, K and V
  const TensorId out = at(Slot::kOutIn);
  const TensorId lse = at(Slot::kLse);
  switch (ctx_.plan.cp_comm) {
    case CpComm::kP2p: {
      // blocks[j]: the keys and values of step j; the rank's own first.
      std::vector<TensorId> blocks{qkv};
      TaskId arrived = kNoTask;  // the hop that brought blocks[j]
      TaskId step = kNoTask;
      for (int64_t j = 0; j < cp; ++j) {
        TaskId next = kNoTask;
        if (j + 1 < cp) {
          blocks.push_back(p_.tensor(
              TensorKind::kScratch, ctx_.slots.name[static_cast<size_t>(Slot::kKvBlock)],
              ctx_.slots.shape[static_cast<size_t>(Slot::kKvBlock)], static_cast<int32_t>(layer_),
              p_.micro_batch(), static_cast<int16_t>(j + 1)));
          next = p_.collective(TaskRole::kAttention, Stream::kCpComm, CollectiveKind::kRingExchange,
                               group, kv_block_bytes(ctx_), {j == 0 ? ready : kNoTask},
                               {read(blocks[static_cast<size_t>(j)]), write(blocks.back())});
        }
        const Access into = j == 0 ? Access::kWrite : Access::kUpdate;
        TaskUses uses{read(qkv)};
        if (j > 0) uses.push_back(read(blocks[static_cast<size_t>(j)]));
        uses.emplace_back(out, into);
        uses.emplace_back(lse, into);
        step = draws(p_.compute(TaskRole::kAttention, j == 0 ? op.forward : op_.cp_block.forward,
                                {arrived}, uses),
                     DropSite::kProbabilities);
        arrived = next;
      }
      return step;
    }
    case CpComm::kAllGather: {
      const TensorId gathered = at(Slot::kKvGathered);
      const TaskId gather =
          p_.collective(TaskRole::kAttention, Stream::kCpComm, CollectiveKind::kAllGather, group,
                        cp * kv_block_bytes(ctx_), {ready}, {read(qkv), write(gathered)});
      return draws(p_.compute(TaskRole::kAttention, op.forward, {gather},
                              {read(qkv), read(gathered), write(out), write(lse)}),
                   DropSite::kProbabilities);
    }
    case CpComm::kAllToAll: {
      const TensorId heads = at(Slot::kQkv);
      const TensorId out_heads = at(Slot::kOutHeads);
      const TaskId moved =
          uniform_all_to_all(ctx_, state_, qkv_bytes(ctx_), ready, {read(qkv), write(heads)});
      const TaskId attended = draws(p_.compute(TaskRole::kAttention, op.forward, {moved},
                                               {read(heads), write(out_heads), write(lse)}),
                                    DropSite::kProbabilities);
      return uniform_all_to_all(ctx_, state_, output_bytes(ctx_), attended,
                                {read(out_heads), write(out)});
    }
  }
  return kNoTask;
}

TaskId LayerOps::cp_attention_backward(const OpPair& op) {
  const int32_t group = state_.groups.cp;
  const int64_t cp = ctx_.plan.cp;
  const TaskId ready = p_.last_compute();  // the op that wrote the output's gradient
  const TensorId dout = at(Slot::kDOutIn);
  const TensorId qkv = at(Slot::kQkv);
  const TensorId out = at(Slot::kOutIn);
  const TensorId lse = at(Slot::kLse);
  const TensorId dqkv = at(Slot::kDQkv);
  switch (ctx_.plan.cp_comm) {
    case CpComm::kP2p: {
      // Hop i carries the keys and values of step i + 1 (blocks) and, after step 0, the dK, dV
      // accumulated for step i's block (sums[i], which it overwrites with the previous rank's);
      // step i writes its own into `partial`, which is added in once hop i has arrived.
      const int64_t kv_bytes = kv_block_bytes(ctx_);
      const auto block = [&](Slot slot, int64_t step) {
        return p_.tensor(TensorKind::kScratch, ctx_.slots.name[static_cast<size_t>(slot)],
                         ctx_.slots.shape[static_cast<size_t>(slot)], static_cast<int32_t>(layer_),
                         p_.micro_batch(), static_cast<int16_t>(step));
      };
      const TensorId partial = at(Slot::kDKvStep);
      std::vector<TensorId> blocks{qkv};
      std::vector<TensorId> sums;
      TaskId arrived = kNoTask;  // the hop that brought blocks[i]
      TaskId added = kNoTask;    // the add of the previous step's dK, dV
      for (int64_t i = 0; i < cp; ++i) {
        TaskUses hop_uses;
        int64_t bytes = 0;
        if (i + 1 < cp) {
          blocks.push_back(block(Slot::kKvBlock, i + 1));
          hop_uses.push_back(read(blocks[static_cast<size_t>(i)]));
          hop_uses.push_back(write(blocks.back()));
          bytes += kv_bytes;
        }
        sums.push_back(block(Slot::kDKvBlock, i));
        if (i > 0) {
          hop_uses.push_back(read(sums[static_cast<size_t>(i - 1)]));
          hop_uses.push_back(write(sums.back()));
          bytes += kv_bytes;
        }
        const TaskId hop =
            p_.collective(TaskRole::kAttention, Stream::kCpComm, CollectiveKind::kRingExchange,
                          group, bytes, {i == 0 ? ready : added}, hop_uses);
        TaskUses uses{read(dout), read(qkv)};
        if (i > 0) uses.push_back(read(blocks[static_cast<size_t>(i)]));
        uses.push_back(read(out));
        uses.push_back(read(lse));
        uses.emplace_back(dqkv, i == 0 ? Access::kWrite : Access::kUpdate);  // dQ
        uses.push_back(write(partial));
        // The rank's own block, causal, comes last (TE's backward runs the ring from the block
        // the forward received last).
        draws(p_.compute(TaskRole::kAttention, i + 1 == cp ? op.backward : op_.cp_block.backward,
                         {arrived}, uses),
              DropSite::kProbabilities);
        // Step 0 starts its block's sum; the last step completes the rank's own block, whose
        // dK, dV go into kDQkv beside dQ.
        const TensorId sum = sums.back();
        TaskUses add_uses{read(partial)};
        if (i + 1 < cp) {
          add_uses.emplace_back(sum, i == 0 ? Access::kWrite : Access::kUpdate);
        } else {
          add_uses.push_back(read(sum));
          add_uses.push_back(update(dqkv));
        }
        added = p_.compute(TaskRole::kAttention, op_.cp_dkv_add, {hop}, add_uses);
        arrived = hop;
      }
      return added;
    }
    case CpComm::kAllGather: {
      // The forward's gathered keys and values are not kept: gathered again.
      const TensorId gathered = at(Slot::kKvGathered);
      const TensorId dgathered = at(Slot::kDKvGathered);
      const int64_t bytes = cp * kv_block_bytes(ctx_);
      const TaskId gather =
          p_.collective(TaskRole::kAttention, Stream::kCpComm, CollectiveKind::kAllGather, group,
                        bytes, {ready}, {read(qkv), write(gathered)});
      const TaskId attended = draws(p_.compute(TaskRole::kAttention, op.backward, {gather},
                                               {read(dout), read(qkv), read(gathered), read(out),
                                                read(lse), write(dqkv), write(dgathered)}),
                                    DropSite::kProbabilities);
      return p_.collective(TaskRole::kAttention, Stream::kCpComm, CollectiveKind::kReduceScatter,
                           group, bytes, {attended}, {read(dgathered), update(dqkv)});
    }
    case CpComm::kAllToAll: {
      const TensorId out_heads = at(Slot::kOutHeads);
      const TensorId dout_heads = at(Slot::kDOutHeads);
      const TensorId dqkv_heads = at(Slot::kDQkvHeads);
      // The output (which the layer keeps on the rank's tokens) and its gradient, together.
      const TaskId moved =
          uniform_all_to_all(ctx_, state_, 2 * output_bytes(ctx_), ready,
                             {read(out), read(dout), write(out_heads), write(dout_heads)});
      const TaskId attended = draws(
          p_.compute(TaskRole::kAttention, op.backward, {moved},
                     {read(dout_heads), read(qkv), read(out_heads), read(lse), write(dqkv_heads)}),
          DropSite::kProbabilities);
      return uniform_all_to_all(ctx_, state_, qkv_bytes(ctx_), attended,
                                {read(dqkv_heads), write(dqkv)});
    }
  }
  return kNoTask;
}

}  // namespace strata
