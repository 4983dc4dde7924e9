#pragma once
// The parameters of a model the executor runs as one rank holds them: the task graph's tensors of
// each block (a transformer layer, the first stage's embedding, the last stage's head;
// plan/param_tensors.hpp), their full shapes, how Megatron-LM's tensor parallelism shards them,
// and their initial values.
//
// Initialization is GPT-2's (Radford et al. 2019, as llm.c and nanoGPT do it), for Llama's
// tensors as well: weights N(0, 0.02), the two residual projections N(0, 0.02 / sqrt(2 L)),
// positions N(0, 0.01), biases 0, norm gains 1. Every value is drawn from (seed, tensor name,
// element index) by a counter-based generator over the FULL tensor, then the rank takes its shard,
// so a tensor's values never depend on the plan.

#include <cstdint>
#include <string>
#include <vector>

#include "models/model_spec.hpp"
#include "plan/parallel_plan.hpp"

namespace strata {

// How tensor parallelism splits a tensor of full shape (rows, cols) over t ranks.
enum class TpShard : uint8_t {
  kReplicated,  // every TP rank holds all of it (norms, row-parallel biases, positions)
  kRows,        // rank r holds rows [r rows/t, (r+1) rows/t): column-parallel weights, biases,
                // the vocabulary-parallel embedding
  kColumns,     // rank r holds columns [r cols/t, (r+1) cols/t): row-parallel weights
  kPartRows,    // rows in parts (Q, K and V; a gated MLP's gate and up), each split as kRows: a
                // rank keeps its heads of each (ParamSpec::parts)
};

struct ParamSpec {
  std::string name;  // "layer3.qkv_w", "wte", "head.wte" (the last stage's tied copy)
  int64_t rows = 0;  // full shape; vectors have cols == 1
  int64_t cols = 1;
  TpShard shard = TpShard::kReplicated;
  double init_std = 0;  // > 0: N(0, init_std); 0: every element init_value
  float init_value = 0;
  bool weight_decay = false;  // AdamW decays 2-D weights only (GPT-2, nanoGPT)
  // Counted once in the global gradient norm: false for a TP-replicated tensor on tp rank > 0
  // and for the last stage's copy of a tied embedding (Megatron-LM counts each parameter once).
  bool counts_in_norm = true;
  // The RNG stream of the initial values (the first stage's embedding and the last stage's tied
  // copy share one, so both start equal).
  std::string init_key;
  std::vector<int64_t> parts;  // kPartRows: the full rows of each part, in order

  int64_t shard_rows(int64_t tp) const;
  int64_t shard_cols(int64_t tp) const;
  int64_t shard_size(int64_t tp) const { return shard_rows(tp) * shard_cols(tp); }

  // Where row `row` of TP rank `tp_rank`'s shard starts in the full tensor: its full row and
  // the full column of the shard's first column.
  struct FullPosition {
    int64_t row = 0;
    int64_t first_col = 0;
  };
  FullPosition full_position(int64_t row, int64_t tp_rank, int64_t tp) const;
};

enum class BlockKind : uint8_t { kLayer, kEmbedding, kHead };

// The tensors one gradient collective moves at once: Megatron-LM's and DeepSpeed's buckets.
struct ParamBlock {
  BlockKind kind = BlockKind::kLayer;
  int64_t layer = -1;  // kLayer: the global layer
  std::vector<ParamSpec> params;
};

// Throws InputError (naming `where` and the field) for models and plans the CPU executor cannot
// run. It runs every decoder the plan compiler lowers (any norm, MLP, positions, block, QK-norm,
// window, biases, dropout) whose kv heads, ffn and vocabulary divide by tp (and a
// whole-width QK-norm at tp 1), in fp32 or in bf16 with fp32 masters and AdamW states, without
// FP8, offload or the TP overlap. (Whether the backend has bf16 kernels is the caller's check.)
void check_executable_model(const ModelSpec& model, const ParallelPlan& plan,
                            const std::string& where);

// The blocks a rank of pipeline stage `stage` and TP rank `tp_rank` holds, in a fixed order:
// its layers (ascending), then the embedding (first stage), then the head (last stage). Each
// block's tensors are the task graph's, in its order (plan/param_tensors.hpp).
std::vector<ParamBlock> rank_param_blocks(const ModelSpec& model, const ParallelPlan& plan,
                                          int64_t stage, int64_t tp_rank);

// The initial values of this TP rank's shard of `spec` (shard_size(tp) elements, row-major).
std::vector<float> initial_shard(const ParamSpec& spec, uint64_t seed, int64_t tp_rank, int64_t tp);

}  // namespace strata
