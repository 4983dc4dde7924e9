// Attention and the memory-bound ops of strata calibrate --backend cuda: both attention paths over
// the zoo's heads per rank and head sizes, and per byte the norms, activations, residual adds,
// the embedding, the loss and AdamW, each with the op shape the plan compiler gives its task.

#include <algorithm>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "exec/cuda_calibration_sweeps.hpp"
#include "kernels/cuda/check.hpp"
#include "kernels/cuda/kernels.hpp"
#include "models/model_reader.hpp"

namespace strata::cuda_calibration {

namespace {

using cuda::bf16;
constexpr size_t kBf16Bytes = sizeof(bf16);
constexpr auto kFwd = Direction::kForward;
constexpr auto kBwd = Direction::kBackward;
constexpr auto kBf16 = DType::kBf16;

size_t elements(int64_t a, int64_t b) { return static_cast<size_t>(a) * static_cast<size_t>(b); }

// One attention case: a sequence of `seq` tokens, `heads` heads of `head_dim` on a rank.
struct AttentionShape {
  int64_t heads = 0, head_dim = 0, seq = 0;
  std::vector<std::string> uses;
};

// Distinct (heads per rank, head size, sequence) of the zoo models per TP size dividing their
// heads, at each sequence length up to the model's longest, in increasing FLOPs. The kernels are
// multi-head (a key and value head per query head), so grouped-query models are timed as such.
std::vector<AttentionShape> zoo_attention_shapes(const CudaCalibrationOptions& options) {
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::vector<std::string>> uses;
  const std::vector<std::string> names =
      options.models.empty() ? zoo_model_names() : options.models;
  for (const std::string& name : names) {
    const ModelSpec model = load_model(name);
    if (model.latent_attention()) continue;
    for (const int64_t tp : options.tp_sizes) {
      if (tp < 1 || model.heads % tp != 0 || model.kv_heads % tp != 0) continue;
      for (const int64_t seq : options.seq_lens) {
        if (model.max_seq > 0 && seq > model.max_seq) continue;
        uses[{model.heads / tp, model.head_dim(), seq}].push_back(
            fmt::format("{} tp{} seq {}", name, tp, seq));
      }
    }
  }
  std::vector<AttentionShape> shapes;
  for (auto& [key, names_of_use] : uses) {
    shapes.push_back(
        {std::get<0>(key), std::get<1>(key), std::get<2>(key), std::move(names_of_use)});
  }
  std::stable_sort(shapes.begin(), shapes.end(), [](const auto& a, const auto& b) {
    return static_cast<double>(a.seq) * a.seq * a.heads * a.head_dim <
           static_cast<double>(b.seq) * b.seq * b.heads * b.head_dim;
  });
  return shapes;
}

void time_attention(Sweep& sweep, const AttentionShape& s) {
  // Named variables, not a structured binding, for the lambdas' sake (exec/cpu_calibration.cpp).
  const int64_t b = 1;
  const int64_t t = s.seq;
  const int64_t nh = s.heads;
  const int64_t hs = s.head_dim;
  const int64_t c = nh * hs;
  const std::string dims = fmt::format("b{} seq {} heads {} hs {}", b, t, nh, hs);
  cuda::Context& ctx = sweep.ctx();
  const size_t tensors = kBf16Bytes * elements(b * t, c) * (3 + 1 + 3 + 1);  // qkv out dqkv dout
  // Path 1: the probabilities (B,NH,T,T) kept, and as much scratch in the backward.
  const size_t scores = kBf16Bytes * elements(b * nh, t * t);
  if (sweep.fits(tensors + 2 * scores, "attention " + dims)) {
    const DeviceBuffer qkv(kBf16Bytes * elements(b * t, 3 * c));
    const DeviceBuffer out(kBf16Bytes * elements(b * t, c));
    const DeviceBuffer att(scores);
    const DeviceBuffer dqkv(qkv.bytes());
    const DeviceBuffer dout(out.bytes());
    sweep.time({OpKind::kAttention, Roof::kFlops, attention_op(b, t, nh, hs, nh, 0, kFwd, kBf16), 0,
                "fwd " + dims, "attention_forward<bf16>", s.uses},
               [&] {
                 cuda::attention_forward<bf16>(ctx, out.as<bf16>(), att.as<bf16>(), qkv.as<bf16>(),
                                               b, t, nh, hs);
               });
    sweep.time({OpKind::kAttention, Roof::kFlops, attention_op(b, t, nh, hs, nh, 0, kBwd, kBf16), 0,
                "bwd " + dims, "attention_backward<bf16>", s.uses},
               [&] {
                 cuda::attention_backward<bf16>(ctx, dqkv.as<bf16>(), dout.as<bf16>(),
                                                qkv.as<bf16>(), att.as<bf16>(), b, t, nh, hs);
               });
  }
  // Path 2: tiled, the log-sum-exp (B,NH,T) kept in fp32.
  if (sweep.fits(tensors + sizeof(float) * elements(b * nh, t), "flash_attention " + dims)) {
    const DeviceBuffer qkv(kBf16Bytes * elements(b * t, 3 * c));
    const DeviceBuffer out(kBf16Bytes * elements(b * t, c));
    const DeviceBuffer lse(sizeof(float) * elements(b * nh, t));
    const DeviceBuffer dqkv(qkv.bytes());
    const DeviceBuffer dout(out.bytes());
    const double forward_s =
        sweep.time({OpKind::kFlashAttention, Roof::kFlops,
                    flash_attention_op(b, t, nh, hs, nh, 0, kFwd, kBf16), 0, "fwd " + dims,
                    "flash_attention_forward<bf16>", s.uses},
                   [&] {
                     cuda::flash_attention_forward<bf16>(ctx, out.as<bf16>(), lse.as<float>(),
                                                         qkv.as<bf16>(), b, t, nh, hs);
                   });
    if (forward_s <= 0) return;  // a head size without an instance: the backward has none either
    sweep.time({OpKind::kFlashAttention, Roof::kFlops,
                flash_attention_op(b, t, nh, hs, nh, 0, kBwd, kBf16), 0, "bwd " + dims,
                "flash_attention_backward<bf16>", s.uses},
               [&] {
                 cuda::flash_attention_backward<bf16>(ctx, dqkv.as<bf16>(), dout.as<bf16>(),
                                                      qkv.as<bf16>(), out.as<bf16>(),
                                                      lse.as<float>(), b, t, nh, hs);
               });
  }
}

// Rows x width of the norms, activations and residual adds.
std::vector<std::pair<int64_t, int64_t>> row_shapes(bool quick) {
  if (quick) return {{8, 64}};
  std::vector<std::pair<int64_t, int64_t>> shapes;
  for (const int64_t rows : {1024, 8192}) {
    for (const int64_t width : {1024, 4096, 8192}) shapes.emplace_back(rows, width);
  }
  return shapes;
}

void time_rowwise(Sweep& sweep, int64_t rows, int64_t width) {
  cuda::Context& ctx = sweep.ctx();
  const std::string dims = fmt::format("{}x{}", rows, width);
  const size_t n = elements(rows, width);
  // The widest case: SwiGLU's input (rows, 2 width) and its gradient, and three more tensors.
  if (!sweep.fits(kBf16Bytes * n * 7 + 3 * sizeof(float) * (rows + width), "rowwise " + dims)) {
    return;
  }
  const DeviceBuffer inp(kBf16Bytes * n * 2);  // wide enough for SwiGLU's [gate | up]
  const DeviceBuffer dinp(kBf16Bytes * n * 2);
  const DeviceBuffer out(kBf16Bytes * n);
  const DeviceBuffer dout(kBf16Bytes * n);
  const DeviceBuffer branch(kBf16Bytes * n);
  const DeviceBuffer weight(kBf16Bytes * static_cast<size_t>(width));
  const DeviceBuffer dweight(sizeof(float) * static_cast<size_t>(width), 0);
  const DeviceBuffer dbias(sizeof(float) * static_cast<size_t>(width), 0);
  const DeviceBuffer mean(sizeof(float) * static_cast<size_t>(rows));
  const DeviceBuffer rstd(sizeof(float) * static_cast<size_t>(rows));
  const auto norm = [&](Direction direction, OpFunction function) {
    OpShape op = norm_op(rows, width, direction, kBf16);
    op.function = function;
    return op;
  };
  sweep.time({OpKind::kNorm,
              Roof::kMemory,
              norm(kFwd, OpFunction::kLayerNorm),
              0,
              "layernorm fwd " + dims,
              "layernorm_forward<bf16>",
              {}},
             [&] {
               cuda::layernorm_forward<bf16>(ctx, out.as<bf16>(), mean.as<float>(),
                                             rstd.as<float>(), inp.as<bf16>(), weight.as<bf16>(),
                                             weight.as<bf16>(), rows, width);
             });
  sweep.time({OpKind::kNorm,
              Roof::kMemory,
              norm(kBwd, OpFunction::kLayerNorm),
              0,
              "layernorm bwd " + dims,
              "layernorm_backward<bf16>",
              {}},
             [&] {
               cuda::layernorm_backward<bf16>(ctx, dinp.as<bf16>(), dweight.as<float>(),
                                              dbias.as<float>(), dout.as<bf16>(), inp.as<bf16>(),
                                              weight.as<bf16>(), mean.as<float>(), rstd.as<float>(),
                                              nullptr, rows, width);
             });
  sweep.time({OpKind::kNorm,
              Roof::kMemory,
              norm(kFwd, OpFunction::kRmsNorm),
              0,
              "rmsnorm fwd " + dims,
              "rmsnorm_forward<bf16>",
              {}},
             [&] {
               cuda::rmsnorm_forward<bf16>(ctx, out.as<bf16>(), rstd.as<float>(), inp.as<bf16>(),
                                           weight.as<bf16>(), rows, width);
             });
  sweep.time({OpKind::kNorm,
              Roof::kMemory,
              norm(kBwd, OpFunction::kRmsNorm),
              0,
              "rmsnorm bwd " + dims,
              "rmsnorm_backward<bf16>",
              {}},
             [&] {
               cuda::rmsnorm_backward<bf16>(ctx, dinp.as<bf16>(), dweight.as<float>(),
                                            dout.as<bf16>(), inp.as<bf16>(), weight.as<bf16>(),
                                            rstd.as<float>(), nullptr, rows, width);
             });
  const auto elementwise = [&](int64_t flops_per_element, int64_t tensors, Direction direction,
                               OpFunction function) {
    OpShape op =
        elementwise_op(static_cast<int64_t>(n), flops_per_element, tensors, direction, kBf16);
    op.function = function;
    return op;
  };
  // The plan's counts (plan/op_shapes.cpp): a residual add with its bias 2 FLOPs and 3 tensors
  // per element (no dropout); GELU 8 FLOPs and 2 tensors; SwiGLU 6 FLOPs and 3 tensors per
  // output element.
  sweep.time({OpKind::kElementwise,
              Roof::kMemory,
              elementwise(2, 3, kFwd, OpFunction::kResidualAdd),
              0,
              "residual " + dims,
              "residual_forward<bf16>",
              {}},
             [&] {
               cuda::residual_forward<bf16>(ctx, out.as<bf16>(), inp.as<bf16>(), branch.as<bf16>(),
                                            weight.as<bf16>(), rows, width);
             });
  sweep.time({OpKind::kElementwise,
              Roof::kMemory,
              elementwise(8, 2, kFwd, OpFunction::kGelu),
              0,
              "gelu fwd " + dims,
              "gelu_forward<bf16>",
              {}},
             [&] {
               cuda::gelu_forward<bf16>(ctx, out.as<bf16>(), inp.as<bf16>(),
                                        static_cast<int64_t>(n));
             });
  sweep.time({OpKind::kElementwise,
              Roof::kMemory,
              elementwise(8, 2, kBwd, OpFunction::kGelu),
              0,
              "gelu bwd " + dims,
              "gelu_backward<bf16>",
              {}},
             [&] {
               cuda::gelu_backward<bf16>(ctx, dinp.as<bf16>(), inp.as<bf16>(), dout.as<bf16>(),
                                         static_cast<int64_t>(n));
             });
  sweep.time({OpKind::kElementwise,
              Roof::kMemory,
              elementwise(6, 3, kFwd, OpFunction::kSwiglu),
              0,
              "swiglu fwd " + dims,
              "swiglu_forward<bf16>",
              {}},
             [&] { cuda::swiglu_forward<bf16>(ctx, out.as<bf16>(), inp.as<bf16>(), rows, width); });
  sweep.time({OpKind::kElementwise,
              Roof::kMemory,
              elementwise(6, 3, kBwd, OpFunction::kSwiglu),
              0,
              "swiglu bwd " + dims,
              "swiglu_backward<bf16>",
              {}},
             [&] {
               cuda::swiglu_backward<bf16>(ctx, dinp.as<bf16>(), inp.as<bf16>(), dout.as<bf16>(),
                                           rows, width);
             });
}

// A device buffer of token ids 0 .. vocab-1 in a fixed scattered order, (i * 37) % vocab.
DeviceBuffer token_ids(int64_t tokens, int64_t vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(tokens));
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<int32_t>((static_cast<int64_t>(i) * 37) % vocab);
  }
  DeviceBuffer buffer(sizeof(int32_t) * ids.size());
  STRATA_CUDA_CHECK(
      cudaMemcpy(buffer.as<int32_t>(), ids.data(), buffer.bytes(), cudaMemcpyHostToDevice));
  return buffer;
}

void time_embedding(Sweep& sweep, int64_t tokens, int64_t width, int64_t vocab) {
  cuda::Context& ctx = sweep.ctx();
  const std::string dims = fmt::format("{} tokens width {} vocab {}", tokens, width, vocab);
  const size_t bytes =
      kBf16Bytes * elements(tokens + vocab, width) * 2 + sizeof(float) * elements(vocab, width);
  if (!sweep.fits(bytes, "embedding " + dims)) return;
  const DeviceBuffer ids = token_ids(tokens, vocab);
  const DeviceBuffer wte(kBf16Bytes * elements(vocab, width));
  const DeviceBuffer dwte(sizeof(float) * elements(vocab, width), 0);
  const DeviceBuffer out(kBf16Bytes * elements(tokens, width));
  sweep.time({OpKind::kEmbedding,
              Roof::kMemory,
              embedding_op(tokens, width, vocab, kFwd, kBf16),
              0,
              "fwd " + dims,
              "embedding_forward<bf16>",
              {}},
             [&] {
               cuda::embedding_forward<bf16>(ctx, out.as<bf16>(), ids.as<int32_t>(), wte.as<bf16>(),
                                             nullptr, 0, vocab, 1, tokens, width);
             });
  sweep.time({OpKind::kEmbedding,
              Roof::kMemory,
              embedding_op(tokens, width, vocab, kBwd, kBf16),
              0,
              "bwd " + dims,
              "embedding_backward<bf16>",
              {}},
             [&] {
               cuda::embedding_backward<bf16>(ctx, dwte.as<float>(), nullptr, out.as<bf16>(),
                                              ids.as<int32_t>(), 0, vocab, 1, tokens, width);
             });
}

// The loss on fp32 logits, as the plan's loss op counts it (4 bytes per logit): the forward as
// the vocabulary-parallel steps on one rank (row max, partials, losses), the backward one kernel.
void time_loss(Sweep& sweep, int64_t tokens, int64_t vocab) {
  cuda::Context& ctx = sweep.ctx();
  const std::string dims = fmt::format("{} tokens vocab {}", tokens, vocab);
  if (!sweep.fits(2 * sizeof(float) * elements(tokens, vocab), "loss " + dims)) return;
  const DeviceBuffer logits(sizeof(float) * elements(tokens, vocab));
  const DeviceBuffer dlogits(logits.bytes());
  const DeviceBuffer targets = token_ids(tokens, vocab);
  const auto row = [&] { return DeviceBuffer(sizeof(float) * static_cast<size_t>(tokens)); };
  const DeviceBuffer maxes = row();
  const DeviceBuffer sums = row();
  const DeviceBuffer target_logits = row();
  const DeviceBuffer losses = row();
  sweep.time({OpKind::kLoss,
              Roof::kMemory,
              loss_op(tokens, vocab, kFwd),
              0,
              "fwd " + dims,
              "row_max, cross_entropy_partials, cross_entropy_losses <float>",
              {}},
             [&] {
               cuda::row_max<float>(ctx, maxes.as<float>(), logits.as<float>(), tokens, vocab);
               cuda::cross_entropy_partials<float>(ctx, sums.as<float>(), target_logits.as<float>(),
                                                   logits.as<float>(), maxes.as<float>(),
                                                   targets.as<int32_t>(), 0, tokens, vocab);
               cuda::cross_entropy_losses(ctx, losses.as<float>(), sums.as<float>(),
                                          maxes.as<float>(), target_logits.as<float>(), tokens);
             });
  sweep.time({OpKind::kLoss,
              Roof::kMemory,
              loss_op(tokens, vocab, kBwd),
              0,
              "bwd " + dims,
              "cross_entropy_backward<float>",
              {}},
             [&] {
               cuda::cross_entropy_backward<float>(
                   ctx, dlogits.as<float>(), logits.as<float>(), maxes.as<float>(),
                   sums.as<float>(), targets.as<int32_t>(), 0, 1.0f / static_cast<float>(tokens),
                   tokens, vocab);
             });
}

// AdamW on fp32 master weights, gradients, m and v, writing the bf16 parameters: the plan's
// optimizer op in bf16 (2 x 2 + 24 bytes per parameter).
void time_optimizer(Sweep& sweep, int64_t parameters) {
  cuda::Context& ctx = sweep.ctx();
  const std::string what = fmt::format("adamw {} parameters", parameters);
  const auto count = static_cast<size_t>(parameters);
  if (!sweep.fits((kBf16Bytes + 4 * sizeof(float)) * count, what)) return;
  const DeviceBuffer param(kBf16Bytes * count);
  const DeviceBuffer master(sizeof(float) * count);
  const DeviceBuffer grad(sizeof(float) * count);
  const DeviceBuffer m(sizeof(float) * count, 0);
  const DeviceBuffer v(sizeof(float) * count, 0);
  const DeviceBuffer norm_squared(sizeof(double), 0);  // a zero norm: no clipping
  int64_t step = 0;
  sweep.time({OpKind::kOptimizer,
              Roof::kMemory,
              optimizer_op(parameters, kBf16),
              0,
              what,
              "adamw_update<bf16>",
              {}},
             [&] {
               cuda::adamw_update<bf16>(ctx, param.as<bf16>(), master.as<float>(), grad.as<float>(),
                                        m.as<float>(), v.as<float>(), parameters, {}, ++step,
                                        norm_squared.as<double>(), 1.0);
             });
}

}  // namespace

void sweep_attention(Sweep& sweep, const CudaCalibrationOptions& options) {
  const std::vector<AttentionShape> shapes = zoo_attention_shapes(options);
  for (const size_t i : spread_indices(shapes.size(), options.max_cases)) {
    time_attention(sweep, shapes[i]);
  }
}

void sweep_memory_bound(Sweep& sweep, const CudaCalibrationOptions& options) {
  const bool quick = sweep.quick();
  const auto rows = row_shapes(quick);
  for (const size_t i : spread_indices(rows.size(), options.max_cases)) {
    time_rowwise(sweep, rows[i].first, rows[i].second);
  }
  const std::vector<int64_t> token_counts =
      quick ? std::vector<int64_t>{16} : std::vector<int64_t>{2048, 8192};
  for (const int64_t tokens : token_counts) {
    time_embedding(sweep, tokens, quick ? 64 : 4096, quick ? 256 : 50304);
    for (const int64_t vocab :
         quick ? std::vector<int64_t>{256} : std::vector<int64_t>{32000, 128256}) {
      time_loss(sweep, tokens, vocab);
    }
  }
  const std::vector<int64_t> parameters =
      quick ? std::vector<int64_t>{1024}
            : std::vector<int64_t>{int64_t{1} << 20, int64_t{1} << 24, int64_t{1} << 27};
  for (const int64_t count : parameters) time_optimizer(sweep, count);
}

}  // namespace strata::cuda_calibration
