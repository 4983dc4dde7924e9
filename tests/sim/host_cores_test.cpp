// A CPU host's ranks share its cores (DeviceSpec::host_cores): with the network free, 8
// data-parallel ranks running the same program on 2 cores take 8 / 2 = 4 times as long as on 8
// cores, and on 8 cores exactly as long as ranks that share nothing (GPUs whose host never holds
// them back: host dispatch none); the folded graph, whose one rank stands for its 8 replicas,
// agrees with the full one.

#include <catch2/catch.hpp>

#include "sim/simulate.hpp"
#include "tests/sim/sim_fixtures.hpp"

namespace strata {

namespace {

double step_time(int64_t host_cores, GraphMode mode) {
  ClusterSpec cluster = test::free_network_cluster();
  cluster.device.host_cores = host_cores;
  const ModelSpec model = test::small_model(2, 256, 8, 256, 128);
  ParallelPlan plan = test::make_plan(8, 1, 1, 1, 16, 128);
  plan.host_dispatch = HostDispatch::kNone;
  validate_plan(plan, model, std::nullopt, "test");
  const CompiledPlan compiled = compile_plan(model, cluster, plan, mode);
  SimOptions options;
  options.calibration = test::no_launch_overhead(cluster.device);
  return simulate(compiled, options).step_time_s;
}

}  // namespace

TEST_CASE("ranks sharing a host's cores: 8 ranks on 2 cores take 4x as long as on 8 cores",
          "[simulate][host]") {
  const double gpu_like = step_time(0, GraphMode::kFull);
  const double eight = step_time(8, GraphMode::kFull);
  const double two = step_time(2, GraphMode::kFull);
  CHECK(eight == Approx(gpu_like).epsilon(1e-4));
  CHECK(two == Approx(4 * eight).epsilon(1e-3));
  CHECK(step_time(2, GraphMode::kFolded) == Approx(two).epsilon(1e-3));
}

}  // namespace strata
