// strata calibrate --backend cuda (exec/cuda_calibration.hpp) with the quick sweep: the
// document's structure, not its numbers. The same tests run on a GPU
// (strata_tests_cuda_calibration, tagged [gpu]: skipped without one) and on the CPU emulation of
// CUDA (strata_tests_cuda_calibration_emu), whose timings are the emulation's and mean nothing.

#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <string>

#include "exec/cuda_calibration.hpp"
#include "exec/cuda_calibration_sweeps.hpp"
#include "sim/compute_model.hpp"
#include "tests/temp_file.hpp"

namespace strata {
namespace {

// One quick calibration per process: each test reads it.
const nlohmann::json& quick_document() {
  static const nlohmann::json document = calibrate_cuda(quick_cuda_calibration_options());
  return document;
}

// The op kinds the simulator prices by table: every OpKind but host (sim/calibration_json.cpp).
std::vector<std::string> tabled_kinds() {
  std::vector<std::string> kinds;
  for (int kind = 0; kind < kOpKindCount; ++kind) {
    if (static_cast<OpKind>(kind) != OpKind::kHost)
      kinds.push_back(to_string(static_cast<OpKind>(kind)));
  }
  return kinds;
}

// A table's curve: [[size, efficiency], ...] with sizes > 0 increasing and efficiencies in (0, 1],
// as the calibration reader requires and the roof makes true.
void check_curve(const nlohmann::json& points, const std::string& what) {
  INFO(what << ": " << points.dump());
  REQUIRE(points.is_array());
  REQUIRE(!points.empty());
  double previous = 0;
  for (const nlohmann::json& point : points) {
    REQUIRE(point.size() == 2);
    const double size = point[0].get<double>();
    const double efficiency = point[1].get<double>();
    CHECK(size > previous);
    CHECK(efficiency > 0);
    CHECK(efficiency <= 1);
    previous = size;
  }
}

}  // namespace

// Every op kind the simulator prices by table gets one, on both roofs, with valid curves, and each
// kind was measured: at least one timed case of that kind feeds the table. Every case's
// efficiency is on its roof, in (0, 1].
TEST_CASE("cuda calibration: a table per op kind, each measured", "[gpu]") {
  const nlohmann::json& document = quick_document();
  REQUIRE(document["devices"].size() == 1);
  const nlohmann::json& device = document["devices"][0];
  CHECK(device["comm_slowdown"].get<double>() >= 0);
  CHECK(device["launch_overhead_us"].get<double>() >= 0);
  std::set<std::string> measured;
  for (const nlohmann::json& sample : document["measurements"]["cases"]) {
    CHECK(sample["seconds"].get<double>() > 0);
    CHECK(sample["efficiency"].get<double>() > 0);
    CHECK(sample["efficiency"].get<double>() <= 1);
    if (sample["in_table"].get<bool>()) measured.insert(sample["op"].get<std::string>());
  }
  for (const std::string& kind : tabled_kinds()) {
    INFO(kind);
    REQUIRE(device["ops"].contains(kind));
    check_curve(device["ops"][kind]["flops_efficiency"], kind + " flops");
    check_curve(device["ops"][kind]["memory_efficiency"], kind + " memory");
    CHECK(measured.count(kind) == 1);
  }
}

// The simulator's reader (sim/calibration_json.cpp) accepts the file whole, device_info and
// measurements included, and reads back the device's name, comm_slowdown and launch overhead.
TEST_CASE("cuda calibration: strata simulate's reader accepts the document", "[gpu]") {
  const nlohmann::json& document = quick_document();
  const test::TempFile file(document, "cuda_calibration");
  const Calibration calibration = load_calibration(file.path());
  REQUIRE(calibration.devices.size() == 1);
  const DeviceEfficiency& device = calibration.devices[0];
  CHECK(device.device == document["devices"][0]["device"].get<std::string>());
  CHECK(device.comm_slowdown == Approx(document["devices"][0]["comm_slowdown"].get<double>()));
  REQUIRE(device.launch_overhead_ns.has_value());
  CHECK(!calibration.cluster.has_value());
}

// The GEMM sweep covers forward, dX and dW of the zoo models' products named in the options, per
// TP size dividing them (tiny-gpt's and tiny-llama's 8 heads: tp 1 and 2), dX and dW recorded
// apart from the table (the plan prices a product's backward as one op); both attention paths.
TEST_CASE("cuda calibration: GEMMs by direction and TP size, both attention paths", "[gpu]") {
  const nlohmann::json& cases = quick_document()["measurements"]["cases"];
  std::set<std::string> gemm_directions;
  std::set<std::string> uses;
  std::set<std::string> kernels;
  for (const nlohmann::json& sample : cases) {
    kernels.insert(sample["kernel"].get<std::string>());
    if (sample["op"] != "matmul") continue;
    const std::string what = sample["case"].get<std::string>();
    const std::string direction = what.substr(0, what.find(' '));
    gemm_directions.insert(direction);
    CHECK(sample["in_table"].get<bool>() == (direction == "fwd" || direction == "bwd"));
    for (const nlohmann::json& use : sample["uses"]) uses.insert(use.get<std::string>());
  }
  CHECK(gemm_directions == std::set<std::string>{"fwd", "bwd", "dX", "dW"});
  const auto used = [&](const std::string& prefix) {
    return std::any_of(uses.begin(), uses.end(),
                       [&](const std::string& use) { return use.rfind(prefix, 0) == 0; });
  };
  CHECK(used("ceiling"));
  CHECK((used("tiny-gpt tp1") || used("tiny-llama tp1")));
  CHECK((used("tiny-gpt tp2") || used("tiny-llama tp2")));
  for (const char* kernel : {"attention_forward<bf16>", "attention_backward<bf16>",
                             "flash_attention_forward<bf16>", "flash_attention_backward<bf16>"}) {
    CHECK(kernels.count(kernel) == 1);
  }
}

// device_info names the GPU (or the emulation, as such), its SMs and the runtime; with one device
// NCCL's sweep is recorded as skipped with its reason; a GPU the zoo lacks comes with the device
// spec its tables are expressed on.
TEST_CASE("cuda calibration: device_info, NCCL and the roofs say what was measured", "[gpu]") {
  const nlohmann::json& document = quick_document();
  const nlohmann::json& info = document["device_info"];
  CHECK(!info["name"].get<std::string>().empty());
  CHECK(info["sm_count"].get<int>() > 0);
  CHECK(!info["runtime_version"].get<std::string>().empty());
  CHECK(info["calibration_device"] == document["devices"][0]["device"]);
#if defined(STRATA_CUDA_EMU)
  CHECK(info["emulated"].get<bool>());
  CHECK(info["zoo_device"].is_null());
#else
  CHECK(!info["emulated"].get<bool>());
#endif
  const nlohmann::json& measurements = document["measurements"];
  if (cuda_devices().count < 2) {
    CHECK(measurements["nccl"].contains("skipped"));
    CHECK(measurements["comm_slowdown"]["communication"].get<std::string>().find("stand-in") == 0);
  }
  CHECK(measurements["ceilings"]["gemm_bf16_tflops"].get<double>() > 0);
  CHECK(measurements["ceilings"]["memcpy_gbps"].get<double>() > 0);
  CHECK(measurements["roofs"]["peak_bf16_tflops"].get<double>() > 0);
  CHECK(measurements.contains("device_spec") == info["zoo_device"].is_null());
}

// A bounded sweep keeps the first and the last case and spreads the rest evenly between them.
TEST_CASE("cuda calibration: spread_indices bounds a sweep and spans its sizes") {
  using cuda_calibration::spread_indices;
  CHECK(spread_indices(10, 4) == std::vector<size_t>{0, 3, 6, 9});
  CHECK(spread_indices(3, 0) == std::vector<size_t>{0, 1, 2});
  CHECK(spread_indices(3, 5) == std::vector<size_t>{0, 1, 2});
  CHECK(spread_indices(10, 1) == std::vector<size_t>{9});
  CHECK(spread_indices(0, 4).empty());
}

}  // namespace strata
