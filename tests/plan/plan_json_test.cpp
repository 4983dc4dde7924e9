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

}  // namespace
}  // namespace strata
