#pragma once
// Framework presets (--framework): what a software stack does by default, as plan fields. One
// preset sets the attention implementation, the communication overlaps, the gradient bucket size
// and how the model states are kept; each field can still be set on its own afterwards. The
// table, with the source of every default, is in framework.cpp and sim/README.md.

#include <string>

#include "plan/parallel_plan.hpp"

namespace strata {

// Sets the fields the framework decides (attention, overlap, precision, bucket_size, and
// zero_stage 3 for fsdp2, which shards everything) to its defaults; other fields are kept.
ParallelPlan apply_framework(ParallelPlan plan, Framework framework);

// The gradient bucket size in parameters this plan reduces by: plan.bucket_size, or
// Megatron-Core's default when 0 (distributed_data_parallel.py: max(40,000,000, 1,000,000 x dp)
// with --overlap-grad-reduce; without it one bucket holds every parameter).
int64_t gradient_bucket_parameters(const ParallelPlan& plan);

// ZeRO 3 / FSDP2: how many layers' parameter all-gathers run ahead of the layer computing, for a
// layer of `layer_parameters` on one rank: plan.prefetch_layers, or when -1 the framework's
// default: DeepSpeed's stage3_prefetch_bucket_size and stage3_max_live_parameters defaults
// (deepspeed_prefetch_layers), one layer elsewhere (FSDP2 issues the next block's all-gather as
// the current one starts, torch/distributed/fsdp/_fully_shard/_fsdp_state.py).
int64_t prefetch_window_layers(const ParallelPlan& plan, int64_t layer_parameters);

// DeepSpeed's prefetch in layers (deepspeed/runtime/zero/partitioned_param_coordinator.py:
// fetch_sub_module prefetches parameters while fewer than stage3_prefetch_bucket_size are in
// flight, so ceil(prefetch / layer) layers; stage3_max_live_parameters bounds every gathered
// layer, the computing one included).
int64_t deepspeed_prefetch_layers(int64_t prefetch_bucket_parameters, int64_t max_live_parameters,
                                  int64_t layer_parameters);
// DeepSpeed's defaults (deepspeed/runtime/zero/config.py).
inline constexpr int64_t kDeepSpeedPrefetchBucket = 50'000'000;
inline constexpr int64_t kDeepSpeedMaxLiveParameters = 1'000'000'000;

// What the framework cannot run: tp or pp under the data-parallel-only ddp and horovod, ZeRO
// stages it does not have. Throws InputError naming `where` and the field with its flag.
void validate_framework(const ParallelPlan& plan, const std::string& where);

// The ZeRO stages a framework runs (megatron-2022: 0-1; ddp and horovod: 0; fsdp2: 2-3; else
// 0-3), for validation and the search.
bool framework_runs_zero_stage(Framework framework, int64_t zero_stage);

const char* to_string(Framework framework);
// Throws InputError naming `where` and `field` for an unknown name, listing the known ones.
Framework parse_framework(const std::string& name, const std::string& where,
                          const std::string& field);

}  // namespace strata
