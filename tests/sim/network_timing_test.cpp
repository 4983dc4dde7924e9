// Collectives timed by the engine on the topology graph (time_collectives), against closed forms
// and against nccl-tests measurements.

#include <catch2/catch.hpp>

#include <cmath>

#include <fmt/format.h>

#include "sim/transfer_builder.hpp"
#include "tests/sim/nccl_reference.hpp"

namespace strata {
namespace {

constexpr double kB = 100e9;  // link bandwidth of the idealized node, bytes/s

// One node of n GPUs on an NVSwitch with links of kB bytes/s, and one protocol with no latency
// of its own and full efficiency: the idealized topology of the ring formulas.
ClusterSpec ideal_node(int64_t n) {
  ClusterSpec cluster = load_cluster("dgx-a100");
  cluster.gpus_per_node = n;
  cluster.nvlink = {kB / 1e9, 500};
  ProtocolTuning simple;
  simple.bw_efficiency = 1.0;
  cluster.collectives.nvlink.protocols = {simple};
  cluster.collectives.nvls.protocols.clear();
  return cluster;
}

std::vector<int64_t> first_gpus(int64_t n) {
  std::vector<int64_t> gpus;
  for (int64_t g = 0; g < n; ++g) gpus.push_back(g);
  return gpus;
}

double seconds_of(const ClusterSpec& cluster, int64_t gpus, std::vector<CollectiveRun> runs,
                  size_t which = 0) {
  return static_cast<double>(time_collectives(cluster, gpus, runs)[which]) / 1e9;
}

// Ring all-reduce of S bytes over n GPUs, link bandwidth B, per-hop latency a (the route's):
// 2(n-1)(a + S/(nB)); reduce-scatter and all-gather (n-1)(a + S/(nB)) (Patarasuk and Yuan 2009;
// NCCL's ring). Within 1%.
TEST_CASE("ring collectives take the closed-form time", "[sim][network]") {
  for (const int64_t n : {2, 4, 8}) {
    const ClusterSpec cluster = ideal_node(n);
    const double a = static_cast<double>(Topology(cluster, n).route(0, 1).latency_ns) / 1e9;
    for (const int64_t bytes : {int64_t{1} << 20, int64_t{64} << 20, int64_t{1} << 30}) {
      const double s = static_cast<double>(bytes);
      const double ring = a + s / (static_cast<double>(n) * kB);
      INFO(fmt::format("n {} size {} a {} s", n, bytes, a));
      CHECK(seconds_of(cluster, n, {{CollectiveKind::kAllReduce, first_gpus(n), bytes}}) ==
            Approx(2.0 * static_cast<double>(n - 1) * ring).epsilon(0.01));
      CHECK(seconds_of(cluster, n, {{CollectiveKind::kReduceScatter, first_gpus(n), bytes}}) ==
            Approx(static_cast<double>(n - 1) * ring).epsilon(0.01));
      CHECK(seconds_of(cluster, n, {{CollectiveKind::kAllGather, first_gpus(n), bytes}}) ==
            Approx(static_cast<double>(n - 1) * ring).epsilon(0.01));
    }
  }
}

// Two 2-GPU all-reduces on {0,1} and {0,2} share GPU 0's up- and down-link (each ring sends S
// bytes each way). Max-min sharing gives each flow B/2 while both run: equal sizes S finish
// together at 2a + 2S/B; sizes S1 < S2 finish at 2a + 2 S1/B and 2a + (S1 + S2)/B.
TEST_CASE("two collectives sharing a link take the max-min time", "[sim][network]") {
  const ClusterSpec cluster = ideal_node(4);
  const double a = static_cast<double>(Topology(cluster, 4).route(0, 1).latency_ns) / 1e9;
  const int64_t s1 = int64_t{256} << 20;
  const int64_t s2 = int64_t{768} << 20;
  const std::vector<TimeNs> same =
      time_collectives(cluster, 4,
                       std::vector<CollectiveRun>{{CollectiveKind::kAllReduce, {0, 1}, s1},
                                                  {CollectiveKind::kAllReduce, {0, 2}, s1}});
  const double both = 2 * a + 2.0 * static_cast<double>(s1) / kB;
  CHECK(static_cast<double>(same[0]) / 1e9 == Approx(both).epsilon(0.01));
  CHECK(static_cast<double>(same[1]) / 1e9 == Approx(both).epsilon(0.01));
  const std::vector<TimeNs> unequal =
      time_collectives(cluster, 4,
                       std::vector<CollectiveRun>{{CollectiveKind::kAllReduce, {0, 1}, s1},
                                                  {CollectiveKind::kAllReduce, {0, 2}, s2}});
  CHECK(static_cast<double>(unequal[0]) / 1e9 ==
        Approx(2 * a + 2.0 * static_cast<double>(s1) / kB).epsilon(0.01));
  CHECK(static_cast<double>(unequal[1]) / 1e9 ==
        Approx(2 * a + static_cast<double>(s1 + s2) / kB).epsilon(0.01));
  // A third all-reduce on {2,3} shares no link with {0,1}: it runs at full rate.
  const std::vector<TimeNs> apart =
      time_collectives(cluster, 4,
                       std::vector<CollectiveRun>{{CollectiveKind::kAllReduce, {0, 1}, s1},
                                                  {CollectiveKind::kAllReduce, {2, 3}, s1}});
  CHECK(static_cast<double>(apart[1]) / 1e9 ==
        Approx(2 * a + static_cast<double>(s1) / kB).epsilon(0.01));
}

// nccl-tests all_reduce on one node of 8 A100s and of 8 H200s (nccl_busbw.csv): the predicted bus
// bandwidth, S * 2(n-1)/n / time, is within 10% of the measured for messages of 8 MiB and larger
// and within 25% below. bench/nccl_compare prints every point.
TEST_CASE("all-reduce bus bandwidth matches nccl-tests on 8 x A100 and 8 x H200", "[sim][nccl]") {
  const auto points = test::single_node_all_reduce_sweeps();
  REQUIRE(points.size() > 30);
  for (const test::BusbwPoint& p : points) {
    const ClusterSpec cluster = load_cluster(p.cluster);
    const double seconds =
        seconds_of(cluster, p.gpus, {{CollectiveKind::kAllReduce, first_gpus(p.gpus), p.bytes}});
    const double busbw = static_cast<double>(p.bytes) *
                         busbw_factor(CollectiveKind::kAllReduce, p.gpus) / seconds / 1e9;
    const double tolerance = p.bytes >= (int64_t{8} << 20) ? 0.10 : 0.25;
    INFO(fmt::format("{} {} bytes: predicted {:.2f} GB/s, measured {:.2f} GB/s", p.system, p.bytes,
                     busbw, p.busbw_gbps));
    CHECK(std::abs(busbw / p.busbw_gbps - 1) <= tolerance);
  }
}

}  // namespace
}  // namespace strata
