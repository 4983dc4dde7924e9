// The CUDA backend (exec/cuda_backend.hpp) trains as the CPU backend does. Built against the CPU
// emulation of CUDA (kernels/emu) these run on every machine, in the emulator's forward,
// reversed and random orders of threads and streams (the CTest label emu); built against the
// toolkit they run on a GPU. Facts checked, none tuned:
//  - the parity of the executor (tests/exec/training_parity_test.cpp): every plan of the grid on
//    8 thread-ranks, their collectives through the loopback communicator, gives the 1-rank run's
//    losses within 1e-5 (fp32 summation order is all that differs);
//  - the same plan on the CPU backend gives the same losses within 1e-5: the kernels keep the CPU
//    references' contracts;
//  - a run is deterministic: the same plan twice gives the same bits (under the emulator's
//    random order, the two runs see different orders of threads and streams).

#include <catch2/catch.hpp>

#include <vector>

#include "exec/trainer.hpp"
#include "plan/compile.hpp"
#include "tests/exec/parity_plans.hpp"
#include "tests/exec_cuda/cuda_training.hpp"

namespace strata {
namespace {

using test::losses;

constexpr int64_t kSteps = 3;

TrainResult train(const test::ParityPlan& p, const ModelSpec& model, bool cuda) {
  const ParallelPlan plan = test::parity_plan(p, 1, 8, 16);
  const CompiledPlan compiled =
      compile_plan(model, cpu_host_cluster(plan.gpus(), int64_t{1} << 32), plan, GraphMode::kFull);
  REQUIRE(compiled.validation.ok());
  return train_in_process(compiled, test::training_options(kSteps, cuda), {});
}

void check_parity(const ModelSpec& model) {
  const test::ParityPlan serial_plan{"serial", 1, 1, 1, 1, 0, false, ScheduleKind::k1F1B};
  const std::vector<double> serial = losses(train(serial_plan, model, true));
  REQUIRE(serial.size() == static_cast<size_t>(kSteps));
  const std::vector<double> cpu = losses(train(serial_plan, model, false));
  for (size_t i = 0; i < serial.size(); ++i) {
    INFO("step " << i << ", the CUDA backend against the CPU backend, 1 rank");
    CHECK(serial[i] == Approx(cpu[i]).epsilon(1e-5));
  }
  for (const test::ParityPlan& p : test::kParityPlans) {
    INFO("plan " << p.name);
    const std::vector<double> parallel = losses(train(p, model, true));
    REQUIRE(parallel.size() == serial.size());
    for (size_t i = 0; i < serial.size(); ++i) {
      INFO("step " << i);
      CHECK(parallel[i] == Approx(serial[i]).epsilon(1e-5));
    }
  }
}

}  // namespace

TEST_CASE(
    "the CUDA backend: every parity plan on 8 thread-ranks matches its 1-rank run, and the "
    "1-rank run the CPU backend's, within 1e-5 per loss (GPT-2)",
    "[gpu][exec_cuda]") {
  check_parity(test::parity_model());
}

TEST_CASE(
    "the CUDA backend: every parity plan on 8 thread-ranks matches its 1-rank run, and the "
    "1-rank run the CPU backend's, within 1e-5 per loss (Llama: RMSNorm, SwiGLU, rotary, "
    "GQA)",
    "[gpu][exec_cuda]") {
  check_parity(test::parity_llama());
}

TEST_CASE(
    "the CUDA backend is deterministic: dp2-tp2-pp2 twice gives the same losses and "
    "weights, bit for bit",
    "[gpu][exec_cuda]") {
  const test::ParityPlan& p = test::kParityPlans[0];
  const TrainResult first = train(p, test::parity_model(), true);
  const TrainResult second = train(p, test::parity_model(), true);
  CHECK(losses(first) == losses(second));
  CHECK(first.weights == second.weights);
}

}  // namespace strata
