#include "topologies/topology.hpp"

#include <fmt/format.h>

#include "common/error.hpp"

namespace strata {

const char* to_string(LinkKind kind) {
  switch (kind) {
    case LinkKind::kNvlinkUp:
      return "nvlink-up";
    case LinkKind::kNvlinkDown:
      return "nvlink-down";
    case LinkKind::kPcieUp:
      return "pcie-up";
    case LinkKind::kPcieDown:
      return "pcie-down";
    case LinkKind::kNicUp:
      return "nic-up";
    case LinkKind::kNicDown:
      return "nic-down";
    case LinkKind::kLeafUp:
      return "leaf-up";
    case LinkKind::kLeafDown:
      return "leaf-down";
  }
  return "?";
}

namespace {

int32_t to_link_id(size_t index) {
  STRATA_ASSERT(index < static_cast<size_t>(INT32_MAX), "link ids fit in int32");
  return static_cast<int32_t>(index);
}

}  // namespace

Topology::Topology(const ClusterSpec& cluster, int64_t gpus)
    : cluster_(cluster),
      gpus_(gpus),
      nodes_(cluster.nodes_for(gpus)),
      gpus_per_node_(cluster.gpus_per_node) {
  STRATA_ASSERT(gpus >= 1, fmt::format("a topology has GPUs, asked for {}", gpus));
  STRATA_ASSERT(cluster.gpus_per_node >= 1 && cluster.nics_per_node >= 1 &&
                    cluster.nodes_per_leaf >= 1 && cluster.oversubscription >= 1,
                fmt::format("cluster '{}' was validated by its reader", cluster.name));
  const int64_t nics = nodes_ * cluster.nics_per_node;
  const int64_t groups = (nodes_ + cluster.nodes_per_leaf - 1) / cluster.nodes_per_leaf;
  const bool rail = cluster.inter_node == InterNodeTopology::kRailOptimized;
  const int64_t switches = rail ? groups * cluster.nics_per_node : groups;
  const bool nvlink = cluster.intra_node != IntraNodeFabric::kPcie;
  links_.reserve(static_cast<size_t>(2 * ((nvlink ? gpus : 0) + gpus + nics + switches)));

  // Each owner gets an up-link then its down-link: down = up + 1.
  const auto add_pair = [this](LinkKind up, LinkKind down, double bw_gbps, int64_t up_latency_ns,
                               int64_t down_latency_ns, int64_t owner) {
    links_.push_back({up, bw_gbps, up_latency_ns, owner});
    links_.push_back({down, bw_gbps, down_latency_ns, owner});
  };

  // The NVLink figure is one GPU-to-GPU hop: half on the way up, the rest on the way down.
  first_nvlink_ = to_link_id(links_.size());
  if (nvlink) {
    const int64_t up_ns = cluster.nvlink.latency_ns / 2;
    for (int64_t gpu = 0; gpu < gpus; ++gpu) {
      add_pair(LinkKind::kNvlinkUp, LinkKind::kNvlinkDown, cluster.nvlink.bw_gbps, up_ns,
               cluster.nvlink.latency_ns - up_ns, gpu);
    }
  }
  first_pcie_ = to_link_id(links_.size());
  for (int64_t gpu = 0; gpu < gpus; ++gpu) {
    add_pair(LinkKind::kPcieUp, LinkKind::kPcieDown, cluster.pcie.bw_gbps, cluster.pcie.latency_ns,
             cluster.pcie.latency_ns, gpu);
  }
  // The NIC figure is one NIC-to-NIC transfer through both HCAs: half at each end.
  first_nic_ = to_link_id(links_.size());
  const int64_t nic_up_ns = cluster.nic.latency_ns / 2;
  for (int64_t nic = 0; nic < nics; ++nic) {
    add_pair(LinkKind::kNicUp, LinkKind::kNicDown, cluster.nic.bw_gbps, nic_up_ns,
             cluster.nic.latency_ns - nic_up_ns, nic);
  }
  // A switch's aggregated up-link carries its down-links' capacity over the oversubscription:
  // fat-tree leaf nodes_per_leaf x nics_per_node NICs, rail switch nodes_per_leaf NICs.
  // Example: 32 nodes x 8 NICs x 50 GB/s at 2:1 = 6,400 GB/s per direction per leaf.
  first_leaf_ = to_link_id(links_.size());
  const int64_t nics_per_switch =
      rail ? cluster.nodes_per_leaf : cluster.nodes_per_leaf * cluster.nics_per_node;
  const double uplink_gbps =
      static_cast<double>(nics_per_switch) * cluster.nic.bw_gbps / cluster.oversubscription;
  for (int64_t leaf = 0; leaf < switches; ++leaf) {
    add_pair(LinkKind::kLeafUp, LinkKind::kLeafDown, uplink_gbps, 0, 0, leaf);
  }
  STRATA_ASSERT(links_.size() < static_cast<size_t>(INT32_MAX), "link ids fit in int32");
}

int64_t Topology::nic_of(int64_t gpu) const {
  return node_of(gpu) * cluster_.nics_per_node +
         local_of(gpu) * cluster_.nics_per_node / gpus_per_node_;
}

int64_t Topology::switch_of(int64_t nic) const {
  const int64_t node = nic / cluster_.nics_per_node;
  const int64_t group = node / cluster_.nodes_per_leaf;
  if (cluster_.inter_node == InterNodeTopology::kFatTree) return group;
  return group * cluster_.nics_per_node + nic % cluster_.nics_per_node;
}

Route Topology::route(int64_t src_gpu, int64_t dst_gpu) const {
  STRATA_ASSERT(src_gpu >= 0 && src_gpu < gpus_ && dst_gpu >= 0 && dst_gpu < gpus_,
                fmt::format("route {} -> {} within {} GPUs", src_gpu, dst_gpu, gpus_));
  STRATA_ASSERT(src_gpu != dst_gpu, fmt::format("a route joins two GPUs, got {} twice", src_gpu));
  Route route;
  int64_t switches = 0;
  if (node_of(src_gpu) == node_of(dst_gpu)) {
    if (cluster_.intra_node == IntraNodeFabric::kPcie) {
      route.links = {pcie_up(src_gpu), pcie_up(dst_gpu) + 1};
    } else {
      route.links = {nvlink_up(src_gpu), nvlink_up(dst_gpu) + 1};
    }
  } else {
    const int64_t src_nic = nic_of(src_gpu);
    const int64_t dst_nic = nic_of(dst_gpu);
    const int64_t src_switch = switch_of(src_nic);
    const int64_t dst_switch = switch_of(dst_nic);
    route.links.reserve(6);
    route.links.push_back(pcie_up(src_gpu));
    route.links.push_back(nic_up(src_nic));
    if (src_switch == dst_switch) {
      switches = 1;
    } else {
      route.links.push_back(leaf_up(src_switch));
      route.links.push_back(leaf_up(dst_switch) + 1);
      switches = 3;  // leaf, spine, leaf
    }
    route.links.push_back(nic_up(dst_nic) + 1);
    route.links.push_back(pcie_up(dst_gpu) + 1);
  }
  route.latency_ns = switches * cluster_.switch_latency_ns;
  for (const int32_t id : route.links) route.latency_ns += link(id).latency_ns;
  return route;
}

int32_t Topology::switch_up(int64_t gpu) const {
  STRATA_ASSERT(cluster_.intra_node != IntraNodeFabric::kPcie,
                "in-switch paths exist on NVLink nodes only");
  STRATA_ASSERT(gpu >= 0 && gpu < gpus_, fmt::format("GPU {} within {}", gpu, gpus_));
  return nvlink_up(gpu);
}

int32_t Topology::switch_down(int64_t gpu) const { return switch_up(gpu) + 1; }

}  // namespace strata
