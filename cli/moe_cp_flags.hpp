#pragma once
// The plan flags of expert parallelism (mixture of experts) and context parallelism, under
// Megatron-LM's names (megatron/training/arguments.py: _add_distributed_args and _add_moe_args)
// and Strata's short ones. Two sets:
//  - the axes, sized with tp and pp by `strata plan`, `simulate` and `train`: --ep, --etp, --cp;
//  - how the stack runs them, which `strata search` also takes as given for every plan it
//    enumerates (with the other stack flags): --moe-token-dispatcher-type, --moe-grouped-gemm,
//    --moe-imbalance, --cp-comm-type.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "plan/parallel_plan.hpp"

namespace strata::cli {

// What was given; nullopt (or false, or empty) where a flag was not.
struct MoeCpFlags {
  std::optional<int64_t> ep, etp, cp;
  std::optional<std::string> moe_dispatcher;  // --moe-token-dispatcher-type
  bool grouped_gemm = false;                  // --moe-grouped-gemm
  std::optional<double> moe_imbalance;
  // --cp-comm-type: Megatron-LM takes one value or one per layer (nargs='+'); the list is read
  // whole so that a per-layer one is refused rather than cut to its first value.
  std::vector<std::string> cp_comm;
};

void add_moe_cp_axis_flags(CLI::App& command, MoeCpFlags& flags);
void add_moe_cp_stack_flags(CLI::App& command, MoeCpFlags& flags);

// `plan` with the axes the flags give; their ranges are validate_plan_sizes's, but for --etp,
// refused here below 1 (0 is the plan's "same as tp", which the flag says by its absence).
ParallelPlan apply_moe_cp_axis_flags(const MoeCpFlags& flags, ParallelPlan plan);
// `plan` with the dispatcher, grouped GEMMs, imbalance and CP exchange the flags give. Throws
// InputError naming the flag for a value Strata does not model (the flex dispatcher, a per-layer
// or hierarchical --cp-comm-type) or an unknown one, with the fix.
ParallelPlan apply_moe_cp_stack_flags(const MoeCpFlags& flags, ParallelPlan plan);

}  // namespace strata::cli
