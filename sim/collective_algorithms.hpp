#pragma once
// Private to sim/collective*.cpp: the algorithms plan_collective (collective_select.cpp) chooses
// between, one per file, and the pieces they share. See sim/collective.hpp for the model.

#include <cstdint>
#include <span>
#include <vector>

#include "sim/collective.hpp"

namespace strata::collective_detail {

// A group's members by node: nodes ascending, the members of a node by local GPU index.
struct Placement {
  std::vector<std::vector<int64_t>> nodes;
  // Every member by (node, local GPU): a ring in this order crosses each node boundary once.
  std::vector<int64_t> ordered;

  bool spans_nodes() const { return nodes.size() > 1; }
  // Every node holds the same number of members.
  bool uniform() const;
};
Placement place(const Topology& topology, std::span<const int64_t> gpus);

// What a protocol puts on the wire to deliver `payload_bytes`.
double wire_bytes(double payload_bytes, const ProtocolTuning& tuning);

// Rings (or chains) that run together, coalesced into one step: one flow per link of each ring
// (member i to i + 1, and the last back to the first when `closed`) carrying `link_bytes` of
// payload, after `ring_steps` x (the protocol's base latency + the largest hop latency of all
// the rings). Rings of one member contribute nothing.
CollectiveStep ring_step(const Topology& topology, std::span<const std::vector<int64_t>> rings,
                         bool closed, int64_t ring_steps, double link_bytes,
                         const ProtocolTuning& tuning);

// collective_ring.cpp: all-reduce, reduce-scatter and all-gather as a ring over
// placement.ordered (across nodes with several members each, one ring per local position, as
// NCCL's channels); a ring exchange as one step of that ring; broadcast as a pipelined chain
// from the group's first member.
CollectivePlan plan_ring(const Topology& topology, const FabricTuning& fabric, CollectiveKind kind,
                         const Placement& placement, int64_t root_gpu, int64_t bytes);

// collective_tree.cpp: inter-node all-reduce as NCCL's double binary tree over the nodes.
CollectivePlan plan_tree(const Topology& topology, const CollectiveTuning& tuning,
                         const Placement& placement, int64_t bytes);

// collective_nvls.cpp: all-reduce reduced in the NVSwitch (one node).
CollectivePlan plan_nvls(const Topology& topology, const FabricTuning& nvls,
                         std::span<const int64_t> members, int64_t bytes);

// collective_hierarchical.cpp: all-reduce as intra-node and inter-node rings in phases;
// `placement` is uniform with several members per node on several nodes.
CollectivePlan plan_hierarchical(const Topology& topology, const CollectiveTuning& tuning,
                                 const Placement& placement, int64_t bytes);

// collective_pairwise.cpp: the uniform all-to-all, one flow of bytes / n per ordered pair (the
// matrix one, plan_all_to_all, is public: sim/collective.hpp).
CollectivePlan plan_pairwise(const Topology& topology, const FabricTuning& fabric,
                             const Placement& placement, int64_t bytes);

}  // namespace strata::collective_detail
