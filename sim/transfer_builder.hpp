#pragma once
// Collective plans (sim/collective.hpp) as engine activities: the topology graph's links become
// engine links on first use, each step a latency delay followed by its flows.
//
// build() takes the plans of a collective's symmetric images (one plan when every rank is
// simulated): only the first image's flows are simulated, each weighted on each link by the
// image flows crossing that link, so that a folded graph prices the traffic of the copies it
// does not simulate (sim/network_model.hpp).

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "sim/collective.hpp"
#include "sim/engine.hpp"
#include "topologies/topology.hpp"

namespace strata {

struct TransferFlow {
  PathId path = -1;
  double wire_bytes = 0;
  std::array<ProcessorId, 2> touches{kNoProcessor, kNoProcessor};
};

struct TransferStep {
  int64_t latency_ns = 0;
  std::vector<TransferFlow> flows;
};

using Transfer = std::vector<TransferStep>;

class TransferBuilder {
 public:
  // `processor_of_gpu[g]`: the engine processor whose compute GPU g's flows slow, or
  // kNoProcessor.
  TransferBuilder(const ClusterSpec& cluster, int64_t gpus, Engine& engine,
                  std::vector<ProcessorId> processor_of_gpu);

  const Topology& topology() const { return topology_; }
  const CollectiveTuning& tuning() const { return topology_.cluster().collectives; }

  Transfer build(std::span<const CollectivePlan> images);
  // The transfer's activities after `join`; returns the activity that ends it.
  ActivityId add(const Transfer& transfer, ActivityId join);

 private:
  LinkId engine_link(int32_t topology_link);

  Topology topology_;
  Engine& engine_;
  std::vector<ProcessorId> processor_of_gpu_;
  std::vector<LinkId> engine_links_;  // by topology link; -1 until first used
  std::vector<int32_t> image_flows_;  // by topology link: scratch for build()
  std::vector<int32_t> simulated_flows_;
};

// Runs collectives on an idle cluster of `gpus` GPUs, all starting at time 0 (one alone is what
// nccl-tests measures), and returns when each finished.
struct CollectiveRun {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  std::vector<int64_t> gpus;
  int64_t bytes = 0;
};
std::vector<TimeNs> time_collectives(const ClusterSpec& cluster, int64_t gpus,
                                     std::span<const CollectiveRun> runs);
// The same for plans made on Topology(cluster, gpus) (whose link ids the builder's topology
// shares): an all-to-all with a traffic matrix (plan_all_to_all), or any plan a caller builds.
std::vector<TimeNs> time_plans(const ClusterSpec& cluster, int64_t gpus,
                               std::span<const CollectivePlan> plans);

}  // namespace strata
