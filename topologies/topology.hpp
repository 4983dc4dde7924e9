#pragma once
// The topology graph of a cluster: the links a byte crosses between two GPUs, each with its
// bandwidth (per direction) and latency, and the route between any two GPUs.
//
// What is modelled (ClusterSpec supplies the figures):
//  - inside a node on NVSwitch: each GPU has one up-link to the node's switch fabric and one
//    down-link from it, each with the GPU's full NVLink bandwidth per direction (DGX: 18 NVLink4
//    ports = 450 GB/s). Any GPU reaches any other at full rate; the switch itself is non-blocking.
//    An NVLink mesh is modelled the same way; a PCIe node routes GPU-to-GPU through PCIe links.
//  - each GPU reaches its NIC (GPU i uses NIC i * nics_per_node / gpus_per_node) over PCIe
//    (GPUDirect RDMA); a NIC has an up-link to and a down-link from its leaf switch.
//  - fat-tree: all NICs of a node hang from one leaf; `nodes_per_leaf` nodes share a leaf; each
//    leaf's up-links to the spine are one aggregated link per direction with the capacity of its
//    down-links divided by `oversubscription` (ECMP spreads flows over the spines; the spine
//    layer itself is non-blocking).
//  - rail-optimized: NIC k of every node hangs from rail switch k of its group of
//    `nodes_per_leaf` nodes; same-rail traffic inside a group crosses one switch; other traffic
//    goes up to the spine through the rail switch's aggregated up-link.
//
// Latencies: the cluster's NVLink figure is one GPU-to-GPU hop through the switch, split over the
// up- and down-link (NVSwitch crossing adds nothing more); the PCIe figure is one GPU-NIC
// transfer, on each PCIe link; the NIC figure is one NIC-to-NIC transfer end to end through both
// HCAs, split over the NIC up- and down-link; each switch crossed between nodes adds
// `switch_latency_ns` (1 under one leaf or rail switch, 3 through the spine).
// Worked example (dgx-h100: NVLink 1 µs, PCIe 1 µs, NIC 2 µs, switch 0.5 µs): GPU to GPU in a
// node 1 µs; to another node under the same leaf 1 + 2 + 0.5 + 1 = 4.5 µs; through the spine
// 5.5 µs.
//
// Construction is O(links) and routing O(1): 16,384 GPUs on 2,048 nodes are ~100k links.
// Links are numbered densely, by kind then owner, each up-link followed by its down-link (so
// down = up + 1); ids are stable for a given (cluster, gpus).

#include <cstdint>
#include <string>
#include <vector>

#include "topologies/cluster_spec.hpp"

namespace strata {

enum class LinkKind : uint8_t {
  kNvlinkUp,    // GPU -> NVSwitch
  kNvlinkDown,  // NVSwitch -> GPU
  kPcieUp,      // GPU -> NIC (or host)
  kPcieDown,    // NIC -> GPU
  kNicUp,       // NIC -> leaf (or rail) switch
  kNicDown,     // leaf switch -> NIC
  kLeafUp,      // leaf -> spine (aggregated)
  kLeafDown,    // spine -> leaf (aggregated)
};
const char* to_string(LinkKind kind);

struct TopologyLink {
  LinkKind kind = LinkKind::kNvlinkUp;
  double bw_gbps = 0;      // capacity per direction, GB/s
  int64_t latency_ns = 0;  // added once per traversal
  int64_t owner = 0;       // the GPU (NVLink, PCIe), NIC (global index) or leaf it belongs to
};

struct Route {
  std::vector<int32_t> links;  // in traversal order
  int64_t latency_ns = 0;      // links' latencies plus switch hops
};

class Topology {
 public:
  // The graph for `gpus` GPUs of `cluster` (ceil(gpus / gpus_per_node) nodes).
  Topology(const ClusterSpec& cluster, int64_t gpus);

  int64_t gpus() const { return gpus_; }
  int64_t nodes() const { return nodes_; }
  int64_t node_of(int64_t gpu) const { return gpu / gpus_per_node_; }
  int64_t local_of(int64_t gpu) const { return gpu % gpus_per_node_; }
  const ClusterSpec& cluster() const { return cluster_; }

  const std::vector<TopologyLink>& links() const { return links_; }
  const TopologyLink& link(int32_t id) const { return links_[static_cast<size_t>(id)]; }

  // The route from one GPU to another (src != dst).
  Route route(int64_t src_gpu, int64_t dst_gpu) const;
  // In-switch reduction (NVLink SHARP) paths: a GPU's up-link into its node's switch and the
  // down-link out of it.
  int32_t switch_up(int64_t gpu) const;
  int32_t switch_down(int64_t gpu) const;
  // A GPU's PCIe link toward its host (and NIC), and back: host memory copies (offload).
  int32_t host_link(int64_t gpu, bool to_host) const { return pcie_up(gpu) + (to_host ? 0 : 1); }

 private:
  ClusterSpec cluster_;
  int64_t gpus_;
  int64_t nodes_;
  int64_t gpus_per_node_;
  std::vector<TopologyLink> links_;
  // Where each kind's links start in links_ (filled by the constructor).
  int32_t first_nvlink_ = 0;
  int32_t first_pcie_ = 0;
  int32_t first_nic_ = 0;
  int32_t first_leaf_ = 0;

  int64_t nic_of(int64_t gpu) const;     // global NIC index
  int64_t switch_of(int64_t nic) const;  // leaf (fat-tree) or rail switch of a NIC
  int32_t nvlink_up(int64_t gpu) const { return first_nvlink_ + static_cast<int32_t>(2 * gpu); }
  int32_t pcie_up(int64_t gpu) const { return first_pcie_ + static_cast<int32_t>(2 * gpu); }
  int32_t nic_up(int64_t nic) const { return first_nic_ + static_cast<int32_t>(2 * nic); }
  int32_t leaf_up(int64_t leaf) const { return first_leaf_ + static_cast<int32_t>(2 * leaf); }
};

}  // namespace strata
