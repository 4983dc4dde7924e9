// All-reduce across nodes whose members share nodes evenly (g members on each of m nodes), in
// phases that keep the slow inter-node links busy with as few bytes as possible (the shape of
// NCCL's NVLS-tree and CollNet all-reduces): reduce-scatter inside each node (ring, (g-1)/g x S
// per NVLink), all-reduce across nodes among the members of the same local position, each on its
// own NIC (ring, 2(m-1)/m x S/g per link: on 2 nodes every GPU sends S/g over its rail), then
// all-gather inside each node ((g-1)/g x S). Its latency grows with g + m where a ring's grows
// with g m. NCCL has no such reduce-scatter or all-gather: those run as rings
// (collective_ring.cpp). The rings of one phase run together in one step (one per node, or one
// per local position); the intra-node phases use the nvlink protocols, the inter-node phase the
// net ones. Phases follow each other: NCCL pipelines them, so this is an upper bound on time when
// the NVLink phases are not negligible.

#include <vector>

#include "common/error.hpp"
#include "sim/collective_algorithms.hpp"

namespace strata::collective_detail {

CollectivePlan plan_hierarchical(const Topology& topology, const CollectiveTuning& tuning,
                                 const Placement& placement, int64_t bytes) {
  const ProtocolTuning& intra = tuning.nvlink.pick(bytes);
  const ProtocolTuning& net = tuning.net.pick(bytes);
  CollectivePlan plan{CollectiveAlgorithm::kHierarchical, net.protocol, {}};
  const std::vector<std::vector<int64_t>>& node_rings = placement.nodes;
  const int64_t g = static_cast<int64_t>(node_rings.front().size());
  const int64_t m = static_cast<int64_t>(node_rings.size());
  STRATA_ASSERT(g > 1 && m > 1 && placement.uniform(),
                "hierarchical collectives need several members on each of several nodes");

  // Ring j joins the j-th member of every node.
  std::vector<std::vector<int64_t>> rail_rings(static_cast<size_t>(g));
  for (const auto& members : node_rings) {
    for (size_t j = 0; j < members.size(); ++j) rail_rings[j].push_back(members[j]);
  }

  const double size = static_cast<double>(bytes);
  const double gd = static_cast<double>(g);
  const double md = static_cast<double>(m);
  const double intra_bytes = (gd - 1) / gd * size;  // ring reduce-scatter or all-gather of S
  const auto intra_phase = [&] {
    return ring_step(topology, node_rings, true, g - 1, intra_bytes, intra);
  };
  plan.steps.push_back(intra_phase());
  plan.steps.push_back(
      ring_step(topology, rail_rings, true, 2 * (m - 1), 2 * (md - 1) / md * size / gd, net));
  plan.steps.push_back(intra_phase());
  return plan;
}

}  // namespace strata::collective_detail
