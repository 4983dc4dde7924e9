// Learning: tiny-gpt (zoo) trained on the shipped text starts at the loss of a uniform guess,
// ln(256) = 5.545, and gets below 2.5 nats per byte within 200 steps of 8 x 64 bytes (one rank,
// AdamW lr 3e-3): the mean of the last 10 steps' losses is checked. Measured when written
// (strata train --steps 200 --lr 3e-3 --micro-batch 8 --global-batch 8 --seq-len 64): a first
// step below 2.5 at step 94, a mean of 2.39 over steps 191-200, 61 s on 2 idle cores.
// tiny-llama (zoo: RMSNorm, SwiGLU, rotary positions, grouped-query attention, an untied head)
// learns the same text faster: measured when written (strata train --model tiny-llama --steps 60
// --lr 3e-3 --micro-batch 8 --global-batch 8 --seq-len 64), 5.70 at step 1 (its untied head's
// initial logits are not quite uniform), below 2.5 from step 39, 0.12 s a step.

#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include "common/zoo.hpp"
#include "exec/trainer.hpp"
#include "models/model_reader.hpp"
#include "plan/compile.hpp"

namespace strata {

namespace {

TrainResult train_zoo_model(const std::string& name, int64_t steps) {
  const ModelSpec model = load_model(name);
  ParallelPlan plan;
  plan.micro_batch = 8;
  plan.global_batch = 8;
  plan.seq_len = 64;
  plan.dtype = DType::kFp32;
  const CompiledPlan compiled =
      compile_plan(model, cpu_host_cluster(1, int64_t{1} << 32), plan, GraphMode::kFull);
  TrainOptions options;
  options.steps = steps;
  options.data_path = std::string(STRATA_SOURCE_DIR) + "/scenarios/data/kjv-genesis-exodus.txt";
  options.optimizer.adamw.lr = 3e-3;
  options.optimizer.adamw.weight_decay = 0.1;
  return train_in_process(compiled, options, {});
}

double mean_of_last_10(const TrainResult& run) {
  double last = 0;
  for (size_t i = run.steps.size() - 10; i < run.steps.size(); ++i) last += run.steps[i].loss;
  return last / 10;
}

}  // namespace

TEST_CASE("tiny-gpt learns the shipped text: loss from ln(256) to below 2.5 within 200 steps",
          "[exec][learning]") {
  const TrainResult run = train_zoo_model("tiny-gpt", 200);
  REQUIRE(run.steps.size() == 200);
  CHECK(run.steps.front().loss == Approx(std::log(256.0)).epsilon(0.02));
  CHECK(mean_of_last_10(run) < 2.5);
}

TEST_CASE("tiny-llama learns the shipped text: loss from about ln(256) to below 2.5 in 80 steps",
          "[exec][learning]") {
  const TrainResult run = train_zoo_model("tiny-llama", 80);
  REQUIRE(run.steps.size() == 80);
  CHECK(run.steps.front().loss == Approx(std::log(256.0)).epsilon(0.05));
  CHECK(mean_of_last_10(run) < 2.5);
}

}  // namespace strata
