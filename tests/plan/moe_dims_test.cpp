// An MoE layer's per-rank sizes (plan/moe_dims.hpp): the rows a rank's experts compute on,
// balanced and with the busiest expert skewed, against the closed forms worked here by hand.

#include <catch2/catch.hpp>

#include "models/model_spec.hpp"
#include "plan/moe_dims.hpp"

namespace strata {
namespace {

ModelSpec moe_model(int64_t experts, int64_t top_k) {
  ModelSpec m;
  m.layers = 4;
  m.hidden = 1024;
  m.heads = 8;
  m.kv_heads = 8;
  m.ffn_hidden = 4096;
  m.vocab = 1000;
  m.max_seq = 1024;
  m.mlp = MlpKind::kSwiGlu;
  m.experts = experts;
  m.experts_per_token = top_k;
  m.expert_ffn_hidden = 1024;
  return m;
}

// Balanced: a rank's E / ep experts get T x etp x k rows. 8 experts, top-2, s b = 4096 tokens,
// tp 2 with sequence parallelism (T = 2048), ep 4: 2 local experts, 2048 x 2 x 2 = 8192 rows, the
// SwiGLU up width 2 x 1024 / 2.
TEST_CASE("balanced routing gives a rank T x etp x k expert rows", "[plan][moe]") {
  ParallelPlan plan;
  plan.tp = 2;
  plan.sequence_parallel = true;
  plan.ep = 4;
  plan.dp = 4;
  plan.seq_len = 4096;
  const MoeDims d = moe_dims(moe_model(8, 2), plan);
  CHECK(d.tokens == 2048);
  CHECK(d.local_experts == 2);
  CHECK(d.expert_rows == 8192);
  CHECK(d.expert_up == 1024);
  CHECK(d.expert_ffn == 512);
  CHECK(d.gathered_tokens == 2048 * 2 * 4);
}

// The busiest expert at i times the mean, the other E - 1 sharing the rest: the rank holding it
// with L experts carries (i + (L - 1)(E - i)/(E - 1)) / L. E 8, i 2: L 1 (ep 8) 2; L 2 (ep 4)
// (2 + 6/7) / 2 = 1.4286; L 8 (ep 1) 1, every token on the rank whatever the skew. A capacity
// factor of 1.5 drops what exceeds it: L 1 carries 1.5.
TEST_CASE("imbalance loads the busiest expert's rank by the closed form", "[plan][moe]") {
  ModelSpec model = moe_model(8, 2);
  ParallelPlan plan;
  plan.moe_imbalance = 2;
  plan.ep = plan.dp = 8;
  CHECK(moe_rank_load(model, plan) == Approx(2.0));
  plan.ep = plan.dp = 4;
  CHECK(moe_rank_load(model, plan) == Approx((2 + 6.0 / 7) / 2));
  plan.ep = plan.dp = 1;
  CHECK(moe_rank_load(model, plan) == Approx(1.0));
  CHECK(moe_dims(model, plan).expert_rows == 2048 * 2);
  model.capacity_factor = 1.5;
  plan.ep = plan.dp = 8;
  CHECK(moe_rank_load(model, plan) == Approx(1.5));
}

}  // namespace
}  // namespace strata
