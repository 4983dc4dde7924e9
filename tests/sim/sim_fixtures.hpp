#pragma once
// Shared set-up for the simulator tests: clusters whose network costs nothing, compute without
// launch overhead, and compiled plans.

#include "sim/compute_model.hpp"
#include "tests/plan/plan_fixtures.hpp"
#include "topologies/cluster_spec.hpp"

namespace strata::test {

// dgx-a100 with links so fast and latencies so small that communication takes no measurable
// time: what is left is compute.
inline ClusterSpec free_network_cluster() {
  ClusterSpec cluster = load_cluster("dgx-a100");
  for (LinkSpec* link : {&cluster.nvlink, &cluster.pcie, &cluster.nic}) {
    link->bw_gbps = 1e9;
    link->latency_ns = 0;
  }
  cluster.switch_latency_ns = 0;
  ProtocolTuning simple;
  simple.bw_efficiency = 1.0;
  cluster.collectives.nvlink.protocols = {simple};
  cluster.collectives.net.protocols = {simple};
  cluster.collectives.nvls.protocols.clear();
  cluster.collectives.tree_max_bytes = 0;
  return cluster;
}

// One node of two GPUs joined by links of `bw` bytes/s, one protocol of full efficiency: a ring
// exchange of S bytes (each GPU sends S to the other) takes a + S/bw, a the route's latency, and
// the two-GPU ring collectives the closed forms of tests/sim/network_timing_test.cpp.
inline ClusterSpec two_gpu_node(double bw) {
  ClusterSpec cluster = load_cluster("dgx-a100");
  cluster.gpus_per_node = 2;
  cluster.nvlink = {bw / 1e9, 500};
  ProtocolTuning simple;
  simple.bw_efficiency = 1.0;
  cluster.collectives.nvlink.protocols = {simple};
  cluster.collectives.nvls.protocols.clear();
  return cluster;
}

// The device's built-in tables without kernel launch overhead, so that every op costs exactly
// its roofline time.
inline Calibration no_launch_overhead(const DeviceSpec& device) {
  DeviceEfficiency eff = default_efficiency(device);
  eff.launch_overhead_ns = 0;
  return Calibration{"test", {eff}, std::nullopt};
}

}  // namespace strata::test
