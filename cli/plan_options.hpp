#pragma once
// The model, cluster and plan flags that `strata plan` (and later `simulate`, `search`) share,
// with Megatron-LM's names accepted too, and their resolution into validated inputs:
// defaults <- scenario file (--scenario) <- flags <- DeepSpeed config (--deepspeed-config).

#include <cstdint>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/model_flags.hpp"
#include "cli/moe_cp_flags.hpp"
#include "models/model_spec.hpp"
#include "plan/parallel_plan.hpp"
#include "topologies/cluster_spec.hpp"

namespace strata::cli {

// What was given on the command line; nullopt where a flag was not given.
struct PlanFlags {
  std::string scenario;
  std::string model;
  std::string cluster;
  std::optional<int64_t> gpus;
  std::optional<int64_t> dp, tp, pp, vpp, layers_per_virtual_stage, zero;
  std::optional<int64_t> micro_batch, global_batch, seq_len;
  std::optional<int64_t> first_stage_layers, last_stage_layers;
  std::optional<std::string> recompute, schedule, dtype;
  std::optional<std::string> attention, attention_backend;
  bool use_flash_attn = false;  // Megatron-LM's --use-flash-attn
  std::optional<std::string> framework;
  // Megatron-LM's overlap flags (store_true, as there) and --no-overlap-p2p-communication.
  bool tp_comm_overlap = false, overlap_grad_reduce = false, overlap_param_gather = false;
  bool overlap_p2p = false, no_overlap_p2p = false;
  std::optional<int64_t> bucket_size;  // --ddp-bucket-size
  bool grad_reduce_in_bf16 = false, grads_in_fp32 = false;
  std::optional<std::string> fp8;           // --fp8 / --fp8-format
  std::optional<int64_t> recompute_layers;  // --recompute-num-layers
  std::optional<std::string> recompute_method;
  std::optional<std::string> host_dispatch;
  bool cuda_graph = false;  // Megatron-LM's --enable-cuda-graph
  bool fp8_param_gather = false;
  bool offload_optimizer = false, offload_param = false;  // ZeRO-Offload to CPU
  std::optional<int64_t> prefetch_layers;                 // ZeRO 3 / FSDP2 prefetch window
  std::optional<double> horovod_cycle_ms;                 // HOROVOD_CYCLE_TIME
  std::optional<bool> fused_kernels;                      // --fused-kernels true|false
  bool recompute_activations = false;  // Megatron's --recompute-activations (selective)
  bool sequence_parallel = false;
  std::optional<std::string> rank_order;  // --rank-order tp-cp-ep-dp-pp
  bool tp_pp_dp_mapping = false;          // Megatron-LM's --use-tp-pp-dp-mapping
  bool distributed_optimizer = false;     // Megatron's --use-distributed-optimizer (ZeRO 1)
  bool bf16 = false;
  bool fp16 = false;
  std::string deepspeed_config;
  bool deepspeed = false;  // Megatron-DeepSpeed's --deepspeed: DeepSpeed runs the step
  ModelFlags model_flags;
  MoeCpFlags moe_cp;  // --ep, --etp, --cp and how the stack runs them
  // Older Megatron-LM and Megatron-DeepSpeed: --checkpoint-activations (full recompute),
  // --activations-checkpoint-method, --checkpoint-num-layers.
  bool checkpoint_activations = false;
  std::string megatron_args;  // read by expand_megatron_args before the flags are parsed
};

void add_plan_flags(CLI::App& command, PlanFlags& flags);
// The zoo's model and cluster names, for a command's --help footer.
std::string zoo_help();
// The flags of the software stack alone (framework, attention, overlaps, buckets, gradient dtype,
// FP8, host dispatch, offload, ZeRO-3 prefetch, the MoE dispatcher, grouped GEMMs and imbalance,
// the CP exchange), which `strata search` takes as given for every plan it enumerates.
void add_stack_flags(CLI::App& command, PlanFlags& flags);
// Sets the stack fields the flags give (--framework's preset is applied before, by the caller).
void apply_stack_flags(const PlanFlags& flags, ParallelPlan& plan);

// Validated inputs for the plan compiler.
struct PlanInputs {
  ModelSpec model;
  ClusterSpec cluster;
  ParallelPlan plan;
};

// Throws InputError naming the file or flag at fault. `measured_cluster` (a calibration file's
// host) stands in when neither --cluster nor a scenario names one.
PlanInputs resolve_plan_inputs(const PlanFlags& flags,
                               const std::optional<ClusterSpec>& measured_cluster = {});

// The scenario `make demo` runs when no model is given.
inline constexpr const char* kDefaultScenario = "scenarios/default.json";

}  // namespace strata::cli
