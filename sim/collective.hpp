#pragma once
// Collective algorithms: how NCCL would run one collective on a group of GPUs, decomposed into
// steps of flows on the topology graph.
//
// Algorithm choice follows NCCL by size and topology:
//  - inside one node: ring; all-reduce on an NVSwitch with in-switch reduction (NVLS) from
//    tuning.nvls_min_bytes;
//  - across nodes: all-reduce as the fastest by estimated time of a double binary tree over the
//    nodes, rings (NCCL's channels, one per local GPU) and, when several members share a node,
//    hierarchical rings (intra-node reduce-scatter, inter-node ring per local GPU, intra-node
//    all-gather); a cluster's tree_max_bytes forces the tree instead up to that size;
//  - reduce-scatter and all-gather: rings over all members, n - 1 steps (across nodes NCCL's
//    channels); broadcast: pipelined ring; all-to-all: one flow per ordered pair, S/n each
//    (plan_collective) or the pair's entry of a traffic matrix (plan_all_to_all).
//
// A ring's 2(n-1) (all-reduce) or n-1 steps are coalesced into one step: every ring link carries
// the same bytes in every step, so one flow per link with all the steps' bytes, after all the
// steps' latencies, takes the same time as the pipelined steps at constant link rates and is
// re-rated like them when other traffic comes and goes. Worked example: ring all-reduce of S
// bytes over n GPUs with link bandwidth B and latency a: latency 2(n-1)a, then n flows of
// 2(n-1)S/n bytes each, one per link: 2(n-1)(a + S/(nB)).
//
// A ring step's latency is (number of ring steps) x (the protocol's base latency + the ring's
// largest per-hop route latency). The protocol is tuning.<fabric>.pick(bytes): nvls for NVLS,
// net for a ring, tree or all-to-all spanning nodes, nvlink inside a node; a hierarchical plan's
// intra-node phases use nvlink's and its inter-node phase net's (CollectivePlan::protocol is
// then the net one). Wire bytes are the payload divided by the protocol's bandwidth efficiency.
// One algorithm per file: sim/collective_{select,ring,tree,nvls,hierarchical,pairwise}.cpp.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "plan/task_graph.hpp"
#include "topologies/collective_tuning.hpp"
#include "topologies/topology.hpp"

namespace strata {

enum class CollectiveAlgorithm : uint8_t { kRing, kTree, kNvls, kHierarchical, kPairwise };
const char* to_string(CollectiveAlgorithm algorithm);

struct CollectiveFlow {
  int32_t src_gpu = 0;
  int32_t dst_gpu = 0;  // == src_gpu for a flow into or out of the switch (NVLS)
  // src_gpu = dst_gpu = -1: a copy-engine DMA (host copies), which runs no kernel on the GPU
  std::vector<int32_t> links;  // topology link ids in order
  double wire_bytes = 0;
};

// Flows of one step start together after the step's latency; the next step starts when all of
// them have finished.
struct CollectiveStep {
  int64_t latency_ns = 0;
  std::vector<CollectiveFlow> flows;
};

struct CollectivePlan {
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::kRing;
  Protocol protocol = Protocol::kSimple;
  std::vector<CollectiveStep> steps;
};

// `gpus`: the members' GPU ids (global, as Topology numbers them), in the group's rank order;
// `bytes`: per rank, as nccl-tests counts size (the full buffer of an all-reduce, the gathered
// output of an all-gather, the input of a reduce-scatter). A one-member group has no steps.
CollectivePlan plan_collective(const Topology& topology, const CollectiveTuning& tuning,
                               CollectiveKind kind, std::span<const int64_t> gpus, int64_t bytes);
// The plan of a given algorithm: the one plan_collective chose for a symmetric copy of the group
// (the simulator's folded images), so that each copy is not estimated again.
CollectivePlan plan_collective_as(CollectiveAlgorithm algorithm, const Topology& topology,
                                  const CollectiveTuning& tuning, CollectiveKind kind,
                                  std::span<const int64_t> gpus, int64_t bytes);

// An all-to-all whose members send different amounts to each other (expert parallelism's token
// dispatch and combine under load imbalance). `matrix` is n x n over the n GPUs of `gpus`,
// row-major in their order: matrix[i * n + j] is what gpus[i] sends to gpus[j]; the diagonal
// stays on its GPU. One step: a flow for each ordered pair i != j with bytes, of the protocol's
// wire bytes for them, after the protocol's base latency plus the longest route among the flows;
// no step when nothing crosses a link. The protocol is the fabric's pick (nvlink in one node, net
// across) for the largest row sum, so that a balanced matrix of S/n per entry plans what
// plan_collective does for an all-to-all of S.
// Worked example (tests/sim/all_to_all_test.cpp): n GPUs on one switch with links of B bytes/s
// (protocol efficiency 1), member 0 receiving r x s from each peer and every other entry s. Every
// link carries n - 1 flows, so each flow runs at B/(n-1) until the s-flows end at (n-1)s/B; the
// n - 1 flows into member 0 then share its down-link alone and end at r(n-1)s/B, its bytes over B.
// `part` keeps only some of the flows: those that leave or reach one member (`touching`), or all
// the others; the protocol is still picked by the whole matrix's largest row.
struct AllToAllPart {
  int64_t member = -1;  // -1: every flow
  bool touching = true;
};
CollectivePlan plan_all_to_all(const Topology& topology, const CollectiveTuning& tuning,
                               std::span<const int64_t> gpus, std::span<const int64_t> matrix,
                               AllToAllPart part = {});

// The time a plan takes alone on an idle cluster: per step, its latency plus the time of its
// most loaded link (the wire bytes of the step's flows on it over its bandwidth). The engine
// gives the same when every flow has its links alone; plan_collective picks by it.
double estimated_seconds(const Topology& topology, const CollectivePlan& plan);

// A point-to-point transfer (pipeline send/recv): one step, one flow on the route.
CollectivePlan plan_p2p(const Topology& topology, const CollectiveTuning& tuning, int64_t src_gpu,
                        int64_t dst_gpu, int64_t bytes);

// A copy between a GPU and its host's memory (offload): one step, one flow on the GPU's PCIe
// link toward the host or back, after the link's latency.
CollectivePlan plan_host_copy(const Topology& topology, int64_t gpu, bool to_host, int64_t bytes);

// nccl-tests' bus bandwidth factor: busbw = algbw * factor (2(n-1)/n all-reduce, (n-1)/n
// reduce-scatter and all-gather, 1 broadcast).
double busbw_factor(CollectiveKind kind, int64_t ranks);

}  // namespace strata
