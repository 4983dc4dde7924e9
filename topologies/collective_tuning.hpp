#pragma once
// How a cluster's NCCL performs, as the collective model needs it: for each fabric, the protocols
// NCCL switches between by message size (LL, LL128, Simple), each with a fixed latency per
// collective step and the fraction of the links' bandwidth it achieves (protocol overhead: LL
// sends 8-byte lines of 4 data bytes, LL128 128-byte lines of 120; Simple is limited by channel
// count and synchronization). Calibrated against data/reference/nccl_busbw.csv; each built-in
// cluster file cites the rows its figures were fitted to.
//
// Worked example (dgx-a100, nvlink Simple: base latency 10.65 µs, efficiency 0.728): a ring
// all-reduce of 1 GiB over 8 GPUs takes 14 steps x (10.65 + 1 µs hop) = 163 µs of latency, then
// 2 x 7/8 x 1 GiB / 0.728 of wire bytes per NVLink at 300 GB/s: 8.6 ms; busbw 214 GB/s (measured
// 229 GB/s, nccl_busbw.csv row '8x A100 SXM node' 1073741824).

#include <cstdint>
#include <optional>
#include <vector>

namespace strata {

enum class Protocol : uint8_t { kLL, kLL128, kSimple };
const char* to_string(Protocol protocol);

struct ProtocolTuning {
  Protocol protocol = Protocol::kSimple;
  int64_t max_bytes = 0;        // NCCL uses this protocol up to this message size; 0: no limit
  int64_t base_latency_ns = 0;  // fixed cost per collective step (added to the hop's latency)
  double bw_efficiency = 1.0;   // achieved fraction of the link bandwidth, in (0, 1]
};

// Protocols of one fabric in increasing max_bytes; the last has max_bytes 0 (no limit).
struct FabricTuning {
  std::vector<ProtocolTuning> protocols;

  // The protocol NCCL picks for a message of `bytes` (per rank, as nccl-tests counts size): the
  // first whose max_bytes is 0 or at least `bytes`.
  const ProtocolTuning& pick(int64_t bytes) const;
};

struct CollectiveTuning {
  FabricTuning nvlink;         // rings inside a node (NVSwitch, NVLink mesh or PCIe)
  FabricTuning nvls;           // in-switch reduction (NVLink SHARP); empty: the switch has none
  int64_t nvls_min_bytes = 0;  // all-reduce uses NVLS from this size when available
  FabricTuning net;            // rings and trees across nodes
  // Inter-node all-reduce: nullopt lets the simulator choose among the double binary tree and the
  // rings by their estimated time, as NCCL's tuner does by its cost model; a value forces the tree
  // up to that size and rings above (0: never a tree), as NCCL_ALGO forces an algorithm.
  std::optional<int64_t> tree_max_bytes;
};

// Defaults for a cluster file without a "collectives" section, and for a ClusterSpec built in
// code. Efficiencies follow NCCL's protocol overheads as the NCCL team quotes them (nccl-tests
// issues #212 and #290, rows of data/reference/nccl_busbw.csv): Simple reaches ~80% of the
// NVLink line rate (370 of 450 GB/s) and ~92% of an InfiniBand NIC's (46 of 50 GB/s); LL128
// carries 120 data bytes per 128-byte line (0.94 x Simple), LL 4 per 8 (0.5 x Simple).
// Latencies (a few µs per step, tens for NVLS) and size thresholds are assumptions of the same
// order as the calibrated built-in clusters. `in_switch_reduction`: fill `nvls`.
CollectiveTuning default_collective_tuning(bool in_switch_reduction);

}  // namespace strata
