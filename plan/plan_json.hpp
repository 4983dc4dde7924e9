#pragma once
// ParallelPlan as JSON (the "plan" object of scenario files and of outputs), and the names of its
// enum values as the command line and JSON spell them. Stable keys:
//   {"dp", "tp", "pp", "vpp", "zero_stage", "micro_batch", "global_batch", "seq_len",
//    "recompute": "none|selective|full|selective-op", "sequence_parallel": bool,
//    "schedule": "gpipe|1f1b|interleaved", "dtype": "bf16|fp16|fp32",
//    "attention": "flash|unfused", "first_stage_layers", "last_stage_layers",
//    "framework": "megatron-core|megatron-2022|deepspeed|fsdp2|ddp|horovod" (its preset applies
//    first, the other keys override it), "tp_comm_overlap", "overlap_grad_reduce",
//    "overlap_param_gather", "overlap_p2p_comm" (bool), "bucket_size" (parameters, 0: Megatron's
//    default), "fp32_grads", "fp32_params", "fp32_master_weights", "fp32_optimizer_states",
//    "fp8": "none|hybrid|e4m3", "fp8_param_gather" (bool), "recompute_layers",
//    "host_dispatch": "eager|compiled|cuda-graphs|native|none", "offload_optimizer",
//    "offload_param" (bool, written only when true), "prefetch_layers" (ZeRO 3; written only
//    when set), "horovod_cycle_time_ms" (HOROVOD_CYCLE_TIME; written when > 0), "fused_kernels"
//    (bool; written when false); and, each written only when it differs from its default:
//    "ep" (1), "etp" (0: tp), "moe_dispatcher": "allgather|alltoall" (allgather),
//    "grouped_gemm" (false), "moe_imbalance" (1), "cp" (1), "cp_comm": "p2p|all_gather|a2a"
//    (p2p)}

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/json_input.hpp"
#include "plan/parallel_plan.hpp"

namespace strata {

// Fields present in `fields` override `plan` after the framework's preset (`framework` when
// given, which then overrides the file's "framework"); unknown keys are refused.
ParallelPlan parse_plan_json(const JsonFields& fields, ParallelPlan plan,
                             std::optional<Framework> framework = std::nullopt);
nlohmann::json plan_to_json(const ParallelPlan& plan);

// Throw InputError naming `where` and `field` for an unknown name, listing the known ones.
ScheduleKind parse_schedule(const std::string& name, const std::string& where,
                            const std::string& field);
RecomputeKind parse_recompute(const std::string& name, const std::string& where,
                              const std::string& field);
DType parse_dtype(const std::string& name, const std::string& where, const std::string& field);
AttentionKind parse_attention(const std::string& name, const std::string& where,
                              const std::string& field);
Fp8Format parse_fp8_format(const std::string& name, const std::string& where,
                           const std::string& field);
HostDispatch parse_host_dispatch(const std::string& name, const std::string& where,
                                 const std::string& field);
MoeDispatcher parse_moe_dispatcher(const std::string& name, const std::string& where,
                                   const std::string& field);
CpComm parse_cp_comm(const std::string& name, const std::string& where, const std::string& field);

}  // namespace strata
