#pragma once
// From the simulated timeline of a step to its metrics: per stage the compute stream's busy and
// idle time, communication and the part of it the compute stream waits on (exposed), the
// pipeline bubble, memory over time and its peak; then the step's throughput, MFU/HFU and cost.

#include <vector>

#include "plan/compile.hpp"
#include "sim/result.hpp"

namespace strata {

struct StepTimeline {
  std::vector<TaskTiming> tasks;         // by task id
  std::vector<DeviceSpec> rank_devices;  // by graph rank (TaskGraph::ranks() order)
  EngineStats engine;
};

SimResult summarize_step(const CompiledPlan& compiled, StepTimeline timeline,
                         double price_usd_per_gpu_hour);

}  // namespace strata
