// strata_bench_exec_vs_sim: closing the loop on the CPU. It calibrates this machine
// (exec/cpu_calibration.hpp, as `strata calibrate --backend cpu` does), then for every plan of
// the executor's parity grid trains the plan for real on 8 thread-ranks and simulates the same
// full task graph on the measured host, and prints the measured and predicted step times with
// the error.
//
// Target (the executor issue): the prediction within 15% of the measured step for every plan.
//
// The model is tiny-gpt (models/zoo) with 8 layers instead of 4, so that pp 4 x vpp 2 divides
// them; seq 64, micro-batch 2, global batch 16, fp32. Each plan trains 2 warm-up steps, then the
// median of 5 measured steps is its step time. The simulator runs the plan's graph on the
// calibrated "cpu-host" cluster: 8 ranks sharing the host's cores (processor sharing), kernels
// priced by the measured tables, collectives by the fitted in-process all-reduce.
//
// Usage: strata_bench_exec_vs_sim [--write-calibration FILE]. Figures are printed, not asserted.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/atomic_file.hpp"
#include "exec/cpu_calibration.hpp"
#include "exec/trainer.hpp"
#include "models/model_reader.hpp"
#include "plan/compile.hpp"
#include "sim/simulate.hpp"
#include "tests/exec/parity_plans.hpp"

namespace strata {
namespace {

constexpr double kTarget = 0.15;
constexpr int64_t kWarmupSteps = 2;
constexpr int64_t kMeasuredSteps = 5;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

int run(int argc, char** argv) {
  std::string calibration_path =
      (std::filesystem::temp_directory_path() / "strata-exec-vs-sim-calibration.json").string();
  if (argc == 3 && std::string(argv[1]) == "--write-calibration") calibration_path = argv[2];

  std::printf("calibrating this machine (strata calibrate --backend cpu) ...\n");
  write_files_atomically({{calibration_path, calibrate_cpu({.ranks = 8}).dump(2) + "\n"}});
  SimOptions sim;
  sim.calibration = load_calibration(calibration_path);
  const ClusterSpec host = *sim.calibration->cluster;
  std::printf("  host: %lld cores, sgemm %.1f GFLOP/s per core, copy %.1f GB/s; %s\n\n",
              static_cast<long long>(host.device.host_cores), host.device.peak_fp32_flops / 1e9,
              host.device.hbm_bw_gbps, calibration_path.c_str());

  ModelSpec model = load_model("tiny-gpt");
  model.layers = 8;
  const std::string data =
      std::string(STRATA_SOURCE_DIR) + "/scenarios/data/kjv-genesis-exodus.txt";
  std::printf("%-28s %12s %12s %8s  %s\n", "plan (8 ranks)", "measured", "predicted", "error",
              "target 15%");
  int missed = 0;
  for (const test::ParityPlan& c : test::kParityPlans) {
    const ParallelPlan plan = test::parity_plan(c, 2, 16, 64);
    validate_plan(plan, model, plan.gpus(), "bench");
    const CompiledPlan measured_plan = compile_plan(
        model, cpu_host_cluster(plan.gpus(), int64_t{1} << 32), plan, GraphMode::kFull);
    TrainOptions options;
    options.steps = kWarmupSteps + kMeasuredSteps;
    options.data_path = data;
    const TrainResult trained = train_in_process(measured_plan, options, {});
    std::vector<double> times;
    for (size_t i = kWarmupSteps; i < trained.steps.size(); ++i)
      times.push_back(trained.steps[i].step_time_s);
    const double measured = median(times);

    const CompiledPlan simulated_plan = compile_plan(model, host, plan, GraphMode::kFull);
    const double predicted = simulate(simulated_plan, sim).step_time_s;
    const double error = (predicted - measured) / measured;
    const bool met = std::abs(error) <= kTarget;
    missed += met ? 0 : 1;
    std::printf("%-28s %9.1f ms %9.1f ms %+7.1f%%  %s\n", c.name, measured * 1e3, predicted * 1e3,
                error * 100, met ? "met" : "MISSED");
  }
  std::printf("\n%s: %d of %zu plans within 15%%\n", missed == 0 ? "met" : "MISSED",
              static_cast<int>(test::kParityPlans.size()) - missed, test::kParityPlans.size());
  return 0;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) { return strata::run(argc, argv); }
