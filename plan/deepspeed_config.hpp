#pragma once
// A DeepSpeed config file (--deepspeed-config FILE) as plan fields. Every key is read, or known
// and documented not to change the prediction (deepspeed_config.cpp lists each with why), or
// refused: a key DeepSpeed has whose effect is not modeled (NVMe offload, ZeRO++, partial
// offload) is refused by name with a fix, and an unknown key as a typo.
//
// Read into the plan:
//  - zero_optimization: stage; overlap_comm (--overlap-grad-reduce; DeepSpeed's default is true
//    under stage 3, false below); reduce_bucket_size (the gradient bucket); under stage 3
//    stage3_prefetch_bucket_size and stage3_max_live_parameters (the prefetch window in layers,
//    deepspeed_prefetch_layers); offload_optimizer and offload_param with "device": "cpu"
//    (--offload-optimizer, --offload-param); fp16_master_weights_and_gradients;
//  - tensor_parallel.autotp_size (DeepSpeed's AutoTP training): tp;
//  - bf16.enabled / fp16.enabled: the training dtype; bf16.bf16_master_weights_and_grads and
//    bf16.bf16_optimizer_states, data_types.grad_accum_dtype: how the model states are kept
//    (plan.precision);
//  - train_batch_size = train_micro_batch_size_per_gpu x gradient_accumulation_steps x dp, which
//    resolves one "auto" (or absent) batch value from the other two; the command line's
//    --micro-batch and --global-batch resolve the rest.
// "auto" bucket sizes resolve as the Hugging Face integration fills them from the model's hidden
// size h (transformers/integrations/deepspeed.py): reduce_bucket_size h^2,
// stage3_prefetch_bucket_size 0.9 h^2.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/model_spec.hpp"
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
  std::optional<int64_t> autotp_size;
  std::optional<bool> overlap_comm;
  // Bucket sizes in parameters; "auto" is kAutoBucket until the model's hidden size resolves it.
  std::optional<int64_t> reduce_bucket_size;
  std::optional<int64_t> prefetch_bucket_size;
  std::optional<int64_t> max_live_parameters;
  Offload offload;
  std::optional<bool> fp32_grads;
  std::optional<bool> fp32_master_weights;
  std::optional<bool> fp32_optimizer_states;
  // The keys read that do not change the prediction, each with why ("gradient_clipping (the
  // global gradient norm is always computed)"), for the command to say so.
  std::vector<std::string> unmodeled;

  static constexpr int64_t kAutoBucket = -1;
};

DeepSpeedConfig read_deepspeed_config(const std::string& path);

// Sets the plan's fields from the config: zero_stage, micro_batch, global_batch, dtype, overlap,
// bucket_size, prefetch_layers, offload and precision (plan.tp is set by the caller from
// autotp_size, before dp is derived). Values given on the command line (the optionals) resolve
// "auto" and must agree with concrete values in the file.
void apply_deepspeed_config(const DeepSpeedConfig& config, const ModelSpec& model,
                            ParallelPlan& plan, std::optional<int64_t> zero_flag,
                            std::optional<int64_t> micro_batch_flag,
                            std::optional<int64_t> global_batch_flag);

}  // namespace strata
