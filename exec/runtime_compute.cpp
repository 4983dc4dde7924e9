// RankRuntime's compute tasks: a GPT-2 layer's forward, recompute and backward under Megatron-LM's
// tensor parallelism (Shoeybi et al. 2019) and sequence parallelism (Korthikanti et al. 2022), the
// embedding, head and vocabulary-parallel loss, and the optimizer step. Each task's role says
// which op it is; the TP collectives between them (exec/rank_runtime.cpp) move the same buffers:
//
//   forward:  x_in -> ln1 -> [gather] -> qkv -> attention -> atty -> proj partial -> [reduce]
//             -> x_mid = x_in + proj + b -> ln2 -> [gather] -> fc -> gelu -> proj partial
//             -> [reduce] -> x_out = x_mid + proj + b
//   backward: the same in reverse; a row-parallel product's input gradient is reduced over TP,
//             a column-parallel product gathers the residual gradient first under sequence
//             parallelism.

#include <cmath>

#include <fmt/format.h>

#include "common/error.hpp"
#include "exec/runtime_state.hpp"

namespace strata {

LayerActivations& RankRuntime::Impl::acts(const Task& task) {
  return layer_acts[std::make_pair(task.layer, task.micro_batch)];
}

float* RankRuntime::Impl::out(DeviceTensor LayerActivations::*field, LayerActivations& a,
                              int64_t elements) {
  if ((a.*field).allocated()) return (a.*field).data();
  DeviceTensor& scratch = scratch_acts.*field;
  if (scratch.size() < elements) scratch = DeviceTensor(backend, elements);
  return scratch.data();
}

float* RankRuntime::Impl::stored(DeviceTensor LayerActivations::*field, LayerActivations& a) {
  if ((a.*field).allocated()) return (a.*field).data();
  STRATA_ASSERT((scratch_acts.*field).allocated(), "a forward op wrote this tensor first");
  return (scratch_acts.*field).data();
}

HeadActivations& RankRuntime::Impl::head(const Task& task) {
  const auto found = head_acts.find(task.micro_batch);
  STRATA_ASSERT(found != head_acts.end(),
                fmt::format("micro-batch {} has no head buffers", task.micro_batch));
  return found->second;
}

const int32_t* RankRuntime::Impl::tokens(int64_t micro_batch, bool targets) {
  auto found = step_tokens.find(micro_batch);
  if (found == step_tokens.end()) {
    const MicroBatchTokens batch = micro_batch_tokens(
        data, first_sequence, plan.global_batch, plan.dp, dp_rank, plan.micro_batch, micro_batch);
    found = step_tokens
                .emplace(micro_batch, std::make_pair(DeviceTokens(backend, batch.inputs),
                                                     DeviceTokens(backend, batch.targets)))
                .first;
  }
  return targets ? found->second.second.data() : found->second.first.data();
}

namespace {

float* param(BlockState& block, int index) { return block.params[index].param.data(); }
float* grad(BlockState& block, int index) { return block.params[index].grad.data(); }

}  // namespace

void RankRuntime::Impl::run_compute(const Task& task) {
  if (task.role == TaskRole::kHostDispatch) return;  // this thread is the host: nothing to run
  if (task.role == TaskRole::kOptimizer) {
    if (!grad_norm_reduced) grad_norm = std::sqrt(params.gradient_sum_of_squares());
    const double scale = cpu::clip_factor(grad_norm, optimizer.clip_grad_norm);
    params.step(optimizer.adamw, step + 1, scale);
    return;
  }
  if (graph.op(task.op).direction == Direction::kForward) {
    run_forward(task);
  } else {
    run_backward(task);
  }
}

// The LM head's weight: the tied embedding (one stage), its last-stage copy, or an untied head.
static ParamState& head_weight(ParamStore& params) {
  BlockState* head = params.head();
  if (head->params.size() > kHeadWte) return head->params[kHeadWte];
  return params.embedding()->params[kWte];
}

void RankRuntime::Impl::run_forward(const Task& task) {
  const bool recompute = task.phase == Phase::kRecompute;
  const bool tp = s.tp > 1;
  const int64_t vocab_start = s.tp_rank * s.vocab;
  switch (task.role) {
    case TaskRole::kEmbedding: {
      BlockState& e = *params.embedding();
      // Positions are added once, by TP rank 0, before the sum over the vocabulary shards.
      const float* wpe = s.tp_rank == 0 ? param(e, kWpe) : nullptr;
      backend.embedding_forward(tp ? partial.data() : resid.data(), tokens(task.micro_batch, false),
                                param(e, kWte), wpe, vocab_start, s.vocab, s.b, s.t, s.c);
      return;
    }
    case TaskRole::kFinalNorm: {
      HeadActivations& h = head(task);
      BlockState& hb = *params.head();
      backend.copy(h.x.data(), resid.data(), s.r * s.c);
      backend.layernorm_forward(h.lnf.data(), h.lnf_mean.data(), h.lnf_rstd.data(), h.x.data(),
                                param(hb, kLnfW), param(hb, kLnfB), s.r, s.c);
      return;
    }
    case TaskRole::kLmHead: {
      HeadActivations& h = head(task);
      const float* input = s.sequence_parallel ? h.lnf_full.data() : h.lnf.data();
      backend.matmul_forward(h.logits.data(), input, head_weight(params).param.data(), nullptr, s.n,
                             s.c, s.vocab);
      return;
    }
    case TaskRole::kLoss: {
      HeadActivations& h = head(task);
      backend.row_max(h.maxes.data(), h.logits.data(), s.n, s.vocab);
      loss_collectives_seen = 0;
      if (!tp) {
        backend.cross_entropy_partials(h.sums.data(), h.target_logits.data(), h.logits.data(),
                                       h.maxes.data(), tokens(task.micro_batch, true), vocab_start,
                                       s.n, s.vocab);
        finish_loss(h);
      }
      return;
    }
    default:
      break;
  }

  LayerActivations& a = acts(task);
  BlockState& layer = params.layer(task.layer);
  switch (task.role) {
    case TaskRole::kNorm1:
      if (!recompute) {
        STRATA_ASSERT(a.x_in.allocated(), "the layer's memory task allocated its input");
        backend.copy(a.x_in.data(), resid.data(), s.r * s.c);
      }
      backend.layernorm_forward(out(&LayerActivations::ln1, a, s.r * s.c),
                                out(&LayerActivations::ln1_mean, a, s.r),
                                out(&LayerActivations::ln1_rstd, a, s.r), a.x_in.data(),
                                param(layer, kLn1W), param(layer, kLn1B), s.r, s.c);
      return;
    case TaskRole::kQkv: {
      const float* input = s.sequence_parallel ? full.data() : stored(&LayerActivations::ln1, a);
      backend.matmul_forward(out(&LayerActivations::qkv, a, s.n * s.qkv), input,
                             param(layer, kQkvW), param(layer, kQkvB), s.n, s.c, s.qkv);
      return;
    }
    case TaskRole::kAttention: {
      // Selective recompute rebuilds only the probabilities; the output was kept.
      const bool scores_only = recompute && plan.recompute == RecomputeKind::kSelective;
      LayerActivations& atty_owner = scores_only ? scratch_acts : a;
      float* atty = out(&LayerActivations::atty, atty_owner, s.n * s.attn);
      backend.attention_forward(atty, out(&LayerActivations::att, a, s.b * s.heads * s.t * s.t),
                                stored(&LayerActivations::qkv, a), s.b, s.t, s.heads, s.head_dim);
      return;
    }
    case TaskRole::kAttnOut:
      backend.matmul_forward(tp ? partial.data() : rows.data(), stored(&LayerActivations::atty, a),
                             param(layer, kAttnProjW), nullptr, s.n, s.attn, s.c);
      return;
    case TaskRole::kAttnResidual:
      backend.residual_forward(out(&LayerActivations::x_mid, a, s.r * s.c), a.x_in.data(),
                               rows.data(), param(layer, kAttnProjB), s.r, s.c);
      return;
    case TaskRole::kNorm2:
      backend.layernorm_forward(
          out(&LayerActivations::ln2, a, s.r * s.c), out(&LayerActivations::ln2_mean, a, s.r),
          out(&LayerActivations::ln2_rstd, a, s.r), stored(&LayerActivations::x_mid, a),
          param(layer, kLn2W), param(layer, kLn2B), s.r, s.c);
      return;
    case TaskRole::kMlpUp: {
      const float* input = s.sequence_parallel ? full.data() : stored(&LayerActivations::ln2, a);
      backend.matmul_forward(out(&LayerActivations::fch, a, s.n * s.ffn), input, param(layer, kFcW),
                             param(layer, kFcB), s.n, s.c, s.ffn);
      return;
    }
    case TaskRole::kMlpAct:
      backend.gelu_forward(out(&LayerActivations::fch_gelu, a, s.n * s.ffn),
                           stored(&LayerActivations::fch, a), s.n * s.ffn);
      return;
    case TaskRole::kMlpDown:
      backend.matmul_forward(tp ? partial.data() : rows.data(),
                             stored(&LayerActivations::fch_gelu, a), param(layer, kFcProjW),
                             nullptr, s.n, s.ffn, s.c);
      return;
    case TaskRole::kMlpResidual:
      // The layer's output is the next layer's input; a recompute's is thrown away.
      backend.residual_forward(recompute ? partial.data() : resid.data(),
                               stored(&LayerActivations::x_mid, a), rows.data(),
                               param(layer, kFcProjB), s.r, s.c);
      return;
    default:
      STRATA_ASSERT(false, fmt::format("no forward op for {}", task_name(graph, task)));
  }
}

void RankRuntime::Impl::run_loss_collective(const Task& task) {
  HeadActivations& h = head(task);
  const RankGroup members = group(task);
  const auto span = [&](DeviceTensor& t) { return std::span(t.data(), static_cast<size_t>(s.n)); };
  switch (loss_collectives_seen++) {
    case 0:  // the max logit over the vocabulary shards
      comm.all_reduce(span(h.maxes), members, ReduceOp::kMax);
      return;
    case 1:  // the target's logit, held by one shard
      backend.cross_entropy_partials(h.sums.data(), h.target_logits.data(), h.logits.data(),
                                     h.maxes.data(), tokens(task.micro_batch, true),
                                     s.tp_rank * s.vocab, s.n, s.vocab);
      comm.all_reduce(span(h.target_logits), members, ReduceOp::kSum);
      return;
    case 2:  // the sum of exponentials
      comm.all_reduce(span(h.sums), members, ReduceOp::kSum);
      finish_loss(h);
      return;
    default:
      STRATA_ASSERT(false, "the vocabulary-parallel loss has three all-reduces");
  }
}

void RankRuntime::Impl::finish_loss(HeadActivations& h) {
  backend.cross_entropy_losses(h.losses.data(), h.sums.data(), h.maxes.data(),
                               h.target_logits.data(), s.n);
  if (s.tp_rank != 0) return;  // every TP rank holds the same losses: count them once
  std::vector<float> losses(static_cast<size_t>(s.n));
  backend.download(losses, h.losses.data());
  for (const float loss : losses) measurement.loss_sum += loss;
  measurement.loss_tokens += s.n;
}

void RankRuntime::Impl::run_backward(const Task& task) {
  const bool tp = s.tp > 1;
  const int64_t vocab_start = s.tp_rank * s.vocab;
  // A row-parallel product's output gradient: the residual's, gathered under sequence parallel.
  float* dout_full = s.sequence_parallel ? dfull.data() : dresid.data();
  switch (task.role) {
    case TaskRole::kLoss: {
      HeadActivations& h = head(task);
      if (!dlogits.allocated()) dlogits = DeviceTensor(backend, s.n * s.vocab);
      // The step's loss is the mean over every token of the global batch.
      const auto scale = static_cast<float>(1.0 / static_cast<double>(plan.global_batch * s.t));
      backend.cross_entropy_backward(dlogits.data(), h.logits.data(), h.maxes.data(), h.sums.data(),
                                     tokens(task.micro_batch, true), vocab_start, scale, s.n,
                                     s.vocab);
      return;
    }
    case TaskRole::kLmHead: {
      HeadActivations& h = head(task);
      ParamState& w = head_weight(params);
      const float* input = s.sequence_parallel ? h.lnf_full.data() : h.lnf.data();
      backend.matmul_backward(tp ? dfull.data() : rows.data(), w.grad.data(), nullptr,
                              dlogits.data(), input, w.param.data(), s.n, s.c, s.vocab);
      return;
    }
    case TaskRole::kFinalNorm: {
      HeadActivations& h = head(task);
      BlockState& hb = *params.head();
      backend.layernorm_backward(dresid.data(), grad(hb, kLnfW), grad(hb, kLnfB), rows.data(),
                                 h.x.data(), param(hb, kLnfW), h.lnf_mean.data(), h.lnf_rstd.data(),
                                 s.r, s.c);
      return;
    }
    case TaskRole::kEmbedding: {
      BlockState& e = *params.embedding();
      backend.embedding_backward(grad(e, kWte), grad(e, kWpe), dout_full,
                                 tokens(task.micro_batch, false), vocab_start, s.vocab, s.b, s.t,
                                 s.c);
      return;
    }
    default:
      break;
  }

  LayerActivations& a = acts(task);
  BlockState& layer = params.layer(task.layer);
  switch (task.role) {
    case TaskRole::kMlpResidual:
      backend.residual_backward(grad(layer, kFcProjB), dresid.data(), s.r, s.c);
      return;
    case TaskRole::kMlpDown:
      backend.matmul_backward(dfch_gelu.data(), grad(layer, kFcProjW), nullptr, dout_full,
                              a.fch_gelu.data(), param(layer, kFcProjW), s.n, s.ffn, s.c);
      return;
    case TaskRole::kMlpAct:
      backend.gelu_backward(dfch.data(), a.fch.data(), dfch_gelu.data(), s.n * s.ffn);
      return;
    case TaskRole::kMlpUp:
      backend.matmul_backward(tp ? dfull.data() : rows.data(), grad(layer, kFcW), grad(layer, kFcB),
                              dfch.data(), s.sequence_parallel ? full.data() : a.ln2.data(),
                              param(layer, kFcW), s.n, s.c, s.ffn);
      return;
    case TaskRole::kNorm2:
      backend.layernorm_backward(partial.data(), grad(layer, kLn2W), grad(layer, kLn2B),
                                 rows.data(), a.x_mid.data(), param(layer, kLn2W),
                                 a.ln2_mean.data(), a.ln2_rstd.data(), s.r, s.c);
      backend.accumulate(dresid.data(), partial.data(), s.r * s.c);
      return;
    case TaskRole::kAttnResidual:
      backend.residual_backward(grad(layer, kAttnProjB), dresid.data(), s.r, s.c);
      return;
    case TaskRole::kAttnOut:
      backend.matmul_backward(datty.data(), grad(layer, kAttnProjW), nullptr, dout_full,
                              a.atty.data(), param(layer, kAttnProjW), s.n, s.attn, s.c);
      return;
    case TaskRole::kAttention: {
      // Flash attention kept no probabilities: its backward recomputes them first, as the fused
      // kernel does (into scratch, leaving the stored output alone).
      float* att = a.att.data();
      if (!a.att.allocated()) {
        att = out(&LayerActivations::att, a, s.b * s.heads * s.t * s.t);
        backend.attention_forward(out(&LayerActivations::atty, scratch_acts, s.n * s.attn), att,
                                  a.qkv.data(), s.b, s.t, s.heads, s.head_dim);
      }
      backend.attention_backward(dqkv.data(), datty.data(), a.qkv.data(), att, s.b, s.t, s.heads,
                                 s.head_dim);
      return;
    }
    case TaskRole::kQkv:
      backend.matmul_backward(
          tp ? dfull.data() : rows.data(), grad(layer, kQkvW), grad(layer, kQkvB), dqkv.data(),
          s.sequence_parallel ? full.data() : a.ln1.data(), param(layer, kQkvW), s.n, s.c, s.qkv);
      return;
    case TaskRole::kNorm1:
      backend.layernorm_backward(partial.data(), grad(layer, kLn1W), grad(layer, kLn1B),
                                 rows.data(), a.x_in.data(), param(layer, kLn1W), a.ln1_mean.data(),
                                 a.ln1_rstd.data(), s.r, s.c);
      backend.accumulate(dresid.data(), partial.data(), s.r * s.c);
      return;
    default:
      STRATA_ASSERT(false, fmt::format("no backward op for {}", task_name(graph, task)));
  }
}

}  // namespace strata
