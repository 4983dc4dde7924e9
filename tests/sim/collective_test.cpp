// Collective plans (sim/collective.hpp): ring closed forms on an idealized node, which algorithm
// is chosen when, where the flows go and how many bytes they carry.

#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <vector>

#include "sim/collective.hpp"
#include "tests/sim/collective_fixtures.hpp"
#include "topologies/collective_tuning.hpp"
#include "topologies/topology.hpp"

namespace strata {
namespace {

using test::first_gpus;
using test::ideal_cluster;
using test::idle_seconds;

constexpr double kBw = 100;       // GB/s
constexpr int64_t kHopNs = 3000;  // ns per hop
constexpr int64_t kMiB = 1 << 20;

double payload(const CollectiveStep& step) {
  double bytes = 0;
  for (const CollectiveFlow& flow : step.flows) bytes += flow.wire_bytes;
  return bytes;
}

// Ring all-reduce of S over n GPUs with link bandwidth B and hop latency a takes
// 2(n-1)(a + S/(nB)); reduce-scatter and all-gather (n-1)(a + S/(nB)) (Patarasuk & Yuan 2009;
// sim/collective.hpp), exactly, for any n and S.
TEST_CASE("ring collectives on an ideal node take the closed-form time", "[sim][collective]") {
  for (const int64_t n : {2, 3, 4, 8}) {
    for (const int64_t bytes : {int64_t{1000}, 64 * kMiB, int64_t{3} << 30}) {
      INFO("n " << n << ", S " << bytes);
      const Topology topology(ideal_cluster(n, kBw, kHopNs), n);
      const CollectiveTuning& tuning = topology.cluster().collectives;
      const double a = kHopNs / 1e9;
      const double per_step = a + static_cast<double>(bytes) / (static_cast<double>(n) * kBw * 1e9);
      const auto gpus = first_gpus(n);
      const CollectivePlan all_reduce =
          plan_collective(topology, tuning, CollectiveKind::kAllReduce, gpus, bytes);
      CHECK(all_reduce.algorithm == CollectiveAlgorithm::kRing);
      CHECK(idle_seconds(topology, all_reduce) ==
            Approx(2 * static_cast<double>(n - 1) * per_step).epsilon(1e-12));
      for (const CollectiveKind kind :
           {CollectiveKind::kReduceScatter, CollectiveKind::kAllGather}) {
        const CollectivePlan plan = plan_collective(topology, tuning, kind, gpus, bytes);
        CHECK(idle_seconds(topology, plan) ==
              Approx(static_cast<double>(n - 1) * per_step).epsilon(1e-12));
      }
    }
  }
}

// Byte conservation of a ring: n flows (one per ring link), each carrying 2(n-1)/n x S for
// all-reduce and (n-1)/n x S for reduce-scatter / all-gather; a broadcast chain has n-1 flows of
// S starting at the root (the group's first member) and none back into it. Wire bytes are the
// payload over the protocol's efficiency.
TEST_CASE("ring flows carry the ring's bytes", "[sim][collective]") {
  const int64_t n = 8;
  const int64_t bytes = 8 * kMiB;
  ClusterSpec cluster = ideal_cluster(n, kBw, kHopNs);
  cluster.collectives.nvlink.protocols[0].bw_efficiency = 0.5;
  const Topology topology(cluster, n);
  const auto gpus = first_gpus(n);
  const double s = static_cast<double>(bytes);

  const CollectivePlan all_reduce =
      plan_collective(topology, cluster.collectives, CollectiveKind::kAllReduce, gpus, bytes);
  REQUIRE(all_reduce.steps.size() == 1);
  REQUIRE(all_reduce.steps[0].flows.size() == n);
  for (const CollectiveFlow& flow : all_reduce.steps[0].flows) {
    CHECK(flow.wire_bytes == Approx(2.0 * 7 / 8 * s / 0.5));
  }
  CHECK(all_reduce.steps[0].latency_ns == 14 * kHopNs);

  const CollectivePlan gather =
      plan_collective(topology, cluster.collectives, CollectiveKind::kAllGather, gpus, bytes);
  CHECK(payload(gather.steps[0]) == Approx(7 * s / 0.5));

  const std::vector<int64_t> from_five{5, 0, 1, 2, 3, 4, 6, 7};
  const CollectivePlan broadcast =
      plan_collective(topology, cluster.collectives, CollectiveKind::kBroadcast, from_five, bytes);
  REQUIRE(broadcast.steps.size() == 1);
  const auto& flows = broadcast.steps[0].flows;
  REQUIRE(flows.size() == n - 1);
  CHECK(flows.front().src_gpu == 5);
  for (const CollectiveFlow& flow : flows) {
    CHECK(flow.dst_gpu != 5);
    CHECK(flow.wire_bytes == Approx(s / 0.5));
  }
  CHECK(broadcast.steps[0].latency_ns == 7 * kHopNs);
}

// A ring over members of several nodes, given in any order, is ordered by (node, local GPU): it
// leaves and enters each node exactly once, so only as many flows cross nodes as there are nodes.
TEST_CASE("a ring crosses each node boundary once", "[sim][collective]") {
  const Topology topology(ideal_cluster(8, kBw, kHopNs), 32);
  // Uneven (3, 2, 3 members), so no hierarchical plan; listed scrambled.
  const std::vector<int64_t> gpus{17, 2, 9, 0, 23, 5, 10, 20};
  const CollectivePlan plan = plan_collective(topology, topology.cluster().collectives,
                                              CollectiveKind::kReduceScatter, gpus, kMiB);
  CHECK(plan.algorithm == CollectiveAlgorithm::kRing);
  REQUIRE(plan.steps.size() == 1);
  std::map<int64_t, int> leaving;
  std::map<int64_t, int> entering;
  for (const CollectiveFlow& flow : plan.steps[0].flows) {
    const int64_t from = topology.node_of(flow.src_gpu);
    const int64_t to = topology.node_of(flow.dst_gpu);
    if (from == to) continue;
    ++leaving[from];
    ++entering[to];
  }
  CHECK(leaving == std::map<int64_t, int>{{0, 1}, {1, 1}, {2, 1}});
  CHECK(entering == std::map<int64_t, int>{{0, 1}, {1, 1}, {2, 1}});
}

// Hierarchical all-reduce on m = 2 nodes of g = 8: intra-node reduce-scatter ((g-1)/g x S per
// NVLink), inter-node all-reduce per local position on S/g (2(m-1)/m x S/g = S/g per GPU on its
// own rail: GPU j of one node to GPU j of the other through NIC j), intra-node all-gather.
TEST_CASE("hierarchical inter-node phase moves S/g per GPU on its rail", "[sim][collective]") {
  const int64_t g = 8;
  ClusterSpec cluster = ideal_cluster(g, kBw, kHopNs);
  cluster.collectives.tree_max_bytes = 0;  // force rings: no tree
  const Topology topology(cluster, 2 * g);
  const auto gpus = first_gpus(2 * g);
  const int64_t bytes = 64 * kMiB;
  const double s = static_cast<double>(bytes);
  const CollectivePlan plan = plan_collective(topology, topology.cluster().collectives,
                                              CollectiveKind::kAllReduce, gpus, bytes);
  CHECK(plan.algorithm == CollectiveAlgorithm::kHierarchical);
  REQUIRE(plan.steps.size() == 3);
  for (const size_t intra : {size_t{0}, size_t{2}}) {
    REQUIRE(plan.steps[intra].flows.size() == 2 * g);
    for (const CollectiveFlow& flow : plan.steps[intra].flows) {
      CHECK(topology.node_of(flow.src_gpu) == topology.node_of(flow.dst_gpu));
      CHECK(flow.wire_bytes == Approx(7.0 / 8 * s));
    }
    CHECK(plan.steps[intra].latency_ns == (g - 1) * kHopNs);
  }
  const CollectiveStep& inter = plan.steps[1];
  REQUIRE(inter.flows.size() == 2 * g);  // a 2-member ring per rail: both directions
  for (const CollectiveFlow& flow : inter.flows) {
    CHECK(topology.node_of(flow.src_gpu) != topology.node_of(flow.dst_gpu));
    CHECK(topology.local_of(flow.src_gpu) == topology.local_of(flow.dst_gpu));
    CHECK(flow.wire_bytes == Approx(s / g));
    REQUIRE(flow.links.size() == 4);
    const TopologyLink& nic_up = topology.link(flow.links[1]);
    CHECK(nic_up.kind == LinkKind::kNicUp);
    CHECK(nic_up.owner % g == topology.local_of(flow.src_gpu));
  }
  CHECK(payload(inter) == Approx(2 * s));  // 2(m-1) x S across nodes in all
}

// NCCL runs reduce-scatter and all-gather across nodes as rings over every member, one per
// channel: on m = 2 nodes of g = 8, g rings of 16 members, each carrying S/g, (n-1)/n x S/g per
// link, in n - 1 = 15 steps. Ring c enters each node at local GPU c and leaves at c - 1, so each
// NIC carries one ring out of its node; each step's latency is the ring's mean hop (14 NVLink
// hops and 2 node-crossing ones in 16).
TEST_CASE("reduce-scatter and all-gather across nodes are NCCL's channel rings",
          "[sim][collective]") {
  const int64_t g = 8;
  const Topology topology(ideal_cluster(g, kBw, kHopNs), 2 * g);
  const auto gpus = first_gpus(2 * g);
  const int64_t bytes = 64 * kMiB;
  const double s = static_cast<double>(bytes);
  for (const CollectiveKind kind : {CollectiveKind::kReduceScatter, CollectiveKind::kAllGather}) {
    const CollectivePlan plan =
        plan_collective(topology, topology.cluster().collectives, kind, gpus, bytes);
    CHECK(plan.algorithm == CollectiveAlgorithm::kRing);
    REQUIRE(plan.steps.size() == 1);
    const CollectiveStep& step = plan.steps[0];
    REQUIRE(step.flows.size() == static_cast<size_t>(g * 2 * g));
    std::map<int32_t, int> flows_on_nic;
    int64_t crossing = 0;
    for (const CollectiveFlow& flow : step.flows) {
      CHECK(flow.wire_bytes == Approx(15.0 / 16 * s / g));
      if (topology.node_of(flow.src_gpu) == topology.node_of(flow.dst_gpu)) continue;
      ++crossing;
      for (const int32_t link : flow.links) {
        if (topology.link(link).kind == LinkKind::kNicUp) ++flows_on_nic[link];
      }
    }
    CHECK(crossing == 2 * g);
    CHECK(flows_on_nic.size() == static_cast<size_t>(2 * g));  // every NIC of both nodes
    for (const auto& [nic, flows] : flows_on_nic) CHECK(flows == 1);
    const double inter_hop = static_cast<double>(topology.route(0, g).latency_ns);
    const double mean_hop = (14 * kHopNs + 2 * inter_hop) / 16;
    CHECK(step.latency_ns == std::llround(15 * mean_hop));
  }
}

// Without a forced tree_max_bytes, an inter-node all-reduce is the fastest of the tree, the rings
// and the hierarchical rings by estimated time: the tree for small messages (its latency grows
// with log m), the others for large ones (the tree moves more bytes across nodes).
TEST_CASE("inter-node all-reduce picks the algorithm of least estimated time",
          "[sim][collective]") {
  ClusterSpec cluster = ideal_cluster(2, kBw, kHopNs);
  cluster.collectives.tree_max_bytes.reset();
  const Topology topology(cluster, 16);
  const auto gpus = first_gpus(16);
  const CollectiveTuning& tuning = cluster.collectives;
  for (const int64_t bytes : {int64_t{8}, kMiB, 256 * kMiB}) {
    INFO(bytes << " bytes");
    const CollectivePlan chosen =
        plan_collective(topology, tuning, CollectiveKind::kAllReduce, gpus, bytes);
    ClusterSpec forced = cluster;
    for (const int64_t threshold : {int64_t{0}, bytes}) {
      forced.collectives.tree_max_bytes = threshold;  // 0: hierarchical; bytes: the tree
      const CollectivePlan other =
          plan_collective(topology, forced.collectives, CollectiveKind::kAllReduce, gpus, bytes);
      CHECK(estimated_seconds(topology, chosen) <= estimated_seconds(topology, other));
    }
  }
  CHECK(plan_collective(topology, tuning, CollectiveKind::kAllReduce, gpus, 8).algorithm ==
        CollectiveAlgorithm::kTree);
  CHECK(plan_collective(topology, tuning, CollectiveKind::kAllReduce, gpus, 256 * kMiB).algorithm !=
        CollectiveAlgorithm::kTree);
}

// The folded simulator plans each copy of a group (the same members shifted by whole nodes) with
// the algorithm chosen for the first (plan_collective_as): a symmetric copy has the same
// estimates, so the choice is the one plan_collective makes for it, flow for flow.
TEST_CASE("a shifted copy of a group plans as the first was chosen", "[sim][collective]") {
  ClusterSpec cluster = ideal_cluster(4, kBw, kHopNs);
  cluster.collectives.tree_max_bytes.reset();
  const Topology topology(cluster, 32);
  const CollectiveTuning& tuning = cluster.collectives;
  std::vector<int64_t> first;
  std::vector<int64_t> copy;
  for (int64_t node = 0; node < 4; ++node) {
    for (int64_t local = 0; local < 2; ++local) {
      first.push_back(node * 4 + local);
      copy.push_back(node * 4 + local + 2);
    }
  }
  for (const int64_t bytes : {int64_t{8}, kMiB, 256 * kMiB}) {
    INFO(bytes << " bytes");
    const CollectiveAlgorithm chosen =
        plan_collective(topology, tuning, CollectiveKind::kAllReduce, first, bytes).algorithm;
    const CollectivePlan direct =
        plan_collective(topology, tuning, CollectiveKind::kAllReduce, copy, bytes);
    const CollectivePlan as =
        plan_collective_as(chosen, topology, tuning, CollectiveKind::kAllReduce, copy, bytes);
    CHECK(direct.algorithm == chosen);
    REQUIRE(as.steps.size() == direct.steps.size());
    for (size_t s = 0; s < as.steps.size(); ++s) {
      CHECK(as.steps[s].latency_ns == direct.steps[s].latency_ns);
      REQUIRE(as.steps[s].flows.size() == direct.steps[s].flows.size());
      for (size_t f = 0; f < as.steps[s].flows.size(); ++f) {
        CHECK(as.steps[s].flows[f].links == direct.steps[s].flows[f].links);
        CHECK(as.steps[s].flows[f].wire_bytes == direct.steps[s].flows[f].wire_bytes);
      }
    }
  }
}
ClusterSpec nvls_cluster(bool in_switch_reduction) {
  ClusterSpec cluster = ideal_cluster(8, kBw, kHopNs);
  cluster.in_switch_reduction = in_switch_reduction;
  cluster.collectives.nvls.protocols = {{Protocol::kSimple, 0, 50000, 0.5}};
  cluster.collectives.nvls_min_bytes = 2 * kMiB;
  return cluster;
}

// NVLS runs only an all-reduce inside one NVSwitch node that reduces in the switch, from
// nvls_min_bytes. Each GPU sends S up and receives S down: 2n flows with src == dst and a
// one-link path (its switch up-link or down-link), after base latency + one hop.
TEST_CASE("NVLS only with in-switch reduction and from nvls_min_bytes", "[sim][collective]") {
  const auto gpus = first_gpus(8);
  const auto algorithm = [&](bool reduction, CollectiveKind kind, int64_t bytes) {
    const Topology topology(nvls_cluster(reduction), 16);
    return plan_collective(topology, topology.cluster().collectives, kind, gpus, bytes).algorithm;
  };
  CHECK(algorithm(false, CollectiveKind::kAllReduce, 64 * kMiB) == CollectiveAlgorithm::kRing);
  CHECK(algorithm(true, CollectiveKind::kAllReduce, 2 * kMiB - 1) == CollectiveAlgorithm::kRing);
  CHECK(algorithm(true, CollectiveKind::kAllReduce, 2 * kMiB) == CollectiveAlgorithm::kNvls);
  CHECK(algorithm(true, CollectiveKind::kReduceScatter, 64 * kMiB) == CollectiveAlgorithm::kRing);

  const Topology topology(nvls_cluster(true), 16);
  const int64_t bytes = 64 * kMiB;
  const CollectivePlan plan = plan_collective(topology, topology.cluster().collectives,
                                              CollectiveKind::kAllReduce, gpus, bytes);
  REQUIRE(plan.steps.size() == 1);
  CHECK(plan.steps[0].latency_ns == 50000 + kHopNs);
  std::set<int32_t> links;
  for (const CollectiveFlow& flow : plan.steps[0].flows) {
    CHECK(flow.src_gpu == flow.dst_gpu);
    REQUIRE(flow.links.size() == 1);
    CHECK((flow.links[0] == topology.switch_up(flow.src_gpu) ||
           flow.links[0] == topology.switch_down(flow.src_gpu)));
    CHECK(flow.wire_bytes == Approx(static_cast<double>(bytes) / 0.5));
    links.insert(flow.links[0]);
  }
  CHECK(links.size() == 16);  // every GPU's up-link and down-link, once each

  // A group spanning two nodes never reduces in one switch.
  const auto across = first_gpus(16);
  CHECK(plan_collective(topology, topology.cluster().collectives, CollectiveKind::kAllReduce,
                        across, bytes)
            .algorithm == CollectiveAlgorithm::kHierarchical);
}

// Inter-node all-reduce up to tree_max_bytes is a double binary tree over the nodes; above it
// rings; inside one node never a tree. On 4 nodes x 2 GPUs: each tree edge carries S/2 each way
// per tree, 2(m-1) x S across nodes in all; each chain link S each way; latency
// 2 x 1 chain hop x (base + hop) + 2 x depth 2 x (base + inter-node hop).
TEST_CASE("tree for small inter-node all-reduce", "[sim][collective]") {
  ClusterSpec cluster = ideal_cluster(2, kBw, kHopNs);
  cluster.collectives.tree_max_bytes = kMiB;
  const Topology topology(cluster, 8);
  const auto gpus = first_gpus(8);
  const CollectiveTuning& tuning = cluster.collectives;
  CHECK(plan_collective(topology, tuning, CollectiveKind::kAllReduce, gpus, kMiB + 1).algorithm ==
        CollectiveAlgorithm::kHierarchical);
  CHECK(plan_collective(topology, tuning, CollectiveKind::kAllReduce, first_gpus(2), 1024)
            .algorithm == CollectiveAlgorithm::kRing);

  const int64_t bytes = kMiB;
  const double s = static_cast<double>(bytes);
  const CollectivePlan tree =
      plan_collective(topology, tuning, CollectiveKind::kAllReduce, gpus, bytes);
  CHECK(tree.algorithm == CollectiveAlgorithm::kTree);
  REQUIRE(tree.steps.size() == 1);
  double across = 0;
  double inside = 0;
  std::map<int64_t, double> sent_by_node;
  for (const CollectiveFlow& flow : tree.steps[0].flows) {
    const bool crosses = topology.node_of(flow.src_gpu) != topology.node_of(flow.dst_gpu);
    (crosses ? across : inside) += flow.wire_bytes;
    if (crosses) sent_by_node[topology.node_of(flow.src_gpu)] += flow.wire_bytes;
  }
  CHECK(across == Approx(2 * 3 * s));
  CHECK(inside == Approx(4 * 2 * s));  // 4 nodes, one chain link, S each way
  // Every node sends at least S/2 (up in the tree where it is not the root, down to children).
  for (const auto& [node, sent] : sent_by_node) CHECK(sent >= s / 2);
  CHECK(sent_by_node.size() == 4);
  const int64_t inter_hop = topology.route(0, 2).latency_ns;
  CHECK(tree.steps[0].latency_ns == 2 * 1 * kHopNs + 2 * 2 * inter_hop);
}

// A group of one has nothing to exchange: no steps, whatever the collective.
TEST_CASE("a one-member group has no steps", "[sim][collective]") {
  const Topology topology(nvls_cluster(true), 16);
  const std::vector<int64_t> alone{5};
  for (const CollectiveKind kind :
       {CollectiveKind::kAllReduce, CollectiveKind::kReduceScatter, CollectiveKind::kAllGather,
        CollectiveKind::kBroadcast, CollectiveKind::kAllToAll}) {
    CHECK(plan_collective(topology, topology.cluster().collectives, kind, alone, 64 * kMiB)
              .steps.empty());
  }
}

// All-to-all: every member sends S/n to every other member, n(n-1) flows in one step, (n-1) x S
// in all.
TEST_CASE("all-to-all is one flow per ordered pair", "[sim][collective]") {
  const Topology topology(ideal_cluster(4, kBw, kHopNs), 8);
  const auto gpus = first_gpus(8);
  const int64_t bytes = 8 * kMiB;
  const CollectivePlan plan = plan_collective(topology, topology.cluster().collectives,
                                              CollectiveKind::kAllToAll, gpus, bytes);
  CHECK(plan.algorithm == CollectiveAlgorithm::kPairwise);
  REQUIRE(plan.steps.size() == 1);
  CHECK(plan.steps[0].flows.size() == 8 * 7);
  CHECK(payload(plan.steps[0]) == Approx(7.0 * static_cast<double>(bytes)));
  std::set<std::pair<int32_t, int32_t>> pairs;
  for (const CollectiveFlow& flow : plan.steps[0].flows) pairs.insert({flow.src_gpu, flow.dst_gpu});
  CHECK(pairs.size() == 8 * 7);
}

// Protocols: rings inside a node use the nvlink protocols, groups spanning nodes the net ones;
// each picked by the message size.
TEST_CASE("rings pick nvlink protocols inside a node and net ones across", "[sim][collective]") {
  ClusterSpec cluster = ideal_cluster(4, kBw, kHopNs);
  cluster.collectives.nvlink.protocols = {{Protocol::kLL, kMiB, 100, 0.5},
                                          {Protocol::kSimple, 0, 200, 1.0}};
  cluster.collectives.net.protocols = {{Protocol::kLL128, kMiB, 300, 0.9},
                                       {Protocol::kSimple, 0, 400, 1.0}};
  const Topology topology(cluster, 8);
  const auto protocol_of = [&](std::vector<int64_t> gpus, int64_t bytes) {
    return plan_collective(topology, cluster.collectives, CollectiveKind::kAllGather, gpus, bytes)
        .protocol;
  };
  CHECK(protocol_of({0, 1, 2, 3}, kMiB) == Protocol::kLL);
  CHECK(protocol_of({0, 1, 2, 3}, kMiB + 1) == Protocol::kSimple);
  CHECK(protocol_of({0, 4}, kMiB) == Protocol::kLL128);
  CHECK(protocol_of({0, 4}, kMiB + 1) == Protocol::kSimple);
  // LL's base latency per step: 3 steps x (100 + hop).
  const CollectivePlan small = plan_collective(topology, cluster.collectives,
                                               CollectiveKind::kAllGather, first_gpus(4), 1024);
  CHECK(small.steps[0].latency_ns == 3 * (100 + kHopNs));
}

// A pipeline transfer is one step, one flow along the route, after the protocol's base latency
// plus the route's; a GPU sending to itself moves nothing.
TEST_CASE("p2p is one flow on the route", "[sim][collective]") {
  const Topology topology(ideal_cluster(4, kBw, kHopNs), 8);
  const CollectiveTuning& tuning = topology.cluster().collectives;
  const CollectivePlan plan = plan_p2p(topology, tuning, 1, 6, kMiB);
  REQUIRE(plan.steps.size() == 1);
  REQUIRE(plan.steps[0].flows.size() == 1);
  const Route route = topology.route(1, 6);
  CHECK(plan.steps[0].flows[0].links == route.links);
  CHECK(plan.steps[0].flows[0].wire_bytes == Approx(static_cast<double>(kMiB)));
  CHECK(plan.steps[0].latency_ns == route.latency_ns);
  CHECK(plan_p2p(topology, tuning, 3, 3, kMiB).steps.empty());
}

// nccl-tests' bus bandwidth factors: 2(n-1)/n for all-reduce, (n-1)/n for reduce-scatter,
// all-gather and all-to-all, 1 for broadcast.
TEST_CASE("busbw factors follow nccl-tests", "[sim][collective]") {
  CHECK(busbw_factor(CollectiveKind::kAllReduce, 8) == Approx(1.75));
  CHECK(busbw_factor(CollectiveKind::kReduceScatter, 8) == Approx(0.875));
  CHECK(busbw_factor(CollectiveKind::kAllGather, 4) == Approx(0.75));
  CHECK(busbw_factor(CollectiveKind::kAllToAll, 2) == Approx(0.5));
  CHECK(busbw_factor(CollectiveKind::kBroadcast, 16) == 1);
}

}  // namespace
}  // namespace strata
