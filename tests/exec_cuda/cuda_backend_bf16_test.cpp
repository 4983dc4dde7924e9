// bf16 training on the CUDA backend (Megatron-LM's mixed precision: bf16 params and activations,
// fp32 master weights, AdamW states and gradients, fp32 logits for the loss; exec/param_store.hpp).
// Built against the CPU emulation of CUDA these run on every machine; against the toolkit, on a
// GPU. Facts checked, none tuned:
//  - bf16 learns as fp32 does: the same run in bf16 gives each step's loss within 1e-2 of the
//    fp32 run's (bf16 keeps 8 bits of mantissa: the kernels' bf16 tolerance, issue 7), and its
//    loss falls;
//  - the parity of the executor in bf16: every plan of the grid on 8 thread-ranks gives the
//    1-rank run's losses within 1e-2 (TP partial sums rounded to bf16 before their sum, and sums
//    in other orders, are what differ);
//  - the mixed-precision state is whole: the final weights of a bf16 run are its fp32 masters,
//    values bf16 cannot hold (not all of them rounded to bf16), and a run resumed from a
//    checkpoint continues bit-identically (losses and weights) under ZeRO 0 (whole masters), 1
//    (master chunks beside whole bf16 params) and 3 (bf16 shards beside master chunks): the
//    checkpoint holds every state the step reads.

#include <catch2/catch.hpp>

#include <filesystem>
#include <vector>

#include "common/bf16.hpp"
#include "exec/trainer.hpp"
#include "plan/compile.hpp"
#include "tests/exec/parity_plans.hpp"
#include "tests/exec_cuda/cuda_training.hpp"

namespace strata {
namespace {

using test::losses;
using test::training_options;

CompiledPlan compile(const test::ParityPlan& p, const ModelSpec& model, DType dtype) {
  ParallelPlan plan = test::parity_plan(p, 1, 8, 16);
  plan.dtype = dtype;
  CompiledPlan compiled =
      compile_plan(model, cpu_host_cluster(plan.gpus(), int64_t{1} << 32), plan, GraphMode::kFull);
  REQUIRE(compiled.validation.ok());
  return compiled;
}

TrainResult train(const test::ParityPlan& p, const ModelSpec& model, DType dtype, int64_t steps) {
  return train_in_process(compile(p, model, dtype), training_options(steps), {});
}

constexpr test::ParityPlan kSerial{"serial", 1, 1, 1, 1, 0, false, ScheduleKind::k1F1B};

void check_learns(const ModelSpec& model) {
  constexpr int64_t kSteps = 5;
  const TrainResult bf16 = train(kSerial, model, DType::kBf16, kSteps);
  const std::vector<double> low = losses(bf16);
  const std::vector<double> full = losses(train(kSerial, model, DType::kFp32, kSteps));
  REQUIRE(low.size() == static_cast<size_t>(kSteps));
  for (size_t i = 0; i < low.size(); ++i) {
    INFO("step " << i << ": bf16 " << low[i] << ", fp32 " << full[i]);
    CHECK(low[i] == Approx(full[i]).epsilon(1e-2));
    if (i > 0) CHECK(low[i] < low[i - 1]);
  }
  // The final weights are the fp32 masters: most are not bf16 values.
  size_t weights = 0;
  size_t bf16_values = 0;
  for (const auto& [name, values] : bf16.weights) {
    for (const float w : values) {
      ++weights;
      bf16_values += Bf16::from_float(w).to_float() == w ? 1 : 0;
    }
  }
  CHECK(bf16_values < weights / 2);
}

void check_parity(const ModelSpec& model) {
  constexpr int64_t kSteps = 3;
  const std::vector<double> serial = losses(train(kSerial, model, DType::kBf16, kSteps));
  REQUIRE(serial.size() == static_cast<size_t>(kSteps));
  for (const test::ParityPlan& p : test::kParityPlans) {
    INFO("plan " << p.name);
    const std::vector<double> parallel = losses(train(p, model, DType::kBf16, kSteps));
    REQUIRE(parallel.size() == serial.size());
    for (size_t i = 0; i < serial.size(); ++i) {
      INFO("step " << i << ": 8 ranks " << parallel[i] << ", 1 rank " << serial[i]);
      CHECK(parallel[i] == Approx(serial[i]).epsilon(1e-2));
    }
  }
}

// Steps 0-3 in one run against steps 0-1, a checkpoint, then 2-3 resumed.
void check_resume(const test::ParityPlan& p) {
  const CompiledPlan compiled = compile(p, test::parity_model(), DType::kBf16);
  const TrainResult whole = train_in_process(compiled, training_options(4), {});
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / "strata-bf16-resume-test-checkpoints";
  std::filesystem::remove_all(dir);
  TrainOptions first = training_options(2);
  first.checkpoint_dir = dir.string();
  first.checkpoint_every = 2;
  train_in_process(compiled, first, {});
  TrainOptions rest = training_options(4);
  rest.checkpoint_dir = dir.string();
  rest.resume = true;
  const TrainResult resumed = train_in_process(compiled, rest, {});
  std::filesystem::remove_all(dir);
  REQUIRE(resumed.first_step == 2);
  REQUIRE(resumed.steps.size() == 2);
  for (size_t i = 0; i < 2; ++i) CHECK(resumed.steps[i].loss == whole.steps[i + 2].loss);
  CHECK(resumed.weights == whole.weights);
}

}  // namespace

TEST_CASE("the CUDA backend in bf16 resumes bit-identically under ZeRO 0, 1 and 3",
          "[gpu][exec_cuda][bf16]") {
  for (const size_t plan : {0, 1, 3}) {
    INFO("plan " << test::kParityPlans[plan].name);
    check_resume(test::kParityPlans[plan]);
  }
}

TEST_CASE("the CUDA backend in bf16 learns as in fp32 (GPT-2)", "[gpu][exec_cuda][bf16]") {
  check_learns(test::parity_model());
}

TEST_CASE("the CUDA backend in bf16 learns as in fp32 (Llama)", "[gpu][exec_cuda][bf16]") {
  check_learns(test::parity_llama());
}

TEST_CASE(
    "the CUDA backend in bf16: every parity plan on 8 thread-ranks matches its 1-rank run "
    "within 1e-2 per loss (GPT-2)",
    "[gpu][exec_cuda][bf16]") {
  check_parity(test::parity_model());
}

TEST_CASE(
    "the CUDA backend in bf16: every parity plan on 8 thread-ranks matches its 1-rank run "
    "within 1e-2 per loss (Llama)",
    "[gpu][exec_cuda][bf16]") {
  check_parity(test::parity_llama());
}

}  // namespace strata
