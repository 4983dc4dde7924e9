#pragma once
// How a cluster's NCCL performs, as the collective model needs it: for each fabric, the protocols
// NCCL switches between by message size (LL, LL128, Simple), each with a fixed latency per
// collective step and the fraction of the links' bandwidth it achieves (protocol overhead: LL
// sends 8-byte lines of 4 data bytes, LL128 120 of 128; Simple is limited by channel count and
// synchronization). Calibrated against ../shared/reference/nccl_busbw.csv; each built-in cluster
// file cites the rows its figures were fitted to.

#include <cstdint>
#include <vector>

namespace strata {

enum class Protocol : uint8_t { kLL, kLL128, kSimple };
const char* to_string(Protocol protocol);

struct ProtocolTuning {
  Protocol protocol = Protocol::kSimple;
  int64_t max_bytes = 0;         // NCCL uses this protocol up to this message size; 0: no limit
  int64_t base_latency_ns = 0;   // fixed cost per collective step
  double bw_efficiency = 1.0;    // achieved fraction of the link bandwidth, in (0, 1]
};

// Protocols of one fabric in increasing max_bytes; the last has max_bytes 0 (no limit).
struct FabricTuning {
  std::vector<ProtocolTuning> protocols;

  // The protocol NCCL picks for a message of `bytes` (per rank, as nccl-tests counts size).
  const ProtocolTuning& pick(int64_t bytes) const;
};

struct CollectiveTuning {
  FabricTuning nvlink;  // rings inside a node
  FabricTuning nvls;    // in-switch reduction (NVLink SHARP); empty: the switch has none
  int64_t nvls_min_bytes = 0;  // all-reduce uses NVLS from this size when available
  FabricTuning net;     // rings and trees across nodes
  // Inter-node all-reduce uses the double binary tree up to this size (and rings above).
  int64_t tree_max_bytes = 0;
};

// Defaults for a cluster file without a "collectives" section: NCCL's own tuning model's
// protocol overheads (LL 50%, LL128 ~94%, Simple ~80% of line rate on NVLink, ~92% on IB as the
// NCCL team quotes in nccl-tests issues #212 and #290) with latencies of a few microseconds.
CollectiveTuning default_collective_tuning(bool in_switch_reduction);

}  // namespace strata
