// All-to-all as NCCL runs it: every member sends S/n to every other member at once (grouped
// send/recv), one flow per ordered pair, n(n-1) flows in one step whose latency is the protocol's
// base latency plus the longest route. S is the per-rank buffer, as nccl-tests counts it.

#include <algorithm>
#include <utility>

#include "sim/collective_algorithms.hpp"

namespace strata::collective_detail {

CollectivePlan plan_pairwise(const Topology& topology, const FabricTuning& fabric,
                             const Placement& placement, int64_t bytes) {
  const ProtocolTuning& protocol = fabric.pick(bytes);
  CollectivePlan plan{CollectiveAlgorithm::kPairwise, protocol.protocol, {}};
  const std::vector<int64_t>& members = placement.ordered;
  const double wire =
      wire_bytes(static_cast<double>(bytes) / static_cast<double>(members.size()), protocol);
  CollectiveStep step;
  step.flows.reserve(members.size() * (members.size() - 1));
  int64_t route_latency_ns = 0;
  for (const int64_t src : members) {
    for (const int64_t dst : members) {
      if (src == dst) continue;
      Route route = topology.route(src, dst);
      route_latency_ns = std::max(route_latency_ns, route.latency_ns);
      step.flows.push_back(
          {static_cast<int32_t>(src), static_cast<int32_t>(dst), std::move(route.links), wire});
    }
  }
  step.latency_ns = protocol.base_latency_ns + route_latency_ns;
  plan.steps.push_back(std::move(step));
  return plan;
}

}  // namespace strata::collective_detail
