// Ring all-reduce, reduce-scatter and all-gather, and the pipelined chain of a broadcast.
//
// A ring of n members moves data around n links in steps: all-reduce in 2(n-1) steps
// (reduce-scatter then all-gather), each link carrying S/n per step, 2(n-1)/n x S in all;
// reduce-scatter and all-gather in n-1 steps, (n-1)/n x S per link. Every link carries the same
// bytes in every step, so the steps are coalesced into one (sim/collective.hpp): worked example,
// all-reduce of S over n GPUs with link bandwidth B and hop latency a: latency 2(n-1)a, then
// n flows of 2(n-1)S/n, each at B: 2(n-1)(a + S/(nB)).
// A broadcast pipelines chunks down a chain from the root: n-1 hops of latency, then every
// chain link carries S. A ring exchange is one step of a ring: every link carries S once.
// Across nodes with several members on each, the all-reduce, reduce-scatter and all-gather
// rings are NCCL's channels (channel_rings): g rings of n members, each with 1/g of the data.

#include <algorithm>
#include <cmath>
#include <utility>

#include "common/error.hpp"
#include "sim/collective_algorithms.hpp"

namespace strata::collective_detail {

CollectiveStep ring_step(const Topology& topology, std::span<const std::vector<int64_t>> rings,
                         bool closed, int64_t ring_steps, double link_bytes,
                         const ProtocolTuning& tuning) {
  CollectiveStep step;
  // A chunk crosses the ring's hops one after another: each step costs the mean hop of its ring
  // (NCCL's tuner: intra-node steps at the NVLink latency, the node-crossing ones at the
  // network's); the slowest ring sets the step's latency.
  double hop_latency_ns = 0;
  for (const std::vector<int64_t>& ring : rings) {
    const size_t n = ring.size();
    if (n < 2) continue;
    const size_t links = closed ? n : n - 1;
    int64_t ring_latency_ns = 0;
    for (size_t i = 0; i < links; ++i) {
      const int64_t src = ring[i];
      const int64_t dst = ring[(i + 1) % n];
      Route route = topology.route(src, dst);
      ring_latency_ns += route.latency_ns;
      step.flows.push_back({static_cast<int32_t>(src), static_cast<int32_t>(dst),
                            std::move(route.links), wire_bytes(link_bytes, tuning)});
    }
    hop_latency_ns =
        std::max(hop_latency_ns, static_cast<double>(ring_latency_ns) / static_cast<double>(links));
  }
  step.latency_ns =
      ring_steps * tuning.base_latency_ns +
      static_cast<int64_t>(std::llround(static_cast<double>(ring_steps) * hop_latency_ns));
  return step;
}

namespace {

// NCCL's rings over several nodes (its channels): one per local position, each through every
// node's members in local order rotated by its position, so that each ring enters and leaves a
// node through a different GPU (and NIC) and the rings together use every NIC, each carrying
// 1/g of the data. One node, or one member per node: a single ring in (node, local) order.
std::vector<std::vector<int64_t>> channel_rings(const Placement& placement) {
  const size_t per_node = placement.nodes.front().size();
  if (!placement.spans_nodes() || !placement.uniform() || per_node < 2) {
    return {placement.ordered};
  }
  std::vector<std::vector<int64_t>> rings(per_node);
  for (size_t c = 0; c < per_node; ++c) {
    for (const std::vector<int64_t>& node : placement.nodes) {
      for (size_t i = 0; i < per_node; ++i) rings[c].push_back(node[(i + c) % per_node]);
    }
  }
  return rings;
}

}  // namespace

CollectivePlan plan_ring(const Topology& topology, const FabricTuning& fabric, CollectiveKind kind,
                         const Placement& placement, int64_t root_gpu, int64_t bytes) {
  const ProtocolTuning& protocol = fabric.pick(bytes);
  CollectivePlan plan{CollectiveAlgorithm::kRing, protocol.protocol, {}};
  std::vector<int64_t> ring = placement.ordered;
  const int64_t n = static_cast<int64_t>(ring.size());
  if (n < 2) return plan;
  const double size = static_cast<double>(bytes);
  const double nd = static_cast<double>(n);
  const std::vector<std::vector<int64_t>> rings = channel_rings(placement);
  const double per_ring = size / static_cast<double>(rings.size());
  switch (kind) {
    case CollectiveKind::kAllReduce:
      plan.steps.push_back(
          ring_step(topology, rings, true, 2 * (n - 1), 2 * (nd - 1) / nd * per_ring, protocol));
      break;
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllGather:
      plan.steps.push_back(
          ring_step(topology, rings, true, n - 1, (nd - 1) / nd * per_ring, protocol));
      break;
    case CollectiveKind::kBroadcast:
      // The chain starts at the root and keeps (node, local GPU) order after it.
      std::rotate(ring.begin(), std::find(ring.begin(), ring.end(), root_gpu), ring.end());
      plan.steps.push_back(ring_step(topology, {&ring, 1}, false, n - 1, size, protocol));
      break;
    case CollectiveKind::kRingExchange:
      plan.steps.push_back(ring_step(topology, {&ring, 1}, true, 1, size, protocol));
      break;
    case CollectiveKind::kAllToAll:
      STRATA_ASSERT(false, "all-to-all is pairwise, not a ring");
  }
  return plan;
}

}  // namespace strata::collective_detail
