#include "plan/parallel_plan.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "common/error.hpp"
#include "plan/framework.hpp"

namespace strata {

namespace {

// Divisors of n, for fix suggestions ("use one of 1, 2, 4, 8").
std::string divisors_of(int64_t n) {
  std::vector<int64_t> found;
  for (int64_t d = 1; d <= n; ++d) {
    if (n % d == 0) found.push_back(d);
  }
  return fmt::format("{}", fmt::join(found, ", "));
}

// Expert tensor parallelism below tp: the experts' grid lays out etp, then ep (Megatron-Core's
// expert RankGenerator), so ep takes the tp / etp TP ranks that hold different experts before any
// data-parallel ones. The plan compiler lays ep over all of those TP ranks, so ep is a multiple of
// tp / etp; Megatron-Core also takes an ep below that, which Strata refuses.
void validate_expert_tp(const ParallelPlan& plan, const std::string& where) {
  const int64_t etp = plan.expert_tp();
  if (etp > plan.tp || plan.tp % etp != 0) {
    throw InputError(
        where, "etp (--etp)",
        fmt::format("expert tensor parallelism {} does not divide tp {}", etp, plan.tp),
        fmt::format("use an etp among {}", divisors_of(plan.tp)));
  }
  if (plan.ep % plan.tp_outer() != 0) {
    throw InputError(
        where, "ep (--ep)",
        fmt::format("with etp {} < tp {}, expert parallelism spans the tp / etp = {} TP ranks "
                    "that hold different experts, and ep {} is not a multiple of {}",
                    etp, plan.tp, plan.tp_outer(), plan.ep, plan.tp_outer()),
        fmt::format("use an ep that is a multiple of {}, or etp {}", plan.tp_outer(), plan.tp));
  }
}

// What the plan compiler lowers of an MoE model so far, and Megatron's own rules for MoE plans.
void validate_moe_plan(const ParallelPlan& plan, const ModelSpec& model, const std::string& where) {
  const auto fail = [&](const char* field, const std::string& problem, const std::string& fix) {
    throw InputError(where, field, problem, fix);
  };
  if (model.experts % plan.ep != 0) {
    fail("ep (--ep)", fmt::format("{} does not divide the {} experts", plan.ep, model.experts),
         fmt::format("use an ep among {}", divisors_of(model.experts)));
  }
  const int64_t etp = plan.expert_tp();
  if (model.expert_ffn_hidden % etp != 0) {
    fail(plan.etp > 0 ? "etp (--etp)" : "tp (--tp)",
         fmt::format("expert tensor parallelism {} does not divide the routed experts' width {}",
                     etp, model.expert_ffn_hidden),
         "choose an etp (by default tp) that divides expert_ffn_hidden");
  }
  if (model.shared_expert_ffn_hidden % plan.tp != 0) {
    fail("tp (--tp)",
         fmt::format("tp {} does not divide the shared experts' width {}", plan.tp,
                     model.shared_expert_ffn_hidden),
         "choose a tp that divides shared_expert_ffn_hidden");
  }
  // Megatron-LM's arguments.py: "When using MoE and tensor parallelism, sequence parallelism
  // must be used."
  if (plan.tp > 1 && !plan.sequence_parallel) {
    fail("sequence_parallel (--sequence-parallel)",
         "an MoE model with tp > 1 needs sequence parallelism (Megatron-LM requires it: each TP "
         "rank routes its own tokens)",
         "add --sequence-parallel");
  }
  if (model.block != LayerBlock::kPreNorm) {
    fail("model (--model)",
         fmt::format("{} has {} blocks, and the plan compiler lowers MoE layers in pre-norm "
                     "blocks only (every released MoE family)",
                     model.name, to_string(model.block)),
         "plan a pre-norm MoE model");
  }
  const auto not_yet = [&](bool set, const char* field, const char* what, const char* fix) {
    if (set) {
      fail(field, fmt::format("{} is not lowered for MoE layers yet ({})", what, model.name), fix);
    }
  };
  not_yet(plan.fp8 != Fp8Format::kNone, "fp8 (--fp8-format)", "FP8 training", "drop --fp8-format");
  not_yet(plan.recompute == RecomputeKind::kSelectiveOp, "recompute (--recompute)",
          "torchtitan's op-level selective recompute", "use --recompute selective or full");
  not_yet(plan.overlap.tp_comm, "tp_comm_overlap (--tp-comm-overlap)",
          "the TP communication overlap", "drop --tp-comm-overlap");
}

// What the context-parallel lowering (plan/cp_attention.cpp) needs: Megatron-Core's
// load-balanced split of each sequence into 2 x cp chunks (get_batch_on_this_cp_rank), each
// rank's tokens split again over tp under sequence parallelism, Transformer Engine's attention
// (Megatron-LM's arguments.py requires flash or fused attention with context parallelism), and
// under a2a whole heads per rank (TE's AttnFuncWithCPAndQKVOA2A).
void validate_cp_plan(const ParallelPlan& plan, const ModelSpec& model, const std::string& where) {
  const auto fail = [&](const char* field, const std::string& problem, const std::string& fix) {
    throw InputError(where, field, problem, fix);
  };
  if (plan.seq_len % (2 * plan.cp) != 0) {
    fail("seq_len (--seq-len)",
         fmt::format("context parallelism cuts each sequence into 2 x cp = {} chunks (two per "
                     "rank, Megatron-Core's load-balanced order), which do not divide {}",
                     2 * plan.cp, plan.seq_len),
         fmt::format("use a sequence length divisible by {}", 2 * plan.cp));
  }
  if (plan.attention != AttentionKind::kFlash) {
    fail("attention (--attention)",
         "context parallelism runs the attention blockwise in Transformer Engine's flash or "
         "fused kernels (Megatron-LM requires them), not the unfused path",
         "use --attention flash");
  }
  if (plan.recompute == RecomputeKind::kSelectiveOp) {
    fail("recompute (--recompute)",
         "torchtitan's op-level selective recompute is not lowered with context parallelism",
         "use --recompute selective or full");
  }
  const int64_t heads_split = plan.tp * plan.cp;
  if (plan.cp_comm == CpComm::kAllToAll &&
      (model.heads % heads_split != 0 || model.kv_heads % heads_split != 0)) {
    fail("cp_comm (--cp-comm-type)",
         fmt::format("a2a splits the heads over tp x cp = {}, which does not divide the {} "
                     "attention heads and {} key/value heads of {}",
                     heads_split, model.heads, model.kv_heads, model.name),
         "use --cp-comm-type p2p or all_gather, or a cp that divides the heads per TP rank");
  }
  const bool windowed = model.sliding_window > 0;
  if (windowed && plan.cp_comm != CpComm::kAllToAll) {
    fail("cp_comm (--cp-comm-type)",
         fmt::format("{} attends through a sliding window of {} tokens, which the plan compiler "
                     "lowers with context parallelism only as a2a (each rank attends over the "
                     "whole sequence on its heads)",
                     model.name, model.sliding_window),
         "use --cp-comm-type a2a, or cp 1");
  }
}

// What the plan compiler lowers of multi-head latent attention (plan/mla_lowering.cpp): its
// projections in pre-norm blocks with rotary positions, as DeepSeek-V2 and V3 have them, with every
// parallelism and recompute but the ones whose products it does not split yet.
void validate_latent_attention_plan(const ParallelPlan& plan, const ModelSpec& model,
                                    const std::string& where) {
  const auto fail = [&](const char* field, const std::string& problem, const std::string& fix) {
    throw InputError(where, field, problem, fix);
  };
  if (model.block != LayerBlock::kPreNorm || model.position != PositionKind::kRotary ||
      model.sliding_window > 0) {
    fail("model (--model)",
         fmt::format("{} has latent attention in {} blocks with {} positions{}, and the plan "
                     "compiler lowers it as DeepSeek-V2 and V3 have it: pre-norm blocks, rotary "
                     "positions, no sliding window",
                     model.name, to_string(model.block), to_string(model.position),
                     model.sliding_window > 0 ? " and a sliding window" : ""),
         "plan a pre-norm latent-attention model with rotary positions and no window");
  }
  const auto not_yet = [&](bool set, const char* field, const char* what, const char* fix) {
    if (set) {
      fail(field,
           fmt::format("{} is not lowered with multi-head latent attention yet ({}: its down "
                       "and up projections)",
                       what, model.name),
           fix);
    }
  };
  not_yet(plan.fp8 != Fp8Format::kNone, "fp8 (--fp8-format)", "FP8 training", "drop --fp8-format");
  not_yet(plan.overlap.tp_comm, "tp_comm_overlap (--tp-comm-overlap)",
          "the TP communication overlap", "drop --tp-comm-overlap");
  not_yet(plan.recompute == RecomputeKind::kSelectiveOp, "recompute (--recompute)",
          "torchtitan's op-level selective recompute", "use --recompute selective or full");
}

}  // namespace

ParallelAxes ParallelPlan::axes() const {
  ParallelAxes axes;
  at(axes.sizes, Axis::kTp) = tp / tp_outer();
  at(axes.sizes, Axis::kTpOuter) = tp_outer();
  at(axes.sizes, Axis::kCp) = cp;
  at(axes.sizes, Axis::kEp) = ep_from_dp();
  at(axes.sizes, Axis::kDp) = dp / ep_from_dp();
  at(axes.sizes, Axis::kPp) = pp;
  axes.order = rank_order;
  return axes;
}

std::vector<int64_t> layers_per_stage(const ParallelPlan& plan, const ModelSpec& model) {
  std::vector<int64_t> layers(static_cast<size_t>(plan.pp), 0);
  if (plan.first_stage_layers == 0 && plan.last_stage_layers == 0) {
    for (auto& count : layers) count = model.layers / plan.pp;
    return layers;
  }
  // Uneven: the given first/last counts; the middle stages split the rest evenly.
  const int64_t middle_stages = plan.pp - 2;
  const int64_t middle_layers = model.layers - plan.first_stage_layers - plan.last_stage_layers;
  layers.front() = plan.first_stage_layers;
  layers.back() = plan.last_stage_layers;
  for (int64_t s = 1; s + 1 < plan.pp; ++s)
    layers[static_cast<size_t>(s)] = middle_layers / middle_stages;
  return layers;
}

std::vector<ChunkLayers> chunk_layout(const ParallelPlan& plan, const ModelSpec& model) {
  const std::vector<int64_t> stages = layers_per_stage(plan, model);
  const auto at = [&](int64_t stage, int64_t chunk) {
    return static_cast<size_t>(chunk * plan.pp + stage);
  };
  std::vector<ChunkLayers> layout(static_cast<size_t>(plan.pp * plan.vpp));
  for (int64_t stage = 0; stage < plan.pp; ++stage) {
    const int64_t layers = stages[static_cast<size_t>(stage)];
    const int64_t base = layers / plan.vpp;
    const int64_t extra = layers % plan.vpp;
    for (int64_t chunk = 0; chunk < plan.vpp; ++chunk) {
      // A stage whose layers its chunks do not divide gives the extra layers to its first
      // chunks, except the first stage, which gives them to its last: the embedding's and the
      // output layer's chunks are the light ones (Megatron-Core's
      // --account-for-embedding-in-pipeline-split layout, Llama 3 405B's 126 layers on 16 x 2).
      const bool heavy = stage == 0 ? chunk >= plan.vpp - extra : chunk < extra;
      layout[at(stage, chunk)].count = base + (heavy ? 1 : 0);
    }
  }
  // Model order: virtual stage chunk * pp + stage follows virtual stage chunk * pp + stage - 1.
  int64_t first = 0;
  for (ChunkLayers& chunk : layout) {
    chunk.first = first;
    first += chunk.count;
  }
  return layout;
}

ChunkLayers chunk_layers(const ParallelPlan& plan, const ModelSpec& model, int64_t stage,
                         int64_t chunk) {
  return chunk_layout(plan, model)[static_cast<size_t>(chunk * plan.pp + stage)];
}

void validate_plan_sizes(const ParallelPlan& plan, const std::string& where) {
  const auto within = [&](int64_t value, int64_t low, int64_t high, const char* field) {
    if (value < low || value > high) {
      throw InputError(where, field, fmt::format("must be in [{}, {}], found {}", low, high, value),
                       fmt::format("use a value from {} to {}", low, high));
    }
  };
  within(plan.dp, 1, kMaxRanks, "dp (--dp)");
  within(plan.tp, 1, kMaxRanks, "tp (--tp)");
  within(plan.pp, 1, kMaxRanks, "pp (--pp)");
  within(plan.cp, 1, kMaxRanks, "cp (--cp)");
  within(plan.ep, 1, kMaxRanks, "ep (--ep)");
  within(plan.etp, 0, kMaxRanks, "etp (--etp)");
  within(plan.vpp, 1, kMaxRanks, "vpp (--vpp)");
  within(plan.micro_batch, 1, kMaxSequences, "micro_batch (--micro-batch)");
  within(plan.global_batch, 1, kMaxSequences, "global_batch (--global-batch)");
  within(plan.seq_len, 1, kMaxSeqLen, "seq_len (--seq-len)");
  within(plan.first_stage_layers, 0, kMaxRanks, "first_stage_layers (--first-stage-layers)");
  within(plan.last_stage_layers, 0, kMaxRanks, "last_stage_layers (--last-stage-layers)");
  if (plan.dp > kMaxRanks / plan.tp / plan.pp / plan.cp) {
    throw InputError(where, "dp (--dp)",
                     fmt::format("dp {} x tp {} x pp {} x cp {} is more than {} GPUs", plan.dp,
                                 plan.tp, plan.pp, plan.cp, kMaxRanks),
                     "use fewer ranks");
  }
  // The busiest expert takes at most every token: a ratio to the balanced share within
  // [1, experts / top-k], which kMaxExperts bounds.
  if (!(plan.moe_imbalance >= 1 && plan.moe_imbalance <= 16384)) {
    throw InputError(where, "moe_imbalance (--moe-imbalance)",
                     fmt::format("must be in [1, 16384], found {}", plan.moe_imbalance),
                     "give the busiest expert's tokens over the mean, 1 for balanced routing");
  }
}

void validate_plan(const ParallelPlan& plan, const ModelSpec& model,
                   std::optional<int64_t> gpus_asked, const std::string& where) {
  const auto fail = [&](const char* field, const std::string& problem, const std::string& fix) {
    throw InputError(where, field, problem, fix);
  };
  validate_plan_sizes(plan, where);
  if (!model.moe() && (plan.ep > 1 || plan.etp > 0)) {
    fail(plan.ep > 1 ? "ep (--ep)" : "etp (--etp)",
         fmt::format("{} has no experts to split", model.name), "drop --ep and --etp");
  }
  if (plan.etp > 0) validate_expert_tp(plan, where);
  if (plan.dp % plan.ep_from_dp() != 0) {
    const int64_t outer = plan.tp_outer();
    fail("ep (--ep)",
         outer > 1 ? fmt::format("expert parallelism spans the tp / etp = {} TP ranks that hold "
                                 "different experts, then data parallelism, and ep {} / {} does "
                                 "not divide dp {}",
                                 outer, plan.ep, outer, plan.dp)
                   : fmt::format("expert parallelism is carved out of data parallelism, and ep "
                                 "{} does not divide dp {}",
                                 plan.ep, plan.dp),
         outer > 1 ? fmt::format("use an ep among {} x ({})", outer, divisors_of(plan.dp))
                   : fmt::format("use an ep among {}", divisors_of(plan.dp)));
  }
  if (!model.moe() && plan.moe_imbalance != 1) {
    fail("moe_imbalance (--moe-imbalance)",
         fmt::format("{} has no experts to route to", model.name), "drop --moe-imbalance");
  }
  if (plan.cp > 1) validate_cp_plan(plan, model, where);
  if (model.mtp_layers > 0) {
    fail("model (--model)",
         fmt::format("{} trains {} multi-token-prediction module(s) (mtp_layers, HF's "
                     "num_nextn_predict_layers), and the plan compiler does not lower them yet "
                     "(their layers and extra output-head products)",
                     model.name, model.mtp_layers),
         "plan the model without them: add --mtp-num-layers 0 (Megatron-LM's flag), or set "
         "\"mtp_layers\": 0 in a native model file");
  }
  if (model.latent_attention()) validate_latent_attention_plan(plan, model, where);
  if (model.moe()) validate_moe_plan(plan, model, where);
  if (plan.zero_stage < 0 || plan.zero_stage > 3) {
    fail("zero_stage (--zero)", fmt::format("must be 0, 1, 2 or 3, found {}", plan.zero_stage),
         "use 0 (none), 1 (optimizer states), 2 (+ gradients) or 3 (+ parameters)");
  }
  if (plan.offload.optimizer && plan.zero_stage == 0) {
    fail("offload_optimizer (--offload-optimizer)",
         "offloading the optimizer needs ZeRO (DeepSpeed's ZeRO-Offload runs stages 1-3)",
         "add --zero 1, 2 or 3, or drop --offload-optimizer");
  }
  if (plan.offload.params && plan.zero_stage != 3) {
    fail("offload_param (--offload-param)",
         fmt::format("offloading parameters needs ZeRO 3 (found ZeRO {})", plan.zero_stage),
         "use --zero 3, or drop --offload-param");
  }
  if (plan.prefetch_layers < -1) {
    fail("prefetch_layers (--prefetch-layers)",
         fmt::format("must be 0 or more (or -1 for the framework's default), found {}",
                     plan.prefetch_layers),
         "give how many layers' gathers may run ahead, e.g. 1");
  }
  if (model.heads % plan.tp != 0) {
    fail("tp (--tp)",
         fmt::format("tp {} does not divide the {} attention heads of {}", plan.tp, model.heads,
                     model.name),
         fmt::format("use a tp that divides {}: {}", model.heads, divisors_of(model.heads)));
  }
  if (model.kv_heads % plan.tp != 0) {
    fail("tp (--tp)",
         fmt::format("tp {} does not divide the {} key/value heads of {}", plan.tp, model.kv_heads,
                     model.name),
         fmt::format("use a tp that divides {}: {}", model.kv_heads, divisors_of(model.kv_heads)));
  }
  if (model.ffn_hidden % plan.tp != 0) {
    fail("tp (--tp)",
         fmt::format("tp {} does not divide the MLP width {} of {}", plan.tp, model.ffn_hidden,
                     model.name),
         "use a tp that divides the MLP width");
  }
  if (plan.seq_len > model.max_seq && model.position == PositionKind::kLearned) {
    fail("seq_len (--seq-len)",
         fmt::format("{} is longer than the {} learned positions of {}", plan.seq_len,
                     model.max_seq, model.name),
         fmt::format("use --seq-len {} or less", model.max_seq));
  }
  if (plan.sequence_parallel && plan.tp == 1) {
    fail("sequence_parallel (--sequence-parallel)", "sequence parallelism needs tp > 1",
         "drop --sequence-parallel or raise --tp");
  }
  if (plan.sequence_parallel && plan.seq_len % (plan.tp * plan.cp) != 0) {
    fail("seq_len (--seq-len)",
         plan.cp == 1
             ? fmt::format("sequence parallelism splits the sequence over tp {}, which does not "
                           "divide {}",
                           plan.tp, plan.seq_len)
             : fmt::format("sequence parallelism splits each context-parallel rank's tokens over "
                           "tp, and cp {} x tp {} does not divide {}",
                           plan.cp, plan.tp, plan.seq_len),
         plan.cp == 1 ? "use a sequence length divisible by tp"
                      : "use a sequence length divisible by cp x tp");
  }
  if (gpus_asked && plan.gpus() != *gpus_asked) {
    const std::string cp = plan.cp > 1 ? fmt::format(" x cp {}", plan.cp) : "";
    fail("dp (--dp)",
         fmt::format("dp {} x tp {} x pp {}{} = {} GPUs, but {} GPUs were asked for", plan.dp,
                     plan.tp, plan.pp, cp, plan.gpus(), *gpus_asked),
         fmt::format("choose dp, tp, pp{} whose product is {} (or omit --dp to derive it)",
                     plan.cp > 1 ? ", cp" : "", *gpus_asked));
  }
  if (plan.global_batch % (plan.dp * plan.micro_batch) != 0) {
    fail("global_batch (--global-batch)",
         fmt::format("{} sequences do not split into dp {} x micro_batch {} = {}",
                     plan.global_batch, plan.dp, plan.micro_batch, plan.dp * plan.micro_batch),
         fmt::format("use a global batch that is a multiple of {}", plan.dp * plan.micro_batch));
  }
  if (plan.micro_batches() > kMaxMicroBatches) {
    fail("global_batch (--global-batch)",
         fmt::format("{} micro-batches per step, more than the {} the task graph holds (it has "
                     "tasks per op per micro-batch)",
                     plan.micro_batches(), kMaxMicroBatches),
         fmt::format("raise --micro-batch or dp so that global batch / (dp x micro-batch) <= {}",
                     kMaxMicroBatches));
  }
  // Schedule and interleaving.
  if (plan.schedule == ScheduleKind::kInterleaved) {
    if (plan.vpp < 2) {
      fail("vpp (--vpp)", "the interleaved schedule needs vpp > 1 model chunks per stage",
           "set --vpp 2 or more, or use --schedule 1f1b");
    }
    if (plan.pp < 2) {
      fail("pp (--pp)", "the interleaved schedule needs a pipeline (pp > 1)",
           "raise --pp or use --schedule 1f1b");
    }
    if (plan.micro_batches() % plan.pp != 0) {
      fail("global_batch (--global-batch)",
           fmt::format("the interleaved schedule needs the micro-batches per step ({}) to be a "
                       "multiple of pp {} (Megatron-LM's requirement)",
                       plan.micro_batches(), plan.pp),
           fmt::format("use a global batch of a multiple of {} sequences",
                       plan.pp * plan.dp * plan.micro_batch));
    }
  } else if (plan.vpp != 1) {
    fail("vpp (--vpp)", fmt::format("vpp {} needs the interleaved schedule", plan.vpp),
         "add --schedule interleaved or drop --vpp");
  }
  validate_framework(plan, where);
  if (plan.fp8 != Fp8Format::kNone && plan.dtype != DType::kBf16) {
    fail("fp8 (--fp8)",
         fmt::format("FP8 GEMMs run inside bf16 training (Transformer Engine), not {}",
                     to_string(plan.dtype)),
         "use --dtype bf16 with --fp8");
  }
  if (plan.recompute == RecomputeKind::kSelectiveOp && plan.attention != AttentionKind::kFlash) {
    fail("recompute (--recompute)",
         "selective-op is torchtitan's policy around its fused attention kernel (SDPA)",
         "use --attention flash, or --recompute selective");
  }
  if (plan.recompute_layers < 0 ||
      (plan.recompute_layers > 0 && plan.recompute != RecomputeKind::kFull)) {
    fail("recompute_layers (--recompute-num-layers)",
         fmt::format("{} layers of full recompute need --recompute full", plan.recompute_layers),
         "add --recompute full (--recompute-granularity full), or drop --recompute-num-layers");
  }
  if (plan.fp8_param_gather && plan.fp8 == Fp8Format::kNone) {
    fail("fp8_param_gather (--fp8-param-gather)", "FP8 parameters need FP8 training",
         "add --fp8-format hybrid or drop --fp8-param-gather");
  }
  // Layers over stages and chunks.
  const bool uneven = plan.first_stage_layers > 0 || plan.last_stage_layers > 0;
  if (uneven) {
    if (plan.pp < 2) {
      fail("first_stage_layers (--first-stage-layers)", "an uneven pipeline split needs pp >= 2",
           "drop --first-stage-layers/--last-stage-layers or raise --pp");
    }
    const int64_t rest = model.layers - plan.first_stage_layers - plan.last_stage_layers;
    const int64_t middle_stages = plan.pp - 2;
    const bool splits =
        middle_stages == 0 ? rest == 0 : rest >= middle_stages && rest % middle_stages == 0;
    if (plan.first_stage_layers < 1 || plan.last_stage_layers < 1 || !splits) {
      fail("first_stage_layers (--first-stage-layers)",
           fmt::format("{} layers minus first {} and last {} leave {} for {} middle stages, "
                       "which is not an even split",
                       model.layers, plan.first_stage_layers, plan.last_stage_layers, rest,
                       middle_stages),
           "give first and last stage layer counts (both >= 1) that leave a multiple of pp - 2");
    }
    const std::vector<int64_t> stages = layers_per_stage(plan, model);
    const int64_t fewest = *std::min_element(stages.begin(), stages.end());
    if (fewest < plan.vpp) {
      fail("vpp (--vpp)",
           fmt::format("a stage of {} layers cannot hold {} model chunks", fewest, plan.vpp),
           fmt::format("use --vpp {} or fewer, or give each stage more layers", fewest));
    }
  } else if (model.layers % (plan.pp * plan.vpp) != 0) {
    fail(plan.vpp > 1 ? "vpp (--vpp)" : "pp (--pp)",
         fmt::format("pp {} x vpp {} = {} does not divide the {} layers of {}", plan.pp, plan.vpp,
                     plan.pp * plan.vpp, model.layers, model.name),
         fmt::format("use pp x vpp among the divisors of {}: {}; or split unevenly with "
                     "--first-stage-layers and --last-stage-layers",
                     model.layers, divisors_of(model.layers)));
  }
}

bool recomputes_attention_scores(const ParallelPlan& plan) {
  return plan.recompute == RecomputeKind::kSelective && plan.attention == AttentionKind::kUnfused;
}

bool runs_fused_kernels(const ParallelPlan& plan) {
  return plan.fused_kernels || plan.host_dispatch == HostDispatch::kCompiled ||
         plan.host_dispatch == HostDispatch::kNative;
}

bool recomputes_layer(const ParallelPlan& plan, int64_t index_in_chunk) {
  return plan.recompute == RecomputeKind::kFull &&
         (plan.recompute_layers == 0 || index_in_chunk < plan.recompute_layers);
}

const char* to_string(HostDispatch dispatch) {
  switch (dispatch) {
    case HostDispatch::kEager:
      return "eager";
    case HostDispatch::kCompiled:
      return "compiled";
    case HostDispatch::kCudaGraphs:
      return "cuda-graphs";
    case HostDispatch::kNative:
      return "native";
    case HostDispatch::kNone:
      return "none";
  }
  return "?";
}

const char* to_string(MoeDispatcher dispatcher) {
  switch (dispatcher) {
    case MoeDispatcher::kAllGather:
      return "allgather";
    case MoeDispatcher::kAllToAll:
      return "alltoall";
  }
  return "?";
}

const char* to_string(CpComm comm) {
  switch (comm) {
    case CpComm::kP2p:
      return "p2p";
    case CpComm::kAllGather:
      return "all_gather";
    case CpComm::kAllToAll:
      return "a2a";
  }
  return "?";
}

const char* to_string(Fp8Format format) {
  switch (format) {
    case Fp8Format::kNone:
      return "none";
    case Fp8Format::kHybrid:
      return "hybrid";
    case Fp8Format::kE4m3:
      return "e4m3";
  }
  return "?";
}

void validate_plan_on_device(const ParallelPlan& plan, const DeviceSpec& device,
                             const std::string& where) {
  if (plan.fp8 != Fp8Format::kNone && device.peak_fp8_flops <= 0) {
    throw InputError(where, "fp8 (--fp8)",
                     fmt::format("{} has no FP8 tensor cores (its device file gives no fp8 peak; "
                                 "data/reference/hardware.csv has none for A100 or V100)",
                                 device.name),
                     "drop --fp8, or use a device with FP8: h100-sxm, h200 or b200");
  }
  const bool offloads = plan.offload.optimizer || plan.offload.params;
  if (offloads && (device.host_flops <= 0 || device.host_mem_bw_gbps <= 0)) {
    throw InputError(where,
                     plan.offload.optimizer ? "offload_optimizer (--offload-optimizer)"
                                            : "offload_param (--offload-param)",
                     fmt::format("device {} gives no host figures (host_tflops, "
                                 "host_mem_bw_gbps) to run the offloaded work at",
                                 device.name),
                     "add them to the device file (topologies/README.md), or drop the offload");
  }
}

const char* to_string(AttentionKind kind) {
  switch (kind) {
    case AttentionKind::kFlash:
      return "flash";
    case AttentionKind::kUnfused:
      return "unfused";
  }
  return "?";
}

const char* to_string(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kGpipe:
      return "gpipe";
    case ScheduleKind::k1F1B:
      return "1f1b";
    case ScheduleKind::kInterleaved:
      return "interleaved";
  }
  return "?";
}

const char* to_string(RecomputeKind kind) {
  switch (kind) {
    case RecomputeKind::kNone:
      return "none";
    case RecomputeKind::kSelective:
      return "selective";
    case RecomputeKind::kSelectiveOp:
      return "selective-op";
    case RecomputeKind::kFull:
      return "full";
  }
  return "?";
}

}  // namespace strata
