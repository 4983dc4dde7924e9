#pragma once
// Shared by the collective tests: an idealized cluster and the time of a collective plan on an
// idle cluster, computed by hand (without the engine).

#include <numeric>
#include <vector>

#include "sim/collective.hpp"
#include "topologies/cluster_spec.hpp"
#include "topologies/topology.hpp"

namespace strata::test {

// `gpus_per_node` GPUs per node on one NVSwitch with `bw_gbps` per direction and `latency_ns`
// per hop, one NIC per GPU; one protocol per fabric (Simple, no base latency, efficiency 1), no
// in-switch reduction, no tree: plans are pure rings whose time has a closed form.
inline ClusterSpec ideal_cluster(int64_t gpus_per_node, double bw_gbps, int64_t latency_ns) {
  ClusterSpec cluster;
  cluster.name = "ideal";
  cluster.gpus_per_node = gpus_per_node;
  cluster.intra_node = IntraNodeFabric::kNvSwitch;
  cluster.nvlink = {bw_gbps, latency_ns};
  cluster.pcie = {bw_gbps, latency_ns};
  cluster.nics_per_node = gpus_per_node;
  cluster.nic = {bw_gbps, latency_ns};
  cluster.nodes_per_leaf = 1024;
  const ProtocolTuning simple{Protocol::kSimple, 0, 0, 1.0};
  cluster.collectives.nvlink.protocols = {simple};
  cluster.collectives.net.protocols = {simple};
  cluster.collectives.nvls.protocols.clear();
  cluster.collectives.tree_max_bytes = 0;
  return cluster;
}

inline std::vector<int64_t> first_gpus(int64_t n) {
  std::vector<int64_t> gpus(static_cast<size_t>(n));
  std::iota(gpus.begin(), gpus.end(), int64_t{0});
  return gpus;
}

// Seconds a plan takes on an idle cluster (sim/collective.hpp's estimate).
inline double idle_seconds(const Topology& topology, const CollectivePlan& plan) {
  return estimated_seconds(topology, plan);
}

}  // namespace strata::test
