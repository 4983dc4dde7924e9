// All-to-all timed by the engine on the topology graph: the uniform plan (nccl-tests'
// alltoall_perf, S/n to each peer) and a traffic matrix (plan_all_to_all, sim/collective.hpp)
// against closed forms worked out by hand from max-min (progressive filling) sharing, with the
// bandwidths, latencies and protocols read from the cluster file the test uses
// (topologies/clusters/dgx-h100.json), and a folded graph's symmetric images through the network
// model (sim/network_model.hpp).

#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <vector>

#include <fmt/format.h>

#include "plan/rank_program.hpp"
#include "sim/network_model.hpp"
#include "sim/transfer_builder.hpp"

namespace strata {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

std::vector<int64_t> first_gpus(int64_t n) {
  std::vector<int64_t> gpus;
  for (int64_t g = 0; g < n; ++g) gpus.push_back(g);
  return gpus;
}

// dgx-h100 with `gpus_per_node` GPUs per node sharing `nics_per_node` NICs, everything else as
// the file says (no built-in file has one GPU per node).
ClusterSpec dgx_h100(int64_t gpus_per_node, int64_t nics_per_node) {
  ClusterSpec cluster = load_cluster("dgx-h100");
  cluster.gpus_per_node = gpus_per_node;
  cluster.nics_per_node = nics_per_node;
  return cluster;
}

// What a pair of GPUs of the test's layout sees, from the cluster file: one NVSwitch node, whose
// GPUs each have an up- and a down-link of the NVLink bandwidth and whose route is one NVLink
// hop; or one GPU per node under one leaf switch, whose route crosses its PCIe link, its NIC, the
// leaf, the other NIC and PCIe link (topologies/topology.hpp), the NIC the narrowest.
struct Fabric {
  ClusterSpec cluster;
  double bw = 0;             // bytes/s of the narrowest link of a route
  double route_seconds = 0;  // a route's latency
  bool spans_nodes = false;  // the net protocols, else the nvlink ones

  const FabricTuning& tuning() const {
    return spans_nodes ? cluster.collectives.net : cluster.collectives.nvlink;
  }
};

Fabric one_node(int64_t n) {
  Fabric f{dgx_h100(n, 8)};
  f.bw = f.cluster.nvlink.bw_gbps * 1e9;
  f.route_seconds = static_cast<double>(f.cluster.nvlink.latency_ns) / 1e9;
  return f;
}

Fabric one_gpu_nodes() {
  Fabric f{dgx_h100(1, 1)};
  f.bw = std::min(f.cluster.nic.bw_gbps, f.cluster.pcie.bw_gbps) * 1e9;
  f.route_seconds = static_cast<double>(2 * f.cluster.pcie.latency_ns + f.cluster.nic.latency_ns +
                                        f.cluster.switch_latency_ns) /
                    1e9;
  f.spans_nodes = true;
  return f;
}

double seconds(TimeNs ns) { return static_cast<double>(ns) / 1e9; }

// Each flow's finish time when `plan` (one step) runs alone from time 0, as TransferBuilder runs
// it: an engine link per topology link at its bandwidth, the step's latency, then the flows
// sharing the links max-min (sim/engine.hpp).
std::vector<double> flow_seconds(const Topology& topology, const CollectivePlan& plan) {
  REQUIRE(plan.steps.size() == 1);
  Engine engine;
  std::map<int32_t, LinkId> links;
  const ActivityId start =
      engine.add({.kind = ActivityKind::kDelay, .duration_ns = plan.steps[0].latency_ns});
  std::vector<ActivityId> flows;
  for (const CollectiveFlow& flow : plan.steps[0].flows) {
    std::vector<PathHop> hops;
    for (const int32_t link : flow.links) {
      const auto [found, added] = links.try_emplace(link, -1);
      if (added) found->second = engine.add_link(topology.link(link).bw_gbps * 1e9);
      hops.push_back({found->second, 1.0f});
    }
    ActivitySpec spec{.kind = ActivityKind::kFlow};
    spec.bytes = flow.wire_bytes;
    spec.path = engine.add_path(hops);
    flows.push_back(engine.add(spec, {&start, 1}));
  }
  engine.run();
  std::vector<double> finish;
  for (const ActivityId flow : flows) finish.push_back(seconds(engine.finish_ns(flow)));
  return finish;
}

// nccl-tests' alltoall_perf of S bytes per rank on n = 8 GPUs (one NVSwitch node of dgx-h100, and
// eight one-GPU nodes under one InfiniBand leaf): each GPU sends S/n to each of the n - 1 others;
// every up- and down-link of a GPU (and of a NIC) carries n - 1 equal flows, which share it
// evenly (max-min), so all end together after (n-1)/n x S / (e B), B the narrowest link of a route
// and e the efficiency of the protocol the fabric picks for S, after that protocol's base latency
// plus one route's latency. Within 1%. A balanced matrix of S/n per entry (plan_all_to_all) plans
// and takes the same.
TEST_CASE("uniform all-to-all takes (n-1)/n S / B plus latency", "[sim][network][all-to-all]") {
  const int64_t n = 8;
  for (const bool nodes : {false, true}) {
    const Fabric f = nodes ? one_gpu_nodes() : one_node(n);
    for (const int64_t bytes : {kMiB, 64 * kMiB, 1024 * kMiB}) {
      const ProtocolTuning& protocol = f.tuning().pick(bytes);
      const double expected = static_cast<double>(protocol.base_latency_ns) / 1e9 +
                              f.route_seconds +
                              static_cast<double>(n - 1) / static_cast<double>(n) *
                                  static_cast<double>(bytes) / (protocol.bw_efficiency * f.bw);
      const std::vector<CollectiveRun> run{{CollectiveKind::kAllToAll, first_gpus(n), bytes}};
      const double uniform = seconds(time_collectives(f.cluster, n, run).front());
      const Topology topology(f.cluster, n);
      const std::vector<int64_t> balanced(static_cast<size_t>(n * n), bytes / n);
      const CollectivePlan plan =
          plan_all_to_all(topology, f.cluster.collectives, first_gpus(n), balanced);
      const double matrix = seconds(time_plans(f.cluster, n, {&plan, 1}).front());
      INFO(fmt::format("{}: S {} B: closed form {:.3f} us, uniform {:.3f} us, matrix {:.3f} us",
                       nodes ? "8 nodes x 1 GPU" : "1 node x 8 GPUs", bytes, expected * 1e6,
                       uniform * 1e6, matrix * 1e6));
      CHECK(plan.protocol == protocol.protocol);
      CHECK(plan.steps.at(0).flows.size() == static_cast<size_t>(n * (n - 1)));
      CHECK(uniform == Approx(expected).epsilon(0.01));
      CHECK(matrix == Approx(expected).epsilon(0.01));
    }
  }
}

// A hot expert's rank: member 0 receives r x s from each of the n - 1 others, every other entry
// is s (n = 8, r = 3, s = 1 MiB). Progressive filling, with e B the rate of a link in payload
// bytes (B the narrowest link of a route, e the protocol's efficiency):
//  - at first every up-link (member i sends to the n - 1 others) and every down-link (member j
//    receives from the n - 1 others; the hot rank's ingress is its down-link: n - 1 flows of r s)
//    carries n - 1 flows, so all links saturate together and every flow runs at e B / (n-1);
//  - the flows of s end at t1 = (n-1) s / (e B); then only the n - 1 flows into member 0 are left,
//    each alone on its sender's up-link and all on the hot down-link: e B / (n-1) each still, so
//    they end at t1 + (n-1)(r-1) s / (e B) = (n-1) r s / (e B), the hot link's bytes over its rate.
// Every flow starts after the protocol's base latency plus one route's latency. The protocol is
// the pick for the largest row sum, r s + (n-1) s = 10 MiB: Simple on NVLink (member 0's own row,
// 8 MiB, would pick LL128). The instance's end and each flow's end, within 1%; the idle estimate
// (estimated_seconds: the busiest link's bytes) gives the same end.
TEST_CASE("a hot receiver's all-to-all follows max-min sharing", "[sim][network][all-to-all]") {
  const int64_t n = 8;
  const int64_t r = 3;
  const int64_t s = kMiB;
  std::vector<int64_t> matrix(static_cast<size_t>(n * n), s);
  for (int64_t i = 1; i < n; ++i) matrix[static_cast<size_t>(i * n)] = r * s;
  for (const bool nodes : {false, true}) {
    const Fabric f = nodes ? one_gpu_nodes() : one_node(n);
    const Topology topology(f.cluster, n);
    const CollectivePlan plan =
        plan_all_to_all(topology, f.cluster.collectives, first_gpus(n), matrix);
    const ProtocolTuning& protocol = f.tuning().pick(r * s + (n - 1) * s);
    CHECK(plan.protocol == protocol.protocol);
    if (!nodes) {
      CHECK(protocol.protocol == Protocol::kSimple);
      CHECK(f.tuning().pick(n * s).protocol == Protocol::kLL128);
    }
    const double latency = static_cast<double>(protocol.base_latency_ns) / 1e9 + f.route_seconds;
    const double rate = protocol.bw_efficiency * f.bw;  // payload bytes/s of a link
    const double t1 = static_cast<double>((n - 1) * s) / rate;
    const double t2 = static_cast<double>((n - 1) * r * s) / rate;
    const double end = seconds(time_plans(f.cluster, n, {&plan, 1}).front());
    INFO(fmt::format("{}: closed form {:.3f} us (s flows {:.3f} us), simulated {:.3f} us",
                     nodes ? "8 nodes x 1 GPU" : "1 node x 8 GPUs", (latency + t2) * 1e6,
                     (latency + t1) * 1e6, end * 1e6));
    CHECK(end == Approx(latency + t2).epsilon(0.01));
    // The idle estimate (the busiest link, the hot down-link) is the same time here.
    CHECK(estimated_seconds(topology, plan) == Approx(latency + t2).epsilon(0.01));
    REQUIRE(plan.steps.size() == 1);
    const std::vector<double> flows = flow_seconds(topology, plan);
    REQUIRE(flows.size() == static_cast<size_t>(n * (n - 1)));
    for (size_t k = 0; k < flows.size(); ++k) {
      const bool hot = plan.steps[0].flows[k].dst_gpu == 0;
      INFO(fmt::format("flow {} -> {}", plan.steps[0].flows[k].src_gpu,
                       plan.steps[0].flows[k].dst_gpu));
      CHECK(flows[k] == Approx(latency + (hot ? t2 : t1)).epsilon(0.01));
    }
  }
}

// A folded graph's all-to-all: tp 2, ep 4 on four dgx-h100 nodes of 2 GPUs sharing one NIC each
// (rank = tp + 2 ep, so the simulated EP group is ranks 0, 2, 4, 6 and its tp image 1, 3, 5, 7,
// GPU 2k and 2k + 1 on node k). The image carries the same matrix, its member i the image of
// member i: rank 1, on the hot rank's node, is hot too. Every NIC link then carries 2(n-1) flows
// (n = 4), the simulated ones with weight 2 (TransferBuilder), and the NIC is narrower than the
// PCIe links (50 against 63 GB/s over n - 1 flows): by the previous test's argument with each
// link's rate halved, the instance ends after latency + 2(n-1) r s / (e B_nic). A full graph of
// the same ranks, whose two EP groups run their all-to-alls at once, ends at the same time.
TEST_CASE("a folded all-to-all prices its images' matrix", "[sim][network][all-to-all]") {
  const int64_t ep = 4;
  const int64_t r = 3;
  const int64_t s = 8 * kMiB;
  std::vector<int64_t> matrix(static_cast<size_t>(ep * ep), s);
  for (int64_t i = 1; i < ep; ++i) matrix[static_cast<size_t>(i * ep)] = r * s;
  const ClusterSpec cluster = dgx_h100(2, 1);
  const ProtocolTuning& protocol = cluster.collectives.net.pick(r * s + (ep - 1) * s);
  const double latency =
      static_cast<double>(protocol.base_latency_ns + 2 * cluster.pcie.latency_ns +
                          cluster.nic.latency_ns + cluster.switch_latency_ns) /
      1e9;
  const double expected = latency + 2.0 * static_cast<double>((ep - 1) * r * s) /
                                        (protocol.bw_efficiency * cluster.nic.bw_gbps * 1e9);
  ParallelAxes axes;
  at(axes.sizes, Axis::kTp) = 2;
  at(axes.sizes, Axis::kEp) = ep;

  std::vector<double> ends;
  for (const GraphMode mode : {GraphMode::kFolded, GraphMode::kFull}) {
    TaskGraph graph(mode, axes);
    const int32_t ranks = mode == GraphMode::kFolded ? 1 : 8;
    for (int32_t rank = 0; rank < ranks; ++rank) graph.add_rank({rank, 0});
    // One all-to-all task per EP group (any member's: the model plans the whole instance).
    std::vector<TaskId> instances;
    for (int32_t first = 0; first < ranks && first < 2; ++first) {
      const int32_t group =
          graph.add_group(GroupKind::kEp, {first, first + 2, first + 4, first + 6});
      const TaskId id =
          RankProgram(graph, first)
              .collective(TaskRole::kMlpUp, Stream::kTpComm, CollectiveKind::kAllToAll, group, 0);
      graph.set_peer_bytes(id, matrix);
      instances.push_back(id);
    }
    Engine engine;
    NetworkModel network(graph, cluster, engine, std::vector<ProcessorId>(8, kNoProcessor));
    const ActivityId start = engine.add({.kind = ActivityKind::kDelay});
    std::vector<ActivityId> done;
    for (const TaskId id : instances) done.push_back(network.add_collective(id, start));
    engine.run();
    for (const ActivityId end : done) ends.push_back(seconds(engine.finish_ns(end)));
  }
  REQUIRE(ends.size() == 3);
  INFO(fmt::format("closed form {:.3f} us; folded {:.3f} us; full {:.3f} and {:.3f} us",
                   expected * 1e6, ends[0] * 1e6, ends[1] * 1e6, ends[2] * 1e6));
  for (const double end : ends) CHECK(end == Approx(expected).epsilon(0.01));
}

}  // namespace
}  // namespace strata
