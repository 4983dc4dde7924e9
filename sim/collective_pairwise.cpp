// All-to-all as NCCL runs it: every member sends its piece for every other member at once
// (grouped send/recv, as nccl-tests' alltoall_perf and Megatron-Core's token dispatcher call it),
// one flow per ordered pair with bytes to move, all in one step whose latency is the protocol's
// base latency plus the longest route among the flows. A member's piece for itself stays on its
// GPU. How fast each flow goes is the engine's max-min sharing of the links: a receiver that n - 1
// peers send to shares its down-link among them.
//
// Uniform (plan_collective): each member sends S/n to each other member, S the per-rank buffer
// as nccl-tests counts it. With a matrix (plan_all_to_all): member i sends matrix[i * n + j] to
// member j.

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "common/error.hpp"
#include "sim/collective_algorithms.hpp"

namespace strata {

namespace {

// One step of a flow from gpus[i] to gpus[j] for each ordered pair i != j whose payload(i, j) is
// positive; no step when there is none (nothing crosses a link).
template <typename Payload>
CollectivePlan pairwise_plan(const Topology& topology, const ProtocolTuning& protocol,
                             std::span<const int64_t> gpus, Payload payload) {
  CollectivePlan plan{CollectiveAlgorithm::kPairwise, protocol.protocol, {}};
  CollectiveStep step;
  int64_t route_latency_ns = 0;
  for (size_t i = 0; i < gpus.size(); ++i) {
    for (size_t j = 0; j < gpus.size(); ++j) {
      const double bytes = payload(i, j);
      if (i == j || bytes <= 0) continue;
      Route route = topology.route(gpus[i], gpus[j]);
      route_latency_ns = std::max(route_latency_ns, route.latency_ns);
      step.flows.push_back({static_cast<int32_t>(gpus[i]), static_cast<int32_t>(gpus[j]),
                            std::move(route.links),
                            collective_detail::wire_bytes(bytes, protocol)});
    }
  }
  if (step.flows.empty()) return plan;
  step.latency_ns = protocol.base_latency_ns + route_latency_ns;
  plan.steps.push_back(std::move(step));
  return plan;
}

}  // namespace

namespace collective_detail {

CollectivePlan plan_pairwise(const Topology& topology, const FabricTuning& fabric,
                             const Placement& placement, int64_t bytes) {
  const double piece = static_cast<double>(bytes) / static_cast<double>(placement.ordered.size());
  return pairwise_plan(topology, fabric.pick(bytes), placement.ordered,
                       [piece](size_t, size_t) { return piece; });
}

}  // namespace collective_detail

// The protocol is picked, as for the uniform plan, by a per-rank size: the largest row sum, the
// send buffer of the member that sends the most. A row sum is the size nccl-tests' alltoall_perf
// reports and the cluster's protocol thresholds were fitted against; a balanced matrix (S/n in
// every entry) has every row sum S and so picks what the uniform plan of S picks, flows and
// latency alike. One protocol serves the whole instance because the plan has one step.
CollectivePlan plan_all_to_all(const Topology& topology, const CollectiveTuning& tuning,
                               std::span<const int64_t> gpus, std::span<const int64_t> matrix,
                               AllToAllPart part) {
  const size_t n = gpus.size();
  STRATA_ASSERT(matrix.size() == n * n,
                fmt::format("an all-to-all over {} GPUs takes a {} x {} matrix, got {} values", n,
                            n, n, matrix.size()));
  const collective_detail::Placement placement = collective_detail::place(topology, gpus);
  int64_t largest_row = 0;
  for (size_t i = 0; i < n; ++i) {
    int64_t row = 0;
    for (size_t j = 0; j < n; ++j) {
      STRATA_ASSERT(matrix[i * n + j] >= 0, "an all-to-all sends 0 or more bytes to each member");
      row += matrix[i * n + j];
    }
    largest_row = std::max(largest_row, row);
  }
  const FabricTuning& fabric = placement.spans_nodes() ? tuning.net : tuning.nvlink;
  const auto member = static_cast<size_t>(part.member);
  return pairwise_plan(topology, fabric.pick(largest_row), gpus, [&](size_t i, size_t j) {
    const bool touches = i == member || j == member;
    return part.member < 0 || touches == part.touching ? static_cast<double>(matrix[i * n + j])
                                                       : 0.0;
  });
}

}  // namespace strata
