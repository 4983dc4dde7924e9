// The precisions the executor trains (check_executable_model, exec/model_params.hpp): fp32, and
// bf16 as Megatron-LM trains it (bf16 params beside fp32 master weights and fp32 AdamW states,
// Micikevicius et al. 2018), with gradients reduced in fp32 or bf16. Every other precision is
// refused with the field that asks for it: fp16 (no fp16 kernels or loss scaling), fp32 params cast
// per op (FSDP2's MixedPrecisionPolicy), and optimizers without fp32 masters or states.

#include <catch2/catch.hpp>

#include <string>

#include "common/error.hpp"
#include "exec/model_params.hpp"
#include "tests/exec/parity_plans.hpp"

namespace strata {
namespace {

// The field check_executable_model names in its refusal of `plan`, or "" when it accepts it.
std::string refused_field(const ParallelPlan& plan) {
  try {
    check_executable_model(test::parity_model(), plan, "test");
  } catch (const InputError& error) {
    return error.field();
  }
  return "";
}

ParallelPlan serial(DType dtype) {
  ParallelPlan plan = test::parity_plan(test::kParityPlans[0], 1, 8, 16);
  plan.dtype = dtype;
  return plan;
}

TEST_CASE("the executor trains fp32 and Megatron-LM's bf16, and names what it refuses",
          "[exec][bf16]") {
  CHECK(refused_field(serial(DType::kFp32)) == "");
  CHECK(refused_field(serial(DType::kBf16)) == "");
  ParallelPlan bf16_reduced = serial(DType::kBf16);
  bf16_reduced.precision.fp32_grads = false;  // --grad-reduce-in-bf16
  CHECK(refused_field(bf16_reduced) == "");

  CHECK(refused_field(serial(DType::kFp16)) == "dtype (--dtype)");
  ParallelPlan cast_per_op = serial(DType::kBf16);
  cast_per_op.precision.fp32_params = true;
  CHECK(refused_field(cast_per_op) == "fp32_params");
  ParallelPlan no_master = serial(DType::kBf16);
  no_master.precision.fp32_master_weights = false;
  CHECK(refused_field(no_master) == "fp32_master_weights");
  ParallelPlan bf16_states = serial(DType::kBf16);
  bf16_states.precision.fp32_optimizer_states = false;
  CHECK(refused_field(bf16_states) == "fp32_optimizer_states");
}

}  // namespace
}  // namespace strata
