// Resume: steps 0-9 in one run and steps 0-4, a checkpoint, then a resumed 5-9 give bit-identical
// losses and final weights (dp 2 x tp 2 with ZeRO 2: sharded optimizer states and gradients).

#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include "exec/trainer.hpp"
#include "models/model_reader.hpp"
#include "plan/compile.hpp"

namespace strata {

TEST_CASE("a resumed run continues bit-identically: losses and final weights", "[exec][resume]") {
  const ModelSpec model = load_model("tiny-gpt");
  ParallelPlan plan;
  plan.dp = 2;
  plan.tp = 2;
  plan.zero_stage = 2;
  plan.micro_batch = 2;
  plan.global_batch = 8;
  plan.seq_len = 32;
  plan.dtype = DType::kFp32;
  const CompiledPlan compiled =
      compile_plan(model, cpu_host_cluster(4, int64_t{1} << 32), plan, GraphMode::kFull);
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / "strata-resume-test-checkpoints";
  std::filesystem::remove_all(dir);

  TrainOptions options;
  options.data_path = std::string(STRATA_SOURCE_DIR) + "/scenarios/data/kjv-genesis-exodus.txt";
  options.optimizer.adamw.lr = 3e-3;
  options.steps = 10;
  const TrainResult whole = train_in_process(compiled, options, {});

  options.steps = 5;
  options.checkpoint_dir = dir.string();
  options.checkpoint_every = 5;
  train_in_process(compiled, options, {});
  options.steps = 10;
  options.checkpoint_every = 0;
  options.resume = true;
  const TrainResult resumed = train_in_process(compiled, options, {});
  std::filesystem::remove_all(dir);

  REQUIRE(resumed.first_step == 5);
  REQUIRE(resumed.steps.size() == 5);
  for (size_t i = 0; i < 5; ++i) CHECK(resumed.steps[i].loss == whole.steps[i + 5].loss);
  CHECK(resumed.weights == whole.weights);
}

}  // namespace strata
