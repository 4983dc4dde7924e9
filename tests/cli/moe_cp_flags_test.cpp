// The expert- and context-parallel plan flags (cli/moe_cp_flags.hpp): Megatron-LM's names
// (arguments.py) and Strata's short ones set the same plan fields, `strata search` takes the
// stack's as given, and what Strata does not model is refused naming the flag with a fix.

#include <catch2/catch.hpp>

#include "cli/moe_cp_flags.hpp"
#include "tests/cli/parse_flags.hpp"
#include "tests/input_error.hpp"

namespace strata {
namespace {

using test::parse_plan_flags;

ParallelPlan stack_plan(const cli::PlanFlags& flags) {
  ParallelPlan plan;
  cli::apply_stack_flags(flags, plan);
  return plan;
}

// --expert-model-parallel-size, --expert-tensor-parallel-size and --context-parallel-size are
// Megatron-LM's names of --ep, --etp and --cp.
TEST_CASE("Megatron's and Strata's names set the expert and context axes", "[cli][moe]") {
  const cli::PlanFlags megatron =
      parse_plan_flags({"--expert-model-parallel-size", "8", "--expert-tensor-parallel-size", "2",
                        "--context-parallel-size", "4"});
  const cli::PlanFlags short_names = parse_plan_flags({"--ep", "8", "--etp", "2", "--cp", "4"});
  for (const cli::PlanFlags* flags : {&megatron, &short_names}) {
    ParallelPlan plan = cli::apply_moe_cp_axis_flags(flags->moe_cp, {});
    CHECK(plan.ep == 8);
    CHECK(plan.expert_tp() == 2);
    CHECK(plan.cp == 4);
    // ParallelPlan::gpus(): cp multiplies the GPUs, ep is carved out of dp and does not.
    plan.dp = 8;
    CHECK(plan.gpus() == 8 * 4);
  }
  // Left out, the axes keep their defaults: ep 1, expert TP the same as tp, cp 1.
  const ParallelPlan plain = cli::apply_moe_cp_axis_flags(parse_plan_flags({}).moe_cp, {});
  CHECK(plain.ep == 1);
  CHECK(plain.etp == 0);
  CHECK(plain.cp == 1);
}

// Megatron-LM's --moe-token-dispatcher-type alltoall and --moe-grouped-gemm, Strata's
// --moe-imbalance, and --cp-comm-type with each of Transformer Engine's three exchanges.
TEST_CASE("the MoE and CP stack flags set how the plan runs them", "[cli][moe]") {
  const ParallelPlan plan =
      stack_plan(parse_plan_flags({"--moe-token-dispatcher-type", "alltoall", "--moe-grouped-gemm",
                                   "--moe-imbalance", "1.5", "--cp-comm-type", "a2a"}));
  CHECK(plan.moe_dispatcher == MoeDispatcher::kAllToAll);
  CHECK(plan.grouped_gemm);
  CHECK(plan.moe_imbalance == 1.5);
  CHECK(plan.cp_comm == CpComm::kAllToAll);
  CHECK(stack_plan(parse_plan_flags({"--cp-comm-type", "all_gather"})).cp_comm ==
        CpComm::kAllGather);
  CHECK(stack_plan(parse_plan_flags({"--cp-comm-type", "p2p"})).cp_comm == CpComm::kP2p);
  CHECK(stack_plan(parse_plan_flags({"--moe-token-dispatcher-type", "allgather"})).moe_dispatcher ==
        MoeDispatcher::kAllGather);
  // Left out: Megatron-LM's defaults (allgather, a GEMM per expert, p2p) and balanced routing.
  const ParallelPlan plain = stack_plan(parse_plan_flags({}));
  CHECK(plain.moe_dispatcher == MoeDispatcher::kAllGather);
  CHECK_FALSE(plain.grouped_gemm);
  CHECK(plain.moe_imbalance == 1);
  CHECK(plain.cp_comm == CpComm::kP2p);
}

// `strata search` declares the stack flags alone and applies them to every plan it enumerates.
TEST_CASE("search takes the MoE and CP stack flags as given", "[cli][moe]") {
  const ParallelPlan plan = stack_plan(
      test::parse_stack_flags({"--moe-token-dispatcher-type", "alltoall", "--moe-grouped-gemm",
                               "--moe-imbalance", "2", "--cp-comm-type", "all_gather"}));
  CHECK(plan.moe_dispatcher == MoeDispatcher::kAllToAll);
  CHECK(plan.grouped_gemm);
  CHECK(plan.moe_imbalance == 2);
  CHECK(plan.cp_comm == CpComm::kAllGather);
}

// Megatron-LM also takes the flex dispatcher (DeepEP), a per-layer --cp-comm-type list and the
// hierarchical a2a+p2p; Strata models none of them and says so, naming the flag.
TEST_CASE("values Strata does not model are refused naming the flag", "[cli][moe]") {
  const auto refusal = [](std::vector<std::string> args) {
    return test::input_error_of([&] { stack_plan(parse_plan_flags(std::move(args))); });
  };
  const auto flex = refusal({"--moe-token-dispatcher-type", "flex"});
  REQUIRE(flex);
  CHECK(flex->field() == "--moe-token-dispatcher-type");
  CHECK_THAT(flex->problem(), Catch::Contains("DeepEP"));
  const auto old = refusal({"--moe-token-dispatcher-type", "alltoall_seq"});
  REQUIRE(old);
  CHECK_THAT(old->problem(), Catch::Contains("allgather, alltoall"));
  const auto per_layer = refusal({"--cp-comm-type", "p2p", "p2p", "a2a"});
  REQUIRE(per_layer);
  CHECK(per_layer->field() == "--cp-comm-type");
  CHECK_THAT(per_layer->problem(), Catch::Contains("'p2p p2p a2a' is a per-layer list"));
  const auto hierarchical = refusal({"--cp-comm-type", "a2a+p2p"});
  REQUIRE(hierarchical);
  CHECK_THAT(hierarchical->problem(), Catch::Contains("hierarchical"));
  const auto unknown = refusal({"--cp-comm-type", "allgather"});
  REQUIRE(unknown);
  CHECK_THAT(unknown->problem(), Catch::Contains("p2p, all_gather, a2a"));
  for (const char* imbalance : {"0.5", "0", "nan"}) {
    INFO(imbalance);
    const auto bad = refusal({"--moe-imbalance", imbalance});
    REQUIRE(bad);
    CHECK(bad->field() == "--moe-imbalance");
  }
  const auto etp = test::input_error_of([] {
    cli::apply_moe_cp_axis_flags(parse_plan_flags({"--etp", "0"}).moe_cp, {});
  });
  REQUIRE(etp);
  CHECK(etp->field() == "--etp");
}

}  // namespace
}  // namespace strata
