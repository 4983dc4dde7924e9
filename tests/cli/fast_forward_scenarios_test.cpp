// Every shipped scenario (scenarios/*.json) simulated as `strata simulate --scenario` does, with
// and without --no-fast-forward. The fact checked: the steady-state fast-forward is exact, so the
// two ways give the same step to the nanosecond and the byte (tests/sim/fast_forward_check.hpp),
// and the same Chrome trace.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/plan_options.hpp"
#include "plan/compile.hpp"
#include "sim/simulate.hpp"
#include "sim/trace.hpp"
#include "tests/sim/fast_forward_check.hpp"

namespace strata {
namespace {

std::vector<std::string> shipped_scenarios() {
  std::vector<std::string> paths;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(STRATA_SOURCE_DIR) + "/scenarios")) {
    if (entry.path().extension() == ".json") paths.push_back(entry.path().string());
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

TEST_CASE("every shipped scenario simulates the same step with and without fast-forward",
          "[cli][fast-forward]") {
  const std::vector<std::string> paths = shipped_scenarios();
  REQUIRE(paths.size() >= 10);
  int64_t copied_activities = 0;
  for (const std::string& path : paths) {
    cli::PlanFlags flags;
    flags.scenario = path;
    const cli::PlanInputs inputs = cli::resolve_plan_inputs(flags);
    const CompiledPlan compiled =
        compile_plan(inputs.model, inputs.cluster, inputs.plan, GraphMode::kFolded);
    REQUIRE(compiled.validation.ok());
    SimOptions options;
    const SimResult copied = simulate(compiled, options);
    options.fast_forward = false;
    const SimResult simulated = simulate(compiled, options);
    INFO(path << ": " << copied.engine.fast_forwarded << " of " << copied.engine.activities
              << " activities copied");
    test::require_same_step(copied, simulated);
    copied_activities += copied.engine.fast_forwarded;
    // The trace is written from the timeline compared above; rendering it for the largest
    // scenarios (millions of tasks, hundreds of MB of JSON) would only repeat that comparison.
    if (compiled.graph.size() <= 300'000) {
      CHECK(trace_json(compiled, copied) == trace_json(compiled, simulated));
    }
  }
  // The demo's plan and the long pipelines (the 1T model's 512 micro-batches) repeat: periods
  // were copied, the comparison was not between two simulations.
  CHECK(copied_activities > 0);
}

}  // namespace
}  // namespace strata
