// Recompute changes when a layer's activations are computed, not what they are: a recomputed
// forward runs the same kernels on the same inputs, so training with full recompute (the layer's
// input kept, every other activation rebuilt in the backward) or selective recompute under the
// unfused attention (the scores rebuilt) gives the same losses and final weights, bit for bit, as
// keeping every activation (Korthikanti et al. 2022, Sec. 4). Checked on both model families the
// executor runs, on dp 2 x tp 2 with sequence parallelism, where a recomputed layer also gathers
// its input again.

#include <catch2/catch.hpp>

#include "models/model_reader.hpp"
#include "tests/exec/small_training.hpp"

namespace strata {
namespace {

TrainResult train(const std::string& model_name, RecomputeKind recompute) {
  ModelSpec model = load_model(model_name);
  model.layers = 2;
  return test::train_small(model, AttentionKind::kUnfused, recompute);
}

}  // namespace

TEST_CASE("full and selective recompute train bit-identically to keeping every activation",
          "[exec][recompute]") {
  for (const char* model : {"tiny-gpt", "tiny-llama"}) {
    const TrainResult kept = train(model, RecomputeKind::kNone);
    for (const RecomputeKind recompute : {RecomputeKind::kFull, RecomputeKind::kSelective}) {
      INFO(model << ", recompute " << to_string(recompute));
      const TrainResult recomputed = train(model, recompute);
      REQUIRE(recomputed.steps.size() == kept.steps.size());
      for (size_t i = 0; i < kept.steps.size(); ++i)
        CHECK(recomputed.steps[i].loss == kept.steps[i].loss);
      CHECK(recomputed.weights == kept.weights);
    }
  }
}

}  // namespace strata
