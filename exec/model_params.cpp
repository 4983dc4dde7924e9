#include "exec/model_params.hpp"

#include <cmath>
#include <numbers>

#include <fmt/format.h>

#include "common/error.hpp"
#include "exec/data_loader.hpp"
#include "plan/param_tensors.hpp"

namespace strata {

int64_t ParamSpec::shard_rows(int64_t tp) const {
  return shard == TpShard::kRows || shard == TpShard::kPartRows ? rows / tp : rows;
}

int64_t ParamSpec::shard_cols(int64_t tp) const {
  return shard == TpShard::kColumns ? cols / tp : cols;
}

ParamSpec::FullPosition ParamSpec::full_position(int64_t row, int64_t tp_rank, int64_t tp) const {
  switch (shard) {
    case TpShard::kReplicated:
      return {row, 0};
    case TpShard::kRows:
      return {tp_rank * shard_rows(tp) + row, 0};
    case TpShard::kColumns:
      return {row, tp_rank * shard_cols(tp)};
    case TpShard::kPartRows: {
      // The shard is this rank's rows of each part, one part after another.
      int64_t full_start = 0;
      for (const int64_t part : parts) {
        const int64_t part_rows = part / tp;
        if (row < part_rows) return {full_start + tp_rank * part_rows + row, 0};
        row -= part_rows;
        full_start += part;
      }
      STRATA_ASSERT(false, fmt::format("{}: row past its parts", name));
    }
  }
  return {row, 0};
}

void check_executable_model(const ModelSpec& model, const ParallelPlan& plan,
                            const std::string& where) {
  if (model.moe()) {
    throw InputError(where, "model (--model)",
                     fmt::format("{} is a mixture-of-experts model, and the CPU executor has no "
                                 "router, token permutation or expert kernels yet",
                                 model.name),
                     "train a dense model; `strata plan` and `strata simulate` take MoE models");
  }
  if (model.latent_attention()) {
    throw InputError(where, "model (--model)",
                     fmt::format("{} has multi-head latent attention, and the CPU executor has no "
                                 "kernels for its latents and key-value assembly yet",
                                 model.name),
                     "train a model with multi-head or grouped-query attention; `strata plan` "
                     "and `strata simulate` take latent attention");
  }
  if (model.qk_norm == QkNorm::kWhole && plan.tp > 1) {
    throw InputError(where, "qk_norm",
                     "a QK-norm over the whole width needs each token's sum of squares over the "
                     "TP group, which the graph does not reduce",
                     "use tp 1 for a whole-width QK-norm (OLMo 2), or a per-head QK-norm");
  }
  if (model.kv_heads % plan.tp != 0) {
    throw InputError(
        where, "tp (--tp)",
        fmt::format("{} does not divide the {} key/value heads", plan.tp, model.kv_heads),
        "choose a tp that divides kv_heads");
  }
  if (plan.recompute_layers > 0) {
    throw InputError(where, "recompute_layers (--recompute-num-layers)",
                     "the CPU executor recomputes every layer or none",
                     "drop --recompute-num-layers (or --recompute-method block)");
  }
  if (plan.cp > 1) {
    throw InputError(where, "cp (--cp)",
                     "the CPU executor runs each rank's attention over its whole sequence: "
                     "context parallelism's blockwise attention over exchanged keys and values "
                     "is predicted by strata simulate, not run",
                     "use cp 1");
  }
  if (plan.overlap.tp_comm) {
    throw InputError(where, "tp_comm_overlap (--tp-comm-overlap)",
                     "the CPU executor runs each product whole: the TP overlap splits them into "
                     "chunks for concurrent GPU streams, which the CPU backend does not have",
                     "drop --tp-comm-overlap (it changes timing, not the result)");
  }
  if (plan.recompute == RecomputeKind::kSelectiveOp) {
    throw InputError(where, "recompute (--recompute)",
                     "the CPU executor recomputes every layer (full) or the attention scores "
                     "(selective), not torchtitan's op-level policy",
                     "use --recompute full, selective or none");
  }
  if (plan.dtype != DType::kFp32 && plan.dtype != DType::kBf16) {
    throw InputError(
        where, "dtype (--dtype)",
        fmt::format("the executor trains in fp32 or bf16, not {}", to_string(plan.dtype)),
        "use --dtype bf16 (with --backend cuda) or --dtype fp32");
  }
  if (plan.dtype == DType::kBf16) {
    // Megatron-LM's mixed precision: bf16 params, fp32 masters and AdamW states.
    const Precision& p = plan.precision;
    const char* field = p.fp32_params              ? "fp32_params"
                        : !p.fp32_master_weights   ? "fp32_master_weights"
                        : !p.fp32_optimizer_states ? "fp32_optimizer_states"
                                                   : nullptr;
    if (field != nullptr) {
      throw InputError(where, field,
                       "the executor trains bf16 as Megatron-LM does: bf16 params beside fp32 "
                       "master weights and fp32 AdamW states (fp32 params cast per op, and "
                       "optimizers without fp32 masters or states, are predicted by strata "
                       "simulate, not run)",
                       "drop the precision override (or the --framework preset that sets it)");
    }
  }
  if (plan.fp8 != Fp8Format::kNone) {
    throw InputError(where, "fp8 (--fp8-format)",
                     "the CPU executor trains in fp32: FP8 GEMMs are predicted by strata simulate, "
                     "not run",
                     "drop --fp8-format");
  }
  if (plan.offload.optimizer || plan.offload.params) {
    throw InputError(where,
                     plan.offload.optimizer ? "offload_optimizer (--offload-optimizer)"
                                            : "offload_param (--offload-param)",
                     "the executor keeps every model state on its device: offload is predicted "
                     "by strata simulate, not run",
                     "drop the offload flags (or the offload_* keys of the DeepSpeed config)");
  }
  if (model.position == PositionKind::kLearned && plan.seq_len > model.max_seq) {
    throw InputError("command line", "seq_len (--seq-len)",
                     fmt::format("{} is longer than the model's {} learned positions", plan.seq_len,
                                 model.max_seq),
                     fmt::format("use --seq-len {} or less", model.max_seq));
  }
  if (model.vocab % plan.tp != 0 || model.ffn_hidden % plan.tp != 0) {
    throw InputError(where, "tp (--tp)",
                     fmt::format("{} does not divide the vocabulary ({}) and the ffn width ({})",
                                 plan.tp, model.vocab, model.ffn_hidden),
                     "choose a tp that divides both (the executor does not pad the vocabulary)");
  }
  if ((plan.micro_batch * plan.seq_len) % plan.tp != 0 && plan.sequence_parallel) {
    throw InputError("command line", "sequence_parallel (--sequence-parallel)",
                     fmt::format("micro-batch x seq_len = {} tokens do not split over tp {}",
                                 plan.micro_batch * plan.seq_len, plan.tp),
                     "choose a seq_len divisible by tp");
  }
}

namespace {

ParamSpec weight(std::string name, int64_t rows, int64_t cols, TpShard shard, double std) {
  ParamSpec spec;
  spec.name = spec.init_key = std::move(name);
  spec.rows = rows;
  spec.cols = cols;
  spec.shard = shard;
  spec.init_std = std;
  spec.weight_decay = true;
  return spec;
}

ParamSpec vector(std::string name, int64_t size, TpShard shard, float value) {
  ParamSpec spec;
  spec.name = spec.init_key = std::move(name);
  spec.rows = size;
  spec.shard = shard;
  spec.init_value = value;
  return spec;
}

// A tensor of the task graph's block (`spec`, plan/param_tensors.hpp) as the executor holds and
// initializes it, named `prefix` + its name.
ParamSpec param_spec(const ModelSpec& m, const ParamTensorSpec& spec, const std::string& prefix) {
  const int64_t c = m.hidden;
  const int64_t f = m.ffn_hidden;
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(m.layers));
  const std::string name = prefix + spec.name;
  const auto parts = [&](std::vector<int64_t> rows, int64_t cols, double std) {
    int64_t total = 0;
    for (const int64_t part : rows) total += part;
    ParamSpec p = cols > 1 ? weight(name, total, cols, TpShard::kPartRows, std)
                           : vector(name, total, TpShard::kPartRows, 0.0f);
    p.parts = std::move(rows);
    return p;
  };
  const std::vector<int64_t> qkv_parts{m.q_hidden(), m.kv_hidden(), m.kv_hidden()};
  const std::vector<int64_t> up_parts =
      m.gated_mlp() ? std::vector<int64_t>{f, f} : std::vector<int64_t>{f};
  if (spec.name == "qkv_w") return parts(qkv_parts, c, 0.02);
  if (spec.name == "qkv_b") return parts(qkv_parts, 1, 0);
  if (spec.name == "up_w") return parts(up_parts, c, 0.02);
  if (spec.name == "up_b") return parts(up_parts, 1, 0);
  if (spec.name == "out_w") return weight(name, c, m.q_hidden(), TpShard::kColumns, residual_std);
  if (spec.name == "down_w") return weight(name, c, f, TpShard::kColumns, residual_std);
  if (spec.name == "wte" || spec.name == "head_w")
    return weight(name, m.vocab, c, TpShard::kRows, 0.02);
  if (spec.name == "head_b") return vector(name, m.vocab, TpShard::kRows, 0.0f);
  if (spec.name == "q_norm_w" || spec.name == "k_norm_w") {
    // Per head: one head_dim vector shared by every head; over the whole width, split with the
    // heads.
    if (m.qk_norm == QkNorm::kPerHead)
      return vector(name, m.head_dim(), TpShard::kReplicated, 1.0f);
    return vector(name, spec.name == "q_norm_w" ? m.q_hidden() : m.kv_hidden(), TpShard::kRows,
                  1.0f);
  }
  if (spec.name == "wpe") return weight(name, m.max_seq, c, TpShard::kReplicated, 0.01);
  STRATA_ASSERT(spec.cols == 1 && spec.replicated,
                fmt::format("the executor has no initializer for {}", name));
  // What is left are the norms' gains ("norm1_w", "final_norm_w", ...), which start at 1, and
  // biases, at 0.
  return vector(name, spec.rows, TpShard::kReplicated, spec.name.ends_with("_w") ? 1.0f : 0.0f);
}

ParamBlock param_block(const ModelSpec& m, const ParallelPlan& plan, BlockKind kind, int64_t layer,
                       const std::vector<ParamTensorSpec>& specs, const std::string& prefix) {
  ParamBlock block{kind, layer, {}};
  for (const ParamTensorSpec& spec : specs) {
    block.params.push_back(param_spec(m, spec, prefix));
    STRATA_ASSERT(block.params.back().shard_size(plan.tp) == spec.elements(),
                  fmt::format("{}: the executor's shard is the graph's", block.params.back().name));
  }
  return block;
}

double standard_normal(uint64_t key, uint64_t index) {
  // Box-Muller on two uniforms in (0, 1] from the counter-based generator.
  const auto uniform = [&](uint64_t salt) {
    const uint64_t bits = splitmix64(key ^ splitmix64(2 * index + salt)) >> 11;
    return (static_cast<double>(bits) + 1.0) / 9007199254740992.0;  // 2^53
  };
  return std::sqrt(-2.0 * std::log(uniform(0))) * std::cos(2.0 * std::numbers::pi * uniform(1));
}

uint64_t fnv1a(const std::string& text) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (const char ch : text) {
    hash ^= static_cast<unsigned char>(ch);
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

}  // namespace

std::vector<ParamBlock> rank_param_blocks(const ModelSpec& model, const ParallelPlan& plan,
                                          int64_t stage, int64_t tp_rank) {
  std::vector<ParamBlock> blocks;
  for (int64_t chunk = 0; chunk < plan.vpp; ++chunk) {
    const ChunkLayers layers = chunk_layers(plan, model, stage, chunk);
    for (int64_t l = layers.first; l < layers.first + layers.count; ++l) {
      blocks.push_back(param_block(model, plan, BlockKind::kLayer, l,
                                   layer_param_specs(model, plan, model.is_moe_layer(l)),
                                   fmt::format("layer{}.", l)));
    }
  }
  if (stage == 0) {
    blocks.push_back(param_block(model, plan, BlockKind::kEmbedding, -1,
                                 embedding_param_specs(model, plan), ""));
  }
  if (stage == plan.pp - 1) {
    ParamBlock block =
        param_block(model, plan, BlockKind::kHead, -1, head_param_specs(model, plan), "head.");
    if (model.tied_embeddings && plan.pp > 1) {
      // Megatron-LM keeps a copy of a tied embedding on the last stage, initialized equal and
      // kept equal by summing the two copies' gradients (the embedding group).
      ParamSpec& copy = block.params.back();
      copy.name = "head.wte";
      copy.init_key = "wte";
      copy.counts_in_norm = false;
    }
    blocks.push_back(std::move(block));
  }
  for (ParamBlock& block : blocks) {
    for (ParamSpec& spec : block.params) {
      if (spec.shard == TpShard::kReplicated && tp_rank > 0) spec.counts_in_norm = false;
    }
  }
  return blocks;
}

std::vector<float> initial_shard(const ParamSpec& spec, uint64_t seed, int64_t tp_rank,
                                 int64_t tp) {
  const uint64_t key = splitmix64(seed ^ fnv1a(spec.init_key));
  const auto full_value = [&](int64_t row, int64_t col) {
    if (spec.init_std == 0) return spec.init_value;
    const auto index = static_cast<uint64_t>(row * spec.cols + col);
    return static_cast<float>(spec.init_std * standard_normal(key, index));
  };
  const int64_t rows = spec.shard_rows(tp);
  const int64_t cols = spec.shard_cols(tp);
  std::vector<float> values(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const ParamSpec::FullPosition full = spec.full_position(r, tp_rank, tp);
    for (int64_t col = 0; col < cols; ++col)
      values[static_cast<size_t>(r * cols + col)] = full_value(full.row, full.first_col + col);
  }
  return values;
}

}  // namespace strata
