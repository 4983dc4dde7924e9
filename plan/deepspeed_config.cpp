#include "plan/deepspeed_config.hpp"

#include <algorithm>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "common/error.hpp"
#include "common/json_input.hpp"
#include "plan/framework.hpp"
#include "plan/shard_sizes.hpp"

namespace strata {

namespace {

// Keys DeepSpeed reads that do not change the step as the simulator prices it, with why.
struct Unmodeled {
  std::string_view key;
  std::string_view why;
};

constexpr Unmodeled kTopLevelUnmodeled[] = {
    {"optimizer",
     "Adam-family states (m and v) are what the memory and step model count; the type is checked"},
    {"scheduler", "the learning-rate schedule changes no work"},
    {"gradient_clipping", "the global gradient norm is always computed"},
    {"steps_per_print", "logging"},
    {"wall_clock_breakdown", "logging"},
    {"dump_state", "logging"},
    {"memory_breakdown", "logging"},
    {"tensorboard", "logging"},
    {"wandb", "logging"},
    {"csv_monitor", "logging"},
    {"comet", "logging"},
    {"flops_profiler", "profiling"},
    {"comms_logger", "logging"},
    {"checkpoint", "checkpoint saving is outside the step"},
    {"prescale_gradients", "a scaling of the same gradients"},
    {"gradient_predivide_factor", "a scaling of the same gradients"},
    {"zero_allow_untested_optimizer", "a safety switch"},
    {"zero_force_ds_cpu_optimizer", "which CPU Adam implementation runs the offloaded step"},
    {"activation_checkpointing",
     "what is recomputed is the plan's --recompute; the keys that move activations elsewhere are "
     "checked"},
};

constexpr Unmodeled kZeroUnmodeled[] = {
    {"contiguous_gradients", "fragmentation: the memory model counts bytes"},
    {"allgather_bucket_size",
     "ZeRO 1/2 all-gather the same bytes after the step; the simulator gathers them per gradient "
     "bucket"},
    {"round_robin_gradients", "the order of offloaded gradient copies, not their bytes"},
    {"sub_group_size", "the offloaded step runs over the whole shard at the host's rate"},
    {"stage3_param_persistence_threshold",
     "parameters below it (norms, biases) are a small part of each layer's gather"},
    {"stage3_max_reuse_distance",
     "parameters reused at the forward/backward turn: the simulator gathers each layer for each "
     "pass"},
    {"stage3_gather_16bit_weights_on_model_save", "checkpoint saving"},
    {"stage3_gather_fp16_weights_on_model_save", "checkpoint saving"},
    {"gather_16bit_weights_on_model_save", "checkpoint saving"},
    {"ignore_unused_parameters", "a safety switch"},
    {"load_from_fp32_weights", "checkpoint loading"},
    {"elastic_checkpoint", "checkpoint loading"},
    {"memory_efficient_linear", "the linear layers' saved tensors are counted as Megatron's"},
    {"log_trace_cache_warnings", "logging"},
    {"cpu_offload_use_pin_memory", "the deprecated cpu_offload's pinned buffers"},
};

constexpr Unmodeled kOffloadUnmodeled[] = {
    {"pin_memory", "copies run at the PCIe link's rate (pinned buffers)"},
    {"buffer_count", "NVMe staging buffers"},
    {"buffer_size", "NVMe staging buffers"},
    {"fast_init", "initialization"},
    {"max_in_cpu", "NVMe"},
    {"nvme_path", "NVMe"},
    {"pipeline_read", "NVMe"},
    {"pipeline_write", "NVMe"},
};

// Refuses keys in neither list; notes each unmodeled key the object has, with why.
template <size_t N>
void check_keys(const JsonFields& fields, std::initializer_list<std::string_view> modeled,
                const Unmodeled (&unmodeled)[N], DeepSpeedConfig& config) {
  std::vector<std::string_view> known(modeled);
  for (const Unmodeled& key : unmodeled) known.push_back(key.key);
  fields.refuse_unknown(known);
  for (const Unmodeled& key : unmodeled) {
    if (fields.has(key.key)) {
      config.unmodeled.push_back(fmt::format("{} ({})", fields.field_name(key.key), key.why));
    }
  }
}

bool is_auto(const JsonFields& fields, const char* key) {
  return fields.has(key) && fields.at(key).is_string() &&
         fields.at(key).get<std::string>() == "auto";
}

// A positive count, or nullopt when absent or "auto".
std::optional<int64_t> count_or_auto(const JsonFields& fields, const char* key) {
  if (!fields.has(key) || is_auto(fields, key)) return std::nullopt;
  return fields.positive_int(key);
}

// A bucket size in parameters (a number DeepSpeed reads as an int, e.g. 5e8), kAutoBucket for
// "auto", nullopt when absent.
std::optional<int64_t> bucket_or_auto(const JsonFields& fields, const char* key) {
  if (!fields.has(key)) return std::nullopt;
  if (is_auto(fields, key)) return DeepSpeedConfig::kAutoBucket;
  return static_cast<int64_t>(fields.positive_number(key, true));
}

std::optional<bool> optional_boolean(const JsonFields& fields, const char* key) {
  if (!fields.has(key) || is_auto(fields, key)) return std::nullopt;
  return fields.boolean(key, false);
}

bool enabled(const JsonFields& fields, const char* section) {
  if (!fields.has(section)) return false;
  const JsonFields sub = fields.object(section);
  if (!sub.has("enabled") || is_auto(sub, "enabled")) return false;
  return sub.boolean("enabled", false);
}

// A key whose effect is not modeled is refused unless it has DeepSpeed's default.
void refuse_unless(const JsonFields& fields, const char* key, bool is_default,
                   const std::string& what) {
  if (fields.has(key) && !is_default) {
    fields.fail(key, what + " is not modeled",
                fmt::format("remove \"{}\" (or set DeepSpeed's default) to predict the run "
                            "without it",
                            key));
  }
}

// offload_optimizer / offload_param: "cpu" offloads, "none" does not; NVMe is refused.
bool offloads(const JsonFields& zero, const char* section,
              std::initializer_list<std::string_view> modeled, DeepSpeedConfig& config) {
  if (!zero.has(section)) return false;
  const JsonFields offload = zero.object(section);
  check_keys(offload, modeled, kOffloadUnmodeled, config);
  if (!offload.has("device")) return false;
  const std::string device = offload.choice("device", {"cpu", "none", "nvme"});
  if (device == "nvme") {
    offload.fail("device", "offload to NVMe (ZeRO-Infinity) is not modeled",
                 "use \"cpu\", or \"none\"");
  }
  return device == "cpu";
}

void read_zero(const JsonFields& zero, DeepSpeedConfig& config) {
  check_keys(zero,
             {"stage", "overlap_comm", "reduce_bucket_size", "stage3_prefetch_bucket_size",
              "stage3_max_live_parameters", "offload_optimizer", "offload_param", "reduce_scatter",
              "allgather_partitions", "fp16_master_weights_and_gradients", "cpu_offload",
              "cpu_offload_params", "zero_hpz_partition_size", "zero_quantized_weights",
              "zero_quantized_gradients", "mics_shard_size"},
             kZeroUnmodeled, config);
  if (is_auto(zero, "stage")) {
    config.zero_stage_auto = true;
  } else if (zero.has("stage")) {
    config.zero_stage = zero.non_negative_int("stage");
  }
  config.overlap_comm = optional_boolean(zero, "overlap_comm");
  config.reduce_bucket_size = bucket_or_auto(zero, "reduce_bucket_size");
  config.prefetch_bucket_size = bucket_or_auto(zero, "stage3_prefetch_bucket_size");
  if (zero.has("stage3_max_live_parameters"))
    config.max_live_parameters =
        static_cast<int64_t>(zero.positive_number("stage3_max_live_parameters", true));
  // ratio < 1 (ZeRO-Offload++ twin-flow) offloads part of the optimizer.
  config.offload.optimizer = offloads(zero, "offload_optimizer", {"device", "ratio"}, config);
  if (zero.has("offload_optimizer") && zero.object("offload_optimizer").has("ratio")) {
    const JsonFields offload = zero.object("offload_optimizer");
    refuse_unless(offload, "ratio", offload.positive_number("ratio", true) == 1.0,
                  "offloading part of the optimizer (ratio < 1)");
  }
  config.offload.params = offloads(zero, "offload_param", {"device"}, config);
  if (zero.boolean("fp16_master_weights_and_gradients", false)) {
    config.fp32_master_weights = false;
    config.fp32_grads = false;
  }
  refuse_unless(zero, "reduce_scatter", zero.boolean("reduce_scatter", true),
                "all-reducing ZeRO gradients (reduce_scatter false)");
  refuse_unless(zero, "allgather_partitions", zero.boolean("allgather_partitions", true),
                "broadcasting partitions (allgather_partitions false)");
  refuse_unless(zero, "cpu_offload", !zero.boolean("cpu_offload", false),
                "the deprecated cpu_offload (use \"offload_optimizer\": {\"device\": \"cpu\"})");
  refuse_unless(zero, "cpu_offload_params", !zero.boolean("cpu_offload_params", false),
                "the deprecated cpu_offload_params (use \"offload_param\")");
  refuse_unless(
      zero, "zero_hpz_partition_size",
      !zero.has("zero_hpz_partition_size") || zero.positive_int("zero_hpz_partition_size") == 1,
      "ZeRO++ hierarchical partitioning");
  refuse_unless(zero, "zero_quantized_weights", !zero.boolean("zero_quantized_weights", false),
                "ZeRO++ quantized weights");
  refuse_unless(zero, "zero_quantized_gradients", !zero.boolean("zero_quantized_gradients", false),
                "ZeRO++ quantized gradients");
  refuse_unless(zero, "mics_shard_size",
                !zero.has("mics_shard_size") || zero.at("mics_shard_size").get<double>() <= 0,
                "MiCS sharding");
}

void read_precision(const JsonFields& fields, DeepSpeedConfig& config) {
  if (fields.has("bf16")) {
    const JsonFields bf16 = fields.object("bf16");
    bf16.refuse_unknown(std::initializer_list<std::string_view>{
        "enabled", "immediate_grad_update", "check_grad_overflow", "bf16_master_weights_and_grads",
        "bf16_optimizer_states"});
    if (bf16.boolean("bf16_master_weights_and_grads", false)) {
      config.fp32_master_weights = false;
      config.fp32_grads = false;
    }
    if (bf16.boolean("bf16_optimizer_states", false)) config.fp32_optimizer_states = false;
  }
  if (fields.has("data_types")) {
    const JsonFields types = fields.object("data_types");
    types.refuse_unknown(std::initializer_list<std::string_view>{"grad_accum_dtype"});
    if (types.has("grad_accum_dtype")) {
      config.fp32_grads =
          types.choice("grad_accum_dtype", {"fp32", "bf16", "fp16"}) == std::string("fp32");
    }
  }
  if (fields.has("communication_data_type")) {
    // The simulator reduces gradients in the dtype they accumulate in.
    const bool fp32 =
        fields.choice("communication_data_type", {"fp32", "bf16", "fp16"}) == std::string("fp32");
    if (config.fp32_grads && *config.fp32_grads != fp32) {
      fields.fail("communication_data_type",
                  "differs from data_types.grad_accum_dtype, which the simulator also reduces in",
                  "remove one of them, or make them the same");
    }
    config.fp32_grads = fp32;
  }
  if (enabled(fields, "bf16")) config.dtype = DType::kBf16;
  if (enabled(fields, "fp16")) {
    if (config.dtype) {
      throw InputError(config.path, "fp16.enabled", "bf16 and fp16 are both enabled",
                       "enable one of them");
    }
    config.dtype = DType::kFp16;
  }
}

// Adam and LAMB keep m and v per parameter, as the memory model counts; other optimizers keep
// other states.
void check_optimizer(const JsonFields& fields) {
  if (!fields.has("optimizer")) return;
  const JsonFields optimizer = fields.object("optimizer");
  if (!optimizer.has("type")) return;
  constexpr std::string_view kAdamFamily[] = {
      "Adam",       "AdamW",       "FusedAdam", "CPUAdam",   "DeepSpeedCPUAdam",
      "OneBitAdam", "ZeroOneAdam", "Lamb",      "FusedLamb", "OneBitLamb"};
  const std::string type = optimizer.string("type");
  if (std::find(std::begin(kAdamFamily), std::end(kAdamFamily), type) == std::end(kAdamFamily)) {
    optimizer.fail("type",
                   fmt::format("'{}' keeps other states than Adam's m and v, which is what the "
                               "memory and step model count",
                               type),
                   "use Adam, AdamW or Lamb (or their DeepSpeed variants)");
  }
}

}  // namespace

DeepSpeedConfig read_deepspeed_config(const std::string& path) {
  const nlohmann::json json = read_json_file(path);
  const JsonFields fields(json, path);
  DeepSpeedConfig config;
  config.path = path;
  check_keys(fields,
             {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
              "zero_optimization", "bf16", "fp16", "data_types", "communication_data_type",
              "tensor_parallel", "sparse_gradients", "amp"},
             kTopLevelUnmodeled, config);
  if (fields.has("zero_optimization")) read_zero(fields.object("zero_optimization"), config);
  config.micro_batch = count_or_auto(fields, "train_micro_batch_size_per_gpu");
  config.grad_accum = count_or_auto(fields, "gradient_accumulation_steps");
  config.grad_accum_auto = is_auto(fields, "gradient_accumulation_steps");
  config.train_batch = count_or_auto(fields, "train_batch_size");
  read_precision(fields, config);
  check_optimizer(fields);
  if (fields.has("tensor_parallel")) {
    const JsonFields tp = fields.object("tensor_parallel");
    tp.refuse_unknown(std::initializer_list<std::string_view>{"autotp_size"});
    config.autotp_size = count_or_auto(tp, "autotp_size");
  }
  refuse_unless(fields, "sparse_gradients", !fields.boolean("sparse_gradients", false),
                "sparse embedding gradients");
  refuse_unless(fields, "amp", !enabled(fields, "amp"), "NVIDIA Apex AMP");
  if (fields.has("activation_checkpointing")) {
    const JsonFields checkpointing = fields.object("activation_checkpointing");
    refuse_unless(checkpointing, "cpu_checkpointing",
                  !checkpointing.boolean("cpu_checkpointing", false),
                  "checkpoints kept in host memory");
    refuse_unless(checkpointing, "partition_activations",
                  !checkpointing.boolean("partition_activations", false),
                  "checkpoints partitioned over the tensor-parallel ranks");
  }
  return config;
}

void apply_deepspeed_config(const DeepSpeedConfig& config, const ModelSpec& model,
                            ParallelPlan& plan, std::optional<int64_t> zero_flag,
                            std::optional<int64_t> micro_batch_flag,
                            std::optional<int64_t> global_batch_flag) {
  const std::string& where = config.path;
  const auto agree = [&](std::optional<int64_t> file, std::optional<int64_t> flag,
                         const char* field, const char* flag_name) {
    if (file && flag && *file != *flag) {
      throw InputError(where, field,
                       fmt::format("the file says {} but {} says {}", *file, flag_name, *flag),
                       fmt::format("make them agree, or set \"{}\": \"auto\"", field));
    }
    return file ? file : flag;
  };
  // ZeRO stage.
  if (config.zero_stage_auto && !zero_flag) {
    throw InputError(where, "zero_optimization.stage", "\"auto\" cannot be resolved",
                     "give the stage in the file or pass --zero");
  }
  if (const auto stage = agree(config.zero_stage, zero_flag, "zero_optimization.stage", "--zero")) {
    plan.zero_stage = *stage;
  }
  if (config.dtype) plan.dtype = *config.dtype;
  // Communication overlap and buckets; "auto" sizes as the Hugging Face integration fills them.
  const int64_t h = model.hidden;
  plan.overlap.grad_reduce = config.overlap_comm.value_or(plan.zero_stage == 3);
  if (config.reduce_bucket_size) {
    plan.bucket_size = *config.reduce_bucket_size == DeepSpeedConfig::kAutoBucket
                           ? h * h
                           : std::max<int64_t>(*config.reduce_bucket_size, 1);
  }
  if (plan.zero_stage == 3 && (config.prefetch_bucket_size || config.max_live_parameters)) {
    const int64_t prefetch = config.prefetch_bucket_size.value_or(kDeepSpeedPrefetchBucket) ==
                                     DeepSpeedConfig::kAutoBucket
                                 ? h * h * 9 / 10
                                 : config.prefetch_bucket_size.value_or(kDeepSpeedPrefetchBucket);
    plan.prefetch_layers = deepspeed_prefetch_layers(
        prefetch, config.max_live_parameters.value_or(kDeepSpeedMaxLiveParameters),
        shard_sizes(model, plan).layer);
  }
  plan.offload = config.offload;
  if (config.fp32_grads) plan.precision.fp32_grads = *config.fp32_grads;
  if (config.fp32_master_weights) plan.precision.fp32_master_weights = *config.fp32_master_weights;
  if (config.fp32_optimizer_states)
    plan.precision.fp32_optimizer_states = *config.fp32_optimizer_states;

  // Batch sizes: train = micro x accumulation x dp.
  auto micro = agree(config.micro_batch, micro_batch_flag, "train_micro_batch_size_per_gpu",
                     "--micro-batch");
  auto train = agree(config.train_batch, global_batch_flag, "train_batch_size", "--global-batch");
  auto accum = config.grad_accum;
  if (!accum && !config.grad_accum_auto && !(micro && train)) accum = 1;  // DeepSpeed's default
  const int64_t dp = plan.dp;
  const auto refuse = [&](const char* field, const std::string& problem, const std::string& fix) {
    throw InputError(where, field, problem, fix);
  };
  const std::string resolve =
      "give concrete values in the file, or pass --micro-batch and --global-batch to resolve "
      "\"auto\"";
  if (micro && accum && train) {
    if (*micro * *accum * dp != *train) {
      refuse("train_batch_size",
             fmt::format("{} is not train_micro_batch_size_per_gpu {} x "
                         "gradient_accumulation_steps {} x dp {}",
                         *train, *micro, *accum, dp),
             fmt::format("use a global batch of {} (--global-batch or train_batch_size), or set "
                         "\"gradient_accumulation_steps\": \"auto\" to derive it",
                         *micro * *accum * dp));
    }
  } else if (micro && accum) {
    train = *micro * *accum * dp;
  } else if (micro && train) {
    if (*train % (*micro * dp) != 0) {
      refuse("train_batch_size",
             fmt::format("{} is not a multiple of micro-batch {} x dp {}", *train, *micro, dp),
             fmt::format("use a global batch that is a multiple of {}", *micro * dp));
    }
    accum = *train / (*micro * dp);
  } else if (accum && train) {
    if (*train % (*accum * dp) != 0) {
      refuse("train_batch_size",
             fmt::format("{} is not a multiple of gradient_accumulation_steps {} x dp {}", *train,
                         *accum, dp),
             fmt::format("use a global batch that is a multiple of {}", *accum * dp));
    }
    micro = *train / (*accum * dp);
  } else {
    refuse(micro ? "gradient_accumulation_steps" : "train_micro_batch_size_per_gpu",
           "\"auto\" (or a missing value) cannot be resolved from the other batch fields", resolve);
  }
  plan.micro_batch = *micro;
  plan.global_batch = *train;
}

}  // namespace strata
