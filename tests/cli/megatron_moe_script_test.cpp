// Megatron-LM launch scripts with MoE and context-parallel flags (--megatron-args,
// cli/megatron_args.hpp): a Mixtral script's flags are modelled into the plan and the model, the
// router's loss terms are read and ignored, the flags that change the step and are not modelled
// are refused, and a per-layer --cp-comm-type reaches its flag whole.

#include <catch2/catch.hpp>

#include <string>

#include "cli/megatron_ignored_flags.hpp"
#include "models/model_reader.hpp"
#include "tests/cli/parse_flags.hpp"
#include "tests/input_error.hpp"

namespace strata {
namespace {

std::string script(const std::string& name) {
  return std::string(STRATA_SOURCE_DIR) + "/tests/cli/data/megatron/" + name;
}

// tests/cli/data/megatron/train_mixtral_8x7b_distributed.sh (after Megatron-LM's example): pp 4,
// ep 8, --num-experts 8 --moe-router-topk 2, the all-to-all dispatcher and grouped GEMMs over
// Mixtral's transformer; the model counts what Mixtral's config.json counts.
TEST_CASE("a Megatron Mixtral script gives the expert plan and model", "[cli][moe][megatron]") {
  const cli::PlanFlags flags =
      test::parse_plan_flags({"--megatron-args", script("train_mixtral_8x7b_distributed.sh")});
  CHECK(flags.pp == 4);
  CHECK(flags.tp == 1);
  const ParallelPlan axes = cli::apply_moe_cp_axis_flags(flags.moe_cp, {});
  CHECK(axes.ep == 8);
  CHECK(axes.cp == 1);
  ParallelPlan stack;
  cli::apply_stack_flags(flags, stack);
  CHECK(stack.moe_dispatcher == MoeDispatcher::kAllToAll);
  CHECK(stack.grouped_gemm);
  CHECK(stack.overlap.grad_reduce);
  const ModelSpec model = cli::megatron_model(flags.model_flags, std::nullopt, 4096, 1);
  CHECK(model.experts == 8);
  CHECK(model.experts_per_token == 2);
  CHECK(model.expert_ffn_hidden == 14336);
  const ModelSpec hf =
      load_model(std::string(STRATA_SOURCE_DIR) + "/tests/models/data/mixtral-8x7b.json");
  CHECK(count_parameters(model).total == count_parameters(hf).total);
}

// The router's loss terms and logging cost elementwise work beside the experts' GEMMs; an fp32
// router, fused permutation, padding to capacity and the EP communication overlap change the
// step and are not modelled.
TEST_CASE("MoE flags are read and ignored, or refused, by what they change",
          "[cli][moe][megatron]") {
  for (const char* ignored :
       {"--moe-router-load-balancing-type", "--moe-aux-loss-coeff", "--moe-z-loss-coeff",
        "--moe-input-jitter-eps", "--moe-per-layer-logging", "--moe-token-drop-policy"}) {
    INFO(ignored);
    CHECK(cli::ignored_flag_reason(ignored));
  }
  for (const char* refused :
       {"--moe-router-dtype", "--moe-permute-fusion", "--moe-pad-expert-input-to-capacity",
        "--overlap-moe-expert-parallel-comm", "--moe-shared-expert-overlap", "--moe-enable-deepep",
        "--hierarchical-context-parallel-sizes"}) {
    INFO(refused);
    CHECK_FALSE(cli::ignored_flag_reason(refused));
  }
  const auto error = test::input_error_of([] {
    test::parse_plan_flags({"--megatron-args", script("moe_unmodelled_flags.sh")});
  });
  REQUIRE(error);
  CHECK(error->field() ==
        "--moe-router-dtype, --moe-permute-fusion, --moe-pad-expert-input-to-capacity, "
        "--overlap-moe-expert-parallel-comm, --hierarchical-context-parallel-sizes");
}

// A flag's later words are its values up to the next flag, but for a redirection's; an option
// that takes one value reads the first as before, one that takes a list (--cp-comm-type) them all,
// so that a per-layer list is refused rather than cut to its first type.
TEST_CASE("a script's per-layer --cp-comm-type is refused whole", "[cli][megatron]") {
  const std::vector<cli::ScriptFlag> flags =
      cli::script_flags("python pretrain_gpt.py --cp-comm-type p2p a2a 2> log --seq-length 8 x");
  REQUIRE(flags.size() == 2);
  CHECK(flags[0].value == "p2p");
  CHECK(flags[0].more_values == std::vector<std::string>{"a2a"});
  CHECK(flags[1].more_values == std::vector<std::string>{"x"});
  const cli::PlanFlags parsed =
      test::parse_plan_flags({"--megatron-args", script("cp_comm_per_layer.sh")});
  CHECK(parsed.moe_cp.cp == 2);
  CHECK(parsed.moe_cp.cp_comm == std::vector<std::string>{"p2p", "a2a"});
  CHECK(parsed.seq_len == 128);
  const auto error = test::input_error_of([&] {
    ParallelPlan plan;
    cli::apply_stack_flags(parsed, plan);
  });
  REQUIRE(error);
  CHECK(error->field() == "--cp-comm-type");
}

}  // namespace
}  // namespace strata
