// The simulator against published end-to-end measurements on A100: the iteration times of
// Korthikanti et al. 2022 (data/reference/korthikanti2022.csv, Table 5) for the 22B, 175B,
// 530B and 1T configurations, with full recomputation and with sequence parallelism + selective
// recomputation, within 10%; and the throughput gain of the second over the first within 5
// percentage points. bench/reference_compare prints the whole comparison.

#include <catch2/catch.hpp>

#include <cmath>

#include <fmt/format.h>

#include "plan/compile.hpp"
#include "sim/simulate.hpp"
#include "tests/sim/korthikanti_cases.hpp"

namespace strata {
namespace {

double simulated_step_s(const test::KorthikantiCase& c, const ParallelPlan& plan) {
  validate_plan(plan, c.model, std::nullopt, "test");
  const CompiledPlan compiled =
      compile_plan(c.model, load_cluster("dgx-a100"), plan, GraphMode::kFolded);
  return simulate(compiled).step_time_s;
}

TEST_CASE("Korthikanti et al. 2022 iteration times on A100 within 10%", "[sim][reference]") {
  const auto cases = test::korthikanti_cases();
  REQUIRE(cases.size() == 4);
  for (const test::KorthikantiCase& c : cases) {
    const double full = simulated_step_s(c, c.full_recompute);
    const double selective = simulated_step_s(c, c.selective);
    const double increase_pct = (full / selective - 1) * 100;
    INFO(
        fmt::format("{}: full recompute {:.2f} s (measured {:.2f}), selective + SP {:.2f} s "
                    "(measured {:.2f}), gain {:.1f}% (measured {:.1f}%)",
                    c.name, full, c.measured_full_s, selective, c.measured_selective_s,
                    increase_pct, c.measured_increase_pct));
    CHECK(std::abs(full / c.measured_full_s - 1) <= 0.10);
    CHECK(std::abs(selective / c.measured_selective_s - 1) <= 0.10);
    CHECK(std::abs(increase_pct - c.measured_increase_pct) <= 5.0);
  }
}

}  // namespace
}  // namespace strata
