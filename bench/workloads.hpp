#pragma once
// The plans the benchmarks are sized for (docs/design.md, "Scale: symmetry folding"), shared by
// strata_bench_plan and strata_bench_simulate.

#include <cstdint>

#include "plan/parallel_plan.hpp"

namespace strata::bench {

// Llama 3 405B pre-training (Llama 3 paper, Table 4): tp 8, pp 16 and `dp` replicas (128 on
// 16,384 GPUs), 126 layers split 7 + 14 x 8 + 7 (one layer fewer on the first and last stage, as
// Llama 3 did), global batch 2048 sequences of 8192 tokens, 1F1B.
inline ParallelPlan llama3_405b_plan(int64_t dp) {
  ParallelPlan plan;
  plan.tp = 8;
  plan.pp = 16;
  plan.dp = dp;
  plan.micro_batch = 1;
  plan.global_batch = 2048;
  plan.seq_len = 8192;
  plan.schedule = ScheduleKind::k1F1B;
  plan.first_stage_layers = 7;
  plan.last_stage_layers = 7;
  return plan;
}

// GPT-3 175B on 8 DGX nodes: tp 8 within a node, pp 8 across nodes, 64 micro-batches of one
// 2048-token sequence, 1F1B.
inline ParallelPlan gpt3_175b_plan() {
  ParallelPlan plan;
  plan.tp = 8;
  plan.pp = 8;
  plan.dp = 1;
  plan.micro_batch = 1;
  plan.global_batch = 64;
  plan.seq_len = 2048;
  plan.schedule = ScheduleKind::k1F1B;
  return plan;
}

}  // namespace strata::bench
