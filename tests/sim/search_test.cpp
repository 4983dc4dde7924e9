// The search on small spaces: what it enumerates (sim/search_space.hpp), and that pruning by the
// lower bounds and splitting the work over threads do not change what it finds (sim/search.hpp).

#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "plan/framework.hpp"
#include "sim/search.hpp"
#include "sim/search_json.hpp"
#include "sim/search_space.hpp"
#include "tests/sim/search_fixtures.hpp"

namespace strata {
namespace {

using test::describe;

SearchSpace gpt2_space(std::vector<int64_t> gpus, int64_t global_batch) {
  SearchSpace space;
  space.model = load_model("gpt2-124m");
  space.cluster = load_cluster("dgx-h100");
  space.gpus = std::move(gpus);
  space.global_batch = global_batch;
  space.seq_len = 1024;
  return space;
}

SearchResult search(const SearchSpace& space, const SearchOptions& options) {
  ThreadEvaluator evaluator(space, options);
  return run_search(space, options, evaluator);
}

// GPT-2 124M (12 layers, 12 heads, MLP 3072) on 8 GPUs of dgx-h100 (8 per node), global batch 16,
// seq 1024. By the rules of enumerate_plans:
//   tp in {1, 2, 4, 8} (divisors of 8, all within a node); pp over the divisors of 8 / tp that
//   split the 12 layers: tp 1 and 2 take pp 1, 2, 4; tp 4 takes pp 1, 2; tp 8 takes pp 1 (pp 8
//   has no uneven split: 2 layers on each of 6 middle stages leave none for the ends);
//   schedules: pp 1 -> 1 (1f1b); pp 2 -> 1f1b, interleaved vpp 2, 3, 6 (divisors >= 2 of 12/2),
//   gpipe = 5; pp 4 -> 1f1b, interleaved vpp 3 (12/4 = 3), gpipe = 3;
//   micro-batches: the divisors of 16/dp: dp 8 -> 2, dp 4 -> 3, dp 2 -> 4, dp 1 -> 5;
//   ZeRO 0-3 when dp > 1 (4), else 1; recompute none and full (2: under the default stack's
//   flash attention selective recompute is the same plan as none); sequence parallel 2 when
//   tp > 1, else 1; overlaps: the gradient and parameter overlaps are simply on where dp > 1, and
//   the default stack has no TP overlap to try.
// Enumerated (schedules x micro-batches x zero x recompute x sp):
//   tp 1: pp 1 dp 8: 1x2x4x2x1 = 16;  pp 2 dp 4: 5x3x4x2x1 = 120;  pp 4 dp 2: 3x4x4x2x1 = 96
//   tp 2: pp 1 dp 4: 1x3x4x2x2 = 48;  pp 2 dp 2: 5x4x4x2x2 = 320;  pp 4 dp 1: 3x5x1x2x2 = 60
//   tp 4: pp 1 dp 2: 1x4x4x2x2 = 64;  pp 2 dp 1: 5x5x1x2x2 = 100
//   tp 8: pp 1 dp 1: 1x5x1x2x2 = 20
//   total 232 + 428 + 164 + 20 = 844; with --tp-comm-overlap each sp plan twice: the sp
//   column counts 3 instead of 2, 232 + 642 + 246 + 30 = 1150.
// Refused by validate_plan:
//   tp 8 does not divide the 12 heads: all 20 of tp 8;
//   interleaved with micro-batches m = 16 / (dp x mb) not a multiple of pp (the tp check passes):
//     tp 1 pp 2 dp 4: mb 4 (m 1), 3 vpp x 4 zero x 2 = 24;  tp 1 pp 4 dp 2: mb 4, 8 (m 2, 1),
//     1 x 2 x 4 x 2 = 16;  tp 2 pp 2 dp 2: mb 8 (m 1), 3 x 4 x 2 x 2 = 48;  tp 2 pp 4 dp 1:
//     mb 8, 16 (m 2, 1), 1 x 2 x 2 x 2 = 8;  tp 4 pp 2 dp 1: mb 16 (m 1), 3 x 2 x 2 = 12;
//     = 108 on global_batch.
//   valid: 844 - 20 - 108 = 716.
TEST_CASE("gpt2-124m on 8 GPUs enumerates 844 plans, 716 of them valid", "[search][enumerate]") {
  const SearchSpace space = gpt2_space({8}, 16);
  const Enumeration enumeration = enumerate_plans(space);
  CHECK(enumeration.enumerated == 844);
  CHECK(enumeration.plans.size() == 716);
  REQUIRE(enumeration.refusals.size() == 2);
  CHECK(enumeration.refusals[0].field == "global_batch (--global-batch)");
  CHECK(enumeration.refusals[0].plans == 108);
  CHECK(enumeration.refusals[1].field == "tp (--tp)");
  CHECK(enumeration.refusals[1].plans == 20);

  int64_t interleaved = 0;
  int64_t sequence_parallel = 0;
  int64_t zero = 0;
  for (const ParallelPlan& plan : enumeration.plans) {
    INFO(describe(plan));
    CHECK_NOTHROW(validate_plan(plan, space.model, 8, "test"));
    CHECK(plan.dp * plan.tp * plan.pp == 8);
    CHECK((!plan.sequence_parallel || plan.tp > 1));
    CHECK((plan.zero_stage == 0 || plan.dp > 1));
    CHECK(plan.global_batch == 16);
    CHECK(plan.seq_len == 1024);
    interleaved += plan.schedule == ScheduleKind::kInterleaved ? 1 : 0;
    sequence_parallel += plan.sequence_parallel ? 1 : 0;
    zero += plan.zero_stage > 0 ? 1 : 0;
    CHECK((!plan.overlap.tp_comm || plan.sequence_parallel));
    CHECK(plan.overlap.grad_reduce == (plan.dp > 1));
    CHECK((!plan.overlap.param_gather || (plan.overlap.grad_reduce && plan.zero_stage > 0)));
  }
  // The rules above are exercised, not vacuous: interleaved, sp and ZeRO plans are among them.
  CHECK(interleaved > 0);
  CHECK(sequence_parallel > 0);
  CHECK(zero > 0);

  SearchSpace with_tp_overlap = space;
  with_tp_overlap.stack.overlap.tp_comm = true;
  CHECK(enumerate_plans(with_tp_overlap).enumerated == 1150);
}

// The stack's framework bounds the search (plan/framework.hpp): megatron-2022 runs ZeRO 0-1 and
// no overlap beyond its own; ddp is data-parallel only, its buckets already overlapped.
TEST_CASE("the search keeps to the stack's framework", "[search][enumerate]") {
  SearchSpace space = gpt2_space({8}, 16);
  space.stack = apply_framework(space.stack, Framework::kMegatron2022);
  for (const ParallelPlan& plan : enumerate_plans(space).plans) {
    INFO(describe(plan));
    CHECK(plan.framework == Framework::kMegatron2022);
    CHECK(plan.attention == AttentionKind::kUnfused);
    CHECK(plan.zero_stage <= 1);
    CHECK(plan.overlap == space.stack.overlap);
  }
  space.stack = apply_framework(space.stack, Framework::kDdp);
  const Enumeration ddp = enumerate_plans(space);
  REQUIRE(!ddp.plans.empty());
  for (const ParallelPlan& plan : ddp.plans) {
    CHECK(plan.dp == 8);
    CHECK(plan.zero_stage == 0);
    CHECK(plan.overlap.grad_reduce);
  }
}

// Expert parallelism is enumerated for an MoE model (each ep dividing dp and the 8 experts of
// Mixtral 8x7B: on 16 GPUs at tp 1 pp 1 dp 16 that is ep 1, 2, 4, 8), and expert tensor
// parallelism (each etp dividing tp, ep then a multiple of tp / etp: at tp 2 etp 2 and 1), never
// for a dense one; cp only up to the stack's cp (1 unless asked for): each cp dividing it,
// dp = gpus / (tp pp cp).
TEST_CASE("the search enumerates ep for MoE models and cp up to the stack's",
          "[search][enumerate]") {
  SearchSpace moe = gpt2_space({16}, 32);
  moe.model = load_model(std::string(STRATA_SOURCE_DIR) + "/tests/models/data/mixtral-8x7b.json");
  std::set<int64_t> eps;
  std::set<std::pair<int64_t, int64_t>> tp2_splits;  // (ep, etp) at tp 2, pp 1
  for (const ParallelPlan& plan : enumerate_plans(moe).plans) {
    CHECK(plan.dp % plan.ep_from_dp() == 0);
    CHECK(plan.ep % plan.tp_outer() == 0);
    CHECK(plan.cp == 1);
    if (plan.tp == 1 && plan.pp == 1) eps.insert(plan.ep);
    if (plan.tp == 2 && plan.pp == 1) tp2_splits.insert({plan.ep, plan.expert_tp()});
  }
  CHECK(eps == std::set<int64_t>{1, 2, 4, 8});
  // dp 8 at tp 2: etp 2 with ep 1, 2, 4, 8; etp 1 with ep 2 x (1, 2, 4) (ep 16 > 8 experts).
  CHECK(tp2_splits == std::set<std::pair<int64_t, int64_t>>{
                          {1, 2}, {2, 2}, {4, 2}, {8, 2}, {2, 1}, {4, 1}, {8, 1}});
  SearchSpace dense = gpt2_space({8}, 16);
  for (const ParallelPlan& plan : enumerate_plans(dense).plans) {
    CHECK(plan.ep == 1);
    CHECK(plan.etp == 0);
  }
  dense.stack.cp = 4;
  std::set<int64_t> cps;
  for (const ParallelPlan& plan : enumerate_plans(dense).plans) {
    CHECK(plan.gpus() == 8);
    cps.insert(plan.cp);
  }
  CHECK(cps == std::set<int64_t>{1, 2, 4});
}

// Where pp does not divide the layers the search splits them unevenly, lighter on the first and
// last stage, so Llama 3 405B (126 layers) on 16,384 GPUs has the pp 16 layout of Meta's paper
// (Dubey et al. 2024, Sec. 3.3.2: 7 + 14 x 8 + 7, interleaved) and a pp 8 one (15 + 6 x 16 + 15).
TEST_CASE("llama3-405b on 16384 GPUs enumerates uneven pp 8 and pp 16 plans, interleaved too",
          "[search][enumerate]") {
  SearchSpace space;
  space.model = load_model("llama3-405b");
  space.cluster = load_cluster("dgx-h100");
  space.gpus = {16384};
  space.global_batch = 2048;
  space.seq_len = 8192;
  const Enumeration enumeration = enumerate_plans(space);
  std::set<std::tuple<int64_t, int64_t, int64_t, int64_t>> splits;  // pp, first, last, vpp
  for (const ParallelPlan& plan : enumeration.plans) {
    if (plan.pp == 8 || plan.pp == 16)
      splits.insert({plan.pp, plan.first_stage_layers, plan.last_stage_layers, plan.vpp});
  }
  CHECK(splits.count({16, 7, 7, 1}) == 1);
  CHECK(splits.count({16, 7, 7, 2}) == 1);
  CHECK(splits.count({16, 7, 7, 4}) == 1);
  CHECK(splits.count({16, 7, 7, 8}) == 0);  // 8 chunks do not fit in 7 layers
  CHECK(splits.count({8, 15, 15, 1}) == 1);
  CHECK(splits.count({8, 15, 15, 2}) == 1);
  for (const auto& [pp, first, last, vpp] : splits) {
    CHECK(first > 0);  // neither pp divides 126: every such plan is uneven
  }
}

std::vector<std::string> dumps(const SearchResult& result, size_t count) {
  std::vector<std::string> out;
  for (size_t i = 0; i < count && i < result.ranked.size(); ++i)
    out.push_back(outcome_json(result.ranked[i]).dump());
  return out;
}

std::vector<std::string> front_dumps(const SearchResult& result) {
  std::vector<std::string> out;
  for (const size_t index : result.pareto) out.push_back(outcome_json(result.ranked[index]).dump());
  return out;
}

// sim/search.hpp: a plan is skipped only when its lower bound is above the K-th best objective
// and its size's fastest step, and stopped only once its clock passes both; so the top K (same
// plans, same order, identical figures, same bounds) and the Pareto front (each size's fastest
// plan is exact) equal those of simulating every plan that fits (--exhaustive), while fewer
// plans are simulated to the end of the step.
TEST_CASE("pruning by the bound gives the exhaustive search's top K and Pareto front",
          "[search][prune]") {
  struct PruneCase {
    const char* name;
    Objective objective;
    std::vector<int64_t> gpus;
  };
  const std::vector<PruneCase> cases{
      {"time on 16 GPUs", Objective::kTime, {16}},
      {"time on 8 or 16 GPUs", Objective::kTime, {8, 16}},
      {"cost on 8 or 16 GPUs", Objective::kCost, {8, 16}},
  };
  for (const PruneCase& c : cases) {
    INFO(c.name);
    const SearchSpace space = gpt2_space(c.gpus, 32);
    SearchOptions options;
    options.objective = c.objective;
    options.top = 5;
    const SearchResult pruned = search(space, options);
    options.exhaustive = true;
    const SearchResult exhaustive = search(space, options);

    REQUIRE(pruned.ranked.size() >= 5);
    CHECK(dumps(pruned, 5) == dumps(exhaustive, 5));
    REQUIRE(!pruned.pareto.empty());
    CHECK(front_dumps(pruned) == front_dumps(exhaustive));
    CHECK(pruned.counts.enumerated == exhaustive.counts.enumerated);
    CHECK(exhaustive.counts.skipped_by_bound == 0);
    CHECK(exhaustive.counts.stopped == 0);
    CHECK(pruned.counts.skipped_by_bound > 0);
    CHECK(pruned.counts.simulated < exhaustive.counts.simulated);
    // With two sizes the front holds a plan of each: 8 GPUs are cheaper, 16 faster.
    if (c.gpus.size() == 2) CHECK(pruned.pareto.size() >= 2);
  }
}

// sim/search.hpp: batches are fixed in size and order, so which plans are simulated, and what
// each gives, does not depend on the threads: 1 and 2 threads rank the same plans with identical
// outcomes (outcome_json, doubles written exactly) and the same counts and front.
TEST_CASE("1 and 2 threads give identical searches", "[search][threads]") {
  const SearchSpace space = gpt2_space({8, 16}, 32);
  SearchOptions options;
  options.objective = Objective::kCost;
  options.top = 5;
  options.threads = 1;
  const SearchResult one = search(space, options);
  options.threads = 2;
  const SearchResult two = search(space, options);

  REQUIRE(one.ranked.size() >= 5);
  CHECK(dumps(one, one.ranked.size()) == dumps(two, two.ranked.size()));
  CHECK(one.pareto == two.pareto);
  const SearchCounts& a = one.counts;
  const SearchCounts& b = two.counts;
  CHECK(a.enumerated == b.enumerated);
  CHECK(a.refused == b.refused);
  CHECK(a.over_memory_bound == b.over_memory_bound);
  CHECK(a.over_memory_plan == b.over_memory_plan);
  CHECK(a.skipped_by_bound == b.skipped_by_bound);
  CHECK(a.stopped == b.stopped);
  CHECK(a.simulated == b.simulated);
  CHECK(a.over_memory_simulated == b.over_memory_simulated);
}

}  // namespace
}  // namespace strata
