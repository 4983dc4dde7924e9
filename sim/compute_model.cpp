// The compute cost model: roofline time of one op from its FLOPs and bytes and the device's
// efficiency tables (sim/compute_model.hpp).

#include "sim/compute_model.hpp"

#include <algorithm>
#include <cmath>

#include "common/error.hpp"
#include "common/units.hpp"

namespace strata {

// Piecewise linear in log10(size), flat beyond the first and last points.
double EfficiencyCurve::at(double size) const {
  STRATA_ASSERT(!points.empty(), "an efficiency curve needs at least one point");
  if (size <= points.front().first) return points.front().second;
  if (size >= points.back().first) return points.back().second;
  const auto upper = std::upper_bound(points.begin(), points.end(), size,
                                      [](double s, const auto& point) { return s < point.first; });
  const auto lower = upper - 1;
  const double x0 = std::log10(lower->first);
  const double x1 = std::log10(upper->first);
  const double t = (std::log10(size) - x0) / (x1 - x0);
  return lower->second + t * (upper->second - lower->second);
}

DeviceEfficiency efficiency_for(const DeviceSpec& device,
                                const std::optional<Calibration>& calibration) {
  if (calibration) {
    for (const DeviceEfficiency& measured : calibration->devices) {
      if (measured.device == device.name) return measured;
    }
  }
  return default_efficiency(device);
}

TimeNs compute_time_ns(const DeviceSpec& device, const DeviceEfficiency& efficiency,
                       const OpShape& op) {
  if (op.kind == OpKind::kHost) return op.dims[0] * op.dims[2] + op.dims[1] * op.dims[3];
  const OpEfficiency& eff = efficiency.op(op);
  const auto flops = static_cast<double>(op.flops);
  const auto bytes = static_cast<double>(op.bytes);
  double seconds = 0;
  if (flops > 0) {
    // A grouped GEMM runs each group's tiles at the efficiency of a product of the group's size.
    const double per_group = op.kind == OpKind::kMatmul && op.dims[3] > 1
                                 ? flops / static_cast<double>(op.dims[3])
                                 : flops;
    seconds = flops / (device.peak_flops(op.dtype) * eff.flops.at(per_group));
  }
  if (bytes > 0) {
    const double memory_s = bytes / (device.hbm_bw_gbps * kBytesPerGB * eff.memory.at(bytes));
    seconds = std::max(seconds, memory_s);
  }
  const int64_t launch_ns = efficiency.launch_overhead_ns.value_or(device.launch_overhead_ns);
  return static_cast<TimeNs>(std::ceil(seconds * static_cast<double>(kNsPerSecond))) +
         launch_ns * op.kernels;
}

TimeNs host_compute_time_ns(const DeviceSpec& device, const OpShape& op) {
  STRATA_ASSERT(device.host_flops > 0 && device.host_mem_bw_gbps > 0,
                "offload needs the device's host figures (validate_plan_on_device)");
  const double seconds =
      std::max(static_cast<double>(op.flops) / device.host_flops,
               static_cast<double>(op.bytes) / (device.host_mem_bw_gbps * kBytesPerGB));
  return static_cast<TimeNs>(std::ceil(seconds * static_cast<double>(kNsPerSecond)));
}

}  // namespace strata
