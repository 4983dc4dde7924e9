// DeepSpeed config resolution: train_batch_size = micro x accumulation x dp resolves one
// "auto" value; the command line resolves the rest; contradictions are refused by field.

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "common/error.hpp"
#include "plan/deepspeed_config.hpp"

namespace strata {
namespace {

DeepSpeedConfig config_from(const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / "strata_ds_config_test.json";
  std::ofstream(path) << text;
  return read_deepspeed_config(path.string());
}

ParallelPlan dp(int64_t size) {
  ParallelPlan plan;
  plan.dp = size;
  return plan;
}

TEST_CASE("concrete values set zero stage, batch sizes and dtype", "[deepspeed]") {
  ParallelPlan plan = dp(4);
  apply_deepspeed_config(config_from(R"({"zero_optimization": {"stage": 2},
      "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 8,
      "fp16": {"enabled": true}})"),
                         plan, std::nullopt, std::nullopt, std::nullopt);
  CHECK(plan.zero_stage == 2);
  CHECK(plan.micro_batch == 2);
  CHECK(plan.global_batch == 64);  // 2 x 8 x 4
  CHECK(plan.dtype == DType::kFp16);
}

TEST_CASE("one auto value is derived from the other two", "[deepspeed]") {
  ParallelPlan plan = dp(4);
  apply_deepspeed_config(
      config_from(R"({"train_batch_size": 64, "gradient_accumulation_steps": "auto",
      "train_micro_batch_size_per_gpu": 4})"),
      plan, std::nullopt, std::nullopt, std::nullopt);
  CHECK(plan.global_batch == 64);
  CHECK(plan.micro_batch == 4);
}

TEST_CASE("auto values are resolved by --micro-batch and --global-batch", "[deepspeed]") {
  ParallelPlan plan = dp(2);
  apply_deepspeed_config(config_from(R"({"train_batch_size": "auto",
      "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto"})"),
                         plan, std::nullopt, 2, 16);
  CHECK(plan.micro_batch == 2);
  CHECK(plan.global_batch == 16);
}

TEST_CASE("unresolvable auto and contradictions are refused by field", "[deepspeed]") {
  ParallelPlan plan = dp(2);
  const auto all_auto = config_from(R"({"train_batch_size": "auto",
      "train_micro_batch_size_per_gpu": "auto"})");
  CHECK_THROWS_WITH(
      apply_deepspeed_config(all_auto, plan, std::nullopt, std::nullopt, std::nullopt),
      Catch::Contains("train_micro_batch_size_per_gpu") && Catch::Contains("auto"));
  const auto concrete = config_from(R"({"train_micro_batch_size_per_gpu": 4})");
  CHECK_THROWS_WITH(
      apply_deepspeed_config(concrete, plan, std::nullopt, 2, std::nullopt),
      Catch::Contains("train_micro_batch_size_per_gpu") && Catch::Contains("--micro-batch says 2"));
  const auto inconsistent = config_from(R"({"train_batch_size": 10,
      "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2})");
  CHECK_THROWS_WITH(
      apply_deepspeed_config(inconsistent, plan, std::nullopt, std::nullopt, std::nullopt),
      Catch::Contains("train_batch_size"));
  const auto auto_stage = config_from(R"({"zero_optimization": {"stage": "auto"},
      "train_micro_batch_size_per_gpu": 1})");
  CHECK_THROWS_WITH(
      apply_deepspeed_config(auto_stage, plan, std::nullopt, std::nullopt, std::nullopt),
      Catch::Contains("zero_optimization.stage"));
  apply_deepspeed_config(auto_stage, plan, 3, std::nullopt, std::nullopt);
  CHECK(plan.zero_stage == 3);
}

}  // namespace
}  // namespace strata
