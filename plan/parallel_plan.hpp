#pragma once
// ParallelPlan: how one training step of a model is split over GPUs. The field names are the
// field's words (Megatron-LM, DeepSpeed): dp x tp x pp ranks, vpp model chunks per pipeline stage
// (interleaved 1F1B), ZeRO stage, micro-batch and global batch in sequences, recompute, sequence
// parallel, pipeline schedule, training dtype.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/model_spec.hpp"
#include "models/ops.hpp"

namespace strata {

enum class ScheduleKind : uint8_t { kGpipe, k1F1B, kInterleaved };
enum class RecomputeKind : uint8_t { kNone, kSelective, kFull };
// How the attention core runs (--attention):
//  - flash: one fused kernel whose scores stay on chip (FlashAttention; Transformer Engine's
//    flash and cuDNN fused backends, PyTorch's scaled_dot_product_attention); a layer stores the
//    output and the fp32 log-sum-exp, and the backward recomputes the scores in the kernel;
//  - unfused: Megatron-LM 2022's path (Korthikanti et al. 2022): batched products around a fused
//    scale-mask-softmax, whose (b, heads, s, s) scores cross HBM and are stored for the backward.
enum class AttentionKind : uint8_t { kFlash, kUnfused };

struct ParallelPlan {
  int64_t dp = 1;
  int64_t tp = 1;
  int64_t pp = 1;
  int64_t vpp = 1;           // model chunks per pipeline stage; > 1 only with interleaved
  int64_t zero_stage = 0;    // 0: plain DP; 1: optimizer states; 2: + gradients; 3: + parameters
  int64_t micro_batch = 1;   // sequences per micro-batch per DP replica
  int64_t global_batch = 1;  // sequences per step over all DP replicas
  int64_t seq_len = 2048;
  RecomputeKind recompute = RecomputeKind::kNone;
  bool sequence_parallel = false;
  ScheduleKind schedule = ScheduleKind::k1F1B;
  DType dtype = DType::kBf16;
  AttentionKind attention = AttentionKind::kFlash;
  // Uneven pipeline split (Megatron's --decoder-first/last-pipeline-num-layers; Llama 3 405B runs
  // 126 layers on 16 stages with one layer fewer on the first and the last). 0: even split.
  int64_t first_stage_layers = 0;
  int64_t last_stage_layers = 0;

  int64_t gpus() const { return dp * tp * pp; }
  // Micro-batches each pipeline runs per step (gradient-accumulation steps).
  int64_t micro_batches() const { return global_batch / (dp * micro_batch); }
  int64_t tokens_per_step() const { return global_batch * seq_len; }
};

// Checks the plan against the model and the GPUs asked for (nullopt: whatever the plan implies).
// Throws InputError naming `where` (a scenario file, or "command line") and the field with the
// flag that sets it, e.g. "tp (--tp)", and the fix.
void validate_plan(const ParallelPlan& plan, const ModelSpec& model,
                   std::optional<int64_t> gpus_asked, const std::string& where);

// Transformer layers held by each pipeline stage, in stage order; sums to model.layers.
std::vector<int64_t> layers_per_stage(const ParallelPlan& plan, const ModelSpec& model);

// The global transformer layers of model chunk `chunk` (0..vpp-1) on pipeline stage `stage`:
// `count` layers from `first`. Without interleaving a stage's layers follow the earlier stages';
// interleaved, virtual stage chunk * pp + stage holds the layers from (chunk * pp + stage) * count.
struct ChunkLayers {
  int64_t first = 0;
  int64_t count = 0;
};
ChunkLayers chunk_layers(const ParallelPlan& plan, const ModelSpec& model, int64_t stage,
                         int64_t chunk);

// Selective recompute rebuilds the attention scores (Korthikanti et al. 2022), which only the
// unfused attention stores; under flash attention there is nothing left to recompute, and
// Megatron-LM then recomputes nothing extra.
bool recomputes_attention_scores(const ParallelPlan& plan);

const char* to_string(ScheduleKind kind);
const char* to_string(RecomputeKind kind);
const char* to_string(AttentionKind kind);

}  // namespace strata
