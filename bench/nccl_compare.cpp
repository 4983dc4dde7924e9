// bench/nccl_compare: the collective model against every nccl-tests point of
// data/reference/nccl_busbw.csv that a built-in cluster models (one node of A100, H200 or
// B200, subsets of a node, four B200 nodes): the algorithm and protocol the model picks, the
// predicted and measured bus bandwidth and their ratio. The acceptance criterion of the
// simulator (tests/sim/network_timing_test.cpp): all_reduce on 8 x A100 and 8 x H200 within 10%
// from 8 MiB, within 25% below.

#include <cmath>
#include <cstdio>
#include <map>
#include <string>

#include <fmt/format.h>

#include "sim/transfer_builder.hpp"
#include "tests/reference_csv.hpp"

namespace strata {
namespace {

// The built-in cluster modelling a system of the csv, or "" when none does.
std::string cluster_for(const test::CsvRow& row) {
  const std::string& system = row.at("system");
  const std::string& algo = row.at("nccl_algo");
  if (system == "8x A100 SXM node") return "dgx-a100";
  if (system.rfind("8x H200 SXM node", 0) == 0 || system.rfind("H200 node", 0) == 0) {
    // Rows that forced an algorithm other than the one NCCL picks are not NCCL's default run.
    if (algo == "Ring" && row.at("collective") == "all_reduce") return "";
    return "dgx-h200";
  }
  if (system.rfind("AWS p6-b200", 0) == 0 || system.rfind("AWS P6-B200", 0) == 0) {
    return "dgx-b200";
  }
  return "";
}

CollectiveKind kind_of(const std::string& collective) {
  if (collective == "all_gather") return CollectiveKind::kAllGather;
  if (collective == "reduce_scatter") return CollectiveKind::kReduceScatter;
  return CollectiveKind::kAllReduce;
}

}  // namespace
}  // namespace strata

int main() {
  using namespace strata;
  std::puts(fmt::format("{:<36} {:>4} {:>12} {:<14} {:<22} {:>9} {:>9} {:>7}", "system", "gpus",
                        "bytes", "collective", "model's choice", "measured", "predicted", "ratio")
                .c_str());
  std::map<std::string, double> worst;  // per system and size class: largest |ratio - 1|
  for (const test::CsvRow& row : test::read_reference_csv("nccl_busbw.csv")) {
    const std::string cluster_name = cluster_for(row);
    const std::string& collective = row.at("collective");
    if (cluster_name.empty() || row.at("busbw_gb_per_s").empty() ||
        row.at("message_bytes").find_first_not_of("0123456789") != std::string::npos ||
        row.at("message_bytes").empty() ||
        (collective != "all_reduce" && collective != "all_gather" &&
         collective != "reduce_scatter")) {
      continue;
    }
    const ClusterSpec cluster = load_cluster(cluster_name);
    const int64_t gpus = std::stoll(row.at("total_gpus"));
    const int64_t bytes = std::stoll(row.at("message_bytes"));
    const CollectiveKind kind = kind_of(collective);
    std::vector<int64_t> members;
    for (int64_t g = 0; g < gpus; ++g) members.push_back(g);
    const Topology topology(cluster, gpus);
    const CollectivePlan plan =
        plan_collective(topology, cluster.collectives, kind, members, bytes);
    const CollectiveRun run{kind, members, bytes};
    const double seconds =
        static_cast<double>(time_collectives(cluster, gpus, {&run, 1}).front()) / 1e9;
    const double predicted = static_cast<double>(bytes) * busbw_factor(kind, gpus) / seconds / 1e9;
    const double measured = std::stod(row.at("busbw_gb_per_s"));
    const double ratio = predicted / measured;
    const std::string key = fmt::format("{} ({} GPUs, {})", row.at("system"), gpus,
                                        bytes >= (int64_t{8} << 20) ? ">= 8 MiB" : "< 8 MiB");
    worst[key] = std::max(worst[key], std::abs(ratio - 1));
    std::puts(fmt::format("{:<36} {:>4} {:>12} {:<14} {:<22} {:>9.2f} {:>9.2f} {:>7.3f}",
                          row.at("system").substr(0, 36), gpus, bytes, collective,
                          fmt::format("{}/{}", to_string(plan.algorithm), to_string(plan.protocol)),
                          measured, predicted, ratio)
                  .c_str());
  }
  std::puts("\nlargest |predicted / measured - 1| by system and size:");
  for (const auto& [key, error] : worst) {
    std::puts(fmt::format("  {:<64} {:>6.1f}%", key, error * 100).c_str());
  }
  return 0;
}
