#pragma once
// What `strata plan` prints and writes: a readable summary, the rank layout, and the JSON with
// stable keys (params, model_flops_per_step, hardware_flops_per_step, task_count, per_stage
// [{stage, layers, peak_memory_bytes, memory {params, grads, optimizer, activations, buffers}}],
// peak_memory_bytes, fits_in_memory, plan, model, cluster, and more).

#include <string>

#include <nlohmann/json.hpp>

#include "plan/compile.hpp"

namespace strata::cli {

std::string plan_summary(const CompiledPlan& compiled);
std::string layout_table(const CompiledPlan& compiled);
nlohmann::json plan_report_json(const CompiledPlan& compiled);

}  // namespace strata::cli
