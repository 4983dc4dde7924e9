#pragma once
// The executor's parity grid: the plans of the executor issue, each completed to 8 ranks, and the
// two models the parity tests train on them. The parity tests (tests/exec/training_parity_test.cpp
// on the CPU backend, tests/exec_cuda on the CUDA backend) train each plan against the 1-rank
// run; bench/exec_vs_sim.cpp predicts each and compares with its measured step.

#include <array>
#include <cstdint>

#include "models/model_spec.hpp"
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

// A GPT-2-style model small enough to train 5 steps on 8 ranks in a second: 8 layers so that
// pp 4 x vpp 2 divides them.
inline ModelSpec parity_model() {
  ModelSpec m;
  m.name = "parity-gpt";
  m.layers = 8;
  m.hidden = 64;
  m.heads = 4;
  m.kv_heads = 4;
  m.ffn_hidden = 256;
  m.vocab = 256;
  m.max_seq = 32;
  m.dropout = false;
  return m;
}

// The same size in Llama's architecture: 8 query heads share 4 key/value heads (so tp 4 divides
// them), and the SwiGLU width is Llama's 8/3 x hidden rounded to a multiple of 16.
inline ModelSpec parity_llama() {
  ModelSpec m = parity_model();
  m.name = "parity-llama";
  m.heads = 8;
  m.kv_heads = 4;
  m.ffn_hidden = 176;
  m.norm = NormKind::kRmsNorm;
  m.mlp = MlpKind::kSwiGlu;
  m.position = PositionKind::kRotary;
  m.tied_embeddings = false;
  m.qkv_bias = m.out_bias = m.linear_bias = false;
  return m;
}

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
