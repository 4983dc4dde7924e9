#pragma once
// nccl-tests all_reduce sweeps from data/reference/nccl_busbw.csv as (system, GPUs, size,
// measured bus bandwidth) points, with the built-in cluster that models each system; shared by
// tests/sim/network_timing_test.cpp and bench/nccl_compare.

#include <cstdint>
#include <string>
#include <vector>

#include "tests/reference_csv.hpp"

namespace strata::test {

struct BusbwPoint {
  std::string system;   // the csv's "system"
  std::string cluster;  // the zoo cluster that models it
  int64_t gpus = 0;
  int64_t bytes = 0;
  double busbw_gbps = 0;
};

// The single-node all_reduce sweeps NCCL ran with its default algorithm choice: 8 x A100
// ("NCCL default") and 8 x H200 (RING/LL up to 1 MiB, NVLS/SIMPLE from 2 MiB).
inline std::vector<BusbwPoint> single_node_all_reduce_sweeps() {
  std::vector<BusbwPoint> points;
  for (const CsvRow& row : read_reference_csv("nccl_busbw.csv")) {
    if (row.at("collective") != "all_reduce" || row.at("nodes") != "1" ||
        row.at("total_gpus") != "8" || row.at("busbw_gb_per_s").empty()) {
      continue;
    }
    std::string cluster;
    if (row.at("system") == "8x A100 SXM node" && row.at("nccl_algo") == "NCCL default") {
      cluster = "dgx-a100";
    } else if (row.at("system") == "8x H200 SXM node" &&
               row.at("nccl_algo").rfind("RING/LL", 0) == 0) {
      cluster = "dgx-h200";
    } else {
      continue;
    }
    points.push_back({row.at("system"), cluster, 8, std::stoll(row.at("message_bytes")),
                      std::stod(row.at("busbw_gb_per_s"))});
  }
  return points;
}

}  // namespace strata::test
