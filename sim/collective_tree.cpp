// Inter-node all-reduce as NCCL's double binary tree (NCCL 2.4, "Massively Scale Your Deep
// Learning Training with NCCL 2.4", NVIDIA blog 2019; src/graph/trees.cc).
//
// Inside each node the members form a chain (local GPU order); the chain's ends are the node's
// leaders: tree 0 enters the node at its first member, tree 1 at its last, so the two trees use
// different NICs. Over the nodes, tree 0 is a binary tree and tree 1 its mirror (or, for an odd
// node count, its shift by one), so that a node is a leaf in one tree where it is interior in
// the other. Each tree reduces half of the data up to its root and broadcasts it back down;
// reduce and broadcast are pipelined in chunks, so they are coalesced into one step:
//  - latency: 2 x (chain hops) x (nvlink base latency + intra hop) + 2 x (tree depth) x (net base
//    latency + the largest node-to-node hop);
//  - flows: each chain link carries S in each direction (S/2 per tree), each tree edge S/2 in
//    each direction.
// Worked example: 2 nodes x 8 GPUs, 8 bytes, dgx-h200: 14 x (1.65 + 1) + 2 x 1 x (1 + 4.5) =
// 48 µs; nccl_busbw.csv's 2 x 8 H20 NVLSTree row measures 46-48 µs.

#include <algorithm>
#include <map>
#include <utility>

#include "sim/collective_algorithms.hpp"

namespace strata::collective_detail {

namespace {

// NCCL's ncclGetBtree: the parent of `rank` in a binary tree over ranks 0..n-1 rooted at 0
// (-1 for the root). A rank's lowest set bit gives its level.
int64_t btree_parent(int64_t n, int64_t rank) {
  if (rank == 0) return -1;
  int64_t bit = 1;
  while (bit < n && (bit & rank) == 0) bit <<= 1;
  int64_t up = (rank ^ bit) | (bit << 1);
  if (up >= n) up = rank ^ bit;
  return up;
}

// Tree 1 of ncclGetDtree: the mirror of tree 0 (rank r plays n-1-r) for an even count, its shift
// by one (rank r plays r-1) for an odd count.
int64_t dtree_parent(int64_t n, int64_t rank) {
  if (n % 2 == 1) {
    const int64_t shifted = btree_parent(n, (rank - 1 + n) % n);
    return shifted < 0 ? -1 : (shifted + 1) % n;
  }
  const int64_t mirrored = btree_parent(n, n - 1 - rank);
  return mirrored < 0 ? -1 : n - 1 - mirrored;
}

// Edges from a rank to its root.
int64_t depth(int64_t rank, int64_t (*parent)(int64_t, int64_t), int64_t n) {
  int64_t edges = 0;
  for (int64_t at = parent(n, rank); at >= 0; at = parent(n, at)) ++edges;
  return edges;
}

}  // namespace

CollectivePlan plan_tree(const Topology& topology, const CollectiveTuning& tuning,
                         const Placement& placement, int64_t bytes) {
  const ProtocolTuning& net = tuning.net.pick(bytes);
  const ProtocolTuning& intra = tuning.nvlink.pick(bytes);
  CollectivePlan plan{CollectiveAlgorithm::kTree, net.protocol, {}};
  const int64_t nodes = static_cast<int64_t>(placement.nodes.size());
  const double size = static_cast<double>(bytes);

  // Payload per (src, dst) pair, in a fixed order so that plans are reproducible.
  std::map<std::pair<int64_t, int64_t>, double> chain_bytes;
  std::map<std::pair<int64_t, int64_t>, double> tree_bytes;

  int64_t chain_hops = 0;
  int64_t intra_hop_ns = 0;
  for (const std::vector<int64_t>& members : placement.nodes) {
    chain_hops = std::max(chain_hops, static_cast<int64_t>(members.size()) - 1);
    for (size_t i = 0; i + 1 < members.size(); ++i) {
      chain_bytes[{members[i], members[i + 1]}] += size;
      chain_bytes[{members[i + 1], members[i]}] += size;
    }
  }

  int64_t tree_depth = 0;
  int64_t inter_hop_ns = 0;
  const auto add_tree = [&](int64_t (*parent)(int64_t, int64_t), bool enter_first) {
    const auto leader = [&](int64_t node) {
      const auto& members = placement.nodes[static_cast<size_t>(node)];
      return enter_first ? members.front() : members.back();
    };
    for (int64_t node = 0; node < nodes; ++node) {
      tree_depth = std::max(tree_depth, depth(node, parent, nodes));
      const int64_t up = parent(nodes, node);
      if (up < 0) continue;
      tree_bytes[{leader(node), leader(up)}] += size / 2;
      tree_bytes[{leader(up), leader(node)}] += size / 2;
    }
  };
  add_tree(btree_parent, true);
  add_tree(dtree_parent, false);

  CollectiveStep step;
  const auto add_flows = [&](const auto& pairs, const ProtocolTuning& protocol, int64_t& hop_ns) {
    for (const auto& [ends, payload] : pairs) {
      Route route = topology.route(ends.first, ends.second);
      hop_ns = std::max(hop_ns, route.latency_ns);
      step.flows.push_back({static_cast<int32_t>(ends.first), static_cast<int32_t>(ends.second),
                            std::move(route.links), wire_bytes(payload, protocol)});
    }
  };
  add_flows(chain_bytes, intra, intra_hop_ns);
  add_flows(tree_bytes, net, inter_hop_ns);
  step.latency_ns = 2 * chain_hops * (intra.base_latency_ns + intra_hop_ns) +
                    2 * tree_depth * (net.base_latency_ns + inter_hop_ns);
  plan.steps.push_back(std::move(step));
  return plan;
}

}  // namespace strata::collective_detail
