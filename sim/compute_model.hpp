#pragma once
// The compute cost model (docs/design.md, "Cost models"): per op,
//   time = max(flops / (peak(dtype) * eff_flops(op kind, flops)),
//              bytes / (hbm_bw * eff_mem(op kind, bytes))) + launch overhead,
// with efficiencies from per-device tables, piecewise linear in log10 of the problem size (FLOPs
// for the compute roof, bytes for the memory roof) and clamped at the ends. The built-in tables
// (sim/default_efficiency.cpp) say how each number was set; measured tables (strata calibrate)
// replace them through a calibration file (sim/calibration_json.cpp).

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "models/ops.hpp"
#include "sim/engine.hpp"
#include "topologies/cluster_spec.hpp"
#include "topologies/device_spec.hpp"

namespace strata {

inline constexpr int kOpKindCount = 9;

// (size, efficiency) points in increasing size; efficiency in (0, 1].
struct EfficiencyCurve {
  std::vector<std::pair<double, double>> points;

  double at(double size) const;
};

struct OpEfficiency {
  EfficiencyCurve flops;   // size: the op's FLOPs
  EfficiencyCurve memory;  // size: the op's bytes
};

struct DeviceEfficiency {
  std::string device;                          // DeviceSpec::name it applies to
  std::array<OpEfficiency, kOpKindCount> ops;  // by OpKind
  OpEfficiency fp8_matmul;                     // matmuls in FP8 (DType::kFp8)
  // Compute runs this much slower while communication kernels share the GPU: rate 1 / (1 + f).
  double comm_slowdown = 0;
  // Overrides the device's launch overhead when set (measured per-kernel gap).
  std::optional<int64_t> launch_overhead_ns;

  const OpEfficiency& op(OpKind kind) const { return ops[static_cast<size_t>(kind)]; }
  // The table an op is priced by: its kind's, or fp8_matmul for an FP8 matmul.
  const OpEfficiency& op(const OpShape& shape) const {
    return shape.kind == OpKind::kMatmul && shape.dtype == DType::kFp8 ? fp8_matmul
                                                                       : op(shape.kind);
  }
};

// Efficiency tables for one or more devices, as `strata calibrate` writes them.
struct Calibration {
  std::string source;  // the file it was read from
  std::vector<DeviceEfficiency> devices;
  // The machine that was measured, when the file describes one (strata calibrate --backend cpu
  // writes the CPU host as a cluster: its cores, memory, measured peak and bandwidths).
  std::optional<ClusterSpec> cluster;
};

// The built-in tables for a device (by name; an unknown device gets tables derived from its
// measured matmul maximum and datasheet, see default_efficiency.cpp).
DeviceEfficiency default_efficiency(const DeviceSpec& device);

// The calibration's table for the device when it has one, else the built-in one.
DeviceEfficiency efficiency_for(const DeviceSpec& device,
                                const std::optional<Calibration>& calibration);

// Uncontended time of one op on one GPU; a host-dispatch op takes the time its dims say, no
// table and no launch overhead.
TimeNs compute_time_ns(const DeviceSpec& device, const DeviceEfficiency& efficiency,
                       const OpShape& op);

// Time of an op the host CPU runs (the offloaded optimizer step) on the host share of one GPU:
// its FLOPs at host_tflops or its bytes at host_mem_bw_gbps, whichever is longer (a roofline at
// the spec-sheet peaks; no table until a host is calibrated).
TimeNs host_compute_time_ns(const DeviceSpec& device, const OpShape& op);

// Reads a calibration file (JSON, format in sim/README.md). Throws InputError naming the file
// and field.
Calibration load_calibration(const std::string& path);

}  // namespace strata
