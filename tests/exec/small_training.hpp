#pragma once
// A short training run for the executor's tests that compare whole runs bit for bit: 3 steps of
// AdamW (lr 3e-3) on the book text, on dp 2 x tp 2 with sequence parallelism (a rank holds a
// slice of the residual stream's rows and of the heads, and a recomputed layer gathers its input
// again), micro-batch 2, global batch 8, 32 tokens, fp32.

#include <string>

#include "exec/trainer.hpp"
#include "plan/compile.hpp"

namespace strata::test {

inline TrainResult train_small(const ModelSpec& model, AttentionKind attention,
                               RecomputeKind recompute) {
  ParallelPlan plan;
  plan.dp = 2;
  plan.tp = 2;
  plan.sequence_parallel = true;
  plan.recompute = recompute;
  plan.attention = attention;
  plan.micro_batch = 2;
  plan.global_batch = 8;
  plan.seq_len = 32;
  plan.dtype = DType::kFp32;
  const CompiledPlan compiled =
      compile_plan(model, cpu_host_cluster(4, int64_t{1} << 32), plan, GraphMode::kFull);
  REQUIRE(compiled.validation.ok());
  TrainOptions options;
  options.data_path = std::string(STRATA_SOURCE_DIR) + "/scenarios/data/kjv-genesis-exodus.txt";
  options.optimizer.adamw.lr = 3e-3;
  options.steps = 3;
  return train_in_process(compiled, options, {});
}

}  // namespace strata::test
