#include "cli/calibrate_command.hpp"

#include <cstdio>
#include <memory>

#include <fmt/format.h>

#include "common/atomic_file.hpp"
#include "common/error.hpp"
#include "exec/cpu_calibration.hpp"
#if STRATA_HAVE_CUDA_CALIBRATION
#include "exec/cuda_calibration.hpp"
#endif

namespace strata::cli {

namespace {

struct CalibrateOptions {
  std::string backend = "cpu";
  std::string out;
  int64_t ranks = 8;
  int device = 0;
  bool quick = false;
  int64_t max_cases = 0;
};

#if STRATA_HAVE_CUDA_CALIBRATION
constexpr const char* kBackends = "cpu and cuda";
#else
constexpr const char* kBackends = "cpu";
#endif

#if STRATA_HAVE_CUDA_CALIBRATION
// strata calibrate --backend cuda: one GPU as kernels/cuda runs it (exec/cuda_calibration.hpp).
int run_calibrate_cuda(const CalibrateOptions& options) {
  const CudaDevices devices = cuda_devices();
  if (devices.count == 0) {
    throw InputError("command line", "--backend",
                     fmt::format("cuda: no CUDA device is visible ({})", devices.problem),
                     "run it on a machine with an NVIDIA GPU and its driver (check that "
                     "nvidia-smi lists one and CUDA_VISIBLE_DEVICES allows it), or use --backend "
                     "cpu");
  }
  if (options.device < 0 || options.device >= devices.count) {
    throw InputError(
        "command line", "--device",
        fmt::format("is {}, but {} CUDA device(s) are visible", options.device, devices.count),
        fmt::format("give a device from 0 to {}", devices.count - 1));
  }
  if (options.max_cases < 0) {
    throw InputError("command line", "--max-cases",
                     fmt::format("must be 0 (every case) or more, found {}", options.max_cases),
                     "give the most cases per sweep, e.g. --max-cases 20");
  }
  check_output_paths({{options.out, ""}});  // before the measuring, not after it
  CudaCalibrationOptions cuda_options =
      options.quick ? quick_cuda_calibration_options() : CudaCalibrationOptions{};
  cuda_options.device = options.device;
  if (options.max_cases > 0) cuda_options.max_cases = options.max_cases;
  const nlohmann::json calibration = calibrate_cuda(cuda_options);
  write_files_atomically({{options.out, calibration.dump(2) + "\n"}});
  const nlohmann::json& info = calibration["device_info"];
  const nlohmann::json& measurements = calibration["measurements"];
  const nlohmann::json& ceilings = measurements["ceilings"];
  const nlohmann::json& launch = measurements["launch"];
  const nlohmann::json& nccl = measurements["nccl"];
  const std::string device = info["calibration_device"].get<std::string>();
  const bool zoo = !info["zoo_device"].is_null();
  const std::string nccl_line = nccl.contains("skipped")
                                    ? "skipped: " + nccl["skipped"].get<std::string>()
                                    : fmt::format("{} cases", nccl["cases"].size());
  const std::string comm = measurements["comm_slowdown"].value("communication", "skipped");
  std::printf(
      "strata calibrate: %s (%s), %d SMs, CUDA runtime %s, driver %s\n"
      "  bf16 GEMM ceiling          %8.1f TFLOP/s (%.0f%% of %.0f TFLOP/s)\n"
      "  copy (memcpy / kernel)     %8.1f / %.1f GB/s\n"
      "  launch overhead            %8.2f us per kernel; host issue %.2f us per launch, %.2f us "
      "per task\n"
      "  comm slowdown              %8.3f (%s)\n"
      "  NCCL                       %s\n"
      "  %zu cases timed, %zu skipped; written to %s\n",
      device.c_str(), info["name"].get<std::string>().c_str(), info["sm_count"].get<int>(),
      info["runtime_version"].get<std::string>().c_str(),
      info["driver_version"].get<std::string>().c_str(), ceilings["gemm_bf16_tflops"].get<double>(),
      100 * ceilings["gemm_fraction_of_peak"].get<double>(),
      measurements["roofs"]["peak_bf16_tflops"].get<double>(),
      ceilings["memcpy_gbps"].get<double>(), ceilings["copy_kernel_gbps"].get<double>(),
      launch["launch_overhead_us"].get<double>(), launch["host_launch_us"].get<double>(),
      launch["task_issue_us"].get<double>(),
      calibration["devices"][0]["comm_slowdown"].get<double>(), comm.c_str(), nccl_line.c_str(),
      measurements["cases"].size(), measurements["skipped"].size(), options.out.c_str());
  if (zoo) {
    std::printf(
        "Predict a run: strata simulate --calibration %s --cluster <a cluster of %s> "
        "[plan flags]\n",
        options.out.c_str(), device.c_str());
  } else {
    std::printf(
        "%s is not a zoo device: write measurements.device_spec of %s as a device file "
        "and a cluster of it to simulate with these tables\n",
        device.c_str(), options.out.c_str());
  }
  return 0;
}
#endif

int run_calibrate(const CalibrateOptions& options) {
#if STRATA_HAVE_CUDA_CALIBRATION
  if (options.backend == "cuda") return run_calibrate_cuda(options);
#endif
  if (options.backend != "cpu") {
    throw InputError(
        "command line", "--backend",
        fmt::format("'{}' is not built; this build calibrates {}", options.backend, kBackends),
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
  command
      ->add_option("--backend", options->backend,
                   "The backend to measure (cpu, or cuda where built)")
      ->type_name("cpu|cuda");
  command->add_option("--out", options->out, "Where the calibration JSON goes")
      ->type_name("FILE")
      ->required();
  command->add_option("--ranks", options->ranks,
                      "Ranks per host the measured cluster holds (default 8; cpu)");
  command->add_option("--device", options->device, "The CUDA device measured (default 0; cuda)");
  command->add_flag("--quick", options->quick,
                    "Small sizes and one call per case: the document in seconds (cuda)");
  command->add_option("--max-cases", options->max_cases,
                      "At most this many cases per sweep, spread over sizes (default all; cuda)");
  command->callback([options, &run] { run = [options] { return run_calibrate(*options); }; });
}

}  // namespace strata::cli
