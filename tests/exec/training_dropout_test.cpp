// Dropout in the executor (docs/design.md, "Executor"): masks drawn from a counter-based
// generator keyed by the run's seed, the draw site's random stream (TaskGraph::random_stream)
// and each element's global coordinates (sequence of the run, position, column or global head),
// here on dp 2 x tp 2 with sequence parallelism (tests/exec/small_training.hpp). So:
//  - at rate 0 every mask keeps everything at scale 1, and training equals training without
//    dropout up to fp32 rounding (1e-6 per loss: the residual add sums (branch + bias) x mask,
//    Megatron-LM's bias-dropout-add, where the plain add sums residual + branch first; the
//    biases start at 0, so the first step is the same bits); at rate 0.1 every step's loss
//    differs by far more (the masks act);
//  - flash attention, which draws the probabilities' mask again in its backward, trains
//    bit-identically to the unfused kernel, which stores it (Dao et al. 2022, Sec. 3.1);
//  - a full or selective recompute draws the same masks again, bit for bit (Korthikanti et al.
//    2022, Sec. 4), as tests/exec/training_recompute_test.cpp checks without dropout.
// Parity with the 1-rank run over the seven 8-rank plans is in training_parity_test.cpp.

#include <catch2/catch.hpp>

#include <cmath>

#include "models/model_reader.hpp"
#include "tests/exec/small_training.hpp"

namespace strata {
namespace {

ModelSpec tiny_gpt(bool dropout, double rate) {
  ModelSpec model = load_model("tiny-gpt");
  model.layers = 2;
  model.dropout = dropout;
  model.hidden_dropout = model.attention_dropout = rate;
  return model;
}

TrainResult train(const ModelSpec& model, AttentionKind attention,
                  RecomputeKind recompute = RecomputeKind::kNone) {
  return test::train_small(model, attention, recompute);
}

void check_bit_identical(const TrainResult& a, const TrainResult& b) {
  REQUIRE(a.steps.size() == b.steps.size());
  for (size_t i = 0; i < a.steps.size(); ++i) CHECK(a.steps[i].loss == b.steps[i].loss);
  CHECK(a.weights == b.weights);
}

}  // namespace

TEST_CASE("dropout at rate 0 changes nothing, at 0.1 every loss", "[exec][dropout]") {
  const TrainResult without = train(tiny_gpt(false, 0), AttentionKind::kUnfused);
  const TrainResult kept = train(tiny_gpt(true, 0), AttentionKind::kUnfused);
  const TrainResult dropped = train(tiny_gpt(true, 0.1), AttentionKind::kUnfused);
  REQUIRE(kept.steps.size() == without.steps.size());
  REQUIRE(dropped.steps.size() == without.steps.size());
  CHECK(kept.steps[0].loss == without.steps[0].loss);
  for (size_t i = 0; i < without.steps.size(); ++i) {
    INFO("step " << i);
    CHECK(kept.steps[i].loss == Approx(without.steps[i].loss).epsilon(1e-6));
    CHECK(std::abs(dropped.steps[i].loss - without.steps[i].loss) > 1e-4);
    CHECK(std::isfinite(dropped.steps[i].loss));
  }
}

TEST_CASE("flash attention redraws the unfused kernel's masks", "[exec][dropout]") {
  const ModelSpec model = tiny_gpt(true, 0.1);
  check_bit_identical(train(model, AttentionKind::kFlash), train(model, AttentionKind::kUnfused));
}

TEST_CASE("recompute redraws the same masks", "[exec][dropout][recompute]") {
  const ModelSpec model = tiny_gpt(true, 0.1);
  const TrainResult kept = train(model, AttentionKind::kUnfused);
  for (const RecomputeKind recompute : {RecomputeKind::kFull, RecomputeKind::kSelective}) {
    INFO("recompute " << to_string(recompute));
    check_bit_identical(train(model, AttentionKind::kUnfused, recompute), kept);
  }
}

}  // namespace strata
