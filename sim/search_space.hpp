#pragma once
// The plans a search considers for one model on one or more cluster sizes: every DP x TP x PP
// split of the GPUs, interleaving, micro-batch, ZeRO stage, recompute, sequence parallelism and
// pipeline schedule, each checked by validate_plan as a user's plan would be.

#include <cstdint>
#include <string>
#include <vector>

#include "models/model_spec.hpp"
#include "models/ops.hpp"
#include "plan/parallel_plan.hpp"
#include "topologies/cluster_spec.hpp"

namespace strata {

struct SearchSpace {
  ModelSpec model;
  ClusterSpec cluster;
  std::vector<int64_t> gpus;  // cluster sizes to compare, each a whole search
  int64_t global_batch = 0;   // sequences per step
  int64_t seq_len = 0;
  DType dtype = DType::kBf16;
  // The software stack every plan runs on: its framework, attention, overlaps, buckets, model
  // state precision, FP8, host dispatch, MoE dispatcher, grouped GEMMs, expert imbalance and CP
  // exchange are taken from here; the parallel layout, batch split, recompute and schedule fields
  // are enumerated, ep among the divisors of dp and of the experts (MoE models), cp among the
  // divisors of this cp (1 unless asked for, so that a dense search is unchanged).
  ParallelPlan stack;
  // TP spans at most one node (NVLink) unless this is set (Megatron-LM's advice, Narayanan et al.
  // 2021 Sec. 3.3: TP across nodes runs its collectives over the slower fabric).
  bool allow_cross_node_tp = false;
};

// Plans validate_plan refused, grouped by the field it named.
struct RefusalCount {
  std::string field;    // e.g. "tp (--tp)"
  std::string example;  // one of the problems, e.g. "tp 8 does not divide the 12 ... heads"
  int64_t plans = 0;
};

struct Enumeration {
  std::vector<ParallelPlan> plans;     // valid ones, in the order enumerated
  int64_t enumerated = 0;              // valid and refused
  std::vector<RefusalCount> refusals;  // most common first (ties by field)
};

// Per size in `space.gpus` (in the order given): tp over the divisors of the GPUs per node (of the
// GPUs with allow_cross_node_tp), pp over the divisors of the rest, each splitting the layers
// evenly or, where pp does not divide them, with lighter first and last stages (Llama 3 405B's
// split; search_space.cpp), schedules 1f1b, interleaved with each vpp >= 2 dividing the layers
// per (middle) stage, and gpipe (1f1b alone when pp = 1), micro-batches dividing the per-replica
// batch, ZeRO 0-3 (0 alone when dp = 1: the stages differ only in what they shard over dp),
// recompute none, selective (not under flash attention, where it is none), full, and sequence
// parallelism off and on (off alone when tp = 1); the ZeRO stages the stack's framework runs, and
// its overlaps: the gradient-reduce and parameter-gather overlaps on where the framework has them
// and dp > 1 (they only hide communication), and, when the stack has the TP communication overlap,
// each sequence-parallel plan with and without it.
Enumeration enumerate_plans(const SearchSpace& space);

}  // namespace strata
