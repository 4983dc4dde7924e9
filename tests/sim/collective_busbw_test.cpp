// The collective model against nccl-tests (data/reference/nccl_busbw.csv), analytically:
// for each measured row, plan the collective on the built-in cluster that models the system and
// time the plan on an idle cluster by hand (tests/sim/collective_fixtures.hpp: per step, latency
// + the busiest link's wire bytes / bandwidth), without the engine. Predicted bus bandwidth =
// S x busbw_factor / time. Prints every row and the largest error per system.

#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "sim/collective.hpp"
#include "tests/reference_csv.hpp"
#include "tests/sim/collective_fixtures.hpp"
#include "topologies/cluster_spec.hpp"
#include "topologies/topology.hpp"

namespace strata {
namespace {

using test::CsvRow;

constexpr int64_t kLargeBytes = int64_t{8} << 20;  // the tolerance changes at 8 MiB

struct Row {
  int64_t bytes = 0;
  double measured_gbps = 0;
};

struct Errors {
  double large = 0;  // largest |predicted / measured - 1| from 8 MiB
  double small = 0;  // below 8 MiB
};

CollectiveKind kind_of(const std::string& collective) {
  if (collective == "all_gather") return CollectiveKind::kAllGather;
  if (collective == "reduce_scatter") return CollectiveKind::kReduceScatter;
  return CollectiveKind::kAllReduce;
}

// The rows of one system: `system` and `algo_prefix` match the csv's "system" and the start of
// its "nccl_algo"; one node of 8 GPUs unless `gpus` says otherwise.
std::vector<Row> rows_of(const std::string& system, const std::string& algo_prefix,
                         const std::string& collective = "all_reduce", int64_t gpus = 8) {
  std::vector<Row> rows;
  for (const CsvRow& row : test::read_reference_csv("nccl_busbw.csv")) {
    if (row.at("system") != system || row.at("collective") != collective ||
        row.at("total_gpus") != std::to_string(gpus) ||
        row.at("nccl_algo").rfind(algo_prefix, 0) != 0 || row.at("busbw_gb_per_s").empty()) {
      continue;
    }
    const std::string& bytes = row.at("message_bytes");
    if (bytes.empty() || bytes.find_first_not_of("0123456789") != std::string::npos) {
      continue;  // a statement about "large" messages, not a measured size
    }
    rows.push_back({std::stoll(row.at("message_bytes")), std::stod(row.at("busbw_gb_per_s"))});
  }
  return rows;
}

double predicted_busbw(const ClusterSpec& cluster, CollectiveKind kind, int64_t gpus,
                       int64_t bytes) {
  const Topology topology(cluster, gpus);
  const CollectivePlan plan =
      plan_collective(topology, cluster.collectives, kind, test::first_gpus(gpus), bytes);
  return static_cast<double>(bytes) * busbw_factor(kind, gpus) /
         test::idle_seconds(topology, plan) / 1e9;
}

// Prints each row and returns the largest errors.
Errors compare(const std::string& label, const ClusterSpec& cluster, const std::vector<Row>& rows,
               CollectiveKind kind = CollectiveKind::kAllReduce, int64_t gpus = 8) {
  Errors errors;
  fmt::print("{} ({}, {} GPUs, {})\n", label, cluster.name, gpus, to_string(kind));
  for (const Row& row : rows) {
    const Topology topology(cluster, gpus);
    const CollectivePlan plan =
        plan_collective(topology, cluster.collectives, kind, test::first_gpus(gpus), row.bytes);
    const double predicted = predicted_busbw(cluster, kind, gpus, row.bytes);
    const double error = predicted / row.measured_gbps - 1;
    (row.bytes >= kLargeBytes ? errors.large : errors.small) =
        std::max(row.bytes >= kLargeBytes ? errors.large : errors.small, std::abs(error));
    fmt::print("  {:>12} B  {:>6}/{:<6}  measured {:7.2f}  predicted {:7.2f} GB/s  {:+6.1f}%\n",
               row.bytes, to_string(plan.algorithm), to_string(plan.protocol), row.measured_gbps,
               predicted, 100 * error);
  }
  fmt::print("  largest error: {:.1f}% from 8 MiB, {:.1f}% below\n", 100 * errors.large,
             100 * errors.small);
  return errors;
}

// The acceptance criterion of the collective model: nccl-tests all_reduce on one node of 8 A100s
// and of 8 H200s, every size from 32 KiB to 16 GiB, predicted busbw within 10% of the measured
// from 8 MiB and within 25% below (nccl_busbw.csv rows '8x A100 SXM node' and '8x H200 SXM node',
// the sweeps dgx-a100.json and dgx-h200.json were fitted to).
TEST_CASE("single-node all-reduce busbw within tolerance on A100 and H200", "[sim][nccl]") {
  const std::vector<Row> a100 = rows_of("8x A100 SXM node", "NCCL default");
  const std::vector<Row> h200 = rows_of("8x H200 SXM node", "RING/LL");
  REQUIRE(a100.size() == 20);
  REQUIRE(h200.size() == 20);
  const Errors a100_errors = compare("8x A100 SXM node", load_cluster("dgx-a100"), a100);
  const Errors h200_errors = compare("8x H200 SXM node", load_cluster("dgx-h200"), h200);
  CHECK(a100_errors.large <= 0.10);
  CHECK(a100_errors.small <= 0.25);
  CHECK(h200_errors.large <= 0.10);
  CHECK(h200_errors.small <= 0.25);
}

// The other fitted rows, to the same tolerances: the P6-B200 single-node sweep (dgx-b200.json),
// the H200 16 GiB rows with NVLS disabled (ring all-reduce, all-gather and reduce-scatter: the
// nvlink Simple efficiency of dgx-h200.json) and the 4 GiB NVLS row of DGX H100 (dgx-h100.json).
TEST_CASE("B200 sweep, H200 rings and H100 NVLS busbw within tolerance", "[sim][nccl]") {
  const std::vector<Row> b200 = rows_of("AWS P6-B200", "NCCL default");
  REQUIRE(b200.size() == 20);
  const Errors b200_errors = compare("AWS P6-B200", load_cluster("dgx-b200"), b200);
  CHECK(b200_errors.large <= 0.10);
  CHECK(b200_errors.small <= 0.25);

  ClusterSpec h200_rings = load_cluster("dgx-h200");
  h200_rings.in_switch_reduction = false;  // NCCL_NVLS_ENABLE=0
  for (const char* collective : {"all_reduce", "all_gather", "reduce_scatter"}) {
    const std::vector<Row> rows = rows_of("8x H200 SXM node", "Ring", collective);
    REQUIRE_FALSE(rows.empty());
    CHECK(compare("8x H200 SXM node, NVLS disabled", h200_rings, rows, kind_of(collective)).large <=
          0.10);
  }

  const std::vector<Row> h100 = rows_of("DGX H100 (8x H100 SXM)", "NVLS");
  REQUIRE(h100.size() == 1);  // 4 GiB; the other rows are statements about "large" messages
  CHECK(compare("DGX H100 (8x H100 SXM)", load_cluster("dgx-h100"), h100).large <= 0.10);
}

// Not fitted, printed for the record, with a loose bound that catches a broken inter-node model:
// 4 nodes x 8 B200 (AWS P6-B200, EFA, ofi tuner). From 1 GiB the sequential hierarchical plan
// predicts ~20% less busbw than NCCL's pipelined rings reach; from 256 MiB to 512 MiB the errors
// change sign (+19%, -13%) as EFA's latency fades; below 256 MiB EFA's 350-500 µs latencies are
// far above InfiniBand's, which dgx-b200 models, and the rows are left out.
TEST_CASE("4-node B200 all-reduce busbw is printed", "[sim][nccl]") {
  std::vector<Row> rows = rows_of("AWS P6-B200", "NCCL default", "all_reduce", 32);
  REQUIRE(rows.size() == 20);
  std::erase_if(rows, [](const Row& row) { return row.bytes < (int64_t{256} << 20); });
  const Errors errors = compare("AWS P6-B200 x 4 nodes", load_cluster("dgx-b200"), rows,
                                CollectiveKind::kAllReduce, 32);
  CHECK(errors.large <= 0.30);
}

}  // namespace
}  // namespace strata
