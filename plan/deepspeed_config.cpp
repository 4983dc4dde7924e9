#include "plan/deepspeed_config.hpp"

#include <fmt/format.h>

#include "common/error.hpp"
#include "common/json_input.hpp"

namespace strata {

namespace {

bool is_auto(const JsonFields& fields, const char* key) {
  return fields.has(key) && fields.at(key).is_string() &&
         fields.at(key).get<std::string>() == "auto";
}

// A positive count, or nullopt when absent or "auto".
std::optional<int64_t> count_or_auto(const JsonFields& fields, const char* key) {
  if (!fields.has(key) || is_auto(fields, key)) return std::nullopt;
  return fields.positive_int(key);
}

bool enabled(const JsonFields& fields, const char* section) {
  if (!fields.has(section)) return false;
  const JsonFields sub = fields.object(section);
  if (!sub.has("enabled") || is_auto(sub, "enabled")) return false;
  return sub.boolean("enabled", false);
}

}  // namespace

DeepSpeedConfig read_deepspeed_config(const std::string& path) {
  const nlohmann::json json = read_json_file(path);
  const JsonFields fields(json, path);
  DeepSpeedConfig config;
  config.path = path;
  if (fields.has("zero_optimization")) {
    const JsonFields zero = fields.object("zero_optimization");
    if (is_auto(zero, "stage")) {
      config.zero_stage_auto = true;
    } else if (zero.has("stage")) {
      config.zero_stage = zero.non_negative_int("stage");
    }
  }
  config.micro_batch = count_or_auto(fields, "train_micro_batch_size_per_gpu");
  config.grad_accum = count_or_auto(fields, "gradient_accumulation_steps");
  config.grad_accum_auto = is_auto(fields, "gradient_accumulation_steps");
  config.train_batch = count_or_auto(fields, "train_batch_size");
  if (enabled(fields, "bf16")) config.dtype = DType::kBf16;
  if (enabled(fields, "fp16")) {
    if (config.dtype) {
      throw InputError(path, "fp16.enabled", "bf16 and fp16 are both enabled",
                       "enable one of them");
    }
    config.dtype = DType::kFp16;
  }
  return config;
}

void apply_deepspeed_config(const DeepSpeedConfig& config, ParallelPlan& plan,
                            std::optional<int64_t> zero_flag,
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

  // Batch sizes: train = micro x accumulation x dp.
  auto micro = agree(config.micro_batch, micro_batch_flag, "train_micro_batch_size_per_gpu",
                     "--micro-batch");
  auto train = agree(config.train_batch, global_batch_flag, "train_batch_size", "--global-batch");
  auto accum = config.grad_accum;
  if (!accum && !config.grad_accum_auto && !(micro && train)) accum = 1;  // DeepSpeed's default
  const int64_t dp = plan.dp;
  const auto refuse = [&](const char* field, const std::string& problem) {
    throw InputError(where, field, problem,
                     "give concrete values in the file, or pass --micro-batch and --global-batch "
                     "to resolve \"auto\"");
  };
  if (micro && accum && train) {
    if (*micro * *accum * dp != *train) {
      refuse("train_batch_size", fmt::format("{} is not train_micro_batch_size_per_gpu {} x "
                                             "gradient_accumulation_steps {} x dp {}",
                                             *train, *micro, *accum, dp));
    }
  } else if (micro && accum) {
    train = *micro * *accum * dp;
  } else if (micro && train) {
    if (*train % (*micro * dp) != 0) {
      refuse("train_batch_size",
             fmt::format("{} is not a multiple of micro-batch {} x dp {}", *train, *micro, dp));
    }
    accum = *train / (*micro * dp);
  } else if (accum && train) {
    if (*train % (*accum * dp) != 0) {
      refuse("train_batch_size",
             fmt::format("{} is not a multiple of gradient_accumulation_steps {} x dp {}", *train,
                         *accum, dp));
    }
    micro = *train / (*accum * dp);
  } else {
    refuse(micro ? "gradient_accumulation_steps" : "train_micro_batch_size_per_gpu",
           "\"auto\" (or a missing value) cannot be resolved from the other batch fields");
  }
  plan.micro_batch = *micro;
  plan.global_batch = *train;
}

}  // namespace strata
