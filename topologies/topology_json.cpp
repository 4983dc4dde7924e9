#include "topologies/topology_json.hpp"

#include "common/units.hpp"

namespace strata {

namespace {

double flops_to_tflops(double flops) { return flops / kFlopsPerTflop; }
double ns_to_us(int64_t ns) { return static_cast<double>(ns) / 1e3; }

nlohmann::json fabric_to_json(const FabricTuning& fabric) {
  nlohmann::json protocols = nlohmann::json::array();
  for (const ProtocolTuning& tuning : fabric.protocols) {
    protocols.push_back({
        {"protocol", to_string(tuning.protocol)},
        {"max_bytes", tuning.max_bytes},
        {"latency_us", ns_to_us(tuning.base_latency_ns)},
        {"bw_efficiency", tuning.bw_efficiency},
    });
  }
  return protocols;
}

// The "collectives" section; NVLS only where the switch reduces, as the reader requires.
nlohmann::json collectives_to_json(const ClusterSpec& cluster) {
  const CollectiveTuning& tuning = cluster.collectives;
  nlohmann::json json{
      {"in_switch_reduction", cluster.in_switch_reduction},
      {"nvlink", fabric_to_json(tuning.nvlink)},
      {"net", fabric_to_json(tuning.net)},
  };
  if (tuning.tree_max_bytes) json["tree_max_bytes"] = *tuning.tree_max_bytes;
  if (cluster.in_switch_reduction && !tuning.nvls.protocols.empty()) {
    json["nvls"] = fabric_to_json(tuning.nvls);
    json["nvls_min_bytes"] = tuning.nvls_min_bytes;
  }
  return json;
}

}  // namespace

// The device format of topologies/README.md, every field written (0 where the device has no
// TF32, no FP8, no measured matmul rate or no known TDP), so that load_device reads it back.
nlohmann::json device_to_json(const DeviceSpec& device) {
  nlohmann::json json{
      {"name", device.name},
      {"peak_tflops",
       {
           {"bf16", flops_to_tflops(device.peak_bf16_flops)},
           {"fp16", flops_to_tflops(device.peak_fp16_flops)},
           {"fp32", flops_to_tflops(device.peak_fp32_flops)},
           {"tf32", flops_to_tflops(device.peak_tf32_flops)},
           {"fp8", flops_to_tflops(device.peak_fp8_flops)},
       }},
      {"measured_matmul_bf16_tflops", flops_to_tflops(device.measured_matmul_bf16_flops)},
      {"measured_matmul_fp8_tflops", flops_to_tflops(device.measured_matmul_fp8_flops)},
      {"hbm_gb", static_cast<double>(device.hbm_bytes) / kBytesPerGB},
      {"hbm_bw_gbps", device.hbm_bw_gbps},
      {"launch_overhead_us", ns_to_us(device.launch_overhead_ns)},
      {"price_usd_per_hour", device.price_usd_per_hour},
      {"tdp_watts", device.tdp_watts},
  };
  if (device.host_cores > 0) json["host_cores"] = device.host_cores;  // a CPU host only
  if (device.host_slice_ns > 0) json["host_slice_us"] = ns_to_us(device.host_slice_ns);
  if (device.host_flops > 0) {
    json["host_tflops"] = flops_to_tflops(device.host_flops);
    json["host_mem_bw_gbps"] = device.host_mem_bw_gbps;
    json["host_memory_gb"] = static_cast<double>(device.host_memory_bytes) / kBytesPerGB;
  }
  return json;
}

// The cluster format of topologies/README.md with the device written inline, so the output
// stands alone and load_cluster reads it back.
nlohmann::json cluster_to_json(const ClusterSpec& cluster) {
  return nlohmann::json{
      {"name", cluster.name},
      {"device", device_to_json(cluster.device)},
      {"gpus_per_node", cluster.gpus_per_node},
      {"max_nodes", cluster.max_nodes},
      {"intra_node",
       {
           {"fabric", to_string(cluster.intra_node)},
           {"bw_gbps", cluster.nvlink.bw_gbps},
           {"latency_us", ns_to_us(cluster.nvlink.latency_ns)},
       }},
      {"pcie",
       {
           {"bw_gbps", cluster.pcie.bw_gbps},
           {"latency_us", ns_to_us(cluster.pcie.latency_ns)},
       }},
      {"inter_node",
       {
           {"nics_per_node", cluster.nics_per_node},
           {"nic_bw_gbps", cluster.nic.bw_gbps},
           {"nic_latency_us", ns_to_us(cluster.nic.latency_ns)},
           {"topology", to_string(cluster.inter_node)},
           {"oversubscription", cluster.oversubscription},
           {"nodes_per_leaf", cluster.nodes_per_leaf},
           {"switch_latency_us", ns_to_us(cluster.switch_latency_ns)},
       }},
      {"price_usd_per_gpu_hour", cluster.price_usd_per_gpu_hour},
      {"collectives", collectives_to_json(cluster)},
  };
}

}  // namespace strata
