// The topology graph (topologies/topology.hpp): which links exist, the route between two GPUs,
// its latency, the leaves' aggregated up-link capacity, and construction at 16,384 GPUs.

#include <catch2/catch.hpp>

#include <map>
#include <tuple>
#include <vector>

#include "topologies/cluster_spec.hpp"
#include "topologies/topology.hpp"

namespace strata {
namespace {

// dgx-h100's figures written out, so that the expected values below are visible: 8 GPUs and 8
// NICs per node, NVLink 450 GB/s 1 µs, PCIe 63 GB/s 1 µs, NIC 50 GB/s 2 µs, 32 nodes per leaf,
// 0.5 µs per switch.
ClusterSpec dgx_like(InterNodeTopology topology = InterNodeTopology::kFatTree) {
  ClusterSpec cluster;
  cluster.name = "test-dgx";
  cluster.gpus_per_node = 8;
  cluster.intra_node = IntraNodeFabric::kNvSwitch;
  cluster.nvlink = {450, 1000};
  cluster.pcie = {63, 1000};
  cluster.nics_per_node = 8;
  cluster.nic = {50, 2000};
  cluster.inter_node = topology;
  cluster.oversubscription = 1;
  cluster.nodes_per_leaf = 32;
  cluster.switch_latency_ns = 500;
  return cluster;
}

std::map<LinkKind, int64_t> count_kinds(const Topology& topology) {
  std::map<LinkKind, int64_t> counts;
  for (const TopologyLink& link : topology.links()) ++counts[link.kind];
  return counts;
}

std::vector<LinkKind> kinds_of(const Topology& topology, const Route& route) {
  std::vector<LinkKind> kinds;
  for (const int32_t id : route.links) kinds.push_back(topology.link(id).kind);
  return kinds;
}

// Per GPU one NVLink and one PCIe link per direction, per NIC one link per direction, per leaf
// one aggregated up-link and down-link: 16 GPUs on 2 nodes under one leaf = 32 + 32 + 32 + 2.
// Every up-link is followed by its down-link, with the same owner.
TEST_CASE("link counts: two links per GPU, per NIC and per leaf", "[topologies][topology]") {
  const Topology topology(dgx_like(), 16);
  CHECK(topology.nodes() == 2);
  CHECK(topology.links().size() == 98);
  const auto counts = count_kinds(topology);
  CHECK(counts.at(LinkKind::kNvlinkUp) == 16);
  CHECK(counts.at(LinkKind::kNvlinkDown) == 16);
  CHECK(counts.at(LinkKind::kPcieUp) == 16);
  CHECK(counts.at(LinkKind::kPcieDown) == 16);
  CHECK(counts.at(LinkKind::kNicUp) == 16);
  CHECK(counts.at(LinkKind::kNicDown) == 16);
  CHECK(counts.at(LinkKind::kLeafUp) == 1);
  CHECK(counts.at(LinkKind::kLeafDown) == 1);
  for (size_t id = 0; id < topology.links().size(); id += 2) {
    const TopologyLink& up = topology.links()[id];
    const TopologyLink& down = topology.links()[id + 1];
    CHECK(static_cast<int>(down.kind) == static_cast<int>(up.kind) + 1);
    CHECK(down.owner == up.owner);
  }
}

// A partly filled last node has links for its GPUs only, but all its NICs: 12 GPUs on 8-GPU
// nodes are 2 nodes, 12 NVLink pairs, 16 NIC pairs.
TEST_CASE("a partly filled node has links for its GPUs", "[topologies][topology]") {
  const Topology topology(dgx_like(), 12);
  CHECK(topology.nodes() == 2);
  const auto counts = count_kinds(topology);
  CHECK(counts.at(LinkKind::kNvlinkUp) == 12);
  CHECK(counts.at(LinkKind::kPcieUp) == 12);
  CHECK(counts.at(LinkKind::kNicUp) == 16);
}

// Inside a node on NVSwitch: [src NVLink up, dst NVLink down], latency the NVLink figure (1 µs)
// with nothing added for the switch, bandwidth the GPU's NVLink rate.
TEST_CASE("intra-node route: two NVLink links through the switch", "[topologies][topology]") {
  const Topology topology(dgx_like(), 16);
  const Route route = topology.route(2, 5);
  REQUIRE(route.links.size() == 2);
  CHECK(kinds_of(topology, route) ==
        std::vector<LinkKind>{LinkKind::kNvlinkUp, LinkKind::kNvlinkDown});
  CHECK(topology.link(route.links[0]).owner == 2);
  CHECK(topology.link(route.links[1]).owner == 5);
  CHECK(topology.link(route.links[0]).bw_gbps == 450);
  CHECK(route.latency_ns == 1000);
  CHECK(topology.switch_up(2) == route.links[0]);
  CHECK(topology.switch_down(5) == route.links[1]);
}

// Across nodes under one leaf: [PCIe up, NIC up, NIC down, PCIe down] through each GPU's own NIC
// (GPU i of a node uses NIC i with 8 NICs); latency 1 + 2 + 0.5 (one switch) + 1 = 4.5 µs.
TEST_CASE("inter-node route under one leaf goes through both NICs", "[topologies][topology]") {
  const Topology topology(dgx_like(), 16);
  const Route route = topology.route(3, 8 + 6);
  CHECK(kinds_of(topology, route) == std::vector<LinkKind>{LinkKind::kPcieUp, LinkKind::kNicUp,
                                                           LinkKind::kNicDown,
                                                           LinkKind::kPcieDown});
  CHECK(topology.link(route.links[0]).owner == 3);
  CHECK(topology.link(route.links[1]).owner == 3);      // NIC 3 of node 0
  CHECK(topology.link(route.links[2]).owner == 8 + 6);  // NIC 6 of node 1
  CHECK(topology.link(route.links[3]).owner == 8 + 6);
  CHECK(route.latency_ns == 4500);
}

// Nodes under different leaves also cross the leaves' aggregated links and the spine: 3 switches,
// 4.5 + 2 x 0.5 = 5.5 µs.
TEST_CASE("inter-node route across leaves goes through the spine", "[topologies][topology]") {
  const Topology topology(dgx_like(), 8 * 40);  // 40 nodes: leaves of 32 and 8 nodes
  const Route route = topology.route(0, 8 * 32);
  CHECK(kinds_of(topology, route) ==
        std::vector<LinkKind>{LinkKind::kPcieUp, LinkKind::kNicUp, LinkKind::kLeafUp,
                              LinkKind::kLeafDown, LinkKind::kNicDown, LinkKind::kPcieDown});
  CHECK(topology.link(route.links[2]).owner == 0);
  CHECK(topology.link(route.links[3]).owner == 1);
  CHECK(route.latency_ns == 5500);
  CHECK(topology.route(0, 8 * 31).links.size() == 4);  // node 31 is still under leaf 0
}

// GPU i of a node uses NIC floor(i * nics_per_node / gpus_per_node): with 2 NICs per 8 GPUs,
// GPUs 0-3 share NIC 0 and GPUs 4-7 NIC 1.
TEST_CASE("GPUs share NICs in order", "[topologies][topology]") {
  ClusterSpec cluster = dgx_like();
  cluster.nics_per_node = 2;
  const Topology topology(cluster, 16);
  CHECK(topology.link(topology.route(3, 8).links[1]).owner == 0);
  CHECK(topology.link(topology.route(4, 8).links[1]).owner == 1);
  CHECK(topology.link(topology.route(15, 0).links[1]).owner == 3);  // node 1, NIC 1
}

// Rail-optimized: NIC k of each node of a group hangs from rail switch k. Same rail in a group:
// one switch (4 links, 4.5 µs); another rail, or another group: through the spine (6 links,
// 5.5 µs) via the rail switches' aggregated links.
TEST_CASE("rail-optimized: same rail crosses one switch, other rails the spine",
          "[topologies][topology]") {
  ClusterSpec cluster = dgx_like(InterNodeTopology::kRailOptimized);
  cluster.nodes_per_leaf = 4;
  const Topology topology(cluster, 8 * 8);  // 2 groups of 4 nodes, 16 rail switches
  CHECK(count_kinds(topology).at(LinkKind::kLeafUp) == 16);

  const Route same_rail = topology.route(3, 8 + 3);
  CHECK(same_rail.links.size() == 4);
  CHECK(same_rail.latency_ns == 4500);

  const Route cross_rail = topology.route(3, 8 + 4);
  REQUIRE(cross_rail.links.size() == 6);
  CHECK(topology.link(cross_rail.links[2]).kind == LinkKind::kLeafUp);
  CHECK(topology.link(cross_rail.links[2]).owner == 3);  // group 0, rail 3
  CHECK(topology.link(cross_rail.links[3]).owner == 4);  // group 0, rail 4
  CHECK(cross_rail.latency_ns == 5500);

  const Route cross_group = topology.route(3, 8 * 4 + 3);
  REQUIRE(cross_group.links.size() == 6);
  CHECK(topology.link(cross_group.links[3]).owner == 8 + 3);  // group 1, rail 3
}

// A leaf's aggregated up-link carries its down-links' capacity over the oversubscription:
// fat-tree 32 nodes x 8 NICs x 50 GB/s / 4 = 3,200 GB/s; a rail switch 32 NICs x 50 / 4 = 400.
TEST_CASE("leaf up-link capacity divides by the oversubscription", "[topologies][topology]") {
  ClusterSpec fat_tree = dgx_like();
  fat_tree.oversubscription = 4;
  const Topology fat(fat_tree, 8 * 64);
  const Route fat_route = fat.route(0, 8 * 32);
  CHECK(fat.link(fat_route.links[2]).bw_gbps == Approx(3200));
  CHECK(fat.link(fat_route.links[3]).bw_gbps == Approx(3200));

  ClusterSpec rail_tree = dgx_like(InterNodeTopology::kRailOptimized);
  rail_tree.oversubscription = 4;
  const Topology rail(rail_tree, 8 * 64);
  CHECK(rail.link(rail.route(0, 8 + 1).links[2]).bw_gbps == Approx(400));
}

// A PCIe node has no NVLink: GPU to GPU goes [PCIe up, PCIe down], 1 + 1 µs, at the PCIe rate.
TEST_CASE("PCIe nodes route GPU to GPU over PCIe", "[topologies][topology]") {
  ClusterSpec cluster = dgx_like();
  cluster.intra_node = IntraNodeFabric::kPcie;
  const Topology topology(cluster, 8);
  CHECK(count_kinds(topology).count(LinkKind::kNvlinkUp) == 0);
  const Route route = topology.route(1, 6);
  CHECK(kinds_of(topology, route) == std::vector<LinkKind>{LinkKind::kPcieUp, LinkKind::kPcieDown});
  CHECK(topology.link(route.links[0]).bw_gbps == 63);
  CHECK(route.latency_ns == 2000);
}

// A route's latency is the sum of its links' latencies plus the switches it crosses: checked on
// every kind of route of a 3-leaf rail-optimized cluster with odd latencies.
TEST_CASE("route latency is the links' latencies plus switch hops", "[topologies][topology]") {
  ClusterSpec cluster = dgx_like(InterNodeTopology::kRailOptimized);
  cluster.nvlink.latency_ns = 701;
  cluster.pcie.latency_ns = 303;
  cluster.nic.latency_ns = 1777;
  cluster.switch_latency_ns = 211;
  cluster.nodes_per_leaf = 2;
  const Topology topology(cluster, 8 * 6);
  for (const auto& [src, dst, switches] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {0, 7, 0}, {1, 9, 1}, {1, 10, 3}, {1, 8 * 5 + 1, 3}}) {
    INFO(src << " -> " << dst);
    const Route route = topology.route(src, dst);
    int64_t sum = 0;
    for (const int32_t id : route.links) sum += topology.link(id).latency_ns;
    CHECK(route.latency_ns == sum + switches * 211);
  }
  CHECK(topology.route(0, 7).latency_ns == 701);
  CHECK(topology.route(1, 9).latency_ns == 303 + 1777 + 211 + 303);
}

// 16,384 GPUs on 2,048 nodes (Llama-3 405B scale): 2 links per GPU for NVLink and PCIe, 2 per NIC,
// 2 per leaf (64 leaves of 32 nodes) = 98,432 links; routes to the far end cross the spine.
TEST_CASE("16,384 GPUs build in O(links)", "[topologies][topology]") {
  const Topology topology(dgx_like(), 16384);
  CHECK(topology.nodes() == 2048);
  CHECK(topology.links().size() == 2 * (16384 + 16384 + 16384 + 64));
  const Route route = topology.route(0, 16383);
  CHECK(route.links.size() == 6);
  CHECK(topology.link(route.links[3]).owner == 63);
  CHECK(topology.link(route.links.back()).owner == 16383);
}

}  // namespace
}  // namespace strata
