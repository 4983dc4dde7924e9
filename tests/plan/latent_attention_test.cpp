// DeepSeek's multi-head latent attention in the task graph (plan/mla_lowering.cpp): a grid of
// plans compiles to valid graphs, folded and full; one layer's model FLOPs, TP traffic and stored
// activations against closed forms derived from the dimensions by hand; under context
// parallelism its cp traffic at the key and value heads' own widths, its stored activations
// divided by cp and its model FLOPs unchanged.

#include <catch2/catch.hpp>

#include <map>
#include <vector>

#include "common/error.hpp"
#include "plan/activation_memory.hpp"
#include "tests/plan/plan_fixtures.hpp"

namespace strata {
namespace {

// A small latent-attention model shaped as DeepSeek's (pre-norm, RMSNorm, SwiGLU, rotary, no
// biases): h 256, 4 heads of 32 + 16 query-key and 24 value dimensions, a key-value latent of 64
// and, with `q_latent`, a query latent of 96. With `moe`, DeepSeek's layout of experts: the first
// layer dense, the others 4 routed experts of 128 (top 2) and a shared one.
ModelSpec mla_model(bool q_latent, bool moe = false) {
  ModelSpec m = test::small_llama(4, 256, 4, 512, 128);
  m.ffn_hidden = 512;
  m.q_lora_rank = q_latent ? 96 : 0;
  m.kv_lora_rank = 64;
  m.qk_nope_head_dim = 32;
  m.qk_rope_head_dim = 16;
  m.v_head_dim = 24;
  if (moe) {
    m.experts = 4;
    m.experts_per_token = 2;
    m.expert_ffn_hidden = 128;
    m.shared_expert_ffn_hidden = 128;
    m.first_dense_layers = 1;
  }
  validate_model(m, "test");
  return m;
}

TEST_CASE("every latent-attention plan of a grid compiles to a valid graph, folded and full",
          "[plan][mla]") {
  const RecomputeKind recomputes[] = {RecomputeKind::kNone, RecomputeKind::kSelective,
                                      RecomputeKind::kFull};
  for (const bool q_latent : {true, false}) {
    ModelSpec model = mla_model(q_latent);
    model.dropout = !q_latent;  // the attention's and branches' masks too
    for (const int64_t tp : {1, 2}) {
      for (const bool sp : {false, true}) {
        if (sp && tp == 1) continue;
        for (const int64_t pp : {1, 2}) {
          for (const int64_t zero : {0, 1}) {
            for (const RecomputeKind recompute : recomputes) {
              ParallelPlan plan = test::make_plan(2, tp, pp, 1, 4, 64);
              plan.sequence_parallel = sp;
              plan.zero_stage = zero;
              plan.recompute = recompute;
              INFO("q latent " << q_latent << " tp " << tp << " sp " << sp << " pp " << pp
                               << " zero " << zero << " " << to_string(recompute));
              test::check_folded_and_full(model, plan);
            }
          }
        }
      }
    }
  }
}

// DeepSeek's layout: latent attention in every layer, experts after the first; with expert
// parallelism, ZeRO 2 and 3, unfused attention (its selective recompute rebuilds the scores from
// the stored Q, K and V) and the interleaved schedule.
TEST_CASE("latent attention with experts compiles to valid graphs, folded and full",
          "[plan][mla][moe]") {
  for (const bool q_latent : {true, false}) {
    const ModelSpec model = mla_model(q_latent, true);
    for (const int64_t ep : {1, 2}) {
      ParallelPlan plan = test::make_plan(2, 2, 2, 1, 8, 64);
      plan.sequence_parallel = true;
      plan.ep = ep;
      plan.moe_dispatcher = ep > 1 ? MoeDispatcher::kAllToAll : MoeDispatcher::kAllGather;
      plan.zero_stage = ep > 1 ? 2 : 3;
      plan.attention = q_latent ? AttentionKind::kUnfused : AttentionKind::kFlash;
      plan.recompute = RecomputeKind::kSelective;
      if (!q_latent) {
        plan.schedule = ScheduleKind::kInterleaved;
        plan.vpp = 2;
      }
      INFO("q latent " << q_latent << " ep " << ep);
      test::check_folded_and_full(model, plan);
    }
  }
}

// The sum over `graph`'s compute tasks of layer 0 in the attention block (the projections, the
// rotary and key-value ops, the attention and its output projection; no recompute) of the model
// FLOPs of the products and the attention kernel, each op once per TP group when its ranks
// compute it on the same data (OpShape::tp_replicated), as compile_plan counts them.
int64_t attention_block_model_flops(const TaskGraph& graph, int64_t tp) {
  int64_t sum = 0;
  for (const Task& t : graph.tasks()) {
    if (t.kind != TaskKind::kCompute || t.layer != 0 || t.phase == Phase::kRecompute) continue;
    const OpShape& op = graph.op(t.op);
    if (op.kind != OpKind::kMatmul && op.kind != OpKind::kFlashAttention) continue;
    if (t.role != TaskRole::kQkv && t.role != TaskRole::kAttention && t.role != TaskRole::kAttnOut)
      continue;
    sum += op.model_flops / (op.tp_replicated ? tp : 1);
  }
  return sum;
}

// Model FLOPs of one MLA layer's attention block, by hand from the dimensions (Megatron's count:
// 2mnk per product, scores and context over the whole sequence, backward twice the forward):
//   products, per token: 2 (h rq + rq H (nope + rope) + h (rkv + rope) + rkv H (nope + v) + H v h)
//     (with rq = 0, h H (nope + rope) for the query projection in place of the first two)
//   attention, per sequence: 2 s^2 H ((nope + rope) + v)
// times 3 for forward and backward, over the step's b s tokens per micro-batch and micro-batches;
// H all the heads, whatever the tp (the down projections duplicated over TP count once).
TEST_CASE("one latent-attention layer's model FLOPs equal the closed form", "[plan][mla][flops]") {
  for (const bool q_latent : {true, false}) {
    const ModelSpec m = mla_model(q_latent);
    const int64_t h = m.hidden;
    const int64_t heads = m.heads;
    const int64_t rq = m.q_lora_rank;
    const int64_t rkv = m.kv_lora_rank;
    const int64_t nope = m.qk_nope_head_dim;
    const int64_t rope = m.qk_rope_head_dim;
    const int64_t v = m.v_head_dim;
    const int64_t s = 128;
    const int64_t micro_batches = 2;
    const int64_t query =
        q_latent ? h * rq + rq * heads * (nope + rope) : h * heads * (nope + rope);
    const int64_t per_token =
        2 * (query + h * (rkv + rope) + rkv * heads * (nope + v) + heads * v * h);
    const int64_t per_sequence = 2 * s * s * heads * ((nope + rope) + v);
    const int64_t expected = 3 * micro_batches * (s * per_token + per_sequence);
    for (const int64_t tp : {1, 2}) {
      for (const bool sp : {false, true}) {
        if (sp && tp == 1) continue;
        ParallelPlan plan = test::make_plan(1, tp, 1, 1, micro_batches, s);
        plan.sequence_parallel = sp;
        plan.attention = AttentionKind::kFlash;
        INFO("q latent " << q_latent << " tp " << tp << " sp " << sp);
        const CompiledPlan full = test::compile_checked(m, plan, GraphMode::kFull);
        CHECK(full.validation.ok());
        CHECK(attention_block_model_flops(full.graph, tp) == expected);
      }
    }
  }
}

// Under sequence parallelism only the latents cross the TP group around latent attention
// (Megatron-Core's MLASelfAttention: the duplicated down projections run on the rank's s/t rows;
// q_up_in, kv_up_in and the rotary key are all-gathered before the up projections, whose input
// gradients and the rotary key's are reduce-scattered back): per micro-batch, e n (rq + rkv +
// rope) gathered forward; backward the up projections gather their inputs again (e n (rq + rkv))
// and reduce-scatter e n (rq + rkv + rope). Without a query latent, linear_q_proj gathers and
// reduce-scatters the layer's h-wide norm output as a dense QKV product does.
TEST_CASE("under sequence parallelism latent attention moves its latents over TP",
          "[plan][mla][communication]") {
  for (const bool q_latent : {true, false}) {
    const ModelSpec m = mla_model(q_latent);
    ParallelPlan plan = test::make_plan(1, 2, 1, 1, 1, 128);
    plan.sequence_parallel = true;
    const CompiledPlan compiled = test::compile_checked(m, plan);
    REQUIRE(compiled.validation.ok());
    const int64_t e = 2;
    const int64_t n = plan.seq_len;
    int64_t gathered_forward = 0;
    int64_t gathered_backward = 0;
    int64_t scattered_backward = 0;
    for (const Task& t : compiled.graph.tasks()) {
      if (t.kind != TaskKind::kCollective || t.layer != 0 || t.role != TaskRole::kQkv) continue;
      const bool forward = t.phase == Phase::kForward;
      if (t.collective == CollectiveKind::kAllGather) {
        (forward ? gathered_forward : gathered_backward) += t.bytes;
      } else {
        CHECK(t.collective == CollectiveKind::kReduceScatter);
        CHECK(!forward);
        scattered_backward += t.bytes;
      }
    }
    const int64_t rope = m.qk_rope_head_dim;
    const int64_t query = q_latent ? m.q_lora_rank : m.hidden;
    INFO("q latent " << q_latent);
    CHECK(gathered_forward == e * n * (query + m.kv_lora_rank + rope));
    CHECK(gathered_backward == e * n * (query + m.kv_lora_rank));
    CHECK(scattered_backward == e * n * (query + m.kv_lora_rank + rope));
  }
}

// What an MLA layer stores for its backward (plan/activation_memory.cpp), by hand, per rank and
// micro-batch, 2 bytes an element, flash attention, no dropout; n = s b tokens, rows = n / t under
// sequence parallelism (else n), H = heads / t:
//   the norms' and the down projections' input, 3 rows h (norm1_in, qkv_in, norm2_in),
//   the latents: rows (2 rq + 2 rkv + rope) (q_latent, q_up_in, kv_latent with the rotary key,
//     kv_up_in),
//   Q, K and V: n H (2 (nope + rope) + v); the attention's output n H v; its fp32 log-sum-exp
//     4 b H s,
//   the MLP: rows h (up_in), n 2f/t (SwiGLU's gate and up), n f/t (down_in).
TEST_CASE("an MLA layer stores its latents, Q, K, V and output", "[plan][mla][memory]") {
  const ModelSpec m = mla_model(true);
  for (const int64_t tp : {1, 2}) {
    for (const bool sp : {false, true}) {
      if (sp && tp == 1) continue;
      ParallelPlan plan = test::make_plan(1, tp, 1, 1, 1, 128);
      plan.sequence_parallel = sp;
      plan.attention = AttentionKind::kFlash;
      const int64_t n = plan.seq_len;
      const int64_t rows = sp ? n / tp : n;
      const int64_t heads = m.heads / tp;
      const int64_t f = m.ffn_hidden / tp;
      const int64_t elements =
          4 * rows * m.hidden +
          rows * (2 * m.q_lora_rank + 2 * m.kv_lora_rank + m.qk_rope_head_dim) +
          n * heads * (2 * (m.qk_nope_head_dim + m.qk_rope_head_dim) + m.v_head_dim) +
          n * heads * m.v_head_dim + n * 3 * f;
      INFO("tp " << tp << " sp " << sp);
      CHECK(layer_activations(m, plan, false).total() == 2 * elements + 4 * heads * n);
    }
  }
}

// Context parallelism with latent attention (plan/cp_attention.cpp): Megatron-Core runs MLA's
// core attention through Transformer Engine's DotProductAttention with k_channels = nope + rope
// and v_channels = v_head_dim, whose context-parallel functions exchange K and V blocks of those
// widths. For mla_model (4 heads, nope 32, rope 16, v 24), S = 128 tokens over cp 2 (s = 64 a
// rank), b = 1, e = 2 bytes, H = 4 / t heads a rank:
//   the rank's K and V: e s b H ((nope + rope) + v) = 2 x 64 x 1 x 4 x 72 = 36,864 bytes at t 1,
//     18,432 at t 2: what each p2p hop carries (cp - 1 = 1 forward; backward 2 (cp - 1) K-and-V's,
//     the first hop K and V, the last dK and dV), all_gather gathers cp times (and gathers again
//     and reduce-scatters backward);
//   a2a: Q, K and V e s b H (2 (nope + rope) + v) = 61,440 and the output e s b H v = 12,288 at
//     t 1 forward; backward the output with its gradient (2 x 12,288) and dQ, dK, dV (61,440).
TEST_CASE("context parallelism moves latent attention's K and V at their own head widths",
          "[plan][mla][cp]") {
  const ModelSpec m = mla_model(true);
  const int64_t e = 2;
  const int64_t s = 128 / 2;
  const int64_t nope = m.qk_nope_head_dim;
  const int64_t rope = m.qk_rope_head_dim;
  const int64_t v = m.v_head_dim;
  REQUIRE(nope + rope + v == 72);
  for (const int64_t tp : {1, 2}) {
    const int64_t heads = m.heads / tp;
    const int64_t kv = e * s * heads * (nope + rope + v);
    const int64_t qkv = e * s * heads * (2 * (nope + rope) + v);
    const int64_t out = e * s * heads * v;
    CHECK(kv == 36864 / tp);
    CHECK(qkv == 61440 / tp);
    CHECK(out == 12288 / tp);
    for (const CpComm comm : {CpComm::kP2p, CpComm::kAllGather, CpComm::kAllToAll}) {
      ParallelPlan plan = test::make_plan(1, tp, 1, 1, 1, 128);
      plan.sequence_parallel = tp > 1;
      plan.cp = 2;
      plan.cp_comm = comm;
      const CompiledPlan compiled = test::compile_checked(m, plan);
      REQUIRE(compiled.validation.ok());
      std::map<CollectiveKind, int64_t> forward, backward;
      std::vector<int64_t> hops_forward, hops_backward;
      const TaskGraph& graph = compiled.graph;
      for (const Task& t : graph.tasks()) {
        if (t.kind != TaskKind::kCollective || graph.group(t.group).kind != GroupKind::kCp)
          continue;
        if (t.layer != 0 || t.micro_batch != 0) continue;
        const bool fwd = t.phase == Phase::kForward;
        (fwd ? forward : backward)[t.collective] += t.bytes;
        if (t.collective == CollectiveKind::kRingExchange)
          (fwd ? hops_forward : hops_backward).push_back(t.bytes);
      }
      INFO("tp " << tp << " " << to_string(comm));
      switch (comm) {
        case CpComm::kP2p:
          CHECK(hops_forward == std::vector<int64_t>{kv});
          CHECK(hops_backward == std::vector<int64_t>{kv, kv});
          break;
        case CpComm::kAllGather:
          CHECK(forward.at(CollectiveKind::kAllGather) == 2 * kv);
          CHECK(backward.at(CollectiveKind::kAllGather) == 2 * kv);
          CHECK(backward.at(CollectiveKind::kReduceScatter) == 2 * kv);
          break;
        case CpComm::kAllToAll:
          CHECK(forward.at(CollectiveKind::kAllToAll) == qkv + out);
          CHECK(backward.at(CollectiveKind::kAllToAll) == 2 * out + qkv);
          break;
      }
    }
  }
}

// Every cp 2 plan of latent attention over p2p, all_gather and a2a, tp 1 and 2 (sequence
// parallel), pp 1 and 2, with and without DeepSeek's layout of experts, compiles to graphs that
// pass the validator, folded and full (heads 4 divide tp x cp under a2a).
TEST_CASE("latent attention under context parallelism compiles to valid graphs, folded and full",
          "[plan][mla][cp]") {
  for (const bool moe : {false, true}) {
    const ModelSpec model = mla_model(!moe, moe);
    for (const CpComm comm : {CpComm::kP2p, CpComm::kAllGather, CpComm::kAllToAll}) {
      for (const int64_t tp : {1, 2}) {
        for (const int64_t pp : {1, 2}) {
          ParallelPlan plan = test::make_plan(1, tp, pp, 1, 4, 128);
          plan.sequence_parallel = tp > 1;
          plan.cp = 2;
          plan.cp_comm = comm;
          plan.recompute = pp > 1 ? RecomputeKind::kSelective : RecomputeKind::kNone;
          INFO("moe " << moe << " " << to_string(comm) << " tp " << tp << " pp " << pp);
          test::check_folded_and_full(model, plan);
        }
      }
    }
  }
}

// An MLA layer's stored tensors are per token (the latents and qkv_in on the rank's rows, Q, K, V,
// the output and the log-sum-exp on its tokens, or under a2a the whole sequence on heads / cp, as
// many bytes), so a rank holding S / cp tokens stores 1/cp of the cp 1 plan's, term by term, in a
// dense and an expert layer (the reasoning of context_parallel_test's Llama 3 8B case).
TEST_CASE("an MLA layer's stored activations divide by cp", "[plan][mla][cp][memory]") {
  const ModelSpec model = mla_model(true, true);
  for (const CpComm comm : {CpComm::kP2p, CpComm::kAllGather, CpComm::kAllToAll}) {
    for (const int64_t tp : {1, 2}) {
      for (const bool moe : {false, true}) {
        ParallelPlan one = test::make_plan(1, tp, 1, 1, 1, 128);
        one.sequence_parallel = tp > 1;
        ParallelPlan split = one;
        split.cp = 2;
        split.cp_comm = comm;
        INFO(to_string(comm) << " tp " << tp << " moe " << moe);
        validate_plan(split, model, std::nullopt, "test");
        test::check_activations_divide_by_cp(model, one, split, moe);
      }
    }
  }
}

// Megatron's model FLOPs count the whole sequence's attention (2 s^2 H (nope + rope + v) a
// sequence) whatever splits it: an MLA plan over cp 2 has the cp 1 plan's, under every
// cp-comm-type (the blocks' value width counted as the whole attention's).
TEST_CASE("an MLA plan over cp has the cp 1 plan's model FLOPs", "[plan][mla][cp][flops]") {
  const ModelSpec model = mla_model(true);
  for (const CpComm comm : {CpComm::kP2p, CpComm::kAllGather, CpComm::kAllToAll}) {
    ParallelPlan one = test::make_plan(1, 2, 1, 1, 1, 128);
    one.sequence_parallel = true;
    ParallelPlan split = one;
    split.cp = 2;
    split.cp_comm = comm;
    INFO(to_string(comm));
    const CompiledPlan a = test::compile_checked(model, one);
    const CompiledPlan b = test::compile_checked(model, split);
    CHECK(b.flops.model == Approx(a.flops.model).epsilon(1e-3));
    CHECK(b.flops.hardware == Approx(a.flops.hardware).epsilon(1e-3));
  }
}

// What the plan compiler does not lower with latent attention is refused, naming the field.
TEST_CASE("latent attention refuses what it does not lower", "[plan][mla]") {
  const ModelSpec m = mla_model(true);
  const auto refused = [&](const ParallelPlan& plan, const char* field) {
    try {
      validate_plan(plan, m, std::nullopt, "test");
      FAIL("accepted");
    } catch (const InputError& e) {
      CHECK_THAT(std::string(e.what()), Catch::Contains(field));
    }
  };
  ParallelPlan fp8 = test::make_plan(1, 1, 1, 1, 1, 128);
  fp8.fp8 = Fp8Format::kHybrid;
  refused(fp8, "fp8 (--fp8-format)");
  ParallelPlan overlap = test::make_plan(1, 2, 1, 1, 1, 128);
  overlap.sequence_parallel = true;
  overlap.overlap.tp_comm = true;
  refused(overlap, "tp_comm_overlap");
  ParallelPlan op_level = test::make_plan(1, 1, 1, 1, 1, 128);
  op_level.recompute = RecomputeKind::kSelectiveOp;
  refused(op_level, "recompute (--recompute)");
  ModelSpec mtp = m;
  mtp.mtp_layers = 1;
  try {
    validate_plan(test::make_plan(1, 1, 1, 1, 1, 128), mtp, std::nullopt, "test");
    FAIL("accepted");
  } catch (const InputError& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("--mtp-num-layers 0"));
  }
}

}  // namespace
}  // namespace strata
