#pragma once
// What `strata simulate` prints and writes: a readable summary of the predicted step and the JSON
// report with stable keys (docs/design.md, "Outputs"):
//   step_time_s, tokens_per_s, samples_per_s, model_flops_per_step, hardware_flops_per_step,
//   model_tflops_per_gpu, hardware_tflops_per_gpu, mfu, hfu, bubble_fraction,
//   exposed_comm_s {tp, cp, ep, dp, pp}, comm_s {tp, cp, ep, dp, pp}, peak_memory_bytes, fits_in_memory,
//   cost_usd_per_step, cost_usd_per_million_tokens,
//   per_stage [{stage, busy_s, idle_s, bubble_fraction, exposed_comm_s, comm_s,
//               peak_memory_bytes, memory {params, grads, optimizer, activations, buffers}}],
//   plan, model, cluster (as `strata plan --json` writes them),
// and more: graph_mode, task_count, engine_events, engine_activities, gpus, tokens_per_step,
// device_memory_bytes, price_usd_per_gpu_hour, calibration, slow_ranks, rank_devices.

#include <string>

#include <nlohmann/json.hpp>

#include "plan/compile.hpp"
#include "sim/result.hpp"
#include "sim/simulate.hpp"

namespace strata::cli {

// The price the step was costed at: --price, else the cluster's.
double price_usd_per_gpu_hour(const CompiledPlan& compiled, const SimOptions& options);

std::string simulate_summary(const CompiledPlan& compiled, const SimOptions& options,
                             const SimResult& result);
nlohmann::json simulate_report_json(const CompiledPlan& compiled, const SimOptions& options,
                                    const SimResult& result);

}  // namespace strata::cli
