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

#include <algorithm>
#include <utility>

#include "common/error.hpp"
#include "sim/collective_algorithms.hpp"

namespace strata::collective_detail {

CollectiveStep ring_step(const Topology& topology, std::span<const std::vector<int64_t>> rings,
                         bool closed, int64_t ring_steps, double link_bytes,
                         const ProtocolTuning& tuning) {
  CollectiveStep step;
  int64_t hop_latency_ns = 0;
  for (const std::vector<int64_t>& ring : rings) {
    const size_t n = ring.size();
    if (n < 2) continue;
    const size_t links = closed ? n : n - 1;
    for (size_t i = 0; i < links; ++i) {
      const int64_t src = ring[i];
      const int64_t dst = ring[(i + 1) % n];
      Route route = topology.route(src, dst);
      hop_latency_ns = std::max(hop_latency_ns, route.latency_ns);
      step.flows.push_back({static_cast<int32_t>(src), static_cast<int32_t>(dst),
                            std::move(route.links), wire_bytes(link_bytes, tuning)});
    }
  }
  step.latency_ns = ring_steps * (tuning.base_latency_ns + hop_latency_ns);
  return step;
}

CollectivePlan plan_ring(const Topology& topology, const FabricTuning& fabric, CollectiveKind kind,
                         const Placement& placement, int64_t root_gpu, int64_t bytes) {
  const ProtocolTuning& protocol = fabric.pick(bytes);
  CollectivePlan plan{CollectiveAlgorithm::kRing, protocol.protocol, {}};
  std::vector<int64_t> ring = placement.ordered;
  const int64_t n = static_cast<int64_t>(ring.size());
  if (n < 2) return plan;
  const double size = static_cast<double>(bytes);
  const double nd = static_cast<double>(n);
  switch (kind) {
    case CollectiveKind::kAllReduce:
      plan.steps.push_back(
          ring_step(topology, {&ring, 1}, true, 2 * (n - 1), 2 * (nd - 1) / nd * size, protocol));
      break;
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllGather:
      plan.steps.push_back(
          ring_step(topology, {&ring, 1}, true, n - 1, (nd - 1) / nd * size, protocol));
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
