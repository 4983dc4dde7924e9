// The plan's JSON (plan/plan_json.hpp): what the writer writes reads back to the same plan, and a
// plan that leaves the optional fields at their defaults writes the bytes it always wrote, so
// that golden files, reports and `strata check` scenarios do not move.

#include <catch2/catch.hpp>

#include "common/json_input.hpp"
#include "plan/framework.hpp"
#include "plan/plan_json.hpp"
#include "tests/input_error.hpp"

namespace strata {
namespace {

ParallelPlan plan_from(const std::string& text) {
  const nlohmann::json json = parse_json_text(text, "test.json");
  return parse_plan_json(JsonFields(json, "test.json", "plan"), ParallelPlan{});
}

ParallelPlan round_trip(const ParallelPlan& plan) {
  const nlohmann::json json = plan_to_json(plan);
  return parse_plan_json(JsonFields(json, "round trip"), ParallelPlan{});
}

// ParallelPlan's defaults as the writer wrote them before the expert- and context-parallel
// fields existed (keys sorted, as nlohmann::json keeps them).
constexpr const char* kDefaultPlanJson =
    R"({"attention":"flash","bucket_size":0,"dp":1,"dtype":"bf16","fp32_grads":true,)"
    R"("fp32_master_weights":true,"fp32_optimizer_states":true,"fp32_params":false,)"
    R"("fp8":"none","fp8_param_gather":false,"framework":"megatron-core","global_batch":1,)"
    R"("host_dispatch":"eager","micro_batch":1,"overlap_grad_reduce":false,)"
    R"("overlap_p2p_comm":true,"overlap_param_gather":false,"pp":1,"recompute":"none",)"
    R"("schedule":"1f1b","seq_len":2048,"sequence_parallel":false,"tp":1,)"
    R"("tp_comm_overlap":false,"vpp":1,"zero_stage":0})";

TEST_CASE("a plan at the defaults writes the bytes it always wrote", "[plan][json]") {
  CHECK(plan_to_json(ParallelPlan{}).dump() == kDefaultPlanJson);
  CHECK(plan_to_json(round_trip(ParallelPlan{})).dump() == kDefaultPlanJson);
  CHECK(plan_to_json(plan_from("{}")).dump() == kDefaultPlanJson);
}

// Every preset's plan, dense as the zoo's, writes none of the new keys: they are written only when
// a plan sets them.
TEST_CASE("no preset writes the expert- or context-parallel keys", "[plan][json]") {
  for (const Framework framework :
       {Framework::kMegatronCore, Framework::kMegatron2022, Framework::kDeepSpeed,
        Framework::kFsdp2, Framework::kDdp, Framework::kHorovod}) {
    const nlohmann::json json = plan_to_json(apply_framework({}, framework));
    for (const char* key :
         {"ep", "etp", "moe_dispatcher", "grouped_gemm", "moe_imbalance", "cp", "cp_comm"}) {
      INFO(to_string(framework) << " " << key);
      CHECK_FALSE(json.contains(key));
    }
  }
}

// Each field away from its default is written and read back: ep 8 (of dp 16), expert TP 2, the
// all-to-all dispatcher, grouped GEMMs, the busiest expert at 1.25x the mean, cp 4 and each CP
// exchange.
TEST_CASE("plan JSON round trip keeps the expert- and context-parallel fields", "[plan][json]") {
  ParallelPlan plan;
  plan.dp = 16;
  plan.ep = 8;
  plan.etp = 2;
  plan.moe_dispatcher = MoeDispatcher::kAllToAll;
  plan.grouped_gemm = true;
  plan.moe_imbalance = 1.25;
  plan.cp = 4;
  for (const CpComm comm : {CpComm::kAllGather, CpComm::kAllToAll, CpComm::kP2p}) {
    plan.cp_comm = comm;
    const ParallelPlan back = round_trip(plan);
    CHECK(back.ep == 8);
    CHECK(back.etp == 2);
    CHECK(back.moe_dispatcher == MoeDispatcher::kAllToAll);
    CHECK(back.grouped_gemm);
    CHECK(back.moe_imbalance == 1.25);
    CHECK(back.cp == 4);
    CHECK(back.cp_comm == comm);
  }
  const nlohmann::json json = plan_to_json(plan);
  CHECK(json.at("moe_dispatcher") == "alltoall");
  CHECK(json.at("moe_imbalance") == 1.25);
  // A field back at its default is left out again.
  plan.cp_comm = CpComm::kP2p;
  CHECK_FALSE(plan_to_json(plan).contains("cp_comm"));
}

// The names as Megatron-LM spells them (--moe-token-dispatcher-type, --cp-comm-type).
TEST_CASE("plan JSON reads the dispatcher and CP exchange by Megatron's names", "[plan][json]") {
  const ParallelPlan plan =
      plan_from(R"({"ep": 2, "etp": 1, "moe_dispatcher": "allgather", "grouped_gemm": false,)"
                R"( "moe_imbalance": 2, "cp": 2, "cp_comm": "all_gather"})");
  CHECK(plan.ep == 2);
  CHECK(plan.expert_tp() == 1);
  CHECK(plan.moe_dispatcher == MoeDispatcher::kAllGather);
  CHECK_FALSE(plan.grouped_gemm);
  CHECK(plan.moe_imbalance == 2);
  CHECK(plan.cp == 2);
  CHECK(plan.cp_comm == CpComm::kAllGather);
  CHECK(plan_from(R"({"cp_comm": "a2a"})").cp_comm == CpComm::kAllToAll);
  CHECK(plan_from(R"({"moe_dispatcher": "alltoall"})").moe_dispatcher == MoeDispatcher::kAllToAll);
}

// Unknown values are refused naming the file and the field, listing the known ones; counts below
// 1 and a non-positive imbalance are refused as the other counts are.
TEST_CASE("plan JSON refuses unknown dispatchers, CP exchanges and bad counts", "[plan][json]") {
  const auto refusal = [](const std::string& text) {
    return test::input_error_of([&] { plan_from(text); });
  };
  const auto flex = refusal(R"({"moe_dispatcher": "flex"})");
  REQUIRE(flex);
  CHECK(flex->where() == "test.json");
  CHECK(flex->field() == "plan.moe_dispatcher");
  CHECK_THAT(flex->problem(), Catch::Contains("allgather, alltoall"));
  const auto ring = refusal(R"({"cp_comm": "a2a+p2p"})");
  REQUIRE(ring);
  CHECK(ring->field() == "plan.cp_comm");
  CHECK_THAT(ring->problem(), Catch::Contains("p2p, all_gather, a2a"));
  for (const char* bad : {R"({"ep": 0})", R"({"cp": 0})", R"({"etp": -1})",
                          R"({"moe_imbalance": 0})", R"({"grouped_gemm": 1})"}) {
    INFO(bad);
    CHECK(refusal(bad));
  }
}

}  // namespace
}  // namespace strata
