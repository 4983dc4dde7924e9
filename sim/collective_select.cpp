// Which algorithm NCCL would run (sim/collective.hpp), point-to-point transfers, and nccl-tests'
// bus bandwidth factor. The algorithms live one per file (collective_ring.cpp, ...).

#include <algorithm>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/error.hpp"
#include "common/units.hpp"
#include "sim/collective.hpp"
#include "sim/collective_algorithms.hpp"

namespace strata {

namespace collective_detail {

bool Placement::uniform() const {
  return std::all_of(nodes.begin(), nodes.end(),
                     [this](const auto& node) { return node.size() == nodes.front().size(); });
}

Placement place(const Topology& topology, std::span<const int64_t> gpus) {
  Placement placement;
  placement.ordered.assign(gpus.begin(), gpus.end());
  // GPU ids are numbered node-major, so ascending ids are (node, local GPU) order.
  std::sort(placement.ordered.begin(), placement.ordered.end());
  for (size_t i = 0; i < placement.ordered.size(); ++i) {
    const int64_t gpu = placement.ordered[i];
    STRATA_ASSERT(
        gpu >= 0 && gpu < topology.gpus(),
        fmt::format("group member GPU {} within the topology's {}", gpu, topology.gpus()));
    STRATA_ASSERT(i == 0 || placement.ordered[i - 1] != gpu,
                  fmt::format("GPU {} appears twice in one collective group", gpu));
    if (i == 0 || topology.node_of(placement.ordered[i - 1]) != topology.node_of(gpu)) {
      placement.nodes.emplace_back();
    }
    placement.nodes.back().push_back(gpu);
  }
  return placement;
}

double wire_bytes(double payload_bytes, const ProtocolTuning& tuning) {
  return payload_bytes / tuning.bw_efficiency;
}

}  // namespace collective_detail

using collective_detail::Placement;

const char* to_string(CollectiveAlgorithm algorithm) {
  switch (algorithm) {
    case CollectiveAlgorithm::kRing:
      return "ring";
    case CollectiveAlgorithm::kTree:
      return "tree";
    case CollectiveAlgorithm::kNvls:
      return "nvls";
    case CollectiveAlgorithm::kHierarchical:
      return "hierarchical";
    case CollectiveAlgorithm::kPairwise:
      return "pairwise";
  }
  return "?";
}

namespace {

// NVLS needs an NVSwitch that reduces (ClusterSpec::in_switch_reduction), an NVLS tuning and a
// message of at least nvls_min_bytes (below it NCCL's rings are faster: nccl_busbw.csv, 8 x H200:
// "RING/LL up to 1MiB, NVLS/SIMPLE from 2MiB").
bool nvls_applies(const Topology& topology, const CollectiveTuning& tuning, int64_t bytes) {
  const ClusterSpec& cluster = topology.cluster();
  return cluster.intra_node == IntraNodeFabric::kNvSwitch && cluster.in_switch_reduction &&
         !tuning.nvls.protocols.empty() && bytes >= tuning.nvls_min_bytes;
}

// Several members on each of several nodes, the same number on each: the intra-node phases use
// every member and the inter-node phase one ring per local position, each on its own NIC.
bool hierarchical_applies(const Placement& placement) {
  return placement.spans_nodes() && placement.uniform() && placement.nodes.front().size() > 1;
}

// The plan of `algorithm` on the placed members; `first_gpu` is the group's rank 0 (a ring's
// start).
CollectivePlan plan_placed(CollectiveAlgorithm algorithm, const Topology& topology,
                           const CollectiveTuning& tuning, CollectiveKind kind,
                           const Placement& placement, int64_t first_gpu, int64_t bytes) {
  const FabricTuning& fabric = placement.spans_nodes() ? tuning.net : tuning.nvlink;
  if (placement.ordered.size() <= 1) {
    return {CollectiveAlgorithm::kRing, fabric.pick(bytes).protocol, {}};
  }
  switch (algorithm) {
    case CollectiveAlgorithm::kRing:
      return collective_detail::plan_ring(topology, fabric, kind, placement, first_gpu, bytes);
    case CollectiveAlgorithm::kTree:
      return collective_detail::plan_tree(topology, tuning, placement, bytes);
    case CollectiveAlgorithm::kNvls:
      return collective_detail::plan_nvls(topology, tuning.nvls, placement.ordered, bytes);
    case CollectiveAlgorithm::kHierarchical:
      return collective_detail::plan_hierarchical(topology, tuning, placement, bytes);
    case CollectiveAlgorithm::kPairwise:
      return collective_detail::plan_pairwise(topology, fabric, placement, bytes);
  }
  STRATA_ASSERT(false, "a known collective algorithm");
  return {};
}

}  // namespace

// The choice, as NCCL's tuner makes it for these shapes:
//  - all-to-all: pairwise; broadcast: a pipelined chain; ring exchange: one ring step;
//  - all-reduce in one node: NVLS when it applies, else a ring;
//  - all-reduce across nodes: whichever of the double binary tree, the rings and (when members
//    share nodes evenly) the hierarchical rings has the shortest estimated time alone
//    (estimated_seconds), as NCCL picks by its cost model rather than a size threshold; a
//    cluster's tree_max_bytes forces the tree up to that size instead, as NCCL_ALGO does;
//  - reduce-scatter and all-gather: rings, across nodes NCCL's channels (n - 1 steps however many
//    nodes: latency-bound on hundreds of ranks).
// Rings use the nvlink protocols inside a node and the net protocols when they cross nodes.
CollectivePlan plan_collective(const Topology& topology, const CollectiveTuning& tuning,
                               CollectiveKind kind, std::span<const int64_t> gpus, int64_t bytes) {
  STRATA_ASSERT(bytes >= 0, fmt::format("a collective moves >= 0 bytes, got {}", bytes));
  const Placement placement = collective_detail::place(topology, gpus);
  const int64_t first_gpu = gpus.empty() ? 0 : gpus.front();
  const auto as = [&](CollectiveAlgorithm algorithm) {
    return plan_placed(algorithm, topology, tuning, kind, placement, first_gpu, bytes);
  };
  if (gpus.size() <= 1) return as(CollectiveAlgorithm::kRing);
  switch (kind) {
    case CollectiveKind::kAllToAll:
      return as(CollectiveAlgorithm::kPairwise);
    case CollectiveKind::kBroadcast:
    case CollectiveKind::kRingExchange:
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllGather:
      return as(CollectiveAlgorithm::kRing);
    case CollectiveKind::kAllReduce:
      break;
  }
  if (!placement.spans_nodes()) {
    return as(nvls_applies(topology, tuning, bytes) ? CollectiveAlgorithm::kNvls
                                                    : CollectiveAlgorithm::kRing);
  }
  const bool hierarchical = hierarchical_applies(placement);
  const CollectiveAlgorithm wide =
      hierarchical ? CollectiveAlgorithm::kHierarchical : CollectiveAlgorithm::kRing;
  if (tuning.tree_max_bytes) {
    return as(bytes <= *tuning.tree_max_bytes ? CollectiveAlgorithm::kTree : wide);
  }
  std::vector<CollectivePlan> candidates;
  candidates.push_back(as(CollectiveAlgorithm::kTree));
  candidates.push_back(as(CollectiveAlgorithm::kRing));
  if (hierarchical) candidates.push_back(as(CollectiveAlgorithm::kHierarchical));
  // The first of equal estimates wins, so the choice is deterministic.
  size_t best = 0;
  double best_s = estimated_seconds(topology, candidates[0]);
  for (size_t i = 1; i < candidates.size(); ++i) {
    const double seconds = estimated_seconds(topology, candidates[i]);
    if (seconds < best_s) {
      best = i;
      best_s = seconds;
    }
  }
  return std::move(candidates[best]);
}

CollectivePlan plan_collective_as(CollectiveAlgorithm algorithm, const Topology& topology,
                                  const CollectiveTuning& tuning, CollectiveKind kind,
                                  std::span<const int64_t> gpus, int64_t bytes) {
  STRATA_ASSERT(bytes >= 0, fmt::format("a collective moves >= 0 bytes, got {}", bytes));
  return plan_placed(algorithm, topology, tuning, kind, collective_detail::place(topology, gpus),
                     gpus.empty() ? 0 : gpus.front(), bytes);
}

double estimated_seconds(const Topology& topology, const CollectivePlan& plan) {
  double seconds = 0;
  // Bytes per link in the step, indexed by link id; `touched` lists the links to scan and clear.
  std::vector<double> load(topology.links().size(), 0.0);
  std::vector<int32_t> touched;
  for (const CollectiveStep& step : plan.steps) {
    for (const CollectiveFlow& flow : step.flows) {
      for (const int32_t link : flow.links) {
        if (load[static_cast<size_t>(link)] == 0) touched.push_back(link);
        load[static_cast<size_t>(link)] += flow.wire_bytes;
      }
    }
    double busiest = 0;
    for (const int32_t link : touched) {
      const double bytes = std::exchange(load[static_cast<size_t>(link)], 0.0);
      busiest = std::max(busiest, bytes / (topology.link(link).bw_gbps * kBytesPerGB));
    }
    touched.clear();
    seconds += static_cast<double>(step.latency_ns) / static_cast<double>(kNsPerSecond) + busiest;
  }
  return seconds;
}

// One step: the protocol's base latency plus the route's, then one flow on the route.
CollectivePlan plan_p2p(const Topology& topology, const CollectiveTuning& tuning, int64_t src_gpu,
                        int64_t dst_gpu, int64_t bytes) {
  STRATA_ASSERT(bytes >= 0, fmt::format("a transfer moves >= 0 bytes, got {}", bytes));
  const bool spans = topology.node_of(src_gpu) != topology.node_of(dst_gpu);
  const ProtocolTuning& protocol = (spans ? tuning.net : tuning.nvlink).pick(bytes);
  CollectivePlan plan{CollectiveAlgorithm::kRing, protocol.protocol, {}};
  if (src_gpu == dst_gpu) return plan;  // a copy on one GPU: nothing crosses a link
  Route route = topology.route(src_gpu, dst_gpu);
  CollectiveStep step;
  step.latency_ns = protocol.base_latency_ns + route.latency_ns;
  step.flows.push_back({static_cast<int32_t>(src_gpu), static_cast<int32_t>(dst_gpu),
                        std::move(route.links),
                        collective_detail::wire_bytes(static_cast<double>(bytes), protocol)});
  plan.steps.push_back(std::move(step));
  return plan;
}

CollectivePlan plan_host_copy(const Topology& topology, int64_t gpu, bool to_host, int64_t bytes) {
  STRATA_ASSERT(bytes >= 0, fmt::format("a copy moves >= 0 bytes, got {}", bytes));
  const int32_t link = topology.host_link(gpu, to_host);
  CollectivePlan plan{CollectiveAlgorithm::kRing, Protocol::kSimple, {}};
  CollectiveStep step;
  step.latency_ns = topology.link(link).latency_ns;
  // The GPU's copy engines move it (cudaMemcpyAsync): no kernel slows the GPU's compute.
  step.flows.push_back({-1, -1, {link}, static_cast<double>(bytes)});
  plan.steps.push_back(std::move(step));
  return plan;
}

double busbw_factor(CollectiveKind kind, int64_t ranks) {
  const double n = static_cast<double>(ranks);
  switch (kind) {
    case CollectiveKind::kAllReduce:
      return 2 * (n - 1) / n;
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllGather:
    case CollectiveKind::kAllToAll:  // nccl-tests alltoall_perf: (n-1)/n
      return (n - 1) / n;
    case CollectiveKind::kBroadcast:
    case CollectiveKind::kRingExchange:
      return 1;
  }
  return 1;
}

}  // namespace strata
