#include "topologies/collective_tuning.hpp"

#include "common/error.hpp"

namespace strata {

namespace {

constexpr int64_t kKiB = 1024;
constexpr int64_t kMiB = 1024 * kKiB;
constexpr int64_t kNsPerUs = 1000;

}  // namespace

const char* to_string(Protocol protocol) {
  switch (protocol) {
    case Protocol::kLL:
      return "LL";
    case Protocol::kLL128:
      return "LL128";
    case Protocol::kSimple:
      return "Simple";
  }
  return "?";
}

const ProtocolTuning& FabricTuning::pick(int64_t bytes) const {
  STRATA_ASSERT(!protocols.empty(), "a fabric's tuning has at least one protocol");
  for (const ProtocolTuning& tuning : protocols) {
    if (tuning.max_bytes == 0 || bytes <= tuning.max_bytes) return tuning;
  }
  // The readers make the last protocol unlimited; a tuning built in code may not.
  return protocols.back();
}

CollectiveTuning default_collective_tuning(bool in_switch_reduction) {
  CollectiveTuning tuning;
  // NVLink: Simple 0.80 of line rate, LL128 0.94 x 0.80, LL 0.5 x 0.80.
  tuning.nvlink.protocols = {
      {Protocol::kLL, 1 * kMiB, 2 * kNsPerUs, 0.40},
      {Protocol::kLL128, 8 * kMiB, 4 * kNsPerUs, 0.75},
      {Protocol::kSimple, 0, 10 * kNsPerUs, 0.80},
  };
  if (in_switch_reduction) {
    // NVLS: algbw ~0.6 of the per-GPU NVLink rate (480 GB/s busbw on 8 x H100 = 274 GB/s algbw
    // of 450), with a large fixed cost that makes rings win below a few MiB.
    tuning.nvls.protocols = {{Protocol::kSimple, 0, 60 * kNsPerUs, 0.60}};
    tuning.nvls_min_bytes = 2 * kMiB;
  }
  // InfiniBand: Simple 0.92 of the NIC rate, LL128 0.94 x 0.92, LL 0.5 x 0.92.
  tuning.net.protocols = {
      {Protocol::kLL, 128 * kKiB, 1 * kNsPerUs, 0.46},
      {Protocol::kLL128, 8 * kMiB, 2 * kNsPerUs, 0.86},
      {Protocol::kSimple, 0, 5 * kNsPerUs, 0.92},
  };
  return tuning;
}

}  // namespace strata
