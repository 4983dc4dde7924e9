// The task graph of a tiny plan, exported as JSON and DOT, equals golden files reviewed by eye
// (tests/plan/golden/). A deliberate change to the lowering regenerates them with
//   STRATA_UPDATE_GOLDEN=1 build/default/tests/plan/strata_tests_plan "[golden]"
// and the diff is reviewed before it is committed.

#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/error.hpp"
#include "plan/graph_export.hpp"
#include "tests/plan/plan_fixtures.hpp"

namespace strata {
namespace {

// Two layers on two pipeline stages, two micro-batches under 1F1B, dp 2 with ZeRO 1.
TaskGraph tiny_graph() {
  const ModelSpec model = test::small_model(2, 64, 4, 128, 32);
  ParallelPlan plan = test::make_plan(2, 1, 2, 1, 4, 16);
  plan.zero_stage = 1;
  return test::compile_checked(model, plan).graph;
}

void check_golden(const std::string& name, const std::string& actual) {
  const std::string path = std::string(STRATA_SOURCE_DIR) + "/tests/plan/golden/" + name;
  if (std::getenv("STRATA_UPDATE_GOLDEN") != nullptr) {
    std::ofstream(path, std::ios::binary) << actual;
  }
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  std::stringstream expected;
  expected << in.rdbuf();
  CHECK(actual == expected.str());
}

TEST_CASE("the tiny plan's task graph JSON equals its golden file", "[golden]") {
  check_golden("tiny_pp2_dp2_zero1.json", graph_to_json(tiny_graph()));
}

TEST_CASE("the tiny plan's task graph DOT equals its golden file", "[golden]") {
  check_golden("tiny_pp2_dp2_zero1.dot", graph_to_dot(tiny_graph(), "tiny.dot"));
}

// ZeRO 3 of a tiny MoE at ep 1 (one dense layer, one MoE layer of 4 experts, dp 2, one
// micro-batch): the experts are not kept apart, so each layer is one gather over dp, its gradient
// bucket one reduce-scatter. The golden file was written by the compiler before ZeRO 3 was lowered
// for ep > 1 (commit 24978ed), so it holds that change left ep 1 graphs byte for byte as they were.
TEST_CASE("a tiny MoE's ZeRO 3 graph at ep 1 equals its golden file", "[golden][moe][zero]") {
  ModelSpec model = test::small_llama(2, 64, 4, 128, 32);
  model.experts = 4;
  model.experts_per_token = 2;
  model.expert_ffn_hidden = 64;
  model.first_dense_layers = 1;
  ParallelPlan plan = test::make_plan(2, 1, 1, 1, 2, 16);
  plan.zero_stage = 3;
  check_golden("tiny_moe_dp2_zero3_ep1.json",
               graph_to_json(test::compile_checked(model, plan).graph));
}

TEST_CASE("DOT output refuses graphs too large to draw", "[export]") {
  const ModelSpec model = load_model("gpt2-124m");
  const CompiledPlan compiled = test::compile_checked(model, test::make_plan(1, 1, 1, 1, 64, 1024));
  REQUIRE(compiled.graph.size() > kMaxDotTasks);
  CHECK_THROWS_AS(graph_to_dot(compiled.graph, "big.dot"), InputError);
}

}  // namespace
}  // namespace strata
