#pragma once
// ClusterSpec: nodes of identical GPUs, the fabric inside a node and the fabric between nodes.
// Built-in clusters live in topologies/clusters/*.json, with link figures from
// data/reference/interconnect.csv cited in each file's "source" field.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "topologies/collective_tuning.hpp"
#include "topologies/device_spec.hpp"

namespace strata {

enum class IntraNodeFabric { kNvSwitch, kNvLinkMesh, kPcie };
enum class InterNodeTopology { kFatTree, kRailOptimized };

struct LinkSpec {
  double bw_gbps = 0;      // per direction, GB/s
  int64_t latency_ns = 0;  // one hop
};

struct ClusterSpec {
  std::string name;
  DeviceSpec device;
  int64_t gpus_per_node = 0;
  int64_t max_nodes = 0;  // 0: as many nodes as the plan asks for
  IntraNodeFabric intra_node = IntraNodeFabric::kNvSwitch;
  LinkSpec nvlink;  // per GPU to the NVSwitch (or the mesh), per direction
  LinkSpec pcie;    // GPU to host / NIC
  int64_t nics_per_node = 0;
  LinkSpec nic;  // per NIC, per direction
  InterNodeTopology inter_node = InterNodeTopology::kFatTree;
  double oversubscription = 1.0;      // leaf up-links : down-links; 1 = non-blocking
  int64_t nodes_per_leaf = 0;         // nodes under one leaf switch (rail: per rail group)
  int64_t switch_latency_ns = 0;      // per switch hop
  double price_usd_per_gpu_hour = 0;  // defaults to the device's price; overridable per cluster
  // NVSwitch with NVLink SHARP (DGX H100, H200, B200; not DGX A100): the switch reduces, so an
  // all-reduce can run in-switch (NCCL's NVLS algorithm).
  bool in_switch_reduction = false;
  // NCCL's protocols per fabric, from the file's "collectives" section or
  // default_collective_tuning(in_switch_reduction).
  CollectiveTuning collectives = default_collective_tuning(false);

  int64_t nodes_for(int64_t gpus) const { return (gpus + gpus_per_node - 1) / gpus_per_node; }
};

// A zoo name (topologies/clusters/*.json) or a path. The "device" field is a device zoo name or
// an inline device object. Throws InputError; an unknown name lists the known ones.
ClusterSpec load_cluster(const std::string& name_or_path);
// A cluster object inside another document (a calibration file's measured host).
ClusterSpec parse_cluster_object(const nlohmann::json& object, const std::string& where,
                                 const std::string& field);
std::vector<std::string> zoo_cluster_names();

const char* to_string(IntraNodeFabric fabric);
const char* to_string(InterNodeTopology topology);

}  // namespace strata
