// A grid of plans compiles to graphs that pass the validator (acyclic, p2p matched, collectives
// complete, memory never negative), and folded and full graphs agree: every rank of a stage runs
// the same program, so the full graph's tasks per stage are dp x tp times the folded graph's.

#include <catch2/catch.hpp>

#include <map>
#include <set>

#include "common/error.hpp"
#include "tests/plan/plan_fixtures.hpp"

namespace strata {
namespace {

// 8 layers, 8 heads and 8 kv heads: every tp up to 8 and pp x vpp up to 8 divide it.
ModelSpec grid_model() { return test::small_model(8, 256, 8, 512, 256); }

std::map<int32_t, int64_t> tasks_per_stage(const TaskGraph& graph) {
  std::map<int32_t, int32_t> stage_of;
  for (const GraphRank& r : graph.ranks()) stage_of[r.rank] = r.stage;
  std::map<int32_t, int64_t> counts;
  for (const Task& t : graph.tasks()) ++counts[stage_of.at(t.rank)];
  return counts;
}

void check_plan(const ModelSpec& model, const ParallelPlan& plan) {
  INFO("dp " << plan.dp << " tp " << plan.tp << " pp " << plan.pp << " vpp " << plan.vpp << " zero "
             << plan.zero_stage << " schedule " << to_string(plan.schedule) << " recompute "
             << to_string(plan.recompute) << " sp " << plan.sequence_parallel << " micro-batch "
             << plan.micro_batch << " global " << plan.global_batch);
  const CompiledPlan folded = test::compile_checked(model, plan, GraphMode::kFolded);
  const CompiledPlan full = test::compile_checked(model, plan, GraphMode::kFull);
  for (const auto& error : folded.validation.errors) FAIL_CHECK("folded: " << error);
  for (const auto& error : full.validation.errors) FAIL_CHECK("full: " << error);
  CHECK(folded.graph.ranks().size() == static_cast<size_t>(plan.pp));
  CHECK(full.graph.ranks().size() == static_cast<size_t>(plan.gpus()));
  const auto folded_counts = tasks_per_stage(folded.graph);
  const auto full_counts = tasks_per_stage(full.graph);
  for (const auto& [stage, count] : folded_counts) {
    CHECK(full_counts.at(stage) == count * plan.dp * plan.tp);
  }
  CHECK(full.flops.model == Approx(folded.flops.model).epsilon(1e-9));
  CHECK(full.memory.peak_bytes == folded.memory.peak_bytes);
}

TEST_CASE("every dp x tp x pp shape compiles to a valid graph, folded and full", "[plan][grid]") {
  const ModelSpec model = grid_model();
  const ScheduleKind schedules[] = {ScheduleKind::kGpipe, ScheduleKind::k1F1B,
                                    ScheduleKind::kInterleaved};
  const RecomputeKind recomputes[] = {RecomputeKind::kNone, RecomputeKind::kSelective,
                                      RecomputeKind::kFull};
  int variant = 0;
  for (const int64_t dp : {1, 2, 3, 4}) {
    for (const int64_t tp : {1, 2, 4, 8}) {
      for (const int64_t pp : {1, 2, 4}) {
        ParallelPlan plan = test::make_plan(dp, tp, pp, 1 + variant % 2, 0, 128);
        plan.global_batch = dp * plan.micro_batch * 4;  // 4 micro-batches: a multiple of pp
        plan.zero_stage = variant % 4;
        plan.schedule = schedules[variant % 3];
        plan.recompute = recomputes[(variant / 3) % 3];
        plan.sequence_parallel = tp > 1 && variant % 2 == 0;
        if (plan.schedule == ScheduleKind::kInterleaved) {
          if (pp == 1) {
            plan.schedule = ScheduleKind::k1F1B;
          } else {
            plan.vpp = 2;
          }
        }
        ++variant;
        check_plan(model, plan);
      }
    }
  }
}

TEST_CASE("every ZeRO stage x schedule x recompute x sequence parallel compiles", "[plan][grid]") {
  const ModelSpec model = grid_model();
  for (const int64_t zero : {0, 1, 2, 3}) {
    for (const ScheduleKind schedule :
         {ScheduleKind::kGpipe, ScheduleKind::k1F1B, ScheduleKind::kInterleaved}) {
      for (const RecomputeKind recompute :
           {RecomputeKind::kNone, RecomputeKind::kSelective, RecomputeKind::kFull}) {
        for (const bool sp : {false, true}) {
          ParallelPlan plan = test::make_plan(2, 2, 2, 1, 8, 128);
          plan.zero_stage = zero;
          plan.schedule = schedule;
          plan.vpp = schedule == ScheduleKind::kInterleaved ? 4 : 1;
          plan.recompute = recompute;
          plan.sequence_parallel = sp;
          check_plan(model, plan);
        }
      }
    }
  }
}

// Llama 3 405B's uneven split (one layer fewer on the first and last of 16 stages) and a tied
// embedding across stages both keep the graph valid.
TEST_CASE("uneven pipeline split and tied embeddings across stages", "[plan]") {
  ModelSpec model = grid_model();
  model.layers = 10;
  ParallelPlan plan = test::make_plan(2, 2, 4, 1, 8, 128);
  plan.first_stage_layers = 2;
  plan.last_stage_layers = 2;
  CHECK(layers_per_stage(plan, model) == std::vector<int64_t>{2, 3, 3, 2});
  check_plan(model, plan);
  model.tied_embeddings = true;
  const CompiledPlan compiled = test::compile_checked(model, plan);
  int embedding_syncs = 0;
  for (const Task& t : compiled.graph.tasks())
    embedding_syncs += t.role == TaskRole::kEmbeddingGradSync;
  CHECK(embedding_syncs == 2);  // one on the first stage, one on the last
}

// Uneven stages with interleaving (Llama 3 405B: 126 layers on 16 stages, 7 on the ends, 2 chunks
// each): every stage's chunks split its layers, the end stages' light chunks holding the embedding
// (first chunk of stage 0) and the output layer (last chunk of the last stage), and the chunks in
// virtual-stage order run through the layers once, in order (chunk_layout's rule). The graph's
// layer tasks on each stage are exactly its chunks' layers.
TEST_CASE("uneven pipeline split with interleaving", "[plan]") {
  ModelSpec model = grid_model();
  model.layers = 14;
  ParallelPlan plan = test::make_plan(1, 2, 4, 1, 8, 128);
  plan.schedule = ScheduleKind::kInterleaved;
  plan.vpp = 2;
  plan.first_stage_layers = 3;
  plan.last_stage_layers = 3;
  validate_plan(plan, model, std::nullopt, "test");
  CHECK(layers_per_stage(plan, model) == std::vector<int64_t>{3, 4, 4, 3});
  const std::vector<ChunkLayers> layout = chunk_layout(plan, model);
  // Virtual stages 0-3 are the stages' first chunks, 4-7 their second.
  const std::vector<int64_t> counts{1, 2, 2, 2, 2, 2, 2, 1};
  int64_t next = 0;
  for (size_t v = 0; v < layout.size(); ++v) {
    CHECK(layout[v].count == counts[v]);
    CHECK(layout[v].first == next);
    next += layout[v].count;
  }
  CHECK(next == model.layers);
  check_plan(model, plan);
  const CompiledPlan compiled = test::compile_checked(model, plan);
  std::map<int32_t, int32_t> stage_of;
  for (const GraphRank& r : compiled.graph.ranks()) stage_of[r.rank] = r.stage;
  std::map<int32_t, std::set<int32_t>> layers_of_stage;
  for (const Task& t : compiled.graph.tasks()) {
    if (t.layer >= 0) layers_of_stage[stage_of.at(t.rank)].insert(t.layer);
  }
  CHECK(layers_of_stage[0] == std::set<int32_t>{0, 7, 8});
  CHECK(layers_of_stage[3] == std::set<int32_t>{5, 6, 13});
  // A stage of 3 layers cannot hold 4 chunks.
  plan.vpp = 4;
  CHECK_THROWS_AS(validate_plan(plan, model, std::nullopt, "test"), InputError);
}

}  // namespace
}  // namespace strata
