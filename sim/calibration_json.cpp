// Reading a calibration file: measured efficiency tables for the compute model, as
// `strata calibrate` writes them (format in sim/README.md):
//   {"devices": [{"device": "a100-80gb", "comm_slowdown": 0.1, "launch_overhead_us": 4,
//                 "ops": {"matmul": {"flops_efficiency": [[1e9, 0.55], [1e11, 0.74]],
//                                    "memory_efficiency": [[1e6, 0.3], [1e9, 0.85]]}}}],
//    "cluster": {...}}
// Op kinds a file leaves out keep the built-in tables of that device. "cluster" (optional) is a
// cluster object as in topologies/clusters/, with its device inline: the machine measured.
// "device_info" and "measurements" (optional) say what was measured and how; not read back.

#include <algorithm>
#include <cmath>
#include <string_view>

#include <fmt/format.h>

#include "common/error.hpp"
#include "common/json_input.hpp"
#include "sim/compute_model.hpp"
#include "topologies/device_spec.hpp"

namespace strata {

namespace {

constexpr std::string_view kFileFields[] = {"devices", "cluster", "device_info", "measurements"};
constexpr std::string_view kDeviceFields[] = {"device", "comm_slowdown", "launch_overhead_us",
                                              "ops"};
constexpr std::string_view kOpFields[] = {"flops_efficiency", "memory_efficiency"};
// In OpKind order: every kind but the last, host, which the plan's --host-dispatch prices.
constexpr std::string_view kOpKinds[] = {"matmul", "attention",   "flash_attention",
                                         "norm",   "elementwise", "embedding",
                                         "loss",   "optimizer"};
static_assert(std::size(kOpKinds) + 1 == kOpKindCount &&
                  static_cast<int>(OpKind::kHost) == kOpKindCount - 1,
              "one name per OpKind but host");
// The ops object's keys: the op kinds but host (the plan's --host-dispatch prices it), and FP8
// matmuls.
constexpr std::string_view kOpsKeys[] = {"matmul", "attention",   "flash_attention",
                                         "norm",   "elementwise", "embedding",
                                         "loss",   "optimizer",   "matmul_fp8"};

// [[size, efficiency], ...]: sizes > 0 and increasing, efficiencies in (0, 1].
EfficiencyCurve read_curve(const JsonFields& fields, std::string_view key) {
  const nlohmann::json& value = fields.at(key);
  const std::string fix =
      "write a list of [size, efficiency] pairs with increasing sizes > 0 "
      "and efficiencies in (0, 1], e.g. [[1e9, 0.55], [1e11, 0.74]]";
  if (!value.is_array() || value.empty()) fields.fail(key, "is not a non-empty list", fix);
  EfficiencyCurve curve;
  for (const nlohmann::json& point : value) {
    if (!point.is_array() || point.size() != 2 || !point[0].is_number() || !point[1].is_number()) {
      fields.fail(key, fmt::format("has the entry {}, not a [size, efficiency] pair", point.dump()),
                  fix);
    }
    const double size = point[0].get<double>();
    const double efficiency = point[1].get<double>();
    if (!(size > 0) || !(efficiency > 0 && efficiency <= 1) ||
        (!curve.points.empty() && size <= curve.points.back().first)) {
      fields.fail(key, fmt::format("has the entry {}", point.dump()), fix);
    }
    curve.points.emplace_back(size, efficiency);
  }
  return curve;
}

DeviceEfficiency read_device(const JsonFields& fields) {
  fields.refuse_unknown(kDeviceFields);
  const std::string name = fields.string("device");
  DeviceSpec device;
  device.name = name;
  const auto known = zoo_device_names();
  if (std::find(known.begin(), known.end(), name) != known.end()) device = load_device(name);
  DeviceEfficiency eff = default_efficiency(device);
  if (fields.has("comm_slowdown"))
    eff.comm_slowdown = fields.positive_number("comm_slowdown", true);
  if (fields.has("launch_overhead_us")) {
    eff.launch_overhead_ns = std::llround(fields.positive_number("launch_overhead_us", true) * 1e3);
  }
  if (!fields.has("ops")) return eff;
  const JsonFields ops = fields.object("ops");
  ops.refuse_unknown(kOpsKeys);
  const auto read_op = [&](std::string_view key, OpEfficiency& out) {
    if (!ops.has(key)) return;
    const JsonFields op = ops.object(key);
    op.refuse_unknown(kOpFields);
    if (op.has("flops_efficiency")) out.flops = read_curve(op, "flops_efficiency");
    if (op.has("memory_efficiency")) out.memory = read_curve(op, "memory_efficiency");
  };
  for (size_t kind = 0; kind < std::size(kOpKinds); ++kind) read_op(kOpKinds[kind], eff.ops[kind]);
  read_op("matmul_fp8", eff.fp8_matmul);
  return eff;
}

}  // namespace

Calibration load_calibration(const std::string& path) {
  const nlohmann::json document = read_json_file(path);
  const JsonFields fields(document, path);
  fields.refuse_unknown(kFileFields);
  const nlohmann::json& devices = fields.at("devices");
  if (!devices.is_array() || devices.empty()) {
    fields.fail("devices", "is not a non-empty list",
                "write one object per device: {\"device\": \"a100-80gb\", \"ops\": {...}}");
  }
  Calibration calibration;
  calibration.source = path;
  for (size_t i = 0; i < devices.size(); ++i) {
    const JsonFields device(devices[i], path, fmt::format("devices[{}]", i));
    calibration.devices.push_back(read_device(device));
  }
  if (fields.has("cluster")) {
    calibration.cluster = parse_cluster_object(fields.at("cluster"), path, "cluster");
  }
  return calibration;
}

}  // namespace strata
