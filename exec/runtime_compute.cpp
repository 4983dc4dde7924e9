// RankRuntime's compute tasks: the kernel of each op kind, function and direction
// (models/ops.hpp), run on the tensors the task names in the order its kind defines:
//
//   op (fwd)         reads                       writes
//   embedding        wte [wpe]                   out (the vocabulary shard's part under TP)
//   norm             in, w [b]                   out [a stored copy of in]
//   qk-norm          w_q, w_k                    qkv in place, the stored [q | k]
//   matmul           in, w [b]                   out (+= when updated: a parallel block's
//                                                branch) [a stored copy of in]
//   attention        qkv                         out [lse, or probabilities [mask, dropped]]
//   residual add     residual, branch [b...]     out [mask]
//   gelu, swiglu,    in                          out
//   geglu
//   rotary           -                           qkv, in place
//   dropout          -                           in place, mask
//   loss             logits [max]                max and/or target logit, sum of exponentials
//
//   op (bwd)         reads                       writes (an input gradient = or +=), adds into
//   embedding        dout                        dwte [dwpe]
//   norm             dout, in, w [joined]        din; dw [db]
//   qk-norm          stored [q | k], w_q, w_k    dqkv in place; dw_q, dw_k
//   matmul           dout, in, w                 din; dw [db]
//   attention        dout, qkv, out [...]        dqkv
//   residual add     dout [joined...] [mask]     [the stream's gradient +=] [the dropped
//                                                branch's gradient]; [db...]
//   gelu, swiglu,    dout, in                    din
//   geglu
//   rotary           -                           dqkv, in place
//   dropout          mask                        dout, in place
//   loss             logits, max, target, sum    dlogits
//
// A stored copy of a layer's input is written by the layer's first op; "joined" gradients are
// those of a tensor the forward used twice, added into the stream's. A dropout mask is the 1-byte
// tensor among an op's operands: the forward draws it, the backward reads it.
//
// Sizes come from the op's dims (per rank) and the tensors' shapes; a kernel's statistics and
// recomputed probabilities live in workspaces inside the call, never across tasks.

#include <cmath>

#include <fmt/format.h>

#include "common/error.hpp"
#include "exec/runtime_state.hpp"

namespace strata {

namespace {

// The factor dropout scales kept elements by, 1 / (1 - rate), so that the expectation is kept.
float dropout_scale(double rate) { return static_cast<float>(1.0 / (1.0 - rate)); }

}  // namespace

const int32_t* RankRuntime::Impl::tokens(int64_t micro_batch, bool targets) {
  auto found = step_tokens.find(micro_batch);
  if (found == step_tokens.end()) {
    const MicroBatchTokens batch = micro_batch_tokens(
        text, first_sequence, plan.global_batch, plan.dp, coord.dp, plan.micro_batch, micro_batch);
    found = step_tokens
                .emplace(micro_batch, std::make_pair(DeviceTokens(backend, batch.inputs),
                                                     DeviceTokens(backend, batch.targets)))
                .first;
  }
  return targets ? found->second.second.data() : found->second.first.data();
}

template <typename T>
T* RankRuntime::Impl::input_gradient(const Operands& o, int64_t elements) {
  STRATA_ASSERT(!o.out.empty(), "a backward op writes its input gradient");
  return o.out_added[0] ? workspace<T>(kInputGradient, elements) : data<T>(o.out[0]);
}

template <typename T>
void RankRuntime::Impl::finish_input_gradient(const Operands& o, int64_t elements) {
  if (o.out_added[0])
    backend.kernels<T>().accumulate(data<T>(o.out[0]), workspace<T>(kInputGradient, elements),
                                    elements);
}

void RankRuntime::Impl::run_compute(const Task& task, std::span<const TensorUse> uses) {
  const OpShape& op = graph.op(task.op);
  if (op.kind == OpKind::kHost) return;  // this thread is the host: nothing to run
  const Operands o = operands(uses);
  if (op.kind == OpKind::kOptimizer) {
    run_optimizer();
    return;
  }
  const DType dtype = op.kind == OpKind::kLoss ? storage_dtype(o.in.at(0)) : plan.dtype;
  with_storage_type(dtype, [&]<typename T>(T) {
    if (op.kind == OpKind::kLoss) {
      run_loss<T>(task, op, o);
    } else if (op.kind == OpKind::kAttention || op.kind == OpKind::kFlashAttention) {
      run_attention<T>(task, op, o);
    } else if (op.direction == Direction::kForward) {
      run_forward<T>(task, op, o);
    } else {
      run_backward<T>(task, op, o);
    }
  });
}

template <typename T>
void RankRuntime::Impl::run_forward(const Task& task, const OpShape& op, const Operands& o) {
  Kernels<T>& kernels = backend.kernels<T>();
  const int64_t c = model.hidden;
  const T* bias = o.weights.size() > 1 ? data<T>(o.weights[1]) : nullptr;
  switch (op.kind) {
    case OpKind::kEmbedding: {
      // dims {tokens, width, vocab_rows}: the shard's rows start at its TP rank's share.
      const int64_t vocab = op.dims[2];
      // Positions are added once, by TP rank 0, before the sum over the vocabulary shards.
      const T* wpe = o.weights.size() > 1 && coord.tp == 0 ? data<T>(o.weights[1]) : nullptr;
      kernels.embedding_forward(data<T>(o.out.at(0)), tokens(task.micro_batch, false),
                                data<T>(o.weights.at(0)), wpe, coord.tp * vocab, vocab,
                                plan.micro_batch, plan.seq_len, c);
      return;
    }
    case OpKind::kNorm: {
      if (op.function == OpFunction::kQkNorm || op.function == OpFunction::kQkNormWhole) {
        qk_norm<T>(op, o);
        return;
      }
      const int64_t n = op.dims[0];
      const int64_t width = op.dims[1];
      const T* in = data<T>(o.in.at(0));
      if (op.function == OpFunction::kRmsNorm) {
        kernels.rmsnorm_forward(data<T>(o.out.at(0)), workspace<float>(kRstd, n), in,
                                data<T>(o.weights.at(0)), n, width);
      } else {
        kernels.layernorm_forward(data<T>(o.out.at(0)), workspace<float>(kMean, n),
                                  workspace<float>(kRstd, n), in, data<T>(o.weights.at(0)), bias, n,
                                  width);
      }
      break;
    }
    case OpKind::kMatmul: {
      // dims {m, n, k}: out (m, n) = in (m, k) @ w (n, k)^T.
      const int64_t m = op.dims[0];
      const int64_t n = op.dims[1];
      const int64_t k = op.dims[2];
      if (o.out_added[0]) {
        STRATA_ASSERT(bias == nullptr, "a product that adds into its output has no bias");
        kernels.matmul_forward_accumulate(data<T>(o.out[0]), data<T>(o.in.at(0)),
                                          data<T>(o.weights.at(0)), m, k, n);
        break;
      }
      // The output layer's logits are fp32 in any plan (Megatron-LM casts them to fp32 for the
      // cross-entropy): a bf16 product is rounded to bf16, then widened into them.
      const TensorId out = o.out.at(0);
      const bool cast = storage_dtype(out) != dtype_of<T>();
      T* product = cast ? workspace<T>(kCast, m * n) : data<T>(out);
      kernels.matmul_forward(product, data<T>(o.in.at(0)), data<T>(o.weights.at(0)), bias, m, k, n);
      if (cast) {
        backend.convert(address(out), storage_dtype(out), product, dtype_of<T>(), m * n);
      }
      break;
    }
    case OpKind::kElementwise: {
      const TensorId out = o.out.at(0);
      switch (op.function) {
        case OpFunction::kResidualAdd: {
          // A parallel block's residual adds both branches' biases.
          const T* bias = o.weights.empty() ? nullptr : data<T>(o.weights[0]);
          if (o.weights.size() > 1) {
            T* sum = workspace<T>(kBiasSum, c);
            backend.copy(sum, bias, c);
            for (size_t i = 1; i < o.weights.size(); ++i)
              kernels.accumulate(sum, data<T>(o.weights[i]), c);
            bias = sum;
          }
          // Under dropout the op also writes its branch's mask, and drops the branch through it.
          const T* mask = nullptr;
          if (o.out.size() > 1) {
            STRATA_ASSERT(is_mask(o.out[1]), "a residual add writes its output and a mask");
            draw_hidden_mask<T>(task, o.out[1]);
            mask = data<T>(o.out[1]);
          }
          kernels.residual_forward(data<T>(out), data<T>(o.in.at(0)), data<T>(o.in.at(1)), bias,
                                   elements(out) / c, c, mask, dropout_scale(model.hidden_dropout));
          return;
        }
        case OpFunction::kGelu:
          kernels.gelu_forward(data<T>(out), data<T>(o.in.at(0)), elements(out));
          break;
        case OpFunction::kSwiglu:
          kernels.swiglu_forward(data<T>(out), data<T>(o.in.at(0)), tokens_per_micro_batch,
                                 elements(out) / tokens_per_micro_batch);
          break;
        case OpFunction::kGeglu:
          kernels.geglu_forward(data<T>(out), data<T>(o.in.at(0)), tokens_per_micro_batch,
                                elements(out) / tokens_per_micro_batch);
          break;
        case OpFunction::kRotary:
          rotate(data<T>(out), Direction::kForward);
          return;
        case OpFunction::kDropout:
          draw_hidden_mask<T>(task, o.out.at(1));
          kernels.apply_dropout(data<T>(out), data<T>(out), data<T>(o.out[1]),
                                dropout_scale(model.hidden_dropout), elements(out));
          return;
        default:
          STRATA_ASSERT(false, fmt::format("no kernel for {}", to_string(op.function)));
      }
      break;
    }
    default:
      STRATA_ASSERT(false, fmt::format("no forward kernel for {}", to_string(op.kind)));
  }
  // A layer's first op also writes the stored copy of its input; when the op read its input
  // gathered over TP (sequence parallelism), the copy is this rank's rows of it.
  for (size_t i = 1; i < o.out.size(); ++i) {
    const int64_t size = elements(o.out[i]);
    const int64_t offset = size == elements(o.in.at(0)) ? 0 : coord.tp * size;
    backend.copy(data<T>(o.out[i]), data<T>(o.in[0]) + offset, size);
  }
}

template <typename T>
void RankRuntime::Impl::run_backward(const Task& task, const OpShape& op, const Operands& o) {
  Kernels<T>& kernels = backend.kernels<T>();
  const int64_t c = model.hidden;
  switch (op.kind) {
    case OpKind::kEmbedding: {
      const int64_t vocab = op.dims[2];
      kernels.embedding_backward(data<float>(o.grads.at(0)),
                                 o.grads.size() > 1 ? data<float>(o.grads[1]) : nullptr,
                                 data<T>(o.in.at(0)), tokens(task.micro_batch, false),
                                 coord.tp * vocab, vocab, plan.micro_batch, plan.seq_len, c);
      return;
    }
    case OpKind::kNorm: {
      if (op.function == OpFunction::kQkNorm || op.function == OpFunction::kQkNormWhole) {
        qk_norm<T>(op, o);
        return;
      }
      const int64_t n = op.dims[0];
      const int64_t width = op.dims[1];
      T* din = input_gradient<T>(o, n * width);
      if (op.function == OpFunction::kRmsNorm) {
        kernels.rmsnorm_backward_from_input(din, data<float>(o.grads.at(0)), data<T>(o.in.at(0)),
                                            data<T>(o.in.at(1)), data<T>(o.weights.at(0)), n,
                                            width);
      } else {
        kernels.layernorm_backward_from_input(
            din, data<float>(o.grads.at(0)), o.grads.size() > 1 ? data<float>(o.grads[1]) : nullptr,
            data<T>(o.in.at(0)), data<T>(o.in.at(1)), data<T>(o.weights.at(0)), n, width);
      }
      finish_input_gradient<T>(o, n * width);
      // A parallel block's first norm also takes the second norm's input gradient.
      for (size_t i = 2; i < o.in.size(); ++i)
        kernels.accumulate(data<T>(o.out[0]), data<T>(o.in[i]), n * width);
      return;
    }
    case OpKind::kMatmul: {
      const int64_t m = op.dims[0];
      const int64_t n = op.dims[1];
      const int64_t k = op.dims[2];
      // The fp32 logits' gradient (the output layer's) is rounded to T for the product, as the
      // backward of Megatron-LM's cast to fp32 does.
      const TensorId dout_id = o.in.at(0);
      const DType dout_dtype = storage_dtype(dout_id);
      const T* dout = nullptr;
      if (dout_dtype == dtype_of<T>()) {
        dout = data<T>(dout_id);
      } else {
        T* converted = workspace<T>(kCast, m * n);
        backend.convert(converted, dtype_of<T>(), address(dout_id), dout_dtype, m * n);
        dout = converted;
      }
      T* din = input_gradient<T>(o, m * k);
      kernels.matmul_backward(din, data<float>(o.grads.at(0)),
                              o.grads.size() > 1 ? data<float>(o.grads[1]) : nullptr, dout,
                              data<T>(o.in.at(1)), data<T>(o.weights.at(0)), m, k, n);
      finish_input_gradient<T>(o, m * k);
      return;
    }
    case OpKind::kElementwise:
      switch (op.function) {
        case OpFunction::kResidualAdd: {
          // The input gradients are the output's. A tensor the op updates is a stream's gradient
          // joining the other gradients it reads (a tensor used twice in the forward sums both
          // gradients); under dropout the op then writes the branch's gradient, the stream's
          // through the branch's mask. The biases, added before the dropout, take the column
          // sums of the branch's gradient.
          const TensorId dout = o.in.at(0);
          TensorId mask = kNoTensor;
          for (const TensorId t : o.in) {
            if (is_mask(t)) mask = t;
          }
          TensorId dbranch = dout;
          for (size_t i = 0; i < o.out.size(); ++i) {
            if (!o.out_added[i]) {
              dbranch = o.out[i];
              continue;
            }
            for (const TensorId joined : o.in) {
              if (joined != o.out[i] && joined != mask)
                kernels.accumulate(data<T>(o.out[i]), data<T>(joined), elements(joined));
            }
          }
          if (mask != kNoTensor) {
            kernels.apply_dropout(data<T>(dbranch), data<T>(dout), data<T>(mask),
                                  dropout_scale(model.hidden_dropout), elements(dout));
          }
          for (const TensorId grad : o.grads)
            kernels.residual_backward(data<float>(grad), data<T>(dbranch), elements(dbranch) / c,
                                      c);
          return;
        }
        case OpFunction::kGelu: {
          const int64_t n = elements(o.in.at(0));
          kernels.gelu_backward(input_gradient<T>(o, n), data<T>(o.in.at(1)), data<T>(o.in[0]), n);
          finish_input_gradient<T>(o, n);
          return;
        }
        case OpFunction::kSwiglu:
        case OpFunction::kGeglu: {
          const int64_t n = elements(o.in.at(1));
          const int64_t h = elements(o.in[0]) / tokens_per_micro_batch;
          if (op.function == OpFunction::kSwiglu) {
            kernels.swiglu_backward(input_gradient<T>(o, n), data<T>(o.in[1]), data<T>(o.in[0]),
                                    tokens_per_micro_batch, h);
          } else {
            kernels.geglu_backward(input_gradient<T>(o, n), data<T>(o.in[1]), data<T>(o.in[0]),
                                   tokens_per_micro_batch, h);
          }
          finish_input_gradient<T>(o, n);
          return;
        }
        case OpFunction::kRotary:
          rotate(data<T>(o.out.at(0)), Direction::kBackward);
          return;
        case OpFunction::kDropout: {
          T* dout = data<T>(o.out.at(0));
          kernels.apply_dropout(dout, dout, data<T>(o.in.at(0)),
                                dropout_scale(model.hidden_dropout), elements(o.out[0]));
          return;
        }
        default:
          break;
      }
      break;
    default:
      break;
  }
  STRATA_ASSERT(false, fmt::format("no backward kernel for {} {}", to_string(op.kind),
                                   to_string(op.function)));
}

// QK-norm (Qwen3, Gemma 3: per head; OLMo 2: over the whole width, tp 1) in place on the
// queries' and the keys' columns of a fused QKV output, which the forward first stores (the
// norm's input, [q | k] per token). The backward reads that input and turns the gradient of the
// normalized queries and keys into their inputs' gradient, in place. Each block of columns is
// copied out to rows of its own, normalized, and copied back.
template <typename T>
void RankRuntime::Impl::qk_norm(const OpShape& op, const Operands& o) {
  Kernels<T>& kernels = backend.kernels<T>();
  const bool forward = op.direction == Direction::kForward;
  const QkvColumns c = qkv_columns();
  const int64_t hd = c.head_dim;
  const int64_t width = c.width();
  const int64_t qk_width = c.v_first();
  const int64_t n = tokens_per_micro_batch;
  T* qkv = data<T>(o.out.at(0));
  const T* saved = forward ? nullptr : data<T>(o.in.at(0));
  if (forward) backend.copy_2d(data<T>(o.out.at(1)), qk_width, qkv, width, n, qk_width);
  const bool per_head = op.function == OpFunction::kQkNorm;
  for (const auto& [heads, first_col, weights, grad] :
       {std::tuple(c.q_heads, int64_t{0}, o.weights.at(0), forward ? kNoTensor : o.grads.at(0)),
        std::tuple(c.kv_heads, c.k_first(), o.weights.at(1),
                   forward ? kNoTensor : o.grads.at(1))}) {
    const int64_t cols = heads * hd;
    const int64_t rows = per_head ? n * heads : n;
    const int64_t norm_width = per_head ? hd : cols;
    T* block = workspace<T>(kQkBlock, n * cols);
    T* result = workspace<T>(kQkResult, n * cols);
    if (forward) {
      backend.copy_2d(block, cols, qkv + first_col, width, n, cols);
      kernels.rmsnorm_forward(result, workspace<float>(kRstd, rows), block, data<T>(weights), rows,
                              norm_width);
    } else {
      T* input = workspace<T>(kQkInput, n * cols);
      backend.copy_2d(input, cols, saved + first_col, qk_width, n, cols);
      backend.copy_2d(block, cols, qkv + first_col, width, n, cols);
      kernels.rmsnorm_backward_from_input(result, data<float>(grad), block, input, data<T>(weights),
                                          rows, norm_width);
    }
    backend.copy_2d(qkv + first_col, width, result, cols, n, cols);
  }
}

// Rotary embedding in place on the queries' and the keys' columns of a fused QKV output (or its
// gradient, rotated back), this rank's heads.
template <typename T>
void RankRuntime::Impl::rotate(T* qkv, Direction direction) {
  Kernels<T>& kernels = backend.kernels<T>();
  const QkvColumns c = qkv_columns();
  for (const auto& [heads, first_col] :
       {std::pair(c.q_heads, int64_t{0}), std::pair(c.kv_heads, c.k_first())}) {
    if (direction == Direction::kForward) {
      kernels.rotary_forward(qkv, qkv, plan.micro_batch, plan.seq_len, heads, c.head_dim, c.width(),
                             first_col, model.rope_theta);
    } else {
      kernels.rotary_backward(qkv, qkv, plan.micro_batch, plan.seq_len, heads, c.head_dim,
                              c.width(), first_col, model.rope_theta);
    }
  }
}

// Attention over the fused QKV output, dims {b, s, heads, head_dim} per rank, with this rank's
// key/value heads. The forward writes its output and, when the graph keeps them (the unfused
// kernel), the probabilities and, under dropout, their mask and the dropped probabilities; the
// backward reads them, or recomputes the probabilities and draws the mask again as flash
// attention's backward does (in workspaces).
template <typename T>
void RankRuntime::Impl::run_attention(const Task& task, const OpShape& op, const Operands& o) {
  Kernels<T>& kernels = backend.kernels<T>();
  const int64_t b = op.dims[0];
  const int64_t s = op.dims[1];
  const int64_t heads = op.dims[2];
  const int64_t hd = op.dims[3];
  const int64_t probabilities = b * heads * s * s;
  const bool forward = op.direction == Direction::kForward;
  const TensorId qkv = forward ? o.in.at(0) : o.in.at(1);
  const int64_t kv_heads = qkv_columns().kv_heads;
  // The stored tensors, after the output (forward) or after dout, qkv and the output (backward):
  // the probabilities, then the mask and the dropped probabilities.
  T* att = nullptr;
  T* keep = nullptr;
  T* dropped = nullptr;
  const std::span<const TensorId> stored =
      forward ? std::span<const TensorId>(o.out.data(), o.out.size()).subspan(1)
              : std::span<const TensorId>(o.in.data(), o.in.size()).subspan(3);
  for (const TensorId t : stored) {
    if (elements(t) != probabilities) continue;  // flash attention's log-sum-exp
    if (is_mask(t)) {
      keep = data<T>(t);
    } else if (att == nullptr) {
      att = data<T>(t);
    } else {
      dropped = data<T>(t);
    }
  }
  const float scale = dropout_scale(model.attention_dropout);
  if (model.dropout && (forward || keep == nullptr)) {
    if (keep == nullptr) keep = workspace<T>(kMask, probabilities);
    draw_probability_mask(task, keep, heads);
  }
  if (forward) {
    if (att == nullptr) att = workspace<T>(kProbabilities, probabilities);
    kernels.gqa_attention_forward(data<T>(o.out.at(0)), att, data<T>(qkv), b, s, heads, kv_heads,
                                  hd, op.window, keep, scale, dropped);
    return;
  }
  if (att == nullptr) {
    att = workspace<T>(kProbabilities, probabilities);
    kernels.gqa_attention_forward(workspace<T>(kRecomputedOutput, b * s * heads * hd), att,
                                  data<T>(qkv), b, s, heads, kv_heads, hd, op.window, nullptr, 1.0f,
                                  nullptr);
  }
  kernels.gqa_attention_backward(data<T>(o.out.at(0)), data<T>(o.in.at(0)), data<T>(qkv), att, b, s,
                                 heads, kv_heads, hd, op.window, keep, scale);
}

int64_t RankRuntime::Impl::sequence_of(int64_t micro_batch, int64_t b) const {
  return micro_batch_first_sequence(first_sequence, plan.global_batch, plan.dp, coord.dp,
                                    plan.micro_batch, micro_batch) +
         b;
}

namespace {

// The generator of a task's draws: the run's seed and the task's random stream.
uint64_t draws_of(uint64_t seed, const Task& task) {
  STRATA_ASSERT(random_stream(task) > 0, "a task that draws a mask names its random stream");
  return cpu::dropout_key(seed, static_cast<uint64_t>(random_stream(task)));
}

}  // namespace

// Row (b, t) of the micro-batch's residual stream is keyed by (sequence of b, t), the columns by
// their index: every rank draws its rows of the same mask, whatever the plan.
template <typename T>
void RankRuntime::Impl::draw_hidden_mask(const Task& task, TensorId mask) {
  const int64_t c = model.hidden;
  const int64_t rows = elements(mask) / c;
  const int64_t s = plan.seq_len;
  // This rank's rows of the (B*T, h) stream: all, or under sequence parallelism its TP rank's
  // contiguous share.
  const int64_t first = rows == tokens_per_micro_batch ? 0 : coord.tp * rows;
  std::vector<uint64_t> keys(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t row = first + r;
    keys[static_cast<size_t>(r)] =
        cpu::dropout_key(static_cast<uint64_t>(sequence_of(task.micro_batch, row / s)),
                         static_cast<uint64_t>(row % s));
  }
  backend.kernels<T>().dropout_mask(data<T>(mask), draws_of(seed, task), keys.data(), rows, c,
                                    model.hidden_dropout);
}

// Row (b, head, query) of the probabilities is keyed by (sequence of b, global head, query), the
// columns by the key's position: a TP rank draws its heads' rows of the same mask.
template <typename T>
void RankRuntime::Impl::draw_probability_mask(const Task& task, T* keep, int64_t heads) {
  const int64_t b = plan.micro_batch;
  const int64_t s = plan.seq_len;
  std::vector<uint64_t> keys(static_cast<size_t>(b * heads * s));
  for (int64_t bi = 0; bi < b; ++bi) {
    const auto sequence = static_cast<uint64_t>(sequence_of(task.micro_batch, bi));
    for (int64_t h = 0; h < heads; ++h) {
      const uint64_t head = cpu::dropout_key(sequence, static_cast<uint64_t>(coord.tp * heads + h));
      for (int64_t i = 0; i < s; ++i)
        keys[static_cast<size_t>((bi * heads + h) * s + i)] =
            cpu::dropout_key(head, static_cast<uint64_t>(i));
    }
  }
  backend.kernels<T>().dropout_mask(keep, draws_of(seed, task), keys.data(), b * heads * s, s,
                                    model.attention_dropout);
}

// The vocabulary-parallel cross-entropy over the logits of this rank's shard, dims {tokens,
// vocab_cols}: the forward in one pass (one shard) or two around the all-reduce of the max; the
// backward the logits' gradient of the mean loss over the global batch, and the per-token losses
// the step reports (once per TP group).
template <typename T>
void RankRuntime::Impl::run_loss(const Task& task, const OpShape& op, const Operands& o) {
  Kernels<T>& kernels = backend.kernels<T>();
  const int64_t n = op.dims[0];
  const int64_t vocab = op.dims[1];
  const int64_t vocab_start = coord.tp * vocab;
  const int32_t* targets = tokens(task.micro_batch, true);
  const T* logits = data<T>(o.in.at(0));
  if (op.direction == Direction::kForward) {
    switch (op.function) {
      case OpFunction::kLossMax:
        kernels.row_max(data<float>(o.out.at(0)), logits, n, vocab);
        return;
      case OpFunction::kLossPartials:
        kernels.cross_entropy_partials(data<float>(o.out.at(1)), data<float>(o.out.at(0)), logits,
                                       data<float>(o.in.at(1)), targets, vocab_start, n, vocab);
        return;
      default:  // max, target logit, sum
        kernels.row_max(data<float>(o.out.at(0)), logits, n, vocab);
        kernels.cross_entropy_partials(data<float>(o.out.at(2)), data<float>(o.out.at(1)), logits,
                                       data<float>(o.out[0]), targets, vocab_start, n, vocab);
        return;
    }
  }
  const float* max = data<float>(o.in.at(1));
  const float* target = data<float>(o.in.at(2));
  const float* sum = data<float>(o.in.at(3));
  // The step's loss is the mean over every token of the global batch.
  const auto scale =
      static_cast<float>(1.0 / static_cast<double>(plan.global_batch * plan.seq_len));
  kernels.cross_entropy_backward(data<T>(o.out.at(0)), logits, max, sum, targets, vocab_start,
                                 scale, n, vocab);
  if (coord.tp != 0) return;  // every TP rank holds the same losses: count them once
  STRATA_ASSERT(losses_written + n <= step_losses.size(), "the step's losses fit their buffer");
  kernels.cross_entropy_losses(step_losses.data<float>() + losses_written, sum, max, target, n);
  losses_written += n;
}

// AdamW over every parameter the store holds, clipped by the global norm: the one a collective
// computed this step, else this rank's own; it stays on the device.
void RankRuntime::Impl::run_optimizer() {
  if (!grad_norm_reduced) {
    backend.fill_zero(norm_squared.data(), 1);
    params.add_gradient_sum_of_squares(norm_squared.data());
  }
  params.step(optimizer.adamw, step + 1, norm_squared.data(), optimizer.clip_grad_norm);
}

}  // namespace strata
