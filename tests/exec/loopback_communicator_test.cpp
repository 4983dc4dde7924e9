// The loopback communicator (exec/loopback_communicator.hpp) reduces the thread-ranks' buffers in
// group order with Backend::reduce_in_order; the staged one copies a backend's buffers through
// the host and runs the in-process communicator on the copies. Over the CPU backend, whose
// buffers are host memory already, a run through either must give the bits of the run without
// them. Checked on the parity grid's first plan (dp 2 x tp 2 x pp 2: all-reduces, pipeline sends
// and receives, the data-parallel gradient reduction) and a ZeRO-3 plan (reduce-scatters and
// all-gathers).

#include <catch2/catch.hpp>

#include <string>

#include "exec/loopback_communicator.hpp"
#include "exec/trainer.hpp"
#include "plan/compile.hpp"
#include "tests/exec/parity_plans.hpp"

namespace strata {
namespace {

enum class Collectives { kInProcess, kLoopback, kStaged };

TrainResult train(const test::ParityPlan& p, Collectives collectives) {
  // The parity model with 4 layers: these plans split it over 2 stages at most.
  ModelSpec model = test::parity_model();
  model.layers = 4;
  const ParallelPlan plan = test::parity_plan(p, 1, 8, 16);
  const CompiledPlan compiled =
      compile_plan(model, cpu_host_cluster(plan.gpus(), int64_t{1} << 32), plan, GraphMode::kFull);
  REQUIRE(compiled.validation.ok());
  TrainOptions options;
  options.steps = 2;
  options.data_path = std::string(STRATA_SOURCE_DIR) + "/scenarios/data/kjv-genesis-exodus.txt";
  options.seed = 7;
  // A "device" backend that is the CPU one: the run goes through the loopback communicator, or
  // the staged one.
  if (collectives != Collectives::kInProcess) {
    options.device_backend = [](int32_t) { return make_cpu_backend(); };
  }
  if (collectives == Collectives::kStaged) options.device_communicator = make_staged_communicator;
  return train_in_process(compiled, options, {});
}

}  // namespace

TEST_CASE(
    "the loopback and staged communicators over the CPU backend give the in-process run's bits",
    "[exec][loopback]") {
  for (const test::ParityPlan& p : {test::kParityPlans[0], test::kParityPlans[3]}) {
    const TrainResult direct = train(p, Collectives::kInProcess);
    for (const Collectives collectives : {Collectives::kLoopback, Collectives::kStaged}) {
      INFO("plan " << p.name
                   << (collectives == Collectives::kLoopback ? ", loopback" : ", staged"));
      const TrainResult device = train(p, collectives);
      REQUIRE(direct.steps.size() == device.steps.size());
      for (size_t i = 0; i < direct.steps.size(); ++i) {
        CHECK(direct.steps[i].loss == device.steps[i].loss);
        CHECK(direct.steps[i].grad_norm == device.steps[i].grad_norm);
      }
      CHECK(direct.weights == device.weights);
    }
  }
}

}  // namespace strata
