#pragma once
// Parts of a SimResult as JSON, shared by the `strata simulate --json` report and the trace's
// metadata so both spell the per-stage figures the same way.

#include <nlohmann/json.hpp>

#include "sim/result.hpp"

namespace strata {

// {"tp": s, "pp": s, "dp": s}
nlohmann::json comm_seconds_json(const CommSeconds& comm);
// {"params", "grads", "optimizer", "activations", "buffers"} in bytes
nlohmann::json memory_breakdown_json(const MemoryBreakdown& memory);
// {"stage", "busy_s", "idle_s", "bubble_fraction", "exposed_comm_s", "comm_s",
//  "peak_memory_bytes", "memory"}
nlohmann::json stage_result_json(const StageResult& stage);

}  // namespace strata
