#pragma once
// The plan-relevant part of a DeepSpeed config file (--deepspeed-config FILE):
// zero_optimization.stage, train_micro_batch_size_per_gpu, gradient_accumulation_steps,
// train_batch_size, bf16.enabled and fp16.enabled. DeepSpeed's relation
//   train_batch_size = train_micro_batch_size_per_gpu x gradient_accumulation_steps x dp
// resolves one "auto" (or absent) batch value from the other two; the command line's
// --micro-batch and --global-batch resolve the rest. What cannot be resolved is refused with a
// message naming the field.

#include <cstdint>
#include <optional>
#include <string>

#include "plan/parallel_plan.hpp"

namespace strata {

struct DeepSpeedConfig {
  std::string path;
  std::optional<int64_t> zero_stage;   // nullopt: absent
  std::optional<int64_t> micro_batch;  // nullopt: absent or "auto"
  std::optional<int64_t> grad_accum;
  std::optional<int64_t> train_batch;
  bool grad_accum_auto = false;
  bool zero_stage_auto = false;
  std::optional<DType> dtype;
};

DeepSpeedConfig read_deepspeed_config(const std::string& path);

// Sets plan.zero_stage, micro_batch, global_batch and dtype from the config; plan.dp must be
// known. Values given on the command line (the optionals) resolve "auto" and must agree with
// concrete values in the file.
void apply_deepspeed_config(const DeepSpeedConfig& config, ParallelPlan& plan,
                            std::optional<int64_t> zero_flag,
                            std::optional<int64_t> micro_batch_flag,
                            std::optional<int64_t> global_batch_flag);

}  // namespace strata
