#include "plan/plan_json.hpp"

#include <cmath>

#include <fmt/format.h>

#include "common/error.hpp"
#include "plan/framework.hpp"

namespace strata {

namespace {

template <typename Enum, size_t N>
Enum parse_name(const std::string& name, const std::pair<const char*, Enum> (&names)[N],
                const std::string& where, const std::string& field) {
  std::vector<std::string> known;
  for (const auto& [text, value] : names) {
    if (name == text) return value;
    known.push_back(text);
  }
  throw InputError(where, field,
                   fmt::format("'{}' is not one of: {}", name, fmt::join(known, ", ")),
                   fmt::format("use one of: {}", fmt::join(known, ", ")));
}

constexpr std::pair<const char*, ScheduleKind> kSchedules[] = {
    {"gpipe", ScheduleKind::kGpipe},
    {"1f1b", ScheduleKind::k1F1B},
    {"interleaved", ScheduleKind::kInterleaved}};
constexpr std::pair<const char*, RecomputeKind> kRecomputes[] = {
    {"none", RecomputeKind::kNone},
    {"selective", RecomputeKind::kSelective},
    {"selective-op", RecomputeKind::kSelectiveOp},
    {"full", RecomputeKind::kFull}};
constexpr std::pair<const char*, AttentionKind> kAttentions[] = {
    {"flash", AttentionKind::kFlash}, {"unfused", AttentionKind::kUnfused}};
constexpr std::pair<const char*, Fp8Format> kFp8Formats[] = {
    {"none", Fp8Format::kNone}, {"hybrid", Fp8Format::kHybrid}, {"e4m3", Fp8Format::kE4m3}};
constexpr std::pair<const char*, HostDispatch> kHostDispatches[] = {
    {"eager", HostDispatch::kEager},
    {"compiled", HostDispatch::kCompiled},
    {"cuda-graphs", HostDispatch::kCudaGraphs},
    {"native", HostDispatch::kNative},
    {"none", HostDispatch::kNone}};
constexpr std::pair<const char*, MoeDispatcher> kMoeDispatchers[] = {
    {"allgather", MoeDispatcher::kAllGather}, {"alltoall", MoeDispatcher::kAllToAll}};
constexpr std::pair<const char*, CpComm> kCpComms[] = {
    {"p2p", CpComm::kP2p}, {"all_gather", CpComm::kAllGather}, {"a2a", CpComm::kAllToAll}};
constexpr std::pair<const char*, DType> kDtypes[] = {
    {"bf16", DType::kBf16}, {"fp16", DType::kFp16}, {"fp32", DType::kFp32}};

constexpr std::string_view kPlanKeys[] = {"dp",
                                          "tp",
                                          "pp",
                                          "vpp",
                                          "zero_stage",
                                          "micro_batch",
                                          "global_batch",
                                          "seq_len",
                                          "recompute",
                                          "sequence_parallel",
                                          "schedule",
                                          "dtype",
                                          "attention",
                                          "framework",
                                          "tp_comm_overlap",
                                          "overlap_grad_reduce",
                                          "overlap_param_gather",
                                          "overlap_p2p_comm",
                                          "bucket_size",
                                          "fp32_grads",
                                          "fp32_params",
                                          "fp32_master_weights",
                                          "fp32_optimizer_states",
                                          "fp8",
                                          "fp8_param_gather",
                                          "recompute_layers",
                                          "host_dispatch",
                                          "first_stage_layers",
                                          "last_stage_layers",
                                          "offload_optimizer",
                                          "offload_param",
                                          "prefetch_layers",
                                          "horovod_cycle_time_ms",
                                          "fused_kernels",
                                          "rank_order",
                                          "ep",
                                          "etp",
                                          "moe_dispatcher",
                                          "grouped_gemm",
                                          "moe_imbalance",
                                          "cp",
                                          "cp_comm"};

// The expert- and context-parallel fields ("ep", "etp", "moe_dispatcher", "grouped_gemm",
// "moe_imbalance", "cp", "cp_comm"); their ranges are validate_plan_sizes's.
ParallelPlan parse_moe_cp_json(const JsonFields& fields, ParallelPlan plan) {
  if (fields.has("ep")) plan.ep = fields.positive_int("ep");
  if (fields.has("etp")) plan.etp = fields.non_negative_int("etp");
  if (fields.has("moe_dispatcher")) {
    plan.moe_dispatcher = parse_moe_dispatcher(fields.string("moe_dispatcher"), fields.where(),
                                               fields.field_name("moe_dispatcher"));
  }
  plan.grouped_gemm = fields.boolean("grouped_gemm", plan.grouped_gemm);
  if (fields.has("moe_imbalance")) plan.moe_imbalance = fields.positive_number("moe_imbalance");
  if (fields.has("cp")) plan.cp = fields.positive_int("cp");
  if (fields.has("cp_comm")) {
    plan.cp_comm =
        parse_cp_comm(fields.string("cp_comm"), fields.where(), fields.field_name("cp_comm"));
  }
  return plan;
}

// The same fields written, like the optional ones before them, only when they differ from their
// defaults, so that a plan without them writes what it always wrote.
nlohmann::json moe_cp_json(const ParallelPlan& plan) {
  nlohmann::json out = nlohmann::json::object();
  if (plan.ep != 1) out["ep"] = plan.ep;
  if (plan.etp != 0) out["etp"] = plan.etp;
  if (plan.moe_dispatcher != MoeDispatcher::kAllGather)
    out["moe_dispatcher"] = to_string(plan.moe_dispatcher);
  if (plan.grouped_gemm) out["grouped_gemm"] = true;
  if (plan.moe_imbalance != 1) out["moe_imbalance"] = plan.moe_imbalance;
  if (plan.cp != 1) out["cp"] = plan.cp;
  if (plan.cp_comm != CpComm::kP2p) out["cp_comm"] = to_string(plan.cp_comm);
  return out;
}

}  // namespace

ScheduleKind parse_schedule(const std::string& name, const std::string& where,
                            const std::string& field) {
  return parse_name(name, kSchedules, where, field);
}

RecomputeKind parse_recompute(const std::string& name, const std::string& where,
                              const std::string& field) {
  return parse_name(name, kRecomputes, where, field);
}

DType parse_dtype(const std::string& name, const std::string& where, const std::string& field) {
  return parse_name(name, kDtypes, where, field);
}

Fp8Format parse_fp8_format(const std::string& name, const std::string& where,
                           const std::string& field) {
  return parse_name(name, kFp8Formats, where, field);
}

HostDispatch parse_host_dispatch(const std::string& name, const std::string& where,
                                 const std::string& field) {
  return parse_name(name, kHostDispatches, where, field);
}

AttentionKind parse_attention(const std::string& name, const std::string& where,
                              const std::string& field) {
  return parse_name(name, kAttentions, where, field);
}

MoeDispatcher parse_moe_dispatcher(const std::string& name, const std::string& where,
                                   const std::string& field) {
  return parse_name(name, kMoeDispatchers, where, field);
}

CpComm parse_cp_comm(const std::string& name, const std::string& where, const std::string& field) {
  return parse_name(name, kCpComms, where, field);
}

ParallelPlan parse_plan_json(const JsonFields& fields, ParallelPlan plan,
                             std::optional<Framework> framework) {
  fields.refuse_unknown(kPlanKeys);
  // The framework's preset first, so that the fields given beside it override it.
  if (!framework && fields.has("framework")) {
    framework =
        parse_framework(fields.string("framework"), fields.where(), fields.field_name("framework"));
  }
  if (framework) plan = apply_framework(plan, *framework);
  const auto set_count = [&](const char* key, int64_t& out) {
    if (fields.has(key)) out = fields.positive_int(key);
  };
  set_count("dp", plan.dp);
  set_count("tp", plan.tp);
  set_count("pp", plan.pp);
  set_count("vpp", plan.vpp);
  if (fields.has("zero_stage")) plan.zero_stage = fields.non_negative_int("zero_stage");
  set_count("micro_batch", plan.micro_batch);
  set_count("global_batch", plan.global_batch);
  set_count("seq_len", plan.seq_len);
  set_count("first_stage_layers", plan.first_stage_layers);
  set_count("last_stage_layers", plan.last_stage_layers);
  if (fields.has("recompute")) {
    plan.recompute =
        parse_recompute(fields.string("recompute"), fields.where(), fields.field_name("recompute"));
  }
  plan.sequence_parallel = fields.boolean("sequence_parallel", plan.sequence_parallel);
  if (fields.has("schedule")) {
    plan.schedule =
        parse_schedule(fields.string("schedule"), fields.where(), fields.field_name("schedule"));
  }
  if (fields.has("dtype")) {
    plan.dtype = parse_dtype(fields.string("dtype"), fields.where(), fields.field_name("dtype"));
  }
  if (fields.has("attention")) {
    plan.attention =
        parse_attention(fields.string("attention"), fields.where(), fields.field_name("attention"));
  }
  plan.overlap.tp_comm = fields.boolean("tp_comm_overlap", plan.overlap.tp_comm);
  plan.overlap.grad_reduce = fields.boolean("overlap_grad_reduce", plan.overlap.grad_reduce);
  plan.overlap.param_gather = fields.boolean("overlap_param_gather", plan.overlap.param_gather);
  plan.overlap.p2p = fields.boolean("overlap_p2p_comm", plan.overlap.p2p);
  if (fields.has("bucket_size")) plan.bucket_size = fields.non_negative_int("bucket_size");
  Precision& precision = plan.precision;
  precision.fp32_grads = fields.boolean("fp32_grads", precision.fp32_grads);
  precision.fp32_params = fields.boolean("fp32_params", precision.fp32_params);
  precision.fp32_master_weights =
      fields.boolean("fp32_master_weights", precision.fp32_master_weights);
  precision.fp32_optimizer_states =
      fields.boolean("fp32_optimizer_states", precision.fp32_optimizer_states);
  if (fields.has("fp8")) {
    plan.fp8 = parse_fp8_format(fields.string("fp8"), fields.where(), fields.field_name("fp8"));
  }
  plan.fp8_param_gather = fields.boolean("fp8_param_gather", plan.fp8_param_gather);
  if (fields.has("recompute_layers"))
    plan.recompute_layers = fields.non_negative_int("recompute_layers");
  if (fields.has("host_dispatch")) {
    plan.host_dispatch = parse_host_dispatch(fields.string("host_dispatch"), fields.where(),
                                             fields.field_name("host_dispatch"));
  }
  plan.fused_kernels = fields.boolean("fused_kernels", plan.fused_kernels);
  if (fields.has("rank_order")) {
    plan.rank_order = parse_rank_order(fields.string("rank_order"), fields.where(),
                                       fields.field_name("rank_order"));
  }
  plan.offload.optimizer = fields.boolean("offload_optimizer", plan.offload.optimizer);
  plan.offload.params = fields.boolean("offload_param", plan.offload.params);
  if (fields.has("prefetch_layers"))
    plan.prefetch_layers = fields.non_negative_int("prefetch_layers");
  if (fields.has("horovod_cycle_time_ms")) {
    plan.cycle_time_ns = std::llround(fields.positive_number("horovod_cycle_time_ms", true) * 1e6);
  }
  return parse_moe_cp_json(fields, plan);
}

nlohmann::json plan_to_json(const ParallelPlan& plan) {
  nlohmann::json out;
  out["dp"] = plan.dp;
  out["tp"] = plan.tp;
  out["pp"] = plan.pp;
  out["vpp"] = plan.vpp;
  out["zero_stage"] = plan.zero_stage;
  out["micro_batch"] = plan.micro_batch;
  out["global_batch"] = plan.global_batch;
  out["seq_len"] = plan.seq_len;
  out["recompute"] = to_string(plan.recompute);
  out["sequence_parallel"] = plan.sequence_parallel;
  out["schedule"] = to_string(plan.schedule);
  out["dtype"] = to_string(plan.dtype);
  out["framework"] = to_string(plan.framework);
  out["attention"] = to_string(plan.attention);
  out["tp_comm_overlap"] = plan.overlap.tp_comm;
  out["overlap_grad_reduce"] = plan.overlap.grad_reduce;
  out["overlap_param_gather"] = plan.overlap.param_gather;
  out["overlap_p2p_comm"] = plan.overlap.p2p;
  out["bucket_size"] = plan.bucket_size;
  out["fp32_grads"] = plan.precision.fp32_grads;
  out["fp32_params"] = plan.precision.fp32_params;
  out["fp32_master_weights"] = plan.precision.fp32_master_weights;
  out["fp32_optimizer_states"] = plan.precision.fp32_optimizer_states;
  out["fp8"] = to_string(plan.fp8);
  out["fp8_param_gather"] = plan.fp8_param_gather;
  if (plan.recompute_layers > 0) out["recompute_layers"] = plan.recompute_layers;
  out["host_dispatch"] = to_string(plan.host_dispatch);
  if (!plan.fused_kernels) out["fused_kernels"] = false;
  if (plan.rank_order != kMegatronOrder) out["rank_order"] = plan.axes().order_text();
  if (plan.first_stage_layers > 0) out["first_stage_layers"] = plan.first_stage_layers;
  if (plan.last_stage_layers > 0) out["last_stage_layers"] = plan.last_stage_layers;
  if (plan.offload.optimizer) out["offload_optimizer"] = true;
  if (plan.offload.params) out["offload_param"] = true;
  if (plan.prefetch_layers >= 0) out["prefetch_layers"] = plan.prefetch_layers;
  if (plan.cycle_time_ns > 0)
    out["horovod_cycle_time_ms"] = static_cast<double>(plan.cycle_time_ns) / 1e6;
  out.update(moe_cp_json(plan));
  return out;
}

}  // namespace strata
