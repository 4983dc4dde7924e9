// The framework presets, each default from the framework's own code or documentation:
//
// megatron-core (Megatron-LM with Megatron-Core and Transformer Engine, megatron/training/
// arguments.py and megatron/core/distributed/):
//  - attention flash: --attention-backend defaults to auto, where Transformer Engine picks its
//    flash or cuDNN fused attention;
//  - --tp-comm-overlap, --overlap-grad-reduce and --overlap-param-gather are off unless given;
//    --overlap-p2p-communication is on (the flag is --no-overlap-p2p-communication);
//  - buckets: --ddp-bucket-size unset, so max(40M, 1M x dp) parameters with --overlap-grad-reduce
//    and one bucket without (bucket_size 0 here);
//  - bf16 turns on accumulate_allreduce_grads_in_fp32: fp32 main gradients, reduced in fp32
//    (--grad-reduce-in-bf16 turns it off); 16-bit parameters with fp32 master weights and Adam
//    states in the optimizer: 18 bytes per parameter (docs: distributed optimizer).
// megatron-2022 (Megatron-LM as Korthikanti et al. 2022 and Narayanan et al. 2021 ran it): the
//  unfused attention (FusedScaleMaskSoftmax between batched products), no overlap of any
//  communication (gradients all-reduced after the last backward, blocking pipeline p2p), the same
//  mixed precision.
// deepspeed (deepspeed/runtime/zero/config.py): reduce_bucket_size 5e8 parameters, overlap_comm
//  false (the DeepSpeed config reader applies its default of true under stage 3), gradients
//  communicated in the training dtype; states as the ZeRO paper counts them, 2 + 2 + 12 bytes
//  (data/reference/zero_memory.csv); models' attention through PyTorch SDPA: flash; ZeRO 3
//  prefetch from stage3_prefetch_bucket_size 5e7 and stage3_max_live_parameters 1e9.
// fsdp2 (torchtitan's defaults for PyTorch FSDP2): every transformer block its own FSDP unit,
//  fully sharded (ZeRO 3); parameters kept as sharded fp32 and all-gathered in bf16
//  (mixed_precision_param), gradients reduce-scattered in fp32 (mixed_precision_reduce) on a
//  separate stream while the backward goes on; flash attention (SDPA). The MoE dispatcher stays
//  allgather: torchtitan's all-to-all token exchange is its expert parallelism's (ExpertParallel,
//  torchtitan/distributed/expert_parallel.py), which validate_plan refuses above ep 1 for now,
//  and a preset away from the plan's default would write "moe_dispatcher" into every fsdp2
//  plan's JSON, dense ones too. Set it with --moe-token-dispatcher-type alltoall.
// ddp (torch.nn.parallel.DistributedDataParallel): bucket_cap_mb 25 of fp32 gradients
//  (6,553,600 parameters), each bucket all-reduced by autograd hooks during the backward; AMP
//  keeps fp32 parameters and gradients; data-parallel only.
// horovod: tensor fusion into a 64 MiB buffer (HOROVOD_FUSION_THRESHOLD, 16,777,216 fp32
//  gradients) all-reduced in the background during the backward, launched by a background thread
//  that wakes every HOROVOD_CYCLE_TIME, 1 ms (horovod/common/operations.cc,
//  BackgroundThreadLoop: SetCycleTimeMs(1) unless the variable is set); fp32 parameters and
//  gradients; data-parallel only.

#include "plan/framework.hpp"

#include <algorithm>
#include <iterator>
#include <limits>

#include <fmt/format.h>

#include "common/error.hpp"

namespace strata {

namespace {

constexpr std::pair<const char*, Framework> kFrameworks[] = {
    {"megatron-core", Framework::kMegatronCore},
    {"megatron-2022", Framework::kMegatron2022},
    {"deepspeed", Framework::kDeepSpeed},
    {"fsdp2", Framework::kFsdp2},
    {"ddp", Framework::kDdp},
    {"horovod", Framework::kHorovod}};

// AMP under DDP and Horovod, and FSDP2's sharded parameters: fp32 parameters cast per op, which
// are the optimizer's master weights; fp32 gradients.
Precision fp32_parameters() {
  return {.fp32_grads = true,
          .fp32_params = true,
          .fp32_master_weights = false,
          .fp32_optimizer_states = true};
}

// Megatron-Core's default bucket with --overlap-grad-reduce (DistributedDataParallel.__init__).
constexpr int64_t kMegatronMinBucket = 40'000'000;
constexpr int64_t kMegatronBucketPerRank = 1'000'000;
// Horovod's default HOROVOD_CYCLE_TIME, 1 ms.
constexpr int64_t kHorovodCycleNs = 1'000'000;

}  // namespace

ParallelPlan apply_framework(ParallelPlan plan, Framework framework) {
  plan.framework = framework;
  plan.attention = AttentionKind::kFlash;
  plan.overlap = Overlap{.p2p = framework == Framework::kMegatronCore};
  plan.precision = Precision{};
  plan.bucket_size = 0;
  plan.cycle_time_ns = 0;
  // Megatron's stacks run fused kernels (Transformer Engine, Apex); the others run the model's
  // own PyTorch modules (torchtitan's Llama, Hugging Face models), eager unless compiled.
  plan.fused_kernels =
      framework == Framework::kMegatronCore || framework == Framework::kMegatron2022;
  switch (framework) {
    case Framework::kMegatronCore:
      break;
    case Framework::kMegatron2022:
      plan.attention = AttentionKind::kUnfused;
      break;
    case Framework::kDeepSpeed:
      plan.precision.fp32_grads = false;
      plan.bucket_size = 500'000'000;
      break;
    case Framework::kFsdp2:
      plan.zero_stage = 3;
      plan.overlap.grad_reduce = true;
      plan.precision = fp32_parameters();
      plan.bucket_size = 1;  // each block reduce-scatters its own gradients
      break;
    case Framework::kDdp:
      plan.overlap.grad_reduce = true;
      plan.precision = fp32_parameters();
      plan.bucket_size = 25 * 1024 * 1024 / 4;
      break;
    case Framework::kHorovod:
      plan.overlap.grad_reduce = true;
      plan.precision = fp32_parameters();
      plan.bucket_size = 64 * 1024 * 1024 / 4;
      plan.cycle_time_ns = kHorovodCycleNs;
      break;
  }
  return plan;
}

int64_t gradient_bucket_parameters(const ParallelPlan& plan) {
  if (plan.bucket_size > 0) return plan.bucket_size;
  if (!plan.overlap.grad_reduce) return std::numeric_limits<int64_t>::max();
  return std::max(kMegatronMinBucket, kMegatronBucketPerRank * plan.dp);
}

int64_t prefetch_window_layers(const ParallelPlan& plan, int64_t layer_parameters) {
  if (plan.prefetch_layers >= 0) return plan.prefetch_layers;
  if (plan.framework != Framework::kDeepSpeed) return 1;
  return deepspeed_prefetch_layers(kDeepSpeedPrefetchBucket, kDeepSpeedMaxLiveParameters,
                                   layer_parameters);
}

int64_t deepspeed_prefetch_layers(int64_t prefetch_bucket_parameters, int64_t max_live_parameters,
                                  int64_t layer_parameters) {
  const int64_t layer = std::max<int64_t>(layer_parameters, 1);
  const int64_t wanted = (prefetch_bucket_parameters + layer - 1) / layer;
  const int64_t live = std::max<int64_t>(max_live_parameters / layer - 1, 0);
  return std::min(wanted, live);
}

bool framework_runs_zero_stage(Framework framework, int64_t zero_stage) {
  switch (framework) {
    case Framework::kMegatron2022:
      return zero_stage <= 1;
    case Framework::kDdp:
    case Framework::kHorovod:
      return zero_stage == 0;
    case Framework::kFsdp2:
      return zero_stage >= 2;
    case Framework::kMegatronCore:
    case Framework::kDeepSpeed:
      return true;
  }
  return true;
}

void validate_framework(const ParallelPlan& plan, const std::string& where) {
  const char* name = to_string(plan.framework);
  const bool data_parallel_only =
      plan.framework == Framework::kDdp || plan.framework == Framework::kHorovod;
  if (data_parallel_only && (plan.tp > 1 || plan.pp > 1)) {
    throw InputError(where, plan.tp > 1 ? "tp (--tp)" : "pp (--pp)",
                     fmt::format("{} is data-parallel only: it runs no tensor or pipeline "
                                 "parallelism (tp {}, pp {})",
                                 name, plan.tp, plan.pp),
                     "use --tp 1 --pp 1, or --framework megatron-core, deepspeed or fsdp2");
  }
  if (!framework_runs_zero_stage(plan.framework, plan.zero_stage)) {
    std::vector<int64_t> stages;
    for (int64_t stage = 0; stage <= 3; ++stage) {
      if (framework_runs_zero_stage(plan.framework, stage)) stages.push_back(stage);
    }
    throw InputError(where, "zero_stage (--zero)",
                     fmt::format("{} does not run ZeRO stage {}", name, plan.zero_stage),
                     fmt::format("use --zero {} with {}, or another --framework",
                                 fmt::join(stages, " or "), name));
  }
  if (plan.cycle_time_ns > 0 && plan.framework != Framework::kHorovod) {
    throw InputError(where, "horovod_cycle_time_ms (--horovod-cycle-time)",
                     fmt::format("{} launches reductions when they are ready; the cycle is "
                                 "Horovod's background thread",
                                 name),
                     "drop it, or use --framework horovod");
  }
  if (plan.overlap.tp_comm && !plan.sequence_parallel) {
    throw InputError(where, "tp_comm_overlap (--tp-comm-overlap)",
                     "the TP communication overlap splits the sequence-parallel all-gathers and "
                     "reduce-scatters, so it needs sequence parallelism (as Megatron-LM asserts)",
                     "add --sequence-parallel (with tp > 1) or drop --tp-comm-overlap");
  }
  if (plan.overlap.param_gather && plan.zero_stage == 0) {
    throw InputError(where, "overlap_param_gather (--overlap-param-gather)",
                     "there is no parameter all-gather to overlap without a sharded optimizer",
                     "add --use-distributed-optimizer (ZeRO 1) or drop --overlap-param-gather");
  }
}

const char* to_string(Framework framework) {
  for (const auto& [name, value] : kFrameworks) {
    if (value == framework) return name;
  }
  return "?";
}

Framework parse_framework(const std::string& name, const std::string& where,
                          const std::string& field) {
  std::vector<std::string> known;
  for (const auto& [text, value] : kFrameworks) {
    if (name == text) return value;
    known.push_back(text);
  }
  throw InputError(where, field,
                   fmt::format("'{}' is not one of: {}", name, fmt::join(known, ", ")),
                   fmt::format("use one of: {}", fmt::join(known, ", ")));
}

}  // namespace strata
