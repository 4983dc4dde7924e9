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

// Pieces `strata simulate` and `strata search` share:
// the summary's first lines ("model    llama3-70b: 70.55 B parameters; ...", "cluster  ...");
// A count as people read it: "70.55 B", "124.44 M", "4096".
std::string count_text(int64_t count);
std::string model_line(const ModelSpec& model);
std::string cluster_line(const ClusterSpec& cluster, int64_t gpus);
// "dp 2 x tp 8 x pp 4, zero 1, micro-batch 1, global batch 512 (256 micro-batches), ...";
std::string plan_line(const ParallelPlan& plan);
// An MoE model's experts under the plan: "8 routed, top 2; 1 per rank (ep 8, expert tp 1),
// alltoall dispatcher; the busiest expert takes 2x the mean: its rank computes and receives
// 1.14x its balanced share";
std::string experts_line(const ModelSpec& model, const ParallelPlan& plan);
// "megatron-core: flash attention; overlapped: p2p; not overlapped: tp, grad-reduce, ...; fp32
// gradients, one gradient bucket per stage" (what the framework does, after the plan's overrides);
std::string stack_line(const ParallelPlan& plan);
// 1.23e18 -> "1.23 EFLOP";
std::string flops_text(double flops);
// the report's inputs: {"plan": {...}, "model": {...}, "cluster": {...}}, readable back.
nlohmann::json plan_inputs_json(const CompiledPlan& compiled);

}  // namespace strata::cli
