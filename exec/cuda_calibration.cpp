// strata calibrate --backend cuda (exec/cuda_calibration.hpp): the sweeps run on one device, the
// samples turned into efficiency tables on the device's roofs, and the calibration document.

#include "exec/cuda_calibration.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "exec/cuda_calibration_sweeps.hpp"
#include "kernels/cuda/check.hpp"
#include "topologies/device_spec.hpp"

namespace strata {

using cuda_calibration::Roof;
using cuda_calibration::Sample;

namespace {

// The zoo devices (topologies/devices) as cudaGetDeviceProperties names their GPU, with the SM
// count of that form of the chip (NVIDIA's datasheets): "NVIDIA H100 80GB HBM3" is the SXM H100.
// Other forms of a chip (PCIe, NVL, Grace Hopper) have other clocks, power or bandwidth and are
// not mapped; an A100's memory tells its 40 GB form from its 80 GB one.
struct ZooGpu {
  const char* id;
  const char* name_part;
  int sms;
  double min_memory_gb;  // the smallest memory of the form mapped here
};
constexpr ZooGpu kZooGpus[] = {{"h100-sxm", "H100", 132, 70},
                               {"h200", "H200", 132, 130},
                               {"b200", "B200", 148, 170},
                               {"a100-80gb", "A100", 108, 70},
                               {"a100-40gb", "A100", 108, 30}};

std::optional<std::string> zoo_device_of(const cudaDeviceProp& properties) {
#if defined(STRATA_CUDA_EMU)
  (void)properties;
  return std::nullopt;  // the emulation is no GPU of the zoo, whatever it reports
#else
  const std::string name = properties.name;
  for (const char* other_form : {"PCIe", "NVL", "GH200", "GB200"}) {
    if (name.find(other_form) != std::string::npos) return std::nullopt;
  }
  const double memory_gb = static_cast<double>(properties.totalGlobalMem) / 1e9;
  for (const ZooGpu& gpu : kZooGpus) {
    if (name.find(gpu.name_part) != std::string::npos &&
        properties.multiProcessorCount == gpu.sms && memory_gb >= gpu.min_memory_gb) {
      return gpu.id;
    }
  }
  return std::nullopt;
#endif
}

// "NVIDIA GeForce RTX 4090" -> "cuda-nvidia-geforce-rtx-4090": a device name for a GPU the zoo
// does not have.
std::string device_slug(const std::string& name) {
  std::string slug = "cuda";
  bool separator = true;
  for (const char c : name) {
    if (std::isalnum(static_cast<unsigned char>(c)) != 0) {
      if (separator) slug += '-';
      slug += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      separator = false;
    } else {
      separator = true;
    }
  }
  return slug;
}

// 13000 -> "13.0" (CUDA's major * 1000 + minor * 10).
std::string cuda_version(int version) {
  return fmt::format("{}.{}", version / 1000, version % 1000 / 10);
}

#if !defined(STRATA_CUDA_EMU)
int attribute(cudaDeviceAttr which, int device) {
  int value = 0;
  STRATA_CUDA_CHECK(cudaDeviceGetAttribute(&value, which, device));
  return value;
}
#endif

nlohmann::json device_info(int device, const cudaDeviceProp& properties) {
  int driver = 0;
  int runtime = 0;
  STRATA_CUDA_CHECK(cudaDriverGetVersion(&driver));
  STRATA_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  nlohmann::json info = {
      {"index", device},
      {"name", properties.name},
      {"compute_capability", fmt::format("{}.{}", properties.major, properties.minor)},
      {"sm_count", properties.multiProcessorCount},
      {"memory_bytes", properties.totalGlobalMem},
      {"l2_cache_bytes", properties.l2CacheSize},
      {"driver_version", cuda_version(driver)},
      {"runtime_version", cuda_version(runtime)}};
#if defined(STRATA_CUDA_EMU)
  info["emulated"] = true;
  info["note"] =
      "the CPU emulation of CUDA (kernels/emu): kernels run as host threads, so every time, rate "
      "and efficiency here is the emulation's, not a GPU's; only the document's structure means "
      "anything";
#else
  info["emulated"] = false;
  // Peak (boost) clocks as the runtime reports them; the current clocks need NVML.
  info["sm_clock_max_mhz"] = attribute(cudaDevAttrClockRate, device) / 1000;
  info["memory_clock_max_mhz"] = attribute(cudaDevAttrMemoryClockRate, device) / 1000;
  info["memory_bus_bits"] = attribute(cudaDevAttrGlobalMemoryBusWidth, device);
  info["ecc_enabled"] = attribute(cudaDevAttrEccEnabled, device) != 0;
  // cublasLtGetVersion: major * 10000 + minor * 100 + patch.
  const size_t cublaslt = cublasLtGetVersion();
  info["cublaslt_version"] =
      fmt::format("{}.{}.{}", cublaslt / 10000, cublaslt / 100 % 100, cublaslt % 100);
#endif
  const std::string nccl = cuda_calibration::nccl_version();
  info["nccl_version"] = nccl.empty() ? nlohmann::json(nullptr) : nlohmann::json(nccl);
  return info;
}

// The roofs the tables are expressed on: what the simulator divides by for this device.
struct Roofs {
  double peak_flops = 0;  // bf16, FLOP/s
  double bandwidth = 0;   // bytes/s
  std::string source;
};

// A sample's size on its roof: FLOPs or bytes.
double size_on_roof(const Sample& s) {
  return s.roof == Roof::kFlops ? static_cast<double>(s.op.flops) : static_cast<double>(s.op.bytes);
}

// The efficiency a sample needs for its measured time in the simulator's model, time = size /
// (roof x efficiency) + the launch overhead per kernel (sim/compute_model.hpp), clamped to
// [1e-4, 1]; 1 when the launches alone take the time.
double efficiency_of(const Sample& s, const Roofs& roofs, double launch_s) {
  const double work_s = s.seconds - launch_s * static_cast<double>(s.op.kernels);
  const double rate = s.roof == Roof::kFlops ? roofs.peak_flops : roofs.bandwidth;
  if (work_s <= 0) return 1.0;
  return std::clamp(size_on_roof(s) / work_s / rate, 1e-4, 1.0);
}

// [[size, efficiency], ...] in increasing size: the tabled samples of one op kind on one roof,
// each with efficiency_of; equal sizes averaged.
nlohmann::json curve(const std::vector<Sample>& samples, OpKind kind, Roof roof, const Roofs& roofs,
                     double launch_s) {
  std::map<double, std::pair<double, int>> by_size;
  for (const Sample& s : samples) {
    if (!s.in_table || s.op.kind != kind || s.roof != roof) continue;
    const double size = size_on_roof(s);
    if (size <= 0) continue;
    auto& [sum, count] = by_size[size];
    sum += efficiency_of(s, roofs, launch_s);
    ++count;
  }
  nlohmann::json points = nlohmann::json::array();
  for (const auto& [size, entry] : by_size) points.push_back({size, entry.first / entry.second});
  if (points.empty()) points.push_back({1.0, 1.0});  // the roof not measured: never binding
  return points;
}

}  // namespace

CudaCalibrationOptions quick_cuda_calibration_options() {
  CudaCalibrationOptions options;
  options.models = {"tiny-gpt", "tiny-llama"};
  options.tp_sizes = {1, 2};
  options.tokens = {64};
  options.seq_lens = {64};
  options.max_cases = 4;
  options.seconds_per_case = 0;
  options.quick = true;
  return options;
}

CudaDevices cuda_devices() {
  CudaDevices devices;
  const cudaError_t status = cudaGetDeviceCount(&devices.count);
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear it: the next call starts clean
    devices.count = 0;
    devices.problem = fmt::format("{}: {}", cudaGetErrorName(status), cudaGetErrorString(status));
  } else if (devices.count == 0) {
    devices.problem = "none found";
  }
  return devices;
}

nlohmann::json calibrate_cuda(const CudaCalibrationOptions& options) {
  namespace cc = cuda_calibration;
  const CudaDevices devices = cuda_devices();
  if (devices.count == 0) throw cuda::CudaError("no CUDA device: " + devices.problem);
  if (options.device < 0 || options.device >= devices.count) {
    throw cuda::CudaError(fmt::format("device {} does not exist: {} CUDA device(s) visible",
                                      options.device, devices.count));
  }
  STRATA_CUDA_CHECK(cudaSetDevice(options.device));
  cudaDeviceProp properties;
  std::memset(&properties, 0, sizeof(properties));
  STRATA_CUDA_CHECK(cudaGetDeviceProperties(&properties, options.device));

  const cc::Stream stream;  // outlives the context bound to it
  cuda::Context ctx(stream.get());
  const cc::TimingOptions timing{options.seconds_per_case, options.quick ? 1 : 3, 1000};
  // Room left for cuBLASLt's workspace, the kernels' scratch and the allocator's rounding.
  const auto budget = static_cast<size_t>(0.6 * static_cast<double>(properties.totalGlobalMem));
  cc::Sweep sweep(ctx, timing, budget, options.quick);

  const cc::LaunchCosts launch = cc::measure_launch_costs(sweep);
  const double gemm_ceiling = cc::measure_gemm_ceiling(sweep);
  const cc::CopyCeilings copy = cc::measure_copy_ceilings(sweep);
  cc::sweep_zoo_gemms(sweep, options);
  cc::sweep_attention(sweep, options);
  cc::sweep_memory_bound(sweep, options);
  const cc::NcclSlowdown nccl_slowdown = cc::measure_comm_slowdown_with_nccl(sweep, options);
  const cc::CommSlowdown slowdown =
      nccl_slowdown.measured ? nccl_slowdown.result : cc::measure_comm_slowdown_with_copy(sweep);
  const nlohmann::json nccl = cc::measure_nccl_bus_bandwidth(options);

  // The roofs: a zoo GPU's datasheet, which the simulator divides by; else the ceilings measured.
  const std::optional<std::string> zoo_id = zoo_device_of(properties);
  const std::string device_name = zoo_id ? *zoo_id : device_slug(properties.name);
  const double copy_bandwidth = std::max(copy.memcpy_bytes_s, copy.copy_kernel_bytes_s);
  Roofs roofs;
  if (zoo_id) {
    const DeviceSpec spec = load_device(*zoo_id);
    roofs = {spec.peak_bf16_flops, spec.hbm_bw_gbps * 1e9,
             fmt::format("topologies/devices/{}.json (dense bf16 peak, HBM bandwidth)", *zoo_id)};
  } else {
    roofs = {gemm_ceiling, copy_bandwidth,
             "the ceilings measured here (best bf16 GEMM, best copy): the GPU is not a zoo device"};
  }

  nlohmann::json ops;
  // Every op kind the calibration format has a table for, under its name (to_string).
  constexpr OpKind kinds[] = {OpKind::kMatmul, OpKind::kAttention,   OpKind::kFlashAttention,
                              OpKind::kNorm,   OpKind::kElementwise, OpKind::kEmbedding,
                              OpKind::kLoss,   OpKind::kOptimizer};
  const double launch_s = launch.launch_overhead_s;
  for (const OpKind kind : kinds) {
    ops[to_string(kind)] = {
        {"flops_efficiency", curve(sweep.samples(), kind, Roof::kFlops, roofs, launch_s)},
        {"memory_efficiency", curve(sweep.samples(), kind, Roof::kMemory, roofs, launch_s)}};
  }
  nlohmann::json cases = nlohmann::json::array();
  for (const Sample& s : sweep.samples()) {
    cases.push_back({{"op", to_string(s.op.kind)},
                     {"direction", s.op.direction == Direction::kForward ? "forward" : "backward"},
                     {"dtype", to_string(s.op.dtype)},
                     {"case", s.what},
                     {"kernel", s.kernel},
                     {"uses", s.uses},
                     {"flops", s.op.flops},
                     {"bytes", s.op.bytes},
                     {"seconds", s.seconds},
                     {"roof", s.roof == Roof::kFlops ? "flops" : "memory"},
                     {"efficiency", efficiency_of(s, roofs, launch_s)},
                     {"in_table", s.in_table}});
  }
  nlohmann::json measurements = {
      {"backend", "cuda"},
      {"kernels",
       "kernels/cuda in bf16, the training dtype (the loss on fp32 logits, as the "
       "plan's loss op); parameter gradients fp32"},
      {"timing", options.quick
                     ? "one call per case after a warm-up (quick): CUDA events"
                     : fmt::format("CUDA events; per case the best of {} batches of back-to-back "
                                   "calls lasting at least {} s each, after a warm-up",
                                   timing.batches, timing.min_seconds)},
      {"roofs",
       {{"peak_bf16_tflops", roofs.peak_flops / 1e12},
        {"hbm_bw_gbps", roofs.bandwidth / 1e9},
        {"source", roofs.source},
        {"efficiency",
         "size / (time - launch overhead x kernels) / roof, clamped to [1e-4, 1]: what the "
         "compute model needs to give the measured time"}}},
      {"ceilings",
       {{"gemm_bf16_tflops", gemm_ceiling / 1e12},
        {"gemm_fraction_of_peak", roofs.peak_flops > 0 ? gemm_ceiling / roofs.peak_flops : 0},
        {"memcpy_gbps", copy.memcpy_bytes_s / 1e9},
        {"copy_kernel_gbps", copy.copy_kernel_bytes_s / 1e9},
        {"copy_bytes_counted", "read + write"},
        {"copy_cases", copy.cases}}},
      {"launch", launch.json},
      {"comm_slowdown", slowdown.json},
      {"nccl", nccl},
      {"cases", cases},
      {"skipped", sweep.skipped()}};
  if (!zoo_id) {
    // A device file (topologies/README.md) for a cluster of this GPU: the tables are expressed on
    // these roofs.
    measurements["device_spec"] = {
        {"name", device_name},
        {"peak_tflops", {{"bf16", roofs.peak_flops / 1e12}, {"fp16", roofs.peak_flops / 1e12}}},
        {"hbm_gb", static_cast<double>(properties.totalGlobalMem) / 1e9},
        {"hbm_bw_gbps", roofs.bandwidth / 1e9},
        {"launch_overhead_us", launch_s * 1e6}};
  }
  nlohmann::json info = device_info(options.device, properties);
  info["calibration_device"] = device_name;
  info["zoo_device"] = zoo_id ? nlohmann::json(*zoo_id) : nlohmann::json(nullptr);
  return {{"devices",
           {{{"device", device_name},
             {"comm_slowdown", slowdown.slowdown},
             {"launch_overhead_us", launch_s * 1e6},
             {"ops", ops}}}},
          {"device_info", info},
          {"measurements", measurements}};
}

}  // namespace strata
