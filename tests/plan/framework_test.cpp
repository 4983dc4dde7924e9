// Framework presets (plan/framework.hpp): each sets what its stack does by default, and every
// field can still be set on its own after it.

#include <catch2/catch.hpp>

#include "common/json_input.hpp"
#include "models/model_reader.hpp"
#include "plan/framework.hpp"
#include "plan/op_shapes.hpp"
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

// Kernel fusion: Megatron's stacks run a fused RMSNorm, SwiGLU and rotary kernel (Transformer
// Engine); the others run the model's eager PyTorch modules, whose kernel chains
// models/op_shape.cpp counts: an RMSNorm forward reads and writes 28 + 4e bytes per value in 6
// kernels (2e in 1 fused), SwiGLU 5e in 2 (3e in 1), rotary 20 + 2e in 6 (2e in 1), e = 2 in
// bf16. torch.compile fuses them whatever the stack.
TEST_CASE("eager stacks run the norms, SwiGLU and rotary embedding as kernel chains",
          "[plan][framework]") {
  const ModelSpec llama = load_model("llama3-8b");
  ParallelPlan plan;
  plan.seq_len = 1024;
  const int64_t tokens = 1024;
  const int64_t h = llama.hidden, f = llama.ffn_hidden, qk = llama.hidden + llama.kv_hidden();
  CHECK(apply_framework({}, Framework::kMegatronCore).fused_kernels);
  CHECK(apply_framework({}, Framework::kMegatron2022).fused_kernels);
  for (const Framework eager :
       {Framework::kDeepSpeed, Framework::kFsdp2, Framework::kDdp, Framework::kHorovod}) {
    CHECK_FALSE(apply_framework({}, eager).fused_kernels);
  }
  const PlanOpShapes fused = plan_op_shapes(llama, plan);
  CHECK(fused.norm.forward.bytes == 4 * tokens * h);
  CHECK(fused.norm.forward.kernels == 1);
  CHECK(fused.mlp_act.forward.bytes == 6 * tokens * f);
  CHECK(fused.rotary.forward.bytes == 4 * tokens * qk);
  CHECK(fused.rotary.forward.kernels == 1);

  plan = apply_framework(plan, Framework::kFsdp2);
  const PlanOpShapes eager = plan_op_shapes(llama, plan);
  CHECK(eager.norm.forward.bytes == 36 * tokens * h);
  CHECK(eager.norm.forward.kernels == 6);
  CHECK(eager.norm.backward.kernels == 12);
  CHECK(eager.mlp_act.forward.bytes == 10 * tokens * f);
  CHECK(eager.mlp_act.forward.kernels == 2);
  CHECK(eager.rotary.forward.bytes == 24 * tokens * qk);
  CHECK(eager.rotary.forward.kernels == 6);

  plan.host_dispatch = HostDispatch::kCompiled;
  CHECK(plan_op_shapes(llama, plan).norm.forward == fused.norm.forward);
  // A learned-position model has no rotary op; a LayerNorm model's norm is one kernel eager too.
  const ModelSpec gpt2 = load_model("gpt2-124m");
  plan.host_dispatch = HostDispatch::kEager;
  CHECK(plan_op_shapes(gpt2, plan).rotary.forward.bytes == 0);
  CHECK(plan_op_shapes(gpt2, plan).norm.forward.kernels == 1);
}

}  // namespace
}  // namespace strata
