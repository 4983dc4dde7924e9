// Framework presets (plan/framework.hpp): each sets what its stack does by default, and every
// field can still be set on its own after it.

#include <catch2/catch.hpp>

#include "common/json_input.hpp"
#include "plan/framework.hpp"
#include "plan/plan_json.hpp"

namespace strata {
namespace {

ParallelPlan plan_from(const std::string& text) {
  const nlohmann::json json = parse_json_text(text, "test.json");
  return parse_plan_json(JsonFields(json, "test.json", "plan"), ParallelPlan{});
}

// A plan without "framework" is megatron-core's: ParallelPlan's defaults are its preset.
TEST_CASE("ParallelPlan's defaults are megatron-core's preset", "[plan][framework]") {
  const ParallelPlan plain;
  const ParallelPlan preset = apply_framework(plain, Framework::kMegatronCore);
  CHECK(preset.attention == plain.attention);
  CHECK(preset.overlap == plain.overlap);
  CHECK(preset.precision == plain.precision);
  CHECK(preset.bucket_size == plain.bucket_size);
  CHECK(preset.zero_stage == plain.zero_stage);
}

// The defaults each framework's own code sets (the table in plan/framework.cpp).
TEST_CASE("each preset sets its framework's defaults", "[plan][framework]") {
  const ParallelPlan megatron_2022 = apply_framework({}, Framework::kMegatron2022);
  CHECK(megatron_2022.attention == AttentionKind::kUnfused);
  CHECK(megatron_2022.overlap == Overlap{false, false, false, false});
  const ParallelPlan deepspeed = apply_framework({}, Framework::kDeepSpeed);
  CHECK(deepspeed.bucket_size == 500'000'000);  // reduce_bucket_size
  CHECK_FALSE(deepspeed.precision.fp32_grads);
  const ParallelPlan fsdp2 = apply_framework({}, Framework::kFsdp2);
  CHECK(fsdp2.zero_stage == 3);
  CHECK(fsdp2.overlap.grad_reduce);
  CHECK(fsdp2.precision.fp32_params);
  CHECK(apply_framework({}, Framework::kDdp).bucket_size == 25 * 1024 * 1024 / 4);  // 25 MB fp32
  // Megatron-Core's bucket: max(40M, 1M x dp) with --overlap-grad-reduce, one bucket without.
  ParallelPlan megatron;
  megatron.dp = 64;
  CHECK(gradient_bucket_parameters(megatron) == std::numeric_limits<int64_t>::max());
  megatron.overlap.grad_reduce = true;
  CHECK(gradient_bucket_parameters(megatron) == 64'000'000);
  megatron.dp = 8;
  CHECK(gradient_bucket_parameters(megatron) == 40'000'000);
}

// In a scenario's plan the preset applies first, whatever the order of the keys, and the other
// keys override it.
TEST_CASE("a plan's own fields override its framework's preset", "[plan][framework]") {
  const ParallelPlan plan =
      plan_from(R"({"overlap_grad_reduce": false, "framework": "fsdp2", "bucket_size": 7})");
  CHECK(plan.framework == Framework::kFsdp2);
  CHECK_FALSE(plan.overlap.grad_reduce);
  CHECK(plan.bucket_size == 7);
  CHECK(plan.precision.fp32_params);  // from the preset
  CHECK(plan_from(R"({"framework": "megatron-2022", "attention": "flash"})").attention ==
        AttentionKind::kFlash);
}

// plan_to_json writes every preset field, so a report's plan reads back to the same plan.
TEST_CASE("plan JSON round trip keeps the framework fields", "[plan][framework]") {
  ParallelPlan plan = apply_framework({}, Framework::kDeepSpeed);
  plan.overlap.tp_comm = true;
  plan.precision.fp32_optimizer_states = false;
  const nlohmann::json json = plan_to_json(plan);
  const ParallelPlan back = parse_plan_json(JsonFields(json, "round trip"), ParallelPlan{});
  CHECK(back.framework == plan.framework);
  CHECK(back.overlap == plan.overlap);
  CHECK(back.precision == plan.precision);
  CHECK(back.bucket_size == plan.bucket_size);
}

}  // namespace
}  // namespace strata
