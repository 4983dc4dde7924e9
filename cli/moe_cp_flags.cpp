#include "cli/moe_cp_flags.hpp"

#include <fmt/format.h>

#include "common/error.hpp"
#include "plan/plan_json.hpp"

namespace strata::cli {

namespace {

constexpr const char* kCommandLine = "command line";

[[noreturn]] void refuse(const char* flag, const std::string& problem, const std::string& fix) {
  throw InputError(kCommandLine, flag, problem, fix);
}

// Megatron-LM's --moe-token-dispatcher-type takes allgather (its default), alltoall and flex;
// flex runs the exchange through DeepEP's fused dispatch and combine kernels (with
// --moe-enable-deepep), which Strata does not model.
MoeDispatcher dispatcher_flag(const std::string& name) {
  const char* flag = "--moe-token-dispatcher-type";
  if (name == "flex") {
    refuse(flag,
           "flex (DeepEP's fused dispatch and combine kernels, --moe-enable-deepep) is not "
           "modelled",
           "use alltoall (the same token exchange by NCCL all-to-alls) or allgather");
  }
  return parse_moe_dispatcher(name, kCommandLine, flag);
}

// Megatron-LM's --cp-comm-type (nargs='+', default p2p) takes one type for every layer or one per
// layer, each p2p, all_gather, a2a or a2a+p2p (hierarchical: all-to-all inside the
// --hierarchical-context-parallel-sizes groups, a ring across them), which Transformer Engine's
// attention runs. Strata plans one of the first three for every layer.
CpComm cp_comm_flag(const std::vector<std::string>& values) {
  const char* flag = "--cp-comm-type";
  const char* fix = "give one of p2p, all_gather or a2a, for every layer";
  if (values.size() > 1) {
    refuse(flag,
           fmt::format("'{}' is a per-layer list, and Strata plans one type for every layer",
                       fmt::join(values, " ")),
           fix);
  }
  if (values.front() == "a2a+p2p") {
    refuse(flag,
           "a2a+p2p (hierarchical context parallelism, with "
           "--hierarchical-context-parallel-sizes) is not modelled",
           fix);
  }
  return parse_cp_comm(values.front(), kCommandLine, flag);
}

}  // namespace

void add_moe_cp_axis_flags(CLI::App& command, MoeCpFlags& flags) {
  const ParallelPlan defaults;
  command.add_option("--ep,--expert-model-parallel-size", flags.ep,
                     fmt::format("Expert-parallel size: an MoE layer's experts split over ep ranks "
                                 "of each data-parallel group (divides dp; default {})",
                                 defaults.ep));
  command.add_option("--etp,--expert-tensor-parallel-size", flags.etp,
                     "Tensor-parallel size inside each expert (default: tp)");
  command.add_option("--cp,--context-parallel-size", flags.cp,
                     fmt::format("Context-parallel size: each sequence split over cp ranks "
                                 "(default {})",
                                 defaults.cp));
}

void add_moe_cp_stack_flags(CLI::App& command, MoeCpFlags& flags) {
  const ParallelPlan defaults;
  command.add_option("--moe-token-dispatcher-type", flags.moe_dispatcher,
                     fmt::format("How MoE tokens reach their experts: allgather or alltoall "
                                 "(default {})",
                                 to_string(defaults.moe_dispatcher)));
  command.add_flag("--moe-grouped-gemm", flags.grouped_gemm,
                   "Megatron-LM: a rank's experts as one grouped GEMM per product");
  command.add_option("--moe-imbalance", flags.moe_imbalance,
                     "The busiest expert's tokens over the balanced share (default 1: balanced)");
  command.add_option("--cp-comm-type", flags.cp_comm,
                     fmt::format("How context-parallel ranks share keys and values: p2p, "
                                 "all_gather or a2a (default {})",
                                 to_string(defaults.cp_comm)));
}

ParallelPlan apply_moe_cp_axis_flags(const MoeCpFlags& flags, ParallelPlan plan) {
  if (flags.ep) plan.ep = *flags.ep;
  if (flags.cp) plan.cp = *flags.cp;
  if (flags.etp) {
    if (*flags.etp < 1) {
      refuse("--etp", fmt::format("must be at least 1, found {}", *flags.etp),
             "give the experts' tensor-parallel size, or leave it out for tp");
    }
    plan.etp = *flags.etp;
  }
  return plan;
}

ParallelPlan apply_moe_cp_stack_flags(const MoeCpFlags& flags, ParallelPlan plan) {
  if (flags.moe_dispatcher) plan.moe_dispatcher = dispatcher_flag(*flags.moe_dispatcher);
  if (flags.grouped_gemm) plan.grouped_gemm = true;
  if (flags.moe_imbalance) {
    // Refused here, not only by validate_plan_sizes (which also bounds it above), so that
    // `strata search` names the flag rather than refusing every plan.
    if (!(*flags.moe_imbalance >= 1)) {
      refuse("--moe-imbalance", fmt::format("must be at least 1, found {}", *flags.moe_imbalance),
             "give the busiest expert's tokens over the mean, 1 for balanced routing");
    }
    plan.moe_imbalance = *flags.moe_imbalance;
  }
  if (!flags.cp_comm.empty()) plan.cp_comm = cp_comm_flag(flags.cp_comm);
  return plan;
}

}  // namespace strata::cli
