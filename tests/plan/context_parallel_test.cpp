// Context parallelism in the plan compiler (plan/cp_attention.cpp): what a rank stores and
// computes is its seq_len / cp tokens' share, the step's model FLOPs do not depend on cp, each
// --cp-comm-type moves the keys and values it should, a grid of cp plans validates folded and
// full, and validate_plan refuses what the lowering does not handle.

#include <catch2/catch.hpp>

#include <map>

#include "common/error.hpp"
#include "plan/activation_memory.hpp"
#include "plan/op_shapes.hpp"
#include "tests/plan/plan_fixtures.hpp"

namespace strata {
namespace {

const CpComm kCpComms[] = {CpComm::kP2p, CpComm::kAllGather, CpComm::kAllToAll};

// A Llama-style model of 4 layers (RMSNorm, SwiGLU, rotary positions, no dropout), with 8 query
// and `kv_heads` key/value heads, whose every tp x cp up to 8 divides the heads (a2a).
ModelSpec llama_style(int64_t kv_heads = 8) {
  ModelSpec m = test::small_llama(4, 256, 8, 512, 4096);
  m.kv_heads = kv_heads;
  return m;
}

ParallelPlan cp_plan(int64_t cp, CpComm comm, int64_t tp = 1, int64_t pp = 1) {
  ParallelPlan plan = test::make_plan(1, tp, pp, 1, 4, 512);
  plan.cp = cp;
  plan.cp_comm = comm;
  return plan;
}

// Korthikanti et al. 2022's per-layer terms are each linear in s (flash attention keeps no s^2
// scores): a rank holding s / cp tokens stores 1/cp of the cp 1 plan's bytes, term by term, with
// and without tensor and sequence parallelism and under every recompute mode that keeps them.
TEST_CASE("a layer's stored activations divide by cp", "[plan][cp]") {
  const ModelSpec model = load_model("llama3-8b");
  for (const CpComm comm : kCpComms) {
    for (const int64_t tp : {1, 2}) {
      for (const bool sp : {false, true}) {
        if (sp && tp == 1) continue;
        for (const RecomputeKind recompute :
             {RecomputeKind::kNone, RecomputeKind::kSelective, RecomputeKind::kFull}) {
          ParallelPlan one = test::make_plan(1, tp, 1, 1, 1, 8192);
          one.sequence_parallel = sp;
          one.recompute = recompute;
          ParallelPlan split = one;
          split.cp = 4;
          split.cp_comm = comm;
          INFO(to_string(comm) << " tp " << tp << " sp " << sp << " " << to_string(recompute));
          validate_plan(split, model, std::nullopt, "test");
          test::check_activations_divide_by_cp(model, one, split, false);
          CHECK(layer_input_bytes(model, split) * 4 == layer_input_bytes(model, one));
          CHECK(pipeline_message_bytes(model, split) * 4 == pipeline_message_bytes(model, one));
        }
      }
    }
  }
}

// The memory plan replays the graph's memory tasks: every stored tensor of a layer, the head's
// logits and the pipeline messages are per token, so a stage's activations at its peak divide by
// cp too (same micro-batches in flight).
TEST_CASE("the memory plan's activations divide by cp", "[plan][cp]") {
  const ModelSpec model = llama_style();
  for (const CpComm comm : kCpComms) {
    INFO(to_string(comm));
    const CompiledPlan one = test::compile_checked(model, cp_plan(1, comm, 2, 2));
    const CompiledPlan split = test::compile_checked(model, cp_plan(4, comm, 2, 2));
    for (size_t stage = 0; stage < 2; ++stage) {
      const MemoryBreakdown& a = one.memory.stages[stage].at_peak;
      const MemoryBreakdown& b = split.memory.stages[stage].at_peak;
      CHECK(b.activations * 4 == a.activations);
    }
  }
}

// Megatron's model FLOPs count the whole sequence's s^2 attention per layer whatever splits it:
// the cp ranks' shares (p2p: cp steps of s/cp x s/cp blocks each; all_gather: s/cp queries over s
// keys; a2a: s x s on heads / cp) add up to it, and every per-token op's cp shares to its whole.
// The executed FLOPs add up too: each rank's flash kernels evaluate s(s + 1) / (2 cp) causal
// pairs under the load-balanced split.
TEST_CASE("a cp plan has the cp 1 plan's model FLOPs", "[plan][cp]") {
  const ModelSpec model = llama_style();
  for (const CpComm comm : kCpComms) {
    for (const int64_t cp : {2, 4}) {
      for (const int64_t tp : {1, 2}) {
        INFO(to_string(comm) << " cp " << cp << " tp " << tp);
        const CompiledPlan one = test::compile_checked(model, cp_plan(1, comm, tp));
        const CompiledPlan split = test::compile_checked(model, cp_plan(cp, comm, tp));
        CHECK(split.flops.model == Approx(one.flops.model).epsilon(1e-3));
        // p2p adds the backward's elementwise sums of the travelling dK, dV (1 FLOP each).
        CHECK(split.flops.hardware == Approx(one.flops.hardware).epsilon(1e-3));
      }
    }
  }
  // The ring's per-step shapes: step 0 the causal s/cp block, later steps half a block each, so
  // that a rank's pairs are s(s + 1) / (2 cp) and its model FLOPs cp times the s/cp x s/cp block.
  const ParallelPlan plan = cp_plan(4, CpComm::kP2p);
  const PlanOpShapes ops = plan_op_shapes(model, plan);
  const int64_t s = plan.seq_len;
  const int64_t local = s / 4;
  const int64_t per_pair = 4 * model.heads * model.head_dim();  // forward, b = 1
  const int64_t pairs = (ops.attention.forward.flops + 3 * ops.cp_block.forward.flops) / per_pair;
  CHECK(pairs * 4 == s * (s + 1) / 2);
  CHECK(ops.attention.forward.model_flops + 3 * ops.cp_block.forward.model_flops ==
        per_pair * local * s);
}

struct CpTraffic {
  std::map<CollectiveKind, int64_t> forward_bytes, backward_bytes;
  std::map<CollectiveKind, int64_t> forward_count, backward_count;
};

// The collectives on the cp group of one layer's forward and backward of one micro-batch.
CpTraffic cp_traffic(const CompiledPlan& compiled, int32_t layer) {
  CpTraffic traffic;
  const TaskGraph& graph = compiled.graph;
  for (const Task& t : graph.tasks()) {
    if (t.kind != TaskKind::kCollective || graph.group(t.group).kind != GroupKind::kCp) continue;
    if (t.layer != layer || t.micro_batch != 0) continue;
    CHECK(t.stream == Stream::kCpComm);
    const bool forward = t.phase == Phase::kForward;
    (forward ? traffic.forward_bytes : traffic.backward_bytes)[t.collective] += t.bytes;
    ++(forward ? traffic.forward_count : traffic.backward_count)[t.collective];
  }
  return traffic;
}

// What each --cp-comm-type moves per layer, K and V being the rank's e (s/cp) b 2 kv bytes:
// p2p, cp - 1 hops of K and V forward; backward cp hops, the first of K and V, the last of their
// gradients and those between of both (2(cp - 1) K-and-V's in all). all_gather: the whole
// sequence's K and V gathered forward, gathered again and their gradients reduce-scattered
// backward. a2a: Q, K, V and the output each way (the output with its gradient backward).
TEST_CASE("each cp-comm-type moves its keys and values over the cp group", "[plan][cp]") {
  const ModelSpec model = llama_style(4);
  const int64_t cp = 4;
  const int64_t tokens = 512 / cp;
  const int64_t kv = 2 * tokens * 2 * model.kv_hidden();
  const int64_t q = 2 * tokens * model.q_hidden();

  const CpTraffic ring = cp_traffic(test::compile_checked(model, cp_plan(cp, CpComm::kP2p)), 1);
  CHECK(ring.forward_count.at(CollectiveKind::kRingExchange) == cp - 1);
  CHECK(ring.forward_bytes.at(CollectiveKind::kRingExchange) == (cp - 1) * kv);
  CHECK(ring.backward_count.at(CollectiveKind::kRingExchange) == cp);
  CHECK(ring.backward_bytes.at(CollectiveKind::kRingExchange) == 2 * (cp - 1) * kv);

  const CpTraffic gather =
      cp_traffic(test::compile_checked(model, cp_plan(cp, CpComm::kAllGather)), 1);
  CHECK(gather.forward_bytes.at(CollectiveKind::kAllGather) == cp * kv);
  CHECK(gather.backward_bytes.at(CollectiveKind::kAllGather) == cp * kv);
  CHECK(gather.backward_bytes.at(CollectiveKind::kReduceScatter) == cp * kv);

  const CpTraffic heads =
      cp_traffic(test::compile_checked(llama_style(), cp_plan(cp, CpComm::kAllToAll)), 1);
  const int64_t qkv = q + 2 * tokens * 2 * llama_style().kv_hidden();
  CHECK(heads.forward_bytes.at(CollectiveKind::kAllToAll) == qkv + q);
  CHECK(heads.backward_bytes.at(CollectiveKind::kAllToAll) == 2 * q + qkv);
}

std::map<int32_t, int64_t> tasks_per_stage(const TaskGraph& graph) {
  std::map<int32_t, int32_t> stage_of;
  for (const GraphRank& r : graph.ranks()) stage_of[r.rank] = r.stage;
  std::map<int32_t, int64_t> counts;
  for (const Task& t : graph.tasks()) ++counts[stage_of.at(t.rank)];
  return counts;
}

// Every cp x cp-comm-type x tp x pp x ZeRO x recompute plan compiles to graphs that pass the
// validator (acyclic, collectives complete, hazards ordered across the compute and cp-comm
// streams), folded and full, and the full graph is every rank of the folded one's stage alike:
// dp x tp x cp times its tasks, the same FLOPs and peak memory.
TEST_CASE("every cp plan of a grid compiles to a valid graph, folded and full", "[plan][cp]") {
  const RecomputeKind recomputes[] = {RecomputeKind::kNone, RecomputeKind::kSelective,
                                      RecomputeKind::kFull};
  ModelSpec gpt = test::small_model(4, 256, 8, 512, 512);  // learned positions, dropout, GELU
  const ModelSpec models[] = {llama_style(), gpt};
  int variant = 0;
  for (const int64_t cp : {1, 2, 4}) {
    for (const CpComm comm : kCpComms) {
      if (cp == 1 && comm != CpComm::kP2p) continue;  // the same plan
      for (const int64_t tp : {1, 2}) {
        for (const int64_t pp : {1, 2}) {
          for (const int64_t zero : {0, 1, 3}) {
            for (const RecomputeKind recompute : recomputes) {
              const ModelSpec& model = models[variant % 2];
              ParallelPlan plan = cp_plan(cp, comm, tp, pp);
              plan.dp = 1 + variant % 2;
              plan.global_batch = plan.dp * 4;
              plan.zero_stage = zero;
              plan.recompute = recompute;
              plan.sequence_parallel = tp > 1 && variant % 3 != 0;
              plan.overlap.tp_comm = plan.sequence_parallel && variant % 5 == 0;
              plan.fp8 = variant % 7 == 0 ? Fp8Format::kHybrid : Fp8Format::kNone;
              ++variant;
              INFO("cp " << cp << " " << to_string(comm) << " tp " << tp << " pp " << pp << " dp "
                         << plan.dp << " zero " << zero << " " << to_string(recompute) << " sp "
                         << plan.sequence_parallel << " tp-overlap " << plan.overlap.tp_comm
                         << " fp8 " << to_string(plan.fp8) << " model " << model.name);
              const CompiledPlan folded = test::compile_checked(model, plan, GraphMode::kFolded);
              const CompiledPlan full = test::compile_checked(model, plan, GraphMode::kFull);
              for (const auto& error : folded.validation.errors) FAIL_CHECK("folded: " << error);
              for (const auto& error : full.validation.errors) FAIL_CHECK("full: " << error);
              const auto folded_counts = tasks_per_stage(folded.graph);
              const auto full_counts = tasks_per_stage(full.graph);
              for (const auto& [stage, count] : folded_counts)
                CHECK(full_counts.at(stage) == count * plan.dp * plan.tp * plan.cp);
              CHECK(full.flops.model == Approx(folded.flops.model).epsilon(1e-9));
              CHECK(full.memory.peak_bytes == folded.memory.peak_bytes);
            }
          }
        }
      }
    }
  }
}

// validate_plan refuses what the context-parallel lowering does not handle, naming the field.
TEST_CASE("validate_plan refuses the cp plans it does not lower", "[plan][cp]") {
  const ModelSpec model = llama_style(4);
  const auto refuses = [&](const ModelSpec& m, const ParallelPlan& plan, const char* field) {
    INFO(field);
    try {
      validate_plan(plan, m, std::nullopt, "test");
      FAIL_CHECK("accepted");
    } catch (const InputError& error) {
      CHECK_THAT(error.what(), Catch::Contains(field));
    }
  };
  ParallelPlan odd = cp_plan(4, CpComm::kP2p);
  odd.seq_len = 4 * 3 * 5;  // not a multiple of 2 cp = 8
  refuses(model, odd, "seq_len (--seq-len)");
  ParallelPlan unfused = cp_plan(2, CpComm::kP2p);
  unfused.attention = AttentionKind::kUnfused;
  refuses(model, unfused, "attention (--attention)");
  ParallelPlan op_level = cp_plan(2, CpComm::kAllGather);
  op_level.recompute = RecomputeKind::kSelectiveOp;
  refuses(model, op_level, "recompute (--recompute)");
  // 4 key/value heads over tp 2 x cp 4.
  refuses(model, cp_plan(4, CpComm::kAllToAll, 2), "cp_comm (--cp-comm-type)");
  ModelSpec windowed = model;
  windowed.sliding_window = 128;
  refuses(windowed, cp_plan(2, CpComm::kP2p), "cp_comm (--cp-comm-type)");
  validate_plan(cp_plan(2, CpComm::kAllToAll), windowed, std::nullopt, "test");
  // MoE models take cp (tests/sim/expert_parallel_test.cpp), and latent attention
  // (tests/plan/latent_attention_test.cpp), whose a2a needs whole heads per rank as a dense
  // model's: 8 heads over tp 2 x cp 8 are refused.
  ModelSpec latent = model;
  latent.kv_heads = latent.heads;
  latent.kv_lora_rank = 64;
  latent.qk_nope_head_dim = 32;
  latent.qk_rope_head_dim = 16;
  latent.v_head_dim = 32;
  validate_plan(cp_plan(2, CpComm::kP2p), latent, std::nullopt, "test");
  refuses(latent, cp_plan(8, CpComm::kAllToAll, 2), "cp_comm (--cp-comm-type)");
  ParallelPlan sp = cp_plan(2, CpComm::kP2p, 4);
  sp.sequence_parallel = true;
  sp.seq_len = 20;  // 2 cp = 4 divides it, cp x tp = 8 does not
  refuses(model, sp, "seq_len (--seq-len)");
}

}  // namespace
}  // namespace strata
