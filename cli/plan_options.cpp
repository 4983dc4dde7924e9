#include "cli/plan_options.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string_view>

#include <fmt/format.h>

#include "common/error.hpp"
#include "common/json_input.hpp"
#include "models/model_reader.hpp"
#include "plan/deepspeed_config.hpp"
#include "plan/framework.hpp"
#include "plan/plan_json.hpp"

namespace strata::cli {

namespace {

constexpr const char* kCommandLine = "command line";

// A scenario file (scenarios/README.md): {"description": text, "model": name or path,
// "cluster": name or path, "gpus": N, "plan": {...}, "expect": {...}, "reference": {...}}.
// "expect" and "reference" belong to `strata check`, which validates them; plan and simulate
// ignore them. Any other key is refused (a misspelt key would otherwise be silently ignored).
struct Scenario {
  std::string model;
  std::string cluster;
  std::optional<int64_t> gpus;
  ParallelPlan plan;
  bool dp_given = false;
  bool grad_overlap_given = false;
};

constexpr std::string_view kScenarioKeys[] = {"description", "model",  "cluster",  "gpus",
                                              "plan",        "expect", "reference"};

// A scenario's model or cluster (`key`): a zoo name, or a path looked up beside the scenario file
// first (so that `strata check` finds scenarios/models/ from any working directory), then from the
// working directory. Anything else is the scenario's mistake, refused naming the file and the key.
std::string scenario_input(const JsonFields& fields, std::string_view key,
                           const std::vector<std::string>& zoo) {
  const std::string name = fields.string(key);
  if (std::find(zoo.begin(), zoo.end(), name) != zoo.end()) return name;
  const std::filesystem::path path(name);
  const std::filesystem::path beside =
      (std::filesystem::path(fields.where()).parent_path() / path).lexically_normal();
  std::error_code error;
  if (!path.is_absolute() && std::filesystem::is_regular_file(beside, error))
    return beside.string();
  if (std::filesystem::is_regular_file(path, error)) return name;
  fields.fail(key,
              fmt::format("'{}' is neither a zoo name nor a file (beside the scenario or from "
                          "the working directory)",
                          name),
              fmt::format("use a zoo name ({}) or a path to a JSON file", fmt::join(zoo, ", ")));
}

Scenario read_scenario(const std::string& path, std::optional<Framework> framework) {
  const nlohmann::json json = read_json_file(path);
  const JsonFields fields(json, path);
  fields.refuse_unknown(kScenarioKeys);
  Scenario scenario;
  scenario.model = scenario_input(fields, "model", zoo_model_names());
  scenario.cluster = scenario_input(fields, "cluster", zoo_cluster_names());
  scenario.gpus = fields.optional_positive_int("gpus");
  if (framework) scenario.plan = apply_framework(scenario.plan, *framework);
  if (fields.has("plan")) {
    const JsonFields plan = fields.object("plan");
    scenario.plan = parse_plan_json(plan, scenario.plan, framework);
    scenario.dp_given = plan.has("dp");
    scenario.grad_overlap_given = plan.has("overlap_grad_reduce");
  }
  return scenario;
}

// Megatron-Core's --attention-backend (AttnBackend): flash and fused (cuDNN) are fused kernels
// whose scores stay on chip, as is auto (Transformer Engine picks one of them); unfused and local
// (Megatron's own DotProductAttention) materialize the scores.
AttentionKind attention_backend(const std::string& name) {
  if (name == "flash" || name == "fused" || name == "auto") return AttentionKind::kFlash;
  if (name == "unfused" || name == "local") return AttentionKind::kUnfused;
  throw InputError(kCommandLine, "--attention-backend",
                   fmt::format("'{}' is not one of: flash, fused, auto, unfused, local", name),
                   "use flash, fused or auto (fused attention) or unfused or local");
}

}  // namespace

void add_stack_flags(CLI::App& command, PlanFlags& flags) {
  command.add_option("--attention", flags.attention,
                     "Attention core: flash (fused, the default) or unfused (scores through HBM)");
  command.add_flag("--use-flash-attn", flags.use_flash_attn, "Megatron-LM: flash attention");
  command.add_option("--attention-backend", flags.attention_backend,
                     "Megatron-Core: flash, fused or auto (flash attention); unfused or local");
  command.add_option("--framework", flags.framework,
                     "Software stack whose defaults the plan takes: megatron-core (default), "
                     "megatron-2022, deepspeed, fsdp2, ddp, horovod");
  command.add_flag("--tp-comm-overlap", flags.tp_comm_overlap,
                   "Megatron-LM: overlap TP communication with GEMMs in chunks (needs SP)");
  command.add_flag("--overlap-grad-reduce", flags.overlap_grad_reduce,
                   "Megatron-LM: reduce gradient buckets during the backward");
  command.add_flag("--overlap-param-gather", flags.overlap_param_gather,
                   "Megatron-LM: all-gather updated parameters during the next forward");
  command.add_flag("--overlap-p2p-communication", flags.overlap_p2p,
                   "Megatron-LM: post pipeline sends and receives ahead (its default)");
  command.add_flag("--no-overlap-p2p-communication", flags.no_overlap_p2p,
                   "Megatron-LM: wait for each pipeline send and receive");
  command.add_option("--ddp-bucket-size", flags.bucket_size,
                     "Megatron-LM: gradient bucket size in parameters");
  command.add_flag("--grad-reduce-in-bf16", flags.grad_reduce_in_bf16,
                   "Megatron-LM: accumulate and reduce gradients in bf16");
  command.add_flag("--accumulate-allreduce-grads-in-fp32", flags.grads_in_fp32,
                   "Megatron-LM: accumulate and reduce gradients in fp32");
  command.add_option("--fp8,--fp8-format", flags.fp8,
                     "FP8 GEMMs in the transformer layers (Transformer Engine): hybrid, e4m3 "
                     "or none");
  command.add_option("--host-dispatch", flags.host_dispatch,
                     "How the host issues work: eager (PyTorch, the default), compiled "
                     "(torch.compile), cuda-graphs, native (a C++/CUDA program), none (never the "
                     "bottleneck)");
  command.add_flag("--enable-cuda-graph", flags.cuda_graph,
                   "Megatron-LM: CUDA graphs (host dispatch cuda-graphs)");
  command.add_flag("--fp8-param-gather", flags.fp8_param_gather,
                   "Megatron-LM: keep and all-gather the layers' weights in FP8");
  command.add_flag("--offload-optimizer", flags.offload_optimizer,
                   "DeepSpeed ZeRO-Offload: optimizer states in host memory, the step on the "
                   "host (ZeRO 1-3)");
  command.add_flag("--offload-param", flags.offload_param,
                   "DeepSpeed ZeRO-Infinity: parameters in host memory (ZeRO 3)");
  command.add_option("--prefetch-layers", flags.prefetch_layers,
                     "ZeRO 3 / FSDP2: layers whose parameter gathers run ahead (default: the "
                     "framework's)");
  command.add_option("--fused-kernels", flags.fused_kernels,
                     "Norms, rotary embeddings and SwiGLU as fused kernels (true: Megatron's "
                     "stacks) or eager PyTorch's kernel chains (false: the other frameworks)");
  command.add_option("--horovod-cycle-time", flags.horovod_cycle_ms,
                     "Horovod: the background thread's cycle in ms (HOROVOD_CYCLE_TIME, 1)");
  add_moe_cp_stack_flags(command, flags.moe_cp);
}

std::string zoo_help() {
  return fmt::format("Zoo models (--model): {}\nZoo clusters (--cluster): {}",
                     fmt::join(zoo_model_names(), ", "), fmt::join(zoo_cluster_names(), ", "));
}

void add_plan_flags(CLI::App& command, PlanFlags& flags) {
  command.footer(zoo_help());
  const ParallelPlan defaults;  // what an unset flag leaves (before --framework's preset)
  command.add_option("--scenario", flags.scenario,
                     "Scenario JSON with model, cluster, gpus and plan; flags override it");
  command.add_option("--model", flags.model,
                     "Zoo model name or path to a model JSON / HF config.json");
  command.add_option("--cluster", flags.cluster, "Zoo cluster name or path to a cluster JSON");
  command.add_option("--gpus", flags.gpus,
                     "GPUs to use (must equal dp x tp x pp x cp; default dp x tp x pp x cp)");
  command.add_option("--dp", flags.dp, "Data-parallel size (default: gpus / (tp x pp x cp))");
  command.add_option("--tp,--tensor-model-parallel-size", flags.tp,
                     fmt::format("Tensor-parallel size (default {})", defaults.tp));
  command.add_option("--pp,--pipeline-model-parallel-size", flags.pp,
                     fmt::format("Pipeline-parallel size (default {})", defaults.pp));
  command.add_option(
      "--vpp,--virtual-pipeline-model-parallel-size", flags.vpp,
      fmt::format("Model chunks per pipeline stage (interleaved schedule; default {})",
                  defaults.vpp));
  command.add_option("--num-layers-per-virtual-pipeline-stage", flags.layers_per_virtual_stage,
                     "Megatron-LM: layers per model chunk (sets vpp)");
  add_moe_cp_axis_flags(command, flags.moe_cp);
  command.add_option("--zero,--zero-stage", flags.zero,
                     fmt::format("ZeRO stage 0-3 (default {})", defaults.zero_stage));
  command.add_flag("--use-distributed-optimizer", flags.distributed_optimizer,
                   "Megatron-LM's distributed optimizer (ZeRO 1)");
  command.add_option(
      "--micro-batch,--micro-batch-size", flags.micro_batch,
      fmt::format("Sequences per micro-batch per DP replica (default {})", defaults.micro_batch));
  command.add_option(
      "--global-batch,--global-batch-size", flags.global_batch,
      fmt::format("Sequences per step over all DP replicas (default {})", defaults.global_batch));
  command.add_option("--seq-len,--seq-length", flags.seq_len,
                     fmt::format("Sequence length in tokens (default {})", defaults.seq_len));
  command.add_option("--recompute,--recompute-granularity", flags.recompute,
                     fmt::format("Activation recompute: none, selective, full, selective-op "
                                 "(torchtitan's op-level policy; default {})",
                                 to_string(defaults.recompute)));
  command.add_flag("--recompute-activations", flags.recompute_activations,
                   "Megatron-LM: selective recompute");
  command.add_flag("--sequence-parallel", flags.sequence_parallel,
                   "Megatron-LM sequence parallelism");
  command.add_option("--rank-order", flags.rank_order,
                     fmt::format("How ranks are laid out over the parallel axes, innermost first "
                                 "(Megatron-Core's order; default {})",
                                 defaults.axes().order_text()));
  command.add_flag("--use-tp-pp-dp-mapping", flags.tp_pp_dp_mapping,
                   "Megatron-LM: lay ranks out tp-cp-ep-pp-dp (pipeline inside data parallel)");
  command.add_option("--schedule", flags.schedule,
                     fmt::format("Pipeline schedule: gpipe, 1f1b, interleaved (default {}; "
                                 "interleaved with --vpp)",
                                 to_string(defaults.schedule)));
  command.add_option(
      "--dtype", flags.dtype,
      fmt::format("Training dtype: bf16, fp16, fp32 (default {})", to_string(defaults.dtype)));
  command.add_flag("--bf16", flags.bf16, "Megatron-LM: train in bf16");
  command.add_flag("--fp16", flags.fp16, "Megatron-LM: train in fp16");
  add_stack_flags(command, flags);
  command.add_option("--recompute-num-layers,--checkpoint-num-layers", flags.recompute_layers,
                     "Megatron-LM: full recompute of this many layers per model chunk");
  command.add_option("--recompute-method,--activations-checkpoint-method", flags.recompute_method,
                     "Megatron-LM: block (the first --recompute-num-layers layers) or uniform");
  command.add_flag("--checkpoint-activations", flags.checkpoint_activations,
                   "Older Megatron-LM, Megatron-DeepSpeed: full recompute");
  command.add_flag("--deepspeed", flags.deepspeed,
                   "Megatron-DeepSpeed: DeepSpeed runs the step (--framework deepspeed)");
  command.add_option("--megatron-args", flags.megatron_args,
                     "A Megatron-LM launch script or argument file: the flags Strata models are "
                     "read as if given here (flags given here win); see cli/README.md");
  add_model_flags(command, flags.model_flags);
  command.add_option("--first-stage-layers,--decoder-first-pipeline-num-layers",
                     flags.first_stage_layers, "Layers on the first pipeline stage (uneven split)");
  command.add_option("--last-stage-layers,--decoder-last-pipeline-num-layers",
                     flags.last_stage_layers, "Layers on the last pipeline stage (uneven split)");
  command.add_option("--deepspeed-config,--deepspeed_config", flags.deepspeed_config,
                     "DeepSpeed config JSON (ZeRO stage, overlap, buckets, offload, AutoTP, "
                     "batch sizes, dtypes; implies --framework deepspeed)");
}

void apply_stack_flags(const PlanFlags& flags, ParallelPlan& plan) {
  if (flags.use_flash_attn) plan.attention = AttentionKind::kFlash;
  if (flags.attention_backend) plan.attention = attention_backend(*flags.attention_backend);
  if (flags.attention)
    plan.attention = parse_attention(*flags.attention, kCommandLine, "--attention");
  if (flags.tp_comm_overlap) plan.overlap.tp_comm = true;
  if (flags.overlap_grad_reduce) plan.overlap.grad_reduce = true;
  if (flags.overlap_param_gather) plan.overlap.param_gather = true;
  if (flags.overlap_p2p && flags.no_overlap_p2p) {
    throw InputError(kCommandLine, "--overlap-p2p-communication",
                     "given with --no-overlap-p2p-communication", "give one of the two");
  }
  if (flags.overlap_p2p) plan.overlap.p2p = true;
  if (flags.no_overlap_p2p) plan.overlap.p2p = false;
  if (flags.bucket_size) {
    if (*flags.bucket_size < 1) {
      throw InputError(kCommandLine, "--ddp-bucket-size",
                       fmt::format("must be at least 1 parameter, found {}", *flags.bucket_size),
                       "give a bucket size in parameters, e.g. 40000000");
    }
    plan.bucket_size = *flags.bucket_size;
  }
  if (flags.grad_reduce_in_bf16 && flags.grads_in_fp32) {
    throw InputError(kCommandLine, "--grad-reduce-in-bf16",
                     "given with --accumulate-allreduce-grads-in-fp32", "give one of the two");
  }
  if (flags.fp8) plan.fp8 = parse_fp8_format(*flags.fp8, kCommandLine, "--fp8");
  if (flags.fp8_param_gather) plan.fp8_param_gather = true;
  if (flags.offload_optimizer) plan.offload.optimizer = true;
  if (flags.offload_param) plan.offload.params = true;
  if (flags.prefetch_layers) plan.prefetch_layers = *flags.prefetch_layers;
  if (flags.fused_kernels) plan.fused_kernels = *flags.fused_kernels;
  if (flags.horovod_cycle_ms) {
    if (!(*flags.horovod_cycle_ms >= 0)) {
      throw InputError(
          kCommandLine, "--horovod-cycle-time",
          fmt::format("must be 0 or more milliseconds, found {}", *flags.horovod_cycle_ms),
          "give Horovod's cycle in ms, e.g. 1");
    }
    plan.cycle_time_ns = std::llround(*flags.horovod_cycle_ms * 1e6);
  }
  if (flags.cuda_graph) plan.host_dispatch = HostDispatch::kCudaGraphs;
  if (flags.host_dispatch) {
    plan.host_dispatch = parse_host_dispatch(*flags.host_dispatch, kCommandLine, "--host-dispatch");
  }
  if (flags.grad_reduce_in_bf16) plan.precision.fp32_grads = false;
  if (flags.grads_in_fp32) plan.precision.fp32_grads = true;
  plan = apply_moe_cp_stack_flags(flags.moe_cp, plan);
}

PlanInputs resolve_plan_inputs(const PlanFlags& flags,
                               const std::optional<ClusterSpec>& measured_cluster) {
  Scenario scenario;
  std::optional<Framework> framework;
  if (flags.framework) framework = parse_framework(*flags.framework, kCommandLine, "--framework");
  // A DeepSpeed config is run by DeepSpeed: its preset first, then the file's fields.
  std::optional<DeepSpeedConfig> deepspeed;
  if (flags.deepspeed && framework && *framework != Framework::kDeepSpeed) {
    throw InputError(kCommandLine, "--framework",
                     fmt::format("{} with --deepspeed, which DeepSpeed runs", *flags.framework),
                     "drop one of the two");
  }
  if (flags.deepspeed) framework = Framework::kDeepSpeed;
  if (!flags.deepspeed_config.empty()) {
    deepspeed = read_deepspeed_config(flags.deepspeed_config);
    if (framework && *framework != Framework::kDeepSpeed) {
      throw InputError(
          kCommandLine, "--framework",
          fmt::format("{} with --deepspeed-config, which DeepSpeed runs", *flags.framework),
          "drop --framework (the config implies deepspeed) or the config");
    }
    framework = Framework::kDeepSpeed;
  }
  if (framework) scenario.plan = apply_framework(scenario.plan, *framework);
  const bool has_cluster = !flags.cluster.empty() || measured_cluster;
  const bool megatron_model_flags = any_model_flag(flags.model_flags);
  if (!flags.scenario.empty()) {
    scenario = read_scenario(flags.scenario, framework);
  } else if ((flags.model.empty() && !megatron_model_flags) || !has_cluster) {
    throw InputError(kCommandLine, has_cluster ? "--model" : "--cluster", "missing",
                     fmt::format("give --model (or Megatron-LM's model flags) and --cluster (zoo "
                                 "names or paths), or --scenario FILE (e.g. {})",
                                 kDefaultScenario));
  }
  const std::string model_name = flags.model.empty() ? scenario.model : flags.model;
  const std::string cluster_name = flags.cluster.empty() ? scenario.cluster : flags.cluster;
  const std::string where = flags.scenario.empty() ? kCommandLine : flags.scenario;
  std::optional<ModelSpec> base_model;
  if (!model_name.empty()) base_model = load_model(model_name);
  PlanInputs inputs{
      base_model.value_or(ModelSpec{}),
      cluster_name.empty() && measured_cluster ? *measured_cluster : load_cluster(cluster_name),
      scenario.plan};
  ParallelPlan& plan = inputs.plan;

  const auto set = [](std::optional<int64_t> flag, int64_t& out) {
    if (flag) out = *flag;
  };
  set(flags.tp, plan.tp);
  if (deepspeed && deepspeed->autotp_size) {
    if (flags.tp && *flags.tp != *deepspeed->autotp_size) {
      throw InputError(
          flags.deepspeed_config, "tensor_parallel.autotp_size",
          fmt::format("the file says {} but --tp says {}", *deepspeed->autotp_size, *flags.tp),
          "make them agree");
    }
    plan.tp = *deepspeed->autotp_size;
  }
  set(flags.pp, plan.pp);
  set(flags.vpp, plan.vpp);
  set(flags.zero, plan.zero_stage);
  set(flags.micro_batch, plan.micro_batch);
  set(flags.global_batch, plan.global_batch);
  set(flags.seq_len, plan.seq_len);
  set(flags.first_stage_layers, plan.first_stage_layers);
  set(flags.last_stage_layers, plan.last_stage_layers);
  set(flags.dp, plan.dp);
  plan = apply_moe_cp_axis_flags(flags.moe_cp, plan);
  // Every size before anything below divides by one or multiplies them.
  validate_plan_sizes(plan, where);
  if (megatron_model_flags) {
    inputs.model = megatron_model(flags.model_flags, base_model, plan.seq_len, plan.tp);
  }
  if (flags.gpus && (*flags.gpus < 1 || *flags.gpus > kMaxRanks)) {
    throw InputError(kCommandLine, "gpus (--gpus)",
                     fmt::format("must be in [1, {}], found {}", kMaxRanks, *flags.gpus),
                     fmt::format("use a value from 1 to {}", kMaxRanks));
  }
  if (flags.distributed_optimizer && !flags.zero)
    plan.zero_stage = std::max<int64_t>(plan.zero_stage, 1);
  if (flags.layers_per_virtual_stage) {
    const int64_t per_stage = inputs.model.layers / plan.pp;
    if (*flags.layers_per_virtual_stage < 1 || per_stage % *flags.layers_per_virtual_stage != 0) {
      throw InputError(kCommandLine, "--num-layers-per-virtual-pipeline-stage",
                       fmt::format("{} does not divide the {} layers per stage",
                                   *flags.layers_per_virtual_stage, per_stage),
                       "use a divisor of the layers per pipeline stage");
    }
    plan.vpp = per_stage / *flags.layers_per_virtual_stage;
  }
  if (flags.recompute_activations) plan.recompute = RecomputeKind::kSelective;
  if (flags.checkpoint_activations) plan.recompute = RecomputeKind::kFull;
  if (flags.recompute)
    plan.recompute = parse_recompute(*flags.recompute, kCommandLine, "--recompute");
  // Megatron-LM turns sequence parallelism off at tp 1 (arguments.py), with a warning.
  if (flags.sequence_parallel && plan.tp == 1) {
    fmt::print(stderr,
               "strata: note: --sequence-parallel at tp 1 is ignored, as Megatron-LM "
               "does (there is no tensor-parallel group to split the sequence over)\n");
  } else if (flags.sequence_parallel) {
    plan.sequence_parallel = true;
  }
  if (flags.rank_order && flags.tp_pp_dp_mapping) {
    throw InputError(kCommandLine, "--use-tp-pp-dp-mapping",
                     "--rank-order and --use-tp-pp-dp-mapping both set the rank order",
                     "give one of them");
  }
  // Megatron-LM's initialize.py: order 'tp-cp-ep-pp-dp' under --use-tp-pp-dp-mapping.
  if (flags.tp_pp_dp_mapping) plan.rank_order = parse_rank_order("tp-cp-ep-pp-dp", "", "");
  if (flags.rank_order)
    plan.rank_order = parse_rank_order(*flags.rank_order, kCommandLine, "--rank-order");
  if (flags.schedule) {
    plan.schedule = parse_schedule(*flags.schedule, kCommandLine, "--schedule");
  } else if (plan.vpp > 1) {
    plan.schedule = ScheduleKind::kInterleaved;  // as Megatron-LM infers from a virtual size
  }
  if (flags.bf16) plan.dtype = DType::kBf16;
  if (flags.fp16) plan.dtype = DType::kFp16;
  if (flags.dtype) plan.dtype = parse_dtype(*flags.dtype, kCommandLine, "--dtype");
  apply_stack_flags(flags, plan);
  // Megatron's methods: block recomputes the first N layers of each chunk in full; uniform
  // checkpoints groups of N layers, which recomputes every layer (counted as block over all).
  if (flags.recompute_method && *flags.recompute_method != "block" &&
      *flags.recompute_method != "uniform") {
    throw InputError(kCommandLine, "--recompute-method",
                     fmt::format("'{}' is not one of: block, uniform", *flags.recompute_method),
                     "use block or uniform");
  }
  if (flags.recompute_layers && flags.recompute_method.value_or("uniform") == "block") {
    plan.recompute_layers = *flags.recompute_layers;
  }

  // GPUs and dp: --gpus (or the scenario's) fixes the product; dp defaults to what is left.
  const std::optional<int64_t> gpus = flags.gpus ? flags.gpus : scenario.gpus;
  if (flags.dp) {
    plan.dp = *flags.dp;
  } else if (gpus && !scenario.dp_given) {
    // ParallelPlan::gpus(): dp x tp x pp x cp (ep is carved out of dp and adds no GPUs).
    const int64_t per_replica = plan.tp * plan.pp * plan.cp;
    if (*gpus % per_replica != 0) {
      const bool cp = plan.cp > 1;  // named only when given, as dense plans leave it out
      throw InputError(where, "gpus (--gpus)",
                       fmt::format("{} GPUs are not a multiple of tp {} x pp {}{}", *gpus, plan.tp,
                                   plan.pp, cp ? fmt::format(" x cp {}", plan.cp) : ""),
                       fmt::format("use a multiple of {} GPUs, or change --tp/--pp{}", per_replica,
                                   cp ? "/--cp" : ""));
    }
    plan.dp = *gpus / per_replica;
  }
  if (deepspeed) {
    apply_deepspeed_config(*deepspeed, inputs.model, plan, flags.zero, flags.micro_batch,
                           flags.global_batch);
  } else if (plan.framework == Framework::kDeepSpeed && plan.zero_stage == 3 &&
             !flags.overlap_grad_reduce && !scenario.grad_overlap_given) {
    // DeepSpeed's overlap_comm defaults to true under ZeRO 3 only (deepspeed/runtime/zero/
    // config.py), which the preset cannot know before the stage is.
    plan.overlap.grad_reduce = true;
  }
  validate_plan(plan, inputs.model, gpus, where);
  validate_plan_on_device(plan, inputs.cluster.device, where);
  const int64_t max_gpus = inputs.cluster.max_nodes * inputs.cluster.gpus_per_node;
  if (inputs.cluster.max_nodes > 0 && plan.gpus() > max_gpus) {
    throw InputError(
        where, "gpus (--gpus)",
        fmt::format("{} GPUs exceed cluster {}'s {} nodes x {} GPUs", plan.gpus(),
                    inputs.cluster.name, inputs.cluster.max_nodes, inputs.cluster.gpus_per_node),
        fmt::format("use at most {} GPUs or a larger cluster", max_gpus));
  }
  if (deepspeed && !deepspeed->unmodeled.empty()) {
    fmt::print(stderr, "strata: note: {}: read, without effect on the prediction: {}\n",
               flags.deepspeed_config, fmt::join(deepspeed->unmodeled, "; "));
  }
  return inputs;
}

}  // namespace strata::cli
