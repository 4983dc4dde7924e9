#pragma once
// Shared set-up for the search tests: a plan written as one line of the field's words, and one
// plan compiled (folded graph, validated) and simulated directly, outside the search.

#include <string>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "models/model_reader.hpp"
#include "plan/compile.hpp"
#include "sim/search.hpp"
#include "sim/simulate.hpp"
#include "topologies/cluster_spec.hpp"

namespace strata::test {

// "dp 2 x tp 4 x pp 8 x vpp 3, interleaved, mb 1, zero 1, recompute selective, sp on, bf16".
inline std::string describe(const ParallelPlan& p) {
  return fmt::format("dp {} x tp {} x pp {} x vpp {}, {}, mb {}, zero {}, recompute {}, sp {}, {}",
                     p.dp, p.tp, p.pp, p.vpp, to_string(p.schedule), p.micro_batch, p.zero_stage,
                     to_string(p.recompute), p.sequence_parallel ? "on" : "off",
                     to_string(p.dtype));
}

// What `strata simulate` predicts for the plan: validate_plan (throws on a bad plan, as for a
// user's), compile_plan on the folded graph with the graph validator, simulate() with the built-in
// efficiency tables and the cluster's price.
struct DirectRun {
  CompiledPlan compiled;
  SimResult result;
};

inline DirectRun simulate_directly(const ModelSpec& model, const ClusterSpec& cluster,
                                   const ParallelPlan& plan) {
  validate_plan(plan, model, plan.gpus(), "test");
  DirectRun run{compile_plan(model, cluster, plan, GraphMode::kFolded), {}};
  INFO("the task graph of " << describe(plan) << " must pass the graph validator");
  REQUIRE(run.compiled.validation.ok());
  run.result = simulate(run.compiled);
  return run;
}

}  // namespace strata::test
