// strata_bench_simulate: wall time and peak memory of simulating one training step (compile +
// simulate), on the workloads of the simulator issue:
//  (a) Llama 3 405B on 16,384 H100s, folded (tp 8, pp 16, dp 128, global batch 2048, seq 8192;
//      126 layers split 7 + 14 x 8 + 7 as Llama 3 did): target < 2 s and < 1 GB;
//  (b) GPT-3 175B on 64 A100s, full (tp 8, pp 8, global batch 64): target < 5 s;
//  (c) how the cost grows: (a) at 1K, 4K, 16K and 64K GPUs (dp 8 to 512, global batch 2048), with
//      the simulation time per pipeline stage x micro-batch, which must not grow;
//  (d) an MoE on 16,384 H100s, folded: Qwen3-235B-A22B (94 layers, 128 experts of 1536, top 8)
//      at tp 4 with sequence parallelism, pp 2, dp 2048 with ep 64, the all-to-all dispatcher and
//      grouped GEMMs, ZeRO 1, global batch 16384 of 4096 tokens (8 micro-batches): target < 2 s.
// Usage: strata_bench_simulate [a|b|c|d]... (default: all, in that order; peak RSS is the process's
// high-water mark, so run one case alone for its own figure). Figures are printed, not asserted.

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench/workloads.hpp"
#include "models/model_reader.hpp"
#include "plan/compile.hpp"
#include "sim/simulate.hpp"

namespace strata {
namespace {

double peak_rss_mb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  }
  return 0;
}

double since(std::chrono::steady_clock::time_point begin) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
}

// The Llama 3 405B workload as Megatron-LM runs a model of this size: the distributed optimizer
// (ZeRO 1), sequence parallelism and selective recomputation.
ParallelPlan llama_plan(int64_t dp) {
  ParallelPlan plan = bench::llama3_405b_plan(dp);
  plan.zero_stage = 1;
  plan.sequence_parallel = true;
  plan.recompute = RecomputeKind::kSelective;
  return plan;
}

struct Measured {
  double compile_s = 0;
  double simulate_s = 0;
  SimResult result;
  int64_t tasks = 0;
};

Measured measure(const std::string& model_name, const std::string& cluster,
                 const ParallelPlan& plan, GraphMode mode) {
  const ModelSpec model = load_model(model_name);
  validate_plan(plan, model, std::nullopt, "bench");
  const auto begin = std::chrono::steady_clock::now();
  const CompiledPlan compiled = compile_plan(model, load_cluster(cluster), plan, mode);
  Measured m;
  m.compile_s = since(begin);
  const auto sim_begin = std::chrono::steady_clock::now();
  m.result = simulate(compiled);
  m.simulate_s = since(sim_begin);
  m.tasks = compiled.graph.size();
  return m;
}

void print(const std::string& name, const Measured& m) {
  std::puts(fmt::format("{}: {} tasks, {} engine activities, {} events; compile {:.3f} s, "
                        "simulate {:.3f} s, total {:.3f} s; predicted step {:.3f} s, MFU {:.1f}%",
                        name, m.tasks, m.result.engine.activities, m.result.engine.events,
                        m.compile_s, m.simulate_s, m.compile_s + m.simulate_s, m.result.step_time_s,
                        m.result.mfu * 100)
                .c_str());
}

void case_a() {
  const Measured m = measure("llama3-405b", "dgx-h100", llama_plan(128), GraphMode::kFolded);
  print("(a) llama3-405b, 16384 x H100, folded", m);
  std::puts(
      fmt::format("    peak RSS {:.0f} MB (targets: < 2 s, < 1000 MB)", peak_rss_mb()).c_str());
}

void case_b() {
  const Measured m = measure("gpt3-175b", "dgx-a100", bench::gpt3_175b_plan(), GraphMode::kFull);
  print("(b) gpt3-175b, 64 x A100, full", m);
  std::puts(fmt::format("    peak RSS {:.0f} MB (target: < 5 s)", peak_rss_mb()).c_str());
}

void case_d() {
  ParallelPlan plan;
  plan.tp = 4;
  plan.sequence_parallel = true;
  plan.pp = 2;
  plan.dp = 2048;
  plan.ep = 64;
  plan.moe_dispatcher = MoeDispatcher::kAllToAll;
  plan.grouped_gemm = true;
  plan.zero_stage = 1;
  plan.micro_batch = 1;
  plan.global_batch = 16384;
  plan.seq_len = 4096;
  const Measured m =
      measure(std::string(STRATA_SOURCE_DIR) + "/tests/models/data/qwen3-235b-a22b.json",
              "dgx-h100", plan, GraphMode::kFolded);
  print("(d) qwen3-235b-a22b (MoE, ep 64), 16384 x H100, folded", m);
  std::puts(fmt::format("    peak RSS {:.0f} MB (target: < 2 s)", peak_rss_mb()).c_str());
}

void case_c() {
  std::puts("(c) llama3-405b folded on H100, global batch 2048: cost against p x m");
  std::puts(fmt::format("{:>7} {:>5} {:>5} {:>7} {:>10} {:>12} {:>14}", "GPUs", "dp", "m", "p x m",
                        "tasks", "simulate s", "us per (p x m)")
                .c_str());
  for (const int64_t dp : {8, 32, 128, 512}) {
    const ParallelPlan plan = llama_plan(dp);
    const Measured m = measure("llama3-405b", "dgx-h100", plan, GraphMode::kFolded);
    const int64_t pm = plan.pp * plan.micro_batches();
    std::puts(fmt::format("{:>7} {:>5} {:>5} {:>7} {:>10} {:>12.3f} {:>14.1f}", plan.gpus(), dp,
                          plan.micro_batches(), pm, m.tasks, m.simulate_s,
                          m.simulate_s / static_cast<double>(pm) * 1e6)
                  .c_str());
  }
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  std::vector<std::string> cases(argv + 1, argv + argc);
  if (cases.empty()) cases = {"a", "b", "c", "d"};
  for (const std::string& name : cases) {
    if (name == "a") strata::case_a();
    if (name == "b") strata::case_b();
    if (name == "c") strata::case_c();
    if (name == "d") strata::case_d();
  }
  return 0;
}
