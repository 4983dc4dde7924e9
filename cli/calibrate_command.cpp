#include "cli/calibrate_command.hpp"

#include <cstdio>
#include <memory>

#include <fmt/format.h>

#include "common/atomic_file.hpp"
#include "common/error.hpp"
#include "exec/cpu_calibration.hpp"

namespace strata::cli {

namespace {

struct CalibrateOptions {
  std::string backend = "cpu";
  std::string out;
  int64_t ranks = 8;
};

int run_calibrate(const CalibrateOptions& options) {
  if (options.backend != "cpu") {
    throw InputError(
        "command line", "--backend",
        fmt::format("'{}' is not built; this build calibrates the cpu backend", options.backend),
        "use --backend cpu");
  }
  // Threads of one process: more than a host's cores would measure contention, not the kernels.
  constexpr int64_t kMaxRanks = 1024;
  if (options.ranks < 1 || options.ranks > kMaxRanks) {
    throw InputError("command line", "--ranks",
                     fmt::format("must be from 1 to {}, found {}", kMaxRanks, options.ranks),
                     "give the ranks per host, e.g. --ranks 8");
  }
  check_output_paths({{options.out, ""}});  // before the measuring, not after it
  const nlohmann::json calibration = calibrate_cpu({.ranks = options.ranks});
  write_files_atomically({{options.out, calibration.dump(2) + "\n"}});
  const nlohmann::json& device = calibration["cluster"]["device"];
  const nlohmann::json& link = calibration["cluster"]["intra_node"];
  std::printf(
      "strata calibrate: cpu-host, %lld cores, one thread per rank\n"
      "  matmul peak (best sgemm)   %8.1f GFLOP/s\n"
      "  memory bandwidth (copy)    %8.1f GB/s\n"
      "  in-process all-reduce      %8.1f GB/s, %.1f us per step\n"
      "  %zu cases timed; written to %s\n"
      "Predict a run: strata simulate --calibration %s --model tiny-gpt --graph full --dtype fp32 "
      "[plan flags as strata train's]\n",
      static_cast<long long>(device["host_cores"].get<int64_t>()),
      device["peak_tflops"]["fp32"].get<double>() * 1e3, device["hbm_bw_gbps"].get<double>(),
      link["bw_gbps"].get<double>(),
      calibration["cluster"]["collectives"]["nvlink"][0]["latency_us"].get<double>(),
      calibration["measurements"]["cases"].size(), options.out.c_str(), options.out.c_str());
  return 0;
}

}  // namespace

void add_calibrate_command(CLI::App& app, std::function<int()>& run) {
  auto options = std::make_shared<CalibrateOptions>();
  CLI::App* command = app.add_subcommand(
      "calibrate",
      "Measure this machine's kernel and communication rates into a calibration file for "
      "strata simulate --calibration");
  command->add_option("--backend", options->backend, "The backend to measure (cpu)")
      ->type_name("cpu");
  command->add_option("--out", options->out, "Where the calibration JSON goes")
      ->type_name("FILE")
      ->required();
  command->add_option("--ranks", options->ranks,
                      "Ranks per host the measured cluster holds (default 8)");
  command->callback([options, &run] { run = [options] { return run_calibrate(*options); }; });
}

}  // namespace strata::cli
