#pragma once
// The executor's parity grid: the plans of the executor issue, each completed to 8 ranks. The
// parity test (tests/exec/training_parity_test.cpp) trains each against the 1-rank run;
// bench/exec_vs_sim.cpp predicts each and compares with its measured step.

#include <array>
#include <cstdint>

#include "plan/parallel_plan.hpp"

namespace strata::test {

struct ParityPlan {
  const char* name;
  int64_t dp, tp, pp, vpp, zero;
  bool sequence_parallel;
  ScheduleKind schedule;
};

inline constexpr std::array<ParityPlan, 7> kParityPlans = {{
    {"dp2-tp2-pp2 1F1B", 2, 2, 2, 1, 0, false, ScheduleKind::k1F1B},
    {"dp4 x tp2, zero 1", 4, 2, 1, 1, 1, false, ScheduleKind::k1F1B},
    {"dp4 x tp2, zero 2", 4, 2, 1, 1, 2, false, ScheduleKind::k1F1B},
    {"dp4 x tp2, zero 3", 4, 2, 1, 1, 3, false, ScheduleKind::k1F1B},
    {"tp4 + SP x dp2", 2, 4, 1, 1, 0, true, ScheduleKind::k1F1B},
    {"pp4 interleaved vpp2 x dp2", 2, 1, 4, 2, 0, false, ScheduleKind::kInterleaved},
    {"dp2-pp2 GPipe x tp2", 2, 2, 2, 1, 0, false, ScheduleKind::kGpipe},
}};

// The plan of `p` in fp32 with this batch shape.
inline ParallelPlan parity_plan(const ParityPlan& p, int64_t micro_batch, int64_t global_batch,
                                int64_t seq_len) {
  ParallelPlan plan;
  plan.dp = p.dp;
  plan.tp = p.tp;
  plan.pp = p.pp;
  plan.vpp = p.vpp;
  plan.zero_stage = p.zero;
  plan.sequence_parallel = p.sequence_parallel;
  plan.schedule = p.schedule;
  plan.micro_batch = micro_batch;
  plan.global_batch = global_batch;
  plan.seq_len = seq_len;
  plan.dtype = DType::kFp32;
  return plan;
}

}  // namespace strata::test
