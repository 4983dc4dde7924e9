// Built-in devices and clusters against the published figures they cite
// (data/reference/hardware.csv and interconnect.csv), JSON round trips, and the errors users
// see for a bad cluster file.

#include <catch2/catch.hpp>

#include <fstream>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "tests/input_error.hpp"
#include "tests/reference_csv.hpp"
#include "tests/temp_file.hpp"
#include "topologies/cluster_spec.hpp"
#include "topologies/device_spec.hpp"
#include "topologies/topology_json.hpp"

namespace strata {
namespace {

using test::CsvRow;
using test::read_reference_csv;

using test::input_error_of;
using test::TempFile;

// The "source" text of a built-in JSON file in the source tree.
std::string source_of(const std::string& folder, const std::string& name) {
  std::ifstream in(std::string(STRATA_SOURCE_DIR) + "/topologies/" + folder + "/" + name + ".json");
  REQUIRE(in);
  return nlohmann::json::parse(in).at("source").get<std::string>();
}

const CsvRow& row_named(const std::vector<CsvRow>& rows, const std::string& column,
                        const std::string& value) {
  for (const auto& row : rows) {
    if (row.at(column) == value) return row;
  }
  FAIL("no row with " << column << " = " << value);
  return rows.front();
}

// An empty cell means "not published": the device holds 0.
double number_or_zero(const CsvRow& row, const std::string& column) {
  const std::string& text = row.at(column);
  return text.empty() ? 0.0 : std::stod(text);
}

// Which hardware.csv row (column "gpu") each built-in device is.
const std::map<std::string, std::string> kDeviceRows = {
    {"a100-40gb", "A100-SXM4-40GB"},
    {"a100-80gb", "A100-SXM4-80GB"},
    {"h100-sxm", "H100-SXM5-80GB"},
    {"h200", "H200-SXM-141GB"},
    {"b200", "B200-SXM"},
};

// Every built-in device equals its hardware.csv row: dense peaks per dtype (TFLOP/s x 1e12), HBM
// (memory_gb x 1e9 bytes), HBM bandwidth (TB/s x 1000 GB/s), TDP and the measured bf16 matmul
// rate (0 where the csv has no figure), and its "source" names that row.
TEST_CASE("built-in devices equal the hardware.csv rows they cite", "[topologies]") {
  const auto rows = read_reference_csv("hardware.csv");
  std::vector<std::string> mapped;
  for (const auto& [name, gpu] : kDeviceRows) mapped.push_back(name);
  CHECK(zoo_device_names() == mapped);  // a new device file needs its row here

  for (const auto& [name, gpu] : kDeviceRows) {
    INFO(name << " vs hardware.csv " << gpu);
    const CsvRow& row = row_named(rows, "gpu", gpu);
    const DeviceSpec device = load_device(name);
    CHECK(device.name == name);
    CHECK(device.peak_bf16_flops == Approx(number_or_zero(row, "peak_dense_bf16_tflops") * 1e12));
    CHECK(device.peak_fp16_flops == Approx(number_or_zero(row, "peak_dense_fp16_tflops") * 1e12));
    CHECK(device.peak_tf32_flops == Approx(number_or_zero(row, "peak_dense_tf32_tflops") * 1e12));
    CHECK(device.peak_fp32_flops == Approx(number_or_zero(row, "peak_fp32_tflops") * 1e12));
    CHECK(device.peak_fp8_flops == Approx(number_or_zero(row, "peak_dense_fp8_tflops") * 1e12));
    CHECK(device.measured_matmul_bf16_flops ==
          Approx(number_or_zero(row, "measured_max_matmul_bf16_tflops") * 1e12));
    CHECK(static_cast<double>(device.hbm_bytes) == number_or_zero(row, "memory_gb") * 1e9);
    CHECK(device.hbm_bw_gbps == Approx(number_or_zero(row, "hbm_bandwidth_tb_per_s") * 1000));
    CHECK(device.tdp_watts == number_or_zero(row, "tdp_w"));
    CHECK(device.launch_overhead_ns > 0);
    CHECK(device.price_usd_per_hour > 0);
    CHECK_THAT(source_of("devices", name), Catch::Contains("hardware.csv row '" + gpu + "'"));
  }
}

// fp32 training uses TF32 tensor cores where the device has them (H100: 494.5 TFLOP/s, not the
// 67 of plain FP32; hardware.csv); bf16 and fp16 use their own dense peaks.
TEST_CASE("peak_flops picks the dtype's peak, TF32 for fp32", "[topologies]") {
  DeviceSpec device = load_device("h100-sxm");
  CHECK(device.peak_flops(DType::kBf16) == Approx(989e12));
  CHECK(device.peak_flops(DType::kFp16) == Approx(989e12));
  CHECK(device.peak_flops(DType::kFp32) == Approx(494.5e12));
  device.peak_tf32_flops = 0;
  CHECK(device.peak_flops(DType::kFp32) == Approx(67e12));
}

struct ClusterRows {
  const char* device;
  const char* nvlink;  // interconnect.csv "name" of the GPU link
  const char* pcie;
  const char* nic;
};

// Which interconnect.csv rows each built-in cluster is built from.
const std::map<std::string, ClusterRows> kClusterRows = {
    {"dgx-a100", {"a100-80gb", "NVLink3 (A100)", "PCIe Gen4 x16", "InfiniBand HDR"}},
    {"dgx-b200", {"b200", "NVLink5 (B200)", "PCIe Gen5 x16", "InfiniBand NDR"}},
    {"dgx-h100", {"h100-sxm", "NVLink4 (H100/H200)", "PCIe Gen5 x16", "InfiniBand NDR"}},
    {"dgx-h200", {"h200", "NVLink4 (H100/H200)", "PCIe Gen5 x16", "InfiniBand NDR"}},
};

// A DGX node has 8 GPUs and 8 compute NICs (interconnect.csv HDR row: 8x200 Gb/s per DGX A100;
// NDR row: 8x400 Gb/s per DGX H100); the NVLink, PCIe and NIC bandwidths per direction equal the
// interconnect.csv rows (NVLink3 300, NVLink4 450, NVLink5 900 GB/s; HDR 25, NDR 50 GB/s), which
// the file's "source" names.
TEST_CASE("built-in clusters equal the interconnect.csv rows they cite", "[topologies]") {
  const auto rows = read_reference_csv("interconnect.csv");
  std::vector<std::string> mapped;
  for (const auto& [name, links] : kClusterRows) mapped.push_back(name);
  CHECK(zoo_cluster_names() == mapped);

  for (const auto& [name, links] : kClusterRows) {
    INFO(name);
    const ClusterSpec cluster = load_cluster(name);
    const std::string source = source_of("clusters", name);
    CHECK(cluster.name == name);
    CHECK(cluster.device.name == links.device);
    CHECK(cluster.gpus_per_node == 8);
    CHECK(cluster.nics_per_node == 8);
    CHECK(cluster.intra_node == IntraNodeFabric::kNvSwitch);
    CHECK(cluster.oversubscription == 1.0);
    CHECK(cluster.price_usd_per_gpu_hour == cluster.device.price_usd_per_hour);
    CHECK(cluster.nvlink.bw_gbps ==
          std::stod(row_named(rows, "name", links.nvlink).at("unidir_gb_per_s")));
    CHECK(cluster.pcie.bw_gbps ==
          std::stod(row_named(rows, "name", links.pcie).at("unidir_gb_per_s")));
    CHECK(cluster.nic.bw_gbps ==
          std::stod(row_named(rows, "name", links.nic).at("unidir_gb_per_s")));
    for (const char* row : {links.nvlink, links.pcie, links.nic}) {
      CHECK_THAT(source, Catch::Contains(std::string("'") + row + "'"));
    }
  }
}

void check_same_device(const DeviceSpec& a, const DeviceSpec& b) {
  CHECK(a.name == b.name);
  CHECK(a.peak_bf16_flops == Approx(b.peak_bf16_flops).epsilon(1e-12));
  CHECK(a.peak_fp16_flops == Approx(b.peak_fp16_flops).epsilon(1e-12));
  CHECK(a.peak_fp32_flops == Approx(b.peak_fp32_flops).epsilon(1e-12));
  CHECK(a.peak_tf32_flops == Approx(b.peak_tf32_flops).epsilon(1e-12));
  CHECK(a.peak_fp8_flops == Approx(b.peak_fp8_flops).epsilon(1e-12));
  CHECK(a.measured_matmul_bf16_flops == Approx(b.measured_matmul_bf16_flops).epsilon(1e-12));
  CHECK(a.hbm_bytes == b.hbm_bytes);
  CHECK(a.hbm_bw_gbps == b.hbm_bw_gbps);
  CHECK(a.launch_overhead_ns == b.launch_overhead_ns);
  CHECK(a.price_usd_per_hour == b.price_usd_per_hour);
  CHECK(a.tdp_watts == b.tdp_watts);
}

// device_to_json writes the format load_device reads: every built-in device comes back equal.
TEST_CASE("device JSON round trip", "[topologies]") {
  for (const auto& name : zoo_device_names()) {
    INFO(name);
    const DeviceSpec device = load_device(name);
    const TempFile file(device_to_json(device), "strata_device_" + name);
    check_same_device(load_device(file.path()), device);
  }
}

// cluster_to_json writes the format load_cluster reads (device inline): every built-in cluster
// comes back equal.
TEST_CASE("cluster JSON round trip", "[topologies]") {
  for (const auto& name : zoo_cluster_names()) {
    INFO(name);
    const ClusterSpec cluster = load_cluster(name);
    const TempFile file(cluster_to_json(cluster), "strata_cluster_" + name);
    const ClusterSpec back = load_cluster(file.path());
    CHECK(back.name == cluster.name);
    check_same_device(back.device, cluster.device);
    CHECK(back.gpus_per_node == cluster.gpus_per_node);
    CHECK(back.max_nodes == cluster.max_nodes);
    CHECK(back.intra_node == cluster.intra_node);
    CHECK(back.nvlink.bw_gbps == cluster.nvlink.bw_gbps);
    CHECK(back.nvlink.latency_ns == cluster.nvlink.latency_ns);
    CHECK(back.pcie.bw_gbps == cluster.pcie.bw_gbps);
    CHECK(back.pcie.latency_ns == cluster.pcie.latency_ns);
    CHECK(back.nics_per_node == cluster.nics_per_node);
    CHECK(back.nic.bw_gbps == cluster.nic.bw_gbps);
    CHECK(back.nic.latency_ns == cluster.nic.latency_ns);
    CHECK(back.inter_node == cluster.inter_node);
    CHECK(back.oversubscription == cluster.oversubscription);
    CHECK(back.nodes_per_leaf == cluster.nodes_per_leaf);
    CHECK(back.switch_latency_ns == cluster.switch_latency_ns);
    CHECK(back.price_usd_per_gpu_hour == cluster.price_usd_per_gpu_hour);
  }
}

// Latencies are written in µs and held in ns: 0.5 µs is 500 ns.
TEST_CASE("cluster latencies convert from microseconds to nanoseconds", "[topologies]") {
  const ClusterSpec cluster = load_cluster("dgx-h100");
  CHECK(cluster.switch_latency_ns == 500);
  CHECK(cluster.nic.latency_ns == 2000);
}

// A cluster file's own price overrides the device's assumed price; a cluster may also be
// rail-optimized and oversubscribed.
TEST_CASE("cluster fields override and choose", "[topologies]") {
  nlohmann::json json = cluster_to_json(load_cluster("dgx-h100"));
  json["device"] = "h100-sxm";
  json["price_usd_per_gpu_hour"] = 2.25;
  json["inter_node"]["topology"] = "rail-optimized";
  json["inter_node"]["oversubscription"] = 7;
  const TempFile file(json, "strata_cluster_override");
  const ClusterSpec cluster = load_cluster(file.path());
  CHECK(cluster.price_usd_per_gpu_hour == 2.25);
  CHECK(cluster.inter_node == InterNodeTopology::kRailOptimized);
  CHECK(cluster.oversubscription == 7.0);
}

// An unknown cluster name lists the built-in ones.
TEST_CASE("unknown cluster name lists the known ones", "[topologies][errors]") {
  const auto error = input_error_of([] { load_cluster("dgx-z100"); });
  REQUIRE(error);
  CHECK_THAT(std::string(error->what()), Catch::Contains("dgx-z100"));
  for (const auto& name : zoo_cluster_names()) {
    CHECK_THAT(std::string(error->what()), Catch::Contains(name));
  }
}

// The error of a mutated dgx-h100 cluster file, or nothing when it loads.
std::optional<InputError> cluster_error_of(nlohmann::json json) {
  const TempFile file(json, "strata_cluster_error");
  return input_error_of([&] { load_cluster(file.path()); });
}

nlohmann::json dgx_h100_json() {
  nlohmann::json json = cluster_to_json(load_cluster("dgx-h100"));
  json["device"] = "h100-sxm";
  return json;
}

// Oversubscription below 1 (more up-link than down-link bandwidth) is refused, naming the nested
// field.
TEST_CASE("oversubscription below 1 is refused", "[topologies][errors]") {
  nlohmann::json json = dgx_h100_json();
  json["inter_node"]["oversubscription"] = 0.5;
  const auto error = cluster_error_of(json);
  REQUIRE(error);
  CHECK(error->field() == "inter_node.oversubscription");
}

// Unknown keys are typos until proven otherwise: refused at the top level and nested, named with
// their path; "source" and "note" are documentation.
TEST_CASE("unknown cluster keys are refused", "[topologies][errors]") {
  nlohmann::json nested = dgx_h100_json();
  nested["inter_node"]["nic_bandwith_gbps"] = 50;
  const auto nested_error = cluster_error_of(nested);
  REQUIRE(nested_error);
  CHECK(nested_error->field() == "inter_node.nic_bandwith_gbps");

  nlohmann::json top = dgx_h100_json();
  top["gpu_per_node"] = 8;
  const auto top_error = cluster_error_of(top);
  REQUIRE(top_error);
  CHECK(top_error->field() == "gpu_per_node");

  nlohmann::json documented = dgx_h100_json();
  documented["source"] = "a datasheet";
  documented["note"] = "a caveat";
  CHECK_FALSE(cluster_error_of(documented));
}

// "device" is a built-in name (an unknown one lists them) or an inline object whose errors are
// named "device.<field>".
TEST_CASE("cluster device errors name the device field", "[topologies][errors]") {
  nlohmann::json unknown = dgx_h100_json();
  unknown["device"] = "h300";
  const auto unknown_error = cluster_error_of(unknown);
  REQUIRE(unknown_error);
  CHECK(unknown_error->field() == "device");
  CHECK_THAT(std::string(unknown_error->what()), Catch::Contains("h100-sxm"));

  nlohmann::json inline_device = cluster_to_json(load_cluster("dgx-h100"));
  inline_device["device"]["peak_tflops"].erase("bf16");
  const auto inline_error = cluster_error_of(inline_device);
  REQUIRE(inline_error);
  CHECK(inline_error->field() == "device.peak_tflops.bf16");
}

// Other nested mistakes: an unknown fabric lists the choices; a negative bandwidth is refused.
TEST_CASE("bad fabric and negative bandwidth are named", "[topologies][errors]") {
  nlohmann::json fabric = dgx_h100_json();
  fabric["intra_node"]["fabric"] = "infinity-fabric";
  const auto fabric_error = cluster_error_of(fabric);
  REQUIRE(fabric_error);
  CHECK(fabric_error->field() == "intra_node.fabric");
  CHECK_THAT(std::string(fabric_error->what()), Catch::Contains("nvswitch"));

  nlohmann::json bandwidth = dgx_h100_json();
  bandwidth["pcie"]["bw_gbps"] = -63;
  const auto bandwidth_error = cluster_error_of(bandwidth);
  REQUIRE(bandwidth_error);
  CHECK(bandwidth_error->field() == "pcie.bw_gbps");
}

// A measured matmul rate above the dense peak is a unit or sparsity mix-up, refused.
TEST_CASE("measured matmul above peak is refused", "[topologies][errors]") {
  nlohmann::json json = device_to_json(load_device("h100-sxm"));
  json["measured_matmul_bf16_tflops"] = 1500;
  const TempFile file(json, "strata_device_error");
  const auto error = input_error_of([&] { load_device(file.path()); });
  REQUIRE(error);
  CHECK(error->field() == "measured_matmul_bf16_tflops");
}

}  // namespace
}  // namespace strata
