// DeepSpeed config resolution: train_batch_size = micro x accumulation x dp resolves one
// "auto" value; the command line resolves the rest; contradictions are refused by field. The
// ZeRO keys set the plan's overlap, buckets, prefetch window, offload and precision as
// DeepSpeed's own defaults and the Hugging Face integration's "auto" rules say
// (plan/deepspeed_config.hpp); what is not modeled is refused by name.

#include <catch2/catch.hpp>

#include "common/error.hpp"
#include "models/model_reader.hpp"
#include "plan/deepspeed_config.hpp"
#include "plan/shard_sizes.hpp"
#include "tests/temp_file.hpp"

namespace strata {
namespace {

// A file of its own per call: ctest runs this suite's cases in parallel processes.
DeepSpeedConfig config_from(const std::string& text) {
  const test::TempFile file(text, "strata_ds_config_test");
  return read_deepspeed_config(file.path());
}

const ModelSpec& gpt2() {
  static const ModelSpec model = load_model("gpt2-124m");
  return model;
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
                         gpt2(), plan, std::nullopt, std::nullopt, std::nullopt);
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
      gpt2(), plan, std::nullopt, std::nullopt, std::nullopt);
  CHECK(plan.global_batch == 64);
  CHECK(plan.micro_batch == 4);
}

TEST_CASE("auto values are resolved by --micro-batch and --global-batch", "[deepspeed]") {
  ParallelPlan plan = dp(2);
  apply_deepspeed_config(config_from(R"({"train_batch_size": "auto",
      "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto"})"),
                         gpt2(), plan, std::nullopt, 2, 16);
  CHECK(plan.micro_batch == 2);
  CHECK(plan.global_batch == 16);
}

TEST_CASE("unresolvable auto and contradictions are refused by field", "[deepspeed]") {
  ParallelPlan plan = dp(2);
  const auto all_auto = config_from(R"({"train_batch_size": "auto",
      "train_micro_batch_size_per_gpu": "auto"})");
  CHECK_THROWS_WITH(
      apply_deepspeed_config(all_auto, gpt2(), plan, std::nullopt, std::nullopt, std::nullopt),
      Catch::Contains("train_micro_batch_size_per_gpu") && Catch::Contains("auto"));
  const auto concrete = config_from(R"({"train_micro_batch_size_per_gpu": 4})");
  CHECK_THROWS_WITH(
      apply_deepspeed_config(concrete, gpt2(), plan, std::nullopt, 2, std::nullopt),
      Catch::Contains("train_micro_batch_size_per_gpu") && Catch::Contains("--micro-batch says 2"));
  const auto inconsistent = config_from(R"({"train_batch_size": 10,
      "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2})");
  CHECK_THROWS_WITH(
      apply_deepspeed_config(inconsistent, gpt2(), plan, std::nullopt, std::nullopt, std::nullopt),
      Catch::Contains("train_batch_size"));
  const auto auto_stage = config_from(R"({"zero_optimization": {"stage": "auto"},
      "train_micro_batch_size_per_gpu": 1})");
  CHECK_THROWS_WITH(
      apply_deepspeed_config(auto_stage, gpt2(), plan, std::nullopt, std::nullopt, std::nullopt),
      Catch::Contains("zero_optimization.stage"));
  apply_deepspeed_config(auto_stage, gpt2(), plan, 3, std::nullopt, std::nullopt);
  CHECK(plan.zero_stage == 3);
  // The fix for a global batch that the file's accumulation contradicts is one that works.
  const auto one_step = config_from(R"({"train_batch_size": "auto",
      "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": 1})");
  CHECK_THROWS_WITH(apply_deepspeed_config(one_step, gpt2(), plan, std::nullopt, 2, 16),
                    Catch::Contains("use a global batch of 4"));
  apply_deepspeed_config(one_step, gpt2(), plan, std::nullopt, 2, 4);
  CHECK(plan.global_batch == 4);
}

ParallelPlan applied(const std::string& text, int64_t data_parallel = 2) {
  ParallelPlan plan = dp(data_parallel);
  apply_deepspeed_config(config_from(text), gpt2(), plan, std::nullopt, 1, 2 * data_parallel);
  return plan;
}

// DeepSpeed's overlap_comm defaults to true under stage 3 and false below
// (deepspeed/runtime/zero/config.py, overlap_comm_valid); the file's value wins.
TEST_CASE("overlap_comm sets the gradient overlap, by DeepSpeed's default per stage",
          "[deepspeed]") {
  CHECK(applied(R"({"zero_optimization": {"stage": 3}})").overlap.grad_reduce);
  CHECK_FALSE(applied(R"({"zero_optimization": {"stage": 2}})").overlap.grad_reduce);
  CHECK(
      applied(R"({"zero_optimization": {"stage": 2, "overlap_comm": true}})").overlap.grad_reduce);
  CHECK_FALSE(
      applied(R"({"zero_optimization": {"stage": 3, "overlap_comm": false}})").overlap.grad_reduce);
}

// reduce_bucket_size is the gradient bucket; "auto" is h^2 (Hugging Face's fill, h = 768 for
// GPT-2 124M). The prefetch window is ceil(stage3_prefetch_bucket_size / layer parameters)
// layers, bounded so that stage3_max_live_parameters hold every gathered layer.
TEST_CASE("bucket sizes and the ZeRO-3 prefetch window in layers", "[deepspeed]") {
  CHECK(applied(R"({"zero_optimization": {"stage": 2, "reduce_bucket_size": 2e8}})").bucket_size ==
        200'000'000);
  CHECK(
      applied(R"({"zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"}})").bucket_size ==
      768 * 768);
  const int64_t layer = shard_sizes(gpt2(), ParallelPlan{}).layer;  // 7,087,872 on one rank
  REQUIRE(layer == 7'087'872);
  // 5e7 / 7,087,872 = 7.05: 8 layers ahead.
  CHECK(applied(R"({"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 5e7}})")
            .prefetch_layers == 8);
  // "auto": 0.9 x 768^2 = 530,841 parameters, less than one layer: one layer ahead.
  CHECK(applied(R"({"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": "auto"}})")
            .prefetch_layers == 1);
  // 3e7 live parameters hold 4 layers: the computing one and 3 ahead.
  CHECK(applied(R"({"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 5e7,
      "stage3_max_live_parameters": 3e7}})")
            .prefetch_layers == 3);
  CHECK(applied(R"({"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 0}})")
            .prefetch_layers == 0);
  // Without either key the plan keeps the framework's default (-1).
  CHECK(applied(R"({"zero_optimization": {"stage": 3}})").prefetch_layers == -1);
}

TEST_CASE("offload to the CPU, AutoTP and the master-weight options", "[deepspeed]") {
  const ParallelPlan offload = applied(R"({"zero_optimization": {"stage": 3,
      "offload_optimizer": {"device": "cpu", "pin_memory": true},
      "offload_param": {"device": "cpu"}}})");
  CHECK(offload.offload.optimizer);
  CHECK(offload.offload.params);
  CHECK_FALSE(applied(R"({"zero_optimization": {"stage": 2,
      "offload_optimizer": {"device": "none"}}})")
                  .offload.optimizer);
  CHECK(config_from(R"({"tensor_parallel": {"autotp_size": 4}})").autotp_size == 4);
  const ParallelPlan bf16 = applied(R"({"bf16": {"enabled": true,
      "bf16_master_weights_and_grads": true, "bf16_optimizer_states": true}})");
  CHECK_FALSE(bf16.precision.fp32_master_weights);
  CHECK_FALSE(bf16.precision.fp32_grads);
  CHECK_FALSE(bf16.precision.fp32_optimizer_states);
  CHECK(applied(R"({"data_types": {"grad_accum_dtype": "fp32"}})").precision.fp32_grads);
}

TEST_CASE("unknown keys and unmodeled features are refused by name", "[deepspeed]") {
  CHECK_THROWS_WITH(config_from(R"({"zero_optimisation": {"stage": 2}})"),
                    Catch::Contains("zero_optimisation") && Catch::Contains("unknown field"));
  CHECK_THROWS_WITH(config_from(R"({"zero_optimization": {"stage": 2, "overlap_com": true}})"),
                    Catch::Contains("zero_optimization.overlap_com"));
  CHECK_THROWS_WITH(
      config_from(R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}})"),
      Catch::Contains("zero_optimization.offload_param.device") && Catch::Contains("NVMe"));
  CHECK_THROWS_WITH(
      config_from(R"({"zero_optimization": {"stage": 2, "reduce_scatter": false}})"),
      Catch::Contains("zero_optimization.reduce_scatter") && Catch::Contains("not modeled"));
  CHECK_THROWS_WITH(config_from(R"({"zero_optimization": {"stage": 2,
      "offload_optimizer": {"device": "cpu", "ratio": 0.3}}})"),
                    Catch::Contains("ratio"));
  CHECK_THROWS_WITH(config_from(R"({"optimizer": {"type": "SGD", "params": {"lr": 0.1}}})"),
                    Catch::Contains("optimizer.type") && Catch::Contains("SGD"));
  CHECK_THROWS_WITH(
      config_from(R"({"zero_optimization": {"stage": 2, "zero_quantized_gradients": true}})"),
      Catch::Contains("ZeRO++"));
  // Keys that do not change the prediction are accepted, and listed with why for the command to
  // say so.
  const DeepSpeedConfig accepted = config_from(R"({"gradient_clipping": 1.0, "steps_per_print": 10,
      "optimizer": {"type": "AdamW", "params": {"lr": 3e-4}}, "scheduler": {"type": "WarmupLR"},
      "zero_optimization": {"stage": 2, "contiguous_gradients": true,
                            "allgather_bucket_size": 5e8, "reduce_scatter": true}})");
  REQUIRE(accepted.unmodeled.size() == 6);
  CHECK_THAT(accepted.unmodeled.front(), Catch::StartsWith("optimizer ("));
  CHECK_THAT(accepted.unmodeled.back(),
             Catch::StartsWith("zero_optimization.allgather_bucket_size ("));
}

}  // namespace
}  // namespace strata
