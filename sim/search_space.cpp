#include "sim/search_space.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "common/error.hpp"
#include "plan/framework.hpp"

namespace strata {

namespace {

// In increasing order, by trial division up to sqrt(n): a global batch of 2^32 costs 2^16 steps.
std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> low;
  std::vector<int64_t> high;
  for (int64_t d = 1; d <= n / d; ++d) {
    if (n % d != 0) continue;
    low.push_back(d);
    if (d != n / d) high.push_back(n / d);
  }
  low.insert(low.end(), high.rbegin(), high.rend());
  return low;
}

struct ScheduleChoice {
  ScheduleKind schedule = ScheduleKind::k1F1B;
  int64_t vpp = 1;
};

// How `layers` go over `pp` stages: evenly where pp divides them; otherwise ceil(layers / pp) on
// each middle stage and the rest split over the first and the last (the first takes the smaller
// half), as Llama 3 405B's 126 layers ran on 16 stages: 7, 8 x 14, 7 (Dubey et al. 2024,
// Sec. 3.3.2). Nullopt where no such split leaves the ends a layer each.
struct PipelineSplit {
  int64_t pp = 1;
  int64_t first_stage_layers = 0;  // 0: even
  int64_t last_stage_layers = 0;
  int64_t stage_layers = 0;  // each middle stage's (every stage's when even)
};

std::optional<PipelineSplit> pipeline_split(int64_t pp, int64_t layers) {
  if (layers % pp == 0) return PipelineSplit{pp, 0, 0, layers / pp};
  if (pp < 2) return std::nullopt;
  const int64_t middle = (layers + pp - 1) / pp;
  const int64_t ends = layers - middle * (pp - 2);
  if (ends < 2) return std::nullopt;
  return PipelineSplit{pp, ends / 2, ends - ends / 2, middle};
}

// 1f1b, interleaved with each vpp >= 2 dividing the middle stages' layers (validate_plan refuses
// the ones an end stage is too small for), and gpipe; 1f1b alone without a pipeline.
std::vector<ScheduleChoice> schedules(const PipelineSplit& split) {
  if (split.pp == 1) return {{ScheduleKind::k1F1B, 1}};
  std::vector<ScheduleChoice> choices{{ScheduleKind::k1F1B, 1}};
  for (const int64_t vpp : divisors(split.stage_layers)) {
    if (vpp >= 2) choices.push_back({ScheduleKind::kInterleaved, vpp});
  }
  choices.push_back({ScheduleKind::kGpipe, 1});
  return choices;
}

// The overlap settings a plan is tried with. The gradient-reduce and parameter-gather overlaps
// only hide communication behind compute, so where the stack's framework has them (megatron-core,
// deepspeed's overlap_comm) and dp > 1 they are on, as Megatron-LM's documentation advises with a
// sharded optimizer. The TP overlap trades exposed communication for smaller, slower GEMM chunks
// (and doubles the graph's GEMM tasks, so the search's time): a stack with it tries each
// sequence-parallel plan with and without it.
std::vector<Overlap> overlaps(const ParallelPlan& stack, int64_t dp, int64_t zero,
                              bool sequence_parallel) {
  Overlap base = stack.overlap;
  const bool megatron = stack.framework == Framework::kMegatronCore;
  if ((megatron || stack.framework == Framework::kDeepSpeed) && dp > 1) {
    base.grad_reduce = true;
    base.param_gather = base.param_gather || megatron;
  }
  base.tp_comm = false;
  base.param_gather = base.param_gather && zero > 0;
  std::vector<Overlap> choices{base};
  if (stack.overlap.tp_comm && sequence_parallel) {
    choices.push_back(base);
    choices.back().tp_comm = true;
  }
  return choices;
}

// How an MoE model's experts split: expert parallelism and expert tensor parallelism.
struct ExpertSplit {
  int64_t ep = 1;
  int64_t etp = 0;  // 0: tp (Megatron's default)
};

// The expert splits of an MoE model on dp x tp ranks: each expert tensor parallelism etp dividing
// tp (tp itself first), and each ep spanning the tp / etp TP ranks that hold different experts
// times a divisor of dp (Megatron carves ep out of dp), dividing the routed experts; a dense
// model has ep 1 alone.
std::vector<ExpertSplit> expert_splits(const ModelSpec& model, int64_t dp, int64_t tp) {
  if (!model.moe()) return {ExpertSplit{}};
  std::vector<ExpertSplit> splits;
  std::vector<int64_t> expert_tps = divisors(tp);
  std::reverse(expert_tps.begin(), expert_tps.end());
  for (const int64_t etp : expert_tps) {
    for (const int64_t ep_from_dp : divisors(dp)) {
      const int64_t ep = tp / etp * ep_from_dp;
      if (model.experts % ep == 0) splits.push_back({ep, etp == tp ? 0 : etp});
    }
  }
  return splits;
}

// Every variant of a plan whose layout (gpus, tp, pp, schedule, micro-batch) is set: each ZeRO
// stage the framework runs, expert (tensor) parallelism, recompute policy, sequence parallelism
// and overlap, each given to `consider`.
template <typename Consider>
void enumerate_variants(const SearchSpace& space, const ParallelPlan& layout, Consider consider) {
  const ParallelPlan& stack = space.stack;
  const int64_t dp = layout.dp;
  for (int64_t zero = 0; zero <= (dp > 1 ? 3 : 0); ++zero) {
    if (!framework_runs_zero_stage(stack.framework, zero)) continue;
    for (const ExpertSplit& experts : expert_splits(space.model, dp, layout.tp)) {
      for (const RecomputeKind recompute : {RecomputeKind::kNone, RecomputeKind::kSelective,
                                            RecomputeKind::kFull, RecomputeKind::kSelectiveOp}) {
        // Under flash attention selective recompute rebuilds nothing: the plan is none's.
        if (recompute == RecomputeKind::kSelective && stack.attention == AttentionKind::kFlash)
          continue;
        // Op-level selective checkpointing is torchtitan's (FSDP2 stack, flash only).
        if (recompute == RecomputeKind::kSelectiveOp &&
            (stack.framework != Framework::kFsdp2 || stack.attention != AttentionKind::kFlash))
          continue;
        for (const bool sequence_parallel : {false, true}) {
          if (sequence_parallel && layout.tp == 1) continue;
          for (const Overlap& overlap : overlaps(stack, dp, zero, sequence_parallel)) {
            ParallelPlan plan = layout;
            plan.zero_stage = zero;
            plan.ep = experts.ep;
            plan.etp = experts.etp;
            plan.recompute = recompute;
            plan.recompute_layers = 0;
            plan.sequence_parallel = sequence_parallel;
            plan.overlap = overlap;
            consider(plan);
          }
        }
      }
    }
  }
}

}  // namespace

Enumeration enumerate_plans(const SearchSpace& space) {
  const ModelSpec& model = space.model;
  Enumeration out;
  std::map<std::string, RefusalCount> refusals;
  const auto consider = [&](const ParallelPlan& plan) {
    ++out.enumerated;
    try {
      validate_plan(plan, model, plan.gpus(), "search");
      out.plans.push_back(plan);
    } catch (const InputError& refused) {
      RefusalCount& count = refusals[refused.field()];
      if (count.plans++ == 0) {
        count.field = refused.field();
        count.example = refused.problem();
      }
    }
  };

  // Context parallelism up to the stack's cp: each cp dividing it (a stack without cp, as by
  // default, enumerates cp 1 alone).
  const std::vector<int64_t> context_parallel = divisors(space.stack.cp);
  for (const int64_t gpus : space.gpus) {
    const int64_t tp_limit = space.allow_cross_node_tp ? gpus : space.cluster.gpus_per_node;
    for (const int64_t cp : context_parallel) {
      if (gpus % cp != 0) continue;
      for (const int64_t tp : divisors(gpus / cp)) {
        if (tp > tp_limit) continue;
        for (const int64_t pp : divisors(gpus / cp / tp)) {
          const std::optional<PipelineSplit> split = pipeline_split(pp, model.layers);
          if (!split) continue;
          const int64_t dp = gpus / (tp * pp * cp);
          // A global batch that dp does not divide is tried (and refused) once.
          const std::vector<int64_t> micro_batches = space.global_batch % dp == 0
                                                         ? divisors(space.global_batch / dp)
                                                         : std::vector<int64_t>{1};
          for (const ScheduleChoice& choice : schedules(*split)) {
            for (const int64_t micro_batch : micro_batches) {
              ParallelPlan layout = space.stack;
              layout.dp = dp;
              layout.tp = tp;
              layout.pp = pp;
              layout.cp = cp;
              layout.vpp = choice.vpp;
              layout.first_stage_layers = split->first_stage_layers;
              layout.last_stage_layers = split->last_stage_layers;
              layout.schedule = choice.schedule;
              layout.micro_batch = micro_batch;
              layout.global_batch = space.global_batch;
              layout.seq_len = space.seq_len;
              layout.dtype = space.dtype;
              enumerate_variants(space, layout, consider);
            }
          }
        }
      }
    }
  }
  for (auto& [field, count] : refusals) out.refusals.push_back(std::move(count));
  std::stable_sort(out.refusals.begin(), out.refusals.end(),
                   [](const RefusalCount& a, const RefusalCount& b) { return a.plans > b.plans; });
  return out;
}

}  // namespace strata
