// All-reduce reduced inside the NVSwitch (NVLink SHARP, NCCL's NVLS algorithm; DGX H100 and
// later). Each GPU pushes its S bytes up to the switch, which reduces them as they arrive, and
// pulls the S reduced bytes back down: per GPU one up-flow and one down-flow of S, concurrent on
// the two directions of its NVLink, whatever the group size. So algbw is the per-GPU NVLink rate
// times the NVLS efficiency, and busbw = algbw x 2(n-1)/n can exceed the link rate
// (nccl_busbw.csv, 8 x H200: 482 GB/s busbw on 450 GB/s links).
// One step: the protocol's base latency plus one hop through the switch, then 2n flows whose
// src == dst is the GPU and whose path is its switch up-link or down-link.

#include <algorithm>
#include <utility>

#include "sim/collective_algorithms.hpp"

namespace strata::collective_detail {

CollectivePlan plan_nvls(const Topology& topology, const FabricTuning& nvls,
                         std::span<const int64_t> members, int64_t bytes) {
  const ProtocolTuning& protocol = nvls.pick(bytes);
  CollectivePlan plan{CollectiveAlgorithm::kNvls, protocol.protocol, {}};
  const double wire = wire_bytes(static_cast<double>(bytes), protocol);
  CollectiveStep step;
  int64_t hop_latency_ns = 0;
  for (const int64_t gpu : members) {
    const int32_t up = topology.switch_up(gpu);
    const int32_t down = topology.switch_down(gpu);
    hop_latency_ns =
        std::max(hop_latency_ns, topology.link(up).latency_ns + topology.link(down).latency_ns);
    const auto id = static_cast<int32_t>(gpu);
    step.flows.push_back({id, id, {up}, wire});
    step.flows.push_back({id, id, {down}, wire});
  }
  step.latency_ns = protocol.base_latency_ns + hop_latency_ns;
  plan.steps.push_back(std::move(step));
  return plan;
}

}  // namespace strata::collective_detail
