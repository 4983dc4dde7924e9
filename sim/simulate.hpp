#pragma once
// simulate(): replay a compiled plan's task graph on a model of its cluster and predict one
// training step (docs/design.md, "Cost models").
//
// Each task becomes engine activities: a compute task a compute activity on its rank's processor,
// priced by the compute model; a p2p pair or a collective instance (the same collective on every
// member) a join of its members followed by the steps of flows its algorithm decomposes into on
// the topology graph. Tasks on one (rank, stream) run in order; streams run concurrently.
// Folded graphs simulate one rank per stage; each collective's flows are weighted by how many
// symmetric copies of the group (the other DP replicas or TP peers) share each link.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "plan/compile.hpp"
#include "sim/compute_model.hpp"
#include "sim/result.hpp"

namespace strata {

// A rank whose compute runs `factor` times slower (thermal throttling, a bad GPU).
struct SlowRank {
  int64_t rank = 0;
  double factor = 1.0;
};

// Ranks [first, last] run on another device (mixed clusters).
struct RankDevice {
  int64_t first = 0;
  int64_t last = 0;
  DeviceSpec device;
};

struct SimOptions {
  // Efficiency tables for the cluster's device (and any device in rank_devices); default: the
  // built-in tables (sim/default_efficiency.cpp), or measured ones loaded with --calibration.
  std::optional<Calibration> calibration;
  std::vector<SlowRank> slow_ranks;      // full graphs only
  std::vector<RankDevice> rank_devices;  // full graphs only
  double price_usd_per_gpu_hour = 0;     // 0: the cluster's
  // Skip the periods in which the schedule repeats (sim/engine_fast_forward.hpp): exact, the
  // same step either way; false is --no-fast-forward, which simulates every one.
  bool fast_forward = true;
};

// The plan must have compiled with a valid graph. Throws InputError for options that need a
// full graph when given a folded one, or that name ranks outside the plan.
SimResult simulate(const CompiledPlan& compiled, const SimOptions& options = {});

// The same, but stops as soon as the simulated clock passes `horizon_ns` and returns nullopt: the
// step takes longer than that (for a search that only needs plans faster than its best so far).
std::optional<SimResult> simulate_within(const CompiledPlan& compiled, const SimOptions& options,
                                         TimeNs horizon_ns);

}  // namespace strata
