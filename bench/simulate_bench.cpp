// strata_bench_simulate: wall time and peak memory of simulating one training step (compile +
// simulate), on the workloads of the simulator issue:
//  (a) Llama 3 405B on 16,384 H100s, folded (tp 8, pp 16, dp 128, global batch 2048, seq 8192;
//      126 layers split 7 + 14 x 8 + 7 as Llama 3 did): target < 2 s and < 1 GB;
//  (b) GPT-3 175B on 64 A100s, full (tp 8, pp 8, global batch 64): target < 5 s;
//  (c) how the cost grows: (a) at 1K, 4K, 16K and 64K GPUs (dp 8 to 512, global batch 2048), with
//      the simulation time per pipeline stage x micro-batch, which must not grow;
//  (d) an MoE on 16,384 H100s, folded: Qwen3-235B-A22B (94 layers, 128 experts of 1536, top 8)
//      at tp 4 with sequence parallelism, pp 2, dp 2048 with ep 64, the all-to-all dispatcher and
//      grouped GEMMs, ZeRO 1, global batch 16384 of 4096 tokens (8 micro-batches): target < 2 s;
//  (e) Korthikanti et al. 2022's four A100 configurations (tests/sim/korthikanti_cases.hpp), the
//      1T one with 512 micro-batches over 64 stages: target 20x faster than without the
//      steady-state fast-forward.
// Every case simulates the step twice, with the steady-state fast-forward (the default) and
// without it (--no-fast-forward), and prints both times, their ratio (measured in one run) and
// whether the two steps are the same to the nanosecond.
// Usage: strata_bench_simulate [a|b|c|d|e]... (default: all, in that order; peak RSS is the
// process's high-water mark, so run one case alone for its own figure). Figures are printed, not
// asserted.

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
#include "tests/sim/korthikanti_cases.hpp"

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
  double simulate_s = 0;         // with the steady-state fast-forward
  double no_fast_forward_s = 0;  // without it
  bool same = false;             // every task's times equal both ways
  SimResult result;
  int64_t tasks = 0;
};

Measured measure_compiled(const ModelSpec& model, const std::string& cluster,
                          const ParallelPlan& plan, GraphMode mode) {
  validate_plan(plan, model, std::nullopt, "bench");
  const auto begin = std::chrono::steady_clock::now();
  const CompiledPlan compiled = compile_plan(model, load_cluster(cluster), plan, mode);
  Measured m;
  m.compile_s = since(begin);
  SimOptions options;
  const auto sim_begin = std::chrono::steady_clock::now();
  m.result = simulate(compiled, options);
  m.simulate_s = since(sim_begin);
  options.fast_forward = false;
  const auto off_begin = std::chrono::steady_clock::now();
  const SimResult simulated = simulate(compiled, options);
  m.no_fast_forward_s = since(off_begin);
  m.same = simulated.step_time_s == m.result.step_time_s &&
           simulated.tasks.size() == m.result.tasks.size();
  for (size_t t = 0; m.same && t < simulated.tasks.size(); ++t) {
    const TaskTiming& x = simulated.tasks[t];
    const TaskTiming& y = m.result.tasks[t];
    m.same =
        x.start_ns == y.start_ns && x.transfer_ns == y.transfer_ns && x.finish_ns == y.finish_ns;
  }
  m.tasks = compiled.graph.size();
  return m;
}

Measured measure(const std::string& model_name, const std::string& cluster,
                 const ParallelPlan& plan, GraphMode mode) {
  return measure_compiled(load_model(model_name), cluster, plan, mode);
}

std::string fast_forward_text(const Measured& m) {
  return fmt::format(
      "without fast-forward {:.3f} s ({:.1f}x; {} of {} activities copied; same "
      "step: {})",
      m.no_fast_forward_s, m.no_fast_forward_s / m.simulate_s, m.result.engine.fast_forwarded,
      m.result.engine.activities, m.same ? "yes" : "NO");
}

void print(const std::string& name, const Measured& m) {
  std::puts(fmt::format("{}: {} tasks, {} engine activities, {} events; compile {:.3f} s, "
                        "simulate {:.3f} s, total {:.3f} s; predicted step {:.3f} s, MFU {:.1f}%",
                        name, m.tasks, m.result.engine.activities, m.result.engine.events,
                        m.compile_s, m.simulate_s, m.compile_s + m.simulate_s, m.result.step_time_s,
                        m.result.mfu * 100)
                .c_str());
  std::puts(fmt::format("    {}", fast_forward_text(m)).c_str());
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
  std::puts(fmt::format("{:>7} {:>5} {:>5} {:>7} {:>10} {:>10} {:>12} {:>14} {:>12} {:>6}", "GPUs",
                        "dp", "m", "p x m", "tasks", "compile s", "simulate s", "us per (p x m)",
                        "no ff s", "same")
                .c_str());
  for (const int64_t dp : {8, 32, 128, 512}) {
    const ParallelPlan plan = llama_plan(dp);
    const Measured m = measure("llama3-405b", "dgx-h100", plan, GraphMode::kFolded);
    const int64_t pm = plan.pp * plan.micro_batches();
    std::puts(fmt::format("{:>7} {:>5} {:>5} {:>7} {:>10} {:>10.3f} {:>12.3f} {:>14.1f} {:>12.3f} "
                          "{:>6}",
                          plan.gpus(), dp, plan.micro_batches(), pm, m.tasks, m.compile_s,
                          m.simulate_s, m.simulate_s / static_cast<double>(pm) * 1e6,
                          m.no_fast_forward_s, m.same ? "yes" : "NO")
                  .c_str());
  }
}

void case_e() {
  std::puts("(e) Korthikanti et al. 2022 on DGX A100, folded (sequence parallel + selective):");
  for (const test::KorthikantiCase& c : test::korthikanti_cases()) {
    const Measured m = measure_compiled(c.model, "dgx-a100", c.selective, GraphMode::kFolded);
    print(fmt::format("    {} (pp {}, {} micro-batches)", c.name, c.selective.pp,
                      c.selective.micro_batches()),
          m);
  }
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  std::vector<std::string> cases(argv + 1, argv + argc);
  if (cases.empty()) cases = {"a", "b", "c", "d", "e"};
  for (const std::string& name : cases) {
    if (name == "a") strata::case_a();
    if (name == "b") strata::case_b();
    if (name == "c") strata::case_c();
    if (name == "d") strata::case_d();
    if (name == "e") strata::case_e();
  }
  return 0;
}
