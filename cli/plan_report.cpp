#include "cli/plan_report.hpp"

#include <array>
#include <cctype>
#include <limits>

#include <fmt/format.h>

#include "cli/report_text.hpp"
#include "common/units.hpp"
#include "models/model_json.hpp"
#include "plan/framework.hpp"
#include "plan/memory_plan.hpp"
#include "plan/moe_dims.hpp"
#include "plan/plan_json.hpp"
#include "plan/rank_layout.hpp"
#include "topologies/topology_json.hpp"

namespace strata::cli {

std::string flops_text(double flops) {
  constexpr std::array<std::pair<double, const char*>, 5> kUnits{
      {{1e18, "EFLOP"}, {1e15, "PFLOP"}, {1e12, "TFLOP"}, {1e9, "GFLOP"}, {1, "FLOP"}}};
  for (const auto& [scale, unit] : kUnits) {
    if (flops >= scale) return fmt::format("{:.3g} {}", flops / scale, unit);
  }
  return "0 FLOP";
}

std::string plan_line(const ParallelPlan& p) {
  std::string axes = fmt::format("dp {} x tp {} x pp {}", p.dp, p.tp, p.pp);
  if (p.vpp > 1) axes += fmt::format(" x vpp {}", p.vpp);
  if (p.cp > 1) axes += fmt::format(" x cp {} ({})", p.cp, to_string(p.cp_comm));
  if (p.ep > 1 && p.tp_outer() > 1) {
    axes += fmt::format(", ep {} = {} of tp x {} of dp (etp {})", p.ep, p.tp_outer(),
                        p.ep_from_dp(), p.expert_tp());
  } else if (p.ep > 1) {
    axes += fmt::format(", ep {} of dp", p.ep);
  }
  return fmt::format(
      "{}, zero {}, micro-batch {}, global batch {} ({} micro-batches), seq {}, {}, recompute "
      "{}{}, {}",
      axes, p.zero_stage, p.micro_batch, p.global_batch, p.micro_batches(), p.seq_len,
      to_string(p.schedule), to_string(p.recompute),
      p.sequence_parallel ? ", sequence parallel" : "", to_string(p.dtype));
}

std::string experts_line(const ModelSpec& m, const ParallelPlan& p) {
  const double load = moe_rank_load(m, p);
  std::string line =
      fmt::format("{} routed, top {}; {} per rank (ep {}, expert tp {}), {} dispatcher{}; ",
                  m.experts, m.experts_per_token, m.experts / p.ep, p.ep, p.expert_tp(),
                  to_string(p.moe_dispatcher), p.grouped_gemm ? ", grouped GEMMs" : "");
  if (p.moe_imbalance == 1) return line + "balanced routing";
  return line + fmt::format(
                    "the busiest expert takes {:.3g}x the mean: its rank computes and receives "
                    "{:.3g}x its balanced share",
                    p.moe_imbalance, load);
}

std::string stack_line(const ParallelPlan& p) {
  std::vector<std::string> overlapped, waited;
  const std::pair<const char*, bool> overlaps[] = {{"tp-comm", p.overlap.tp_comm},
                                                   {"grad-reduce", p.overlap.grad_reduce},
                                                   {"param-gather", p.overlap.param_gather},
                                                   {"p2p", p.overlap.p2p}};
  for (const auto& [name, on] : overlaps) (on ? overlapped : waited).push_back(name);
  const int64_t bucket = gradient_bucket_parameters(p);
  const std::string buckets = bucket == std::numeric_limits<int64_t>::max()
                                  ? "one gradient bucket per stage"
                              : bucket == 1 ? "a gradient bucket per block"
                                            : fmt::format("gradient buckets of {:.3g} M parameters",
                                                          static_cast<double>(bucket) / 1e6);
  std::string extras;
  if (p.zero_stage == 3 && p.prefetch_layers >= 0) {
    extras += fmt::format("; parameter gathers {} layer(s) ahead", p.prefetch_layers);
  }
  if (p.offload.optimizer || p.offload.params) {
    extras += fmt::format("; offloaded to host memory: {}",
                          p.offload.optimizer && p.offload.params
                              ? "optimizer (step on the host), parameters"
                          : p.offload.optimizer ? "optimizer (step on the host)"
                                                : "parameters");
  }
  const StateBytesPerParameter states = state_bytes_per_parameter(p.dtype, p.precision);
  const std::string fp8 = p.fp8 == Fp8Format::kNone
                              ? ""
                              : fmt::format(", FP8 {} GEMMs{}", to_string(p.fp8),
                                            p.fp8_param_gather ? " with FP8 weights" : "");
  return fmt::format(
      "{}: {} attention{}; overlapped: {}; not overlapped: {}; {}; model states {} "
      "+ {} + {} bytes per parameter (params, grads, optimizer){}",
      to_string(p.framework), to_string(p.attention), fp8,
      overlapped.empty() ? "none" : fmt::format("{}", fmt::join(overlapped, ", ")),
      waited.empty() ? "none" : fmt::format("{}", fmt::join(waited, ", ")), buckets, states.params,
      states.grads, states.optimizer, extras);
}

std::string count_text(int64_t count) {
  const auto n = static_cast<double>(count);
  if (n >= 1e9) return fmt::format("{:.2f} B", n / 1e9);
  if (n >= 1e6) return fmt::format("{:.2f} M", n / 1e6);
  return fmt::format("{}", count);
}

// The architecture's departures from a plain pre-norm block, as the report names them.
std::string model_details(const ModelSpec& m) {
  std::string text;
  if (m.head_size > 0 && m.head_size * m.heads != m.hidden)
    text += fmt::format(", head_dim {}", m.head_dim());
  if (m.block != LayerBlock::kPreNorm) text += fmt::format(", {} block", to_string(m.block));
  if (m.qk_norm != QkNorm::kNone) text += fmt::format(", QK-norm ({})", to_string(m.qk_norm));
  if (m.tied_embeddings) text += ", tied embeddings";
  if (m.sliding_window > 0) {
    text += fmt::format(", sliding window {}", m.sliding_window);
    if (m.global_every > 0) text += fmt::format(" (1 layer in {} global)", m.global_every);
  }
  return text;
}

std::string model_line(const ModelSpec& m) {
  return fmt::format(
      "model    {}: {} parameters; {} layers, hidden {}, {} heads ({} kv), ffn {}, vocab {}, "
      "{}, {}, {} positions{}",
      m.name, count_text(count_parameters(m).total), m.layers, m.hidden, m.heads, m.kv_heads,
      m.ffn_hidden, m.vocab, to_string(m.norm), to_string(m.mlp), to_string(m.position),
      model_details(m));
}

std::string cluster_line(const ClusterSpec& cluster, int64_t gpus) {
  const double memory_gb = static_cast<double>(cluster.device.hbm_bytes) / kBytesPerGB;
  if (cluster.device.host_cores > 0) {  // a CPU host (strata calibrate --backend cpu)
    return fmt::format("cluster  {}: {} rank(s) on a CPU host of {} cores; {} GiB memory per rank",
                       cluster.name, gpus, cluster.device.host_cores,
                       gib(cluster.device.hbm_bytes));
  }
  return fmt::format("cluster  {}: {} x {} on {} node(s) of {}; {:.0f} GB HBM per GPU",
                     cluster.name, gpus, cluster.device.name, cluster.nodes_for(gpus),
                     cluster.gpus_per_node, memory_gb);
}

std::string plan_summary(const CompiledPlan& c) {
  const ParallelPlan& p = c.plan;
  std::string out;
  auto add = [&out](const std::string& line) { out += line + "\n"; };
  add(model_line(c.model));
  add(cluster_line(c.cluster, p.gpus()));
  add(fmt::format("plan     {}", plan_line(p)));
  if (c.model.moe()) add(fmt::format("experts  {}", experts_line(c.model, p)));
  add(fmt::format("stack    {}", stack_line(p)));
  add(
      fmt::format("step     {} tokens; model {} (MFU numerator), hardware {} (executed, with "
                  "recompute)",
                  p.tokens_per_step(), flops_text(c.flops.model), flops_text(c.flops.hardware)));
  std::array<int64_t, 5> kinds{};
  for (const Task& t : c.graph.tasks()) ++kinds[static_cast<size_t>(t.kind)];
  add(fmt::format(
      "graph    {} ({} ranks): {} tasks = {} compute, {} collective, {} p2p, {} memory{}; "
      "{}",
      to_string(c.graph.mode()), c.graph.ranks().size(), c.graph.size(), kinds[0], kinds[1],
      kinds[2], kinds[3], kinds[4] > 0 ? fmt::format(", {} host copies", kinds[4]) : std::string(),
      c.validation.ok()
          ? "valid (acyclic, p2p matched, collectives complete, memory >= 0, no data hazards)"
          : "INVALID"));
  add("");
  add("memory per GPU at each stage's peak (GiB = 2^30 bytes)");
  add(fmt::format("{:>5} {:>6} {:>12} {:>9} {:>9} {:>9} {:>11} {:>9} {:>9}", "stage", "layers",
                  "params/GPU", "params", "grads", "optimizer", "activations", "buffers", "peak"));
  for (const StageMemory& s : c.memory.stages) {
    add(fmt::format("{:>5} {:>6} {:>12} {:>9} {:>9} {:>9} {:>11} {:>9} {:>9}", s.stage, s.layers,
                    count_text(s.parameters), gib(s.at_peak.params), gib(s.at_peak.grads),
                    gib(s.at_peak.optimizer), gib(s.at_peak.activations), gib(s.at_peak.buffers),
                    gib(s.peak_bytes)));
  }
  if (p.attention == AttentionKind::kFlash) {
    add(fmt::format(
        "note     flash attention: each layer stores its output and the fp32 log-sum-exp, "
        "no (s, s) scores{}",
        p.recompute == RecomputeKind::kSelective
            ? "; selective recompute therefore recomputes nothing"
            : ""));
  }
  const MemoryPlan& mem = c.memory;
  if (mem.host_bytes > 0) {
    const int64_t host = c.cluster.device.host_memory_bytes;
    add(fmt::format(
        "host     offload keeps {} GiB per GPU in host memory{}", gib(mem.host_bytes),
        host > 0 ? fmt::format(" ({} GiB per GPU in {}'s usual server{})", gib(host),
                               c.cluster.device.name, mem.host_bytes > host ? ": DOES NOT FIT" : "")
                 : std::string()));
  }
  // GiB throughout, with the datasheet's GB beside the device's memory.
  const double device_gb = static_cast<double>(mem.device_bytes) / kBytesPerGB;
  if (mem.fits) {
    add(fmt::format("peak     {} GiB of {} GiB ({:.0f} GB): fits, {} GiB headroom",
                    gib(mem.peak_bytes), gib(mem.device_bytes), device_gb,
                    gib(mem.device_bytes - mem.peak_bytes)));
  } else {
    add(fmt::format(
        "peak     {} GiB of {} GiB ({:.0f} GB): DOES NOT FIT, short by {} GiB (try more pp, tp, "
        "a higher ZeRO stage or recompute)",
        gib(mem.peak_bytes), gib(mem.device_bytes), device_gb, gib(mem.shortfall_bytes)));
  }
  return out;
}

namespace {

std::string upper_name(Axis axis) {
  std::string name = to_string(axis);
  for (char& ch : name) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return name;
}

}  // namespace

std::string layout_table(const CompiledPlan& c) {
  const RankLayout layout(c.plan, c.cluster.gpus_per_node);
  // The rank order's axes: dp, tp, pp, and cp and ep where the plan splits along them (tp-outer,
  // inside tp, unnamed).
  std::vector<std::string> order;
  for (const Axis axis : layout.axes().order) {
    const bool shown = axis == Axis::kDp || axis == Axis::kTp || axis == Axis::kPp;
    if (axis != Axis::kTpOuter && (shown || layout.size(axis) > 1))
      order.push_back(upper_name(axis));
  }
  std::string out = fmt::format("rank layout ({} innermost, then {})\n", order.front(),
                                fmt::join(order.begin() + 1, order.end(), ", then "));
  // Columns: dp, pp, tp (the dense TP rank), then cp, ep (the expert-parallel rank) and, with
  // etp < tp, the expert-TP rank where present.
  const int64_t outer = layout.size(Axis::kTpOuter);
  std::vector<std::string> names = {"dp", "pp", "tp"};
  for (const Axis axis : {Axis::kCp, Axis::kEp}) {
    if (layout.size(axis) * (axis == Axis::kEp ? outer : 1) > 1)
      names.emplace_back(to_string(axis));
  }
  if (outer > 1) names.emplace_back("etp");
  out += fmt::format("{:>6} {:>5} {:>4}", "rank", "node", "gpu");
  for (const std::string& name : names) out += fmt::format(" {:>4}", name);
  out += "\n";
  for (int64_t rank = 0; rank < layout.world_size(); ++rank) {
    const RankCoord r = layout.coord(rank);
    const auto value = [&](const std::string& name) {
      if (name == "tp") return r.tp + layout.size(Axis::kTp) * r.tp_outer;
      if (name == "ep") return r.tp_outer + outer * r.ep;
      if (name == "etp") return r.tp;
      return r[*parse_axis(name)];
    };
    out += fmt::format("{:>6} {:>5} {:>4}", rank, r.node, r.gpu);
    for (const std::string& name : names) out += fmt::format(" {:>4}", value(name));
    out += "\n";
  }
  return out;
}

nlohmann::json plan_report_json(const CompiledPlan& c) {
  nlohmann::json out;
  out["params"] = c.parameters;
  out["model_flops_per_step"] = c.flops.model;
  out["hardware_flops_per_step"] = c.flops.hardware;
  out["task_count"] = c.graph.size();
  out["graph_mode"] = to_string(c.graph.mode());
  out["tokens_per_step"] = c.plan.tokens_per_step();
  nlohmann::json stages = nlohmann::json::array();
  for (const StageMemory& s : c.memory.stages) {
    stages.push_back({{"stage", s.stage},
                      {"layers", s.layers},
                      {"params_per_gpu", s.parameters},
                      {"peak_memory_bytes", s.peak_bytes},
                      {"memory",
                       {{"params", s.at_peak.params},
                        {"grads", s.at_peak.grads},
                        {"optimizer", s.at_peak.optimizer},
                        {"activations", s.at_peak.activations},
                        {"buffers", s.at_peak.buffers}}}});
  }
  out["per_stage"] = std::move(stages);
  out["peak_memory_bytes"] = c.memory.peak_bytes;
  out["device_memory_bytes"] = c.memory.device_bytes;
  out["fits_in_memory"] = c.memory.fits;
  out["memory_shortfall_bytes"] = c.memory.shortfall_bytes;
  if (c.memory.host_bytes > 0) out["host_memory_bytes"] = c.memory.host_bytes;
  out.update(plan_inputs_json(c));
  return out;
}

nlohmann::json plan_inputs_json(const CompiledPlan& c) {
  return {{"plan", plan_to_json(c.plan)},
          {"model", model_to_json(c.model)},
          {"cluster", cluster_to_json(c.cluster)}};
}

}  // namespace strata::cli
