#include "exec/model_params.hpp"

#include <cmath>
#include <numbers>

#include <fmt/format.h>

#include "common/error.hpp"
#include "exec/data_loader.hpp"

namespace strata {

int64_t ParamSpec::shard_rows(int64_t tp) const {
  return shard == TpShard::kRows || shard == TpShard::kQkvRows ? rows / tp : rows;
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
    case TpShard::kQkvRows: {
      const int64_t part_rows = shard_rows(tp) / 3;  // this rank's rows of Q (or K, or V)
      return {(row / part_rows) * (rows / 3) + tp_rank * part_rows + row % part_rows, 0};
    }
  }
  return {row, 0};
}

void check_executable_model(const ModelSpec& model, const ParallelPlan& plan,
                            const std::string& where) {
  const auto refuse = [&](const char* field, const std::string& problem) {
    throw InputError(where, field, problem,
                     "run a GPT-2-style model (tiny-gpt, gpt2-124m, or a JSON model with "
                     "layernorm, gelu, learned positions, biases and no dropout)");
  };
  if (model.norm != NormKind::kLayerNorm) refuse("norm", "the CPU executor runs LayerNorm only");
  if (model.mlp != MlpKind::kGelu) refuse("mlp", "the CPU executor runs the GELU MLP only");
  if (model.position != PositionKind::kLearned)
    refuse("position", "the CPU executor runs learned positions only");
  if (model.kv_heads != model.heads)
    refuse("kv_heads", "the CPU executor runs multi-head attention only (kv_heads == heads)");
  if (model.dropout) refuse("dropout", "the CPU executor has no dropout kernel");
  if (!model.qkv_bias || !model.out_bias || !model.linear_bias || model.head_bias)
    refuse("linear_bias", "the CPU executor runs GPT-2's biased projections only");
  if (model.block != LayerBlock::kPreNorm)
    refuse("block", "the CPU executor runs GPT-2's pre-norm block only");
  if (model.qk_norm != QkNorm::kNone) refuse("qk_norm", "the CPU executor has no QK-norm");
  if (model.head_size != 0 && model.head_size * model.heads != model.hidden)
    refuse("head_dim", "the CPU executor runs heads of hidden / heads only");
  if (model.sliding_window != 0)
    refuse("sliding_window", "the CPU executor runs full causal attention only");
  if (plan.recompute_layers > 0) {
    throw InputError(where, "recompute_layers (--recompute-num-layers)",
                     "the CPU executor recomputes every layer or none",
                     "drop --recompute-num-layers (or --recompute-method block)");
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
  if (plan.offload.optimizer || plan.offload.params) {
    throw InputError(where,
                     plan.offload.optimizer ? "offload_optimizer (--offload-optimizer)"
                                            : "offload_param (--offload-param)",
                     "the executor keeps every model state on its device: offload is predicted "
                     "by strata simulate, not run",
                     "drop the offload flags (or the offload_* keys of the DeepSpeed config)");
  }
  if (plan.seq_len > model.max_seq) {
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
  ParamSpec spec{name, rows, cols, shard, std, 0.0f, true, true, name};
  return spec;
}

ParamSpec vector(std::string name, int64_t size, TpShard shard, float value) {
  ParamSpec spec{name, size, 1, shard, 0.0, value, false, true, name};
  return spec;
}

ParamBlock layer_block(const ModelSpec& m, int64_t layer) {
  const int64_t c = m.hidden;
  const int64_t f = m.ffn_hidden;
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(m.layers));
  const std::string p = fmt::format("layer{}.", layer);
  ParamBlock block{BlockKind::kLayer, layer, {}};
  block.params = {
      vector(p + "ln1_w", c, TpShard::kReplicated, 1.0f),
      vector(p + "ln1_b", c, TpShard::kReplicated, 0.0f),
      weight(p + "qkv_w", 3 * c, c, TpShard::kQkvRows, 0.02),
      vector(p + "qkv_b", 3 * c, TpShard::kQkvRows, 0.0f),
      weight(p + "attn_proj_w", c, c, TpShard::kColumns, residual_std),
      vector(p + "attn_proj_b", c, TpShard::kReplicated, 0.0f),
      vector(p + "ln2_w", c, TpShard::kReplicated, 1.0f),
      vector(p + "ln2_b", c, TpShard::kReplicated, 0.0f),
      weight(p + "fc_w", f, c, TpShard::kRows, 0.02),
      vector(p + "fc_b", f, TpShard::kRows, 0.0f),
      weight(p + "fc_proj_w", c, f, TpShard::kColumns, residual_std),
      vector(p + "fc_proj_b", c, TpShard::kReplicated, 0.0f),
  };
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
  const int64_t c = model.hidden;
  std::vector<ParamBlock> blocks;
  for (int64_t chunk = 0; chunk < plan.vpp; ++chunk) {
    const ChunkLayers layers = chunk_layers(plan, model, stage, chunk);
    for (int64_t l = layers.first; l < layers.first + layers.count; ++l)
      blocks.push_back(layer_block(model, l));
  }
  if (stage == 0) {
    ParamBlock block{BlockKind::kEmbedding, -1, {}};
    block.params = {weight("wte", model.vocab, c, TpShard::kRows, 0.02),
                    weight("wpe", model.max_seq, c, TpShard::kReplicated, 0.01)};
    blocks.push_back(std::move(block));
  }
  if (stage == plan.pp - 1) {
    ParamBlock block{BlockKind::kHead, -1, {}};
    block.params = {vector("lnf_w", c, TpShard::kReplicated, 1.0f),
                    vector("lnf_b", c, TpShard::kReplicated, 0.0f)};
    if (!model.tied_embeddings) {
      block.params.push_back(weight("lm_head", model.vocab, c, TpShard::kRows, 0.02));
    } else if (plan.pp > 1) {
      // Megatron-LM keeps a copy of a tied embedding on the last stage, initialized equal and
      // kept equal by summing the two copies' gradients (the embedding group).
      ParamSpec copy = weight("head.wte", model.vocab, c, TpShard::kRows, 0.02);
      copy.init_key = "wte";
      copy.counts_in_norm = false;
      block.params.push_back(std::move(copy));
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
