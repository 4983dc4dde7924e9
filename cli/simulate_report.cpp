#include "cli/simulate_report.hpp"

#include <fmt/format.h>

#include "cli/plan_report.hpp"
#include "cli/report_text.hpp"
#include "common/units.hpp"
#include "sim/result_json.hpp"

namespace strata::cli {

namespace {

std::string ms(double seconds) { return fmt::format("{:.2f} ms", seconds * 1e3); }

// "energy   1.23 kWh per step (estimate: ...)", or why there is no estimate.
std::string energy_line(const CompiledPlan& compiled, const SimResult& result) {
  const DeviceSpec& device = compiled.cluster.device;
  if (result.energy_joules_per_step <= 0)
    return fmt::format("energy   unknown ({} has no TDP in its device file)", device.name);
  return fmt::format("energy   {} per step (an estimate: {} GPUs at the {:.0f} W TDP of {})",
                     energy_text(result.energy_joules_per_step), compiled.plan.gpus(),
                     device.tdp_watts, device.name);
}

// tp, pp and dp, then cp and ep where the plan communicates along them.
std::string comm_text(const CommSeconds& comm) {
  std::string text = fmt::format("tp {}, pp {}, dp {}", ms(comm.tp), ms(comm.pp), ms(comm.dp));
  for (const Axis axis : {Axis::kCp, Axis::kEp}) {
    if (comm[axis] > 0) text += fmt::format(", {} {}", to_string(axis), ms(comm[axis]));
  }
  return text;
}

// "rank 3 computes 1.5x slower; ranks 0-3 on h100-sxm", or "" for a uniform cluster.
std::string rank_changes_text(const SimOptions& options) {
  std::vector<std::string> parts;
  for (const SlowRank& s : options.slow_ranks)
    parts.push_back(fmt::format("rank {} computes {:g}x slower", s.rank, s.factor));
  for (const RankDevice& d : options.rank_devices) {
    parts.push_back(d.first == d.last
                        ? fmt::format("rank {} on {}", d.first, d.device.name)
                        : fmt::format("ranks {}-{} on {}", d.first, d.last, d.device.name));
  }
  return fmt::format("{}", fmt::join(parts, "; "));
}

}  // namespace

double price_usd_per_gpu_hour(const CompiledPlan& compiled, const SimOptions& options) {
  return options.price_usd_per_gpu_hour > 0 ? options.price_usd_per_gpu_hour
                                            : compiled.cluster.price_usd_per_gpu_hour;
}

std::string simulate_summary(const CompiledPlan& c, const SimOptions& options, const SimResult& r) {
  std::string out;
  auto add = [&out](const std::string& line) { out += line + "\n"; };
  add(model_line(c.model));
  add(cluster_line(c.cluster, c.plan.gpus()));
  add(fmt::format("plan     {}", plan_line(c.plan)));
  if (c.model.moe()) add(fmt::format("experts  {}", experts_line(c.model, c.plan)));
  add(fmt::format("stack    {}", stack_line(c.plan)));
  add(fmt::format("graph    {} ({} ranks): {} tasks; the engine answered {} events",
                  to_string(c.graph.mode()), c.graph.ranks().size(), c.graph.size(),
                  r.engine.events));
  const std::string changes = rank_changes_text(options);
  if (!changes.empty()) add(fmt::format("ranks    {}", changes));
  if (options.calibration) {
    add(fmt::format("compute  efficiency tables from {}", options.calibration->source));
  }
  add("");
  add(fmt::format("step     {} for {} tokens: {:.0f} tokens/s, {:.2f} samples/s",
                  duration_text(r.step_time_s), c.plan.tokens_per_step(), r.tokens_per_s,
                  r.samples_per_s));
  add(
      fmt::format("flops    MFU {:.1f}% ({:.1f} model TFLOP/s per GPU, {} per step); "
                  "HFU {:.1f}% ({:.1f} hardware TFLOP/s per GPU, executed with recompute)",
                  r.mfu * 100, r.model_tflops_per_gpu, flops_text(r.model_flops_per_step),
                  r.hfu * 100, r.hardware_tflops_per_gpu));
  if (c.plan.fp8 != Fp8Format::kNone) {
    add(
        fmt::format("         MFU and HFU against the {} dense peak, as NeMo and MLPerf report FP8 "
                    "runs (the FP8 GEMMs run against the fp8 peak)",
                    to_string(c.plan.dtype)));
  }
  add(
      fmt::format("bubble   {:.1f}% of the step (the largest stage's pipeline idle time: not "
                  "computing, not waiting on communication or its host)",
                  r.bubble_fraction * 100));
  add(fmt::format("comm     exposed {} (compute waits on it)", comm_text(r.exposed_comm_s)));
  add(fmt::format("         total   {}", comm_text(r.comm_s)));
  const int64_t device_bytes = c.cluster.device.hbm_bytes;
  if (r.fits_in_memory) {
    add(fmt::format("memory   peak {} GiB per GPU of {} GiB ({:.0f} GB): fits, {} GiB headroom",
                    gib(r.peak_memory_bytes), gib(device_bytes),
                    static_cast<double>(device_bytes) / kBytesPerGB,
                    gib(device_bytes - r.peak_memory_bytes)));
  } else {
    add(
        fmt::format("memory   peak {} GiB per GPU of {} GiB ({:.0f} GB): DOES NOT FIT (try more "
                    "pp, tp, a higher ZeRO stage or recompute)",
                    gib(r.peak_memory_bytes), gib(device_bytes),
                    static_cast<double>(device_bytes) / kBytesPerGB));
  }
  add(fmt::format("cost     {} per step, {} per million tokens ({} GPUs at ${:.2f} per GPU-hour)",
                  usd(r.cost_usd_per_step), usd(r.cost_usd_per_million_tokens), c.plan.gpus(),
                  price_usd_per_gpu_hour(c, options)));
  add(energy_line(c, r));
  add("");
  add("per stage (seconds; exposed communication in ms; GiB = 2^30 bytes)");
  // The cp and ep columns where the plan has those axes.
  const bool cp = c.plan.cp > 1;
  const bool ep = c.plan.ep > 1;
  std::string header = fmt::format("{:>5} {:>10} {:>10} {:>7} {:>10} {:>10} {:>10}", "stage",
                                   "busy s", "idle s", "bubble", "exposed tp", "pp", "dp");
  if (cp) header += fmt::format(" {:>10}", "cp");
  if (ep) header += fmt::format(" {:>10}", "ep");
  add(header + fmt::format(" {:>9}", "peak GiB"));
  for (const StageResult& s : r.per_stage) {
    std::string row =
        fmt::format("{:>5} {:>10.6f} {:>10.6f} {:>6.1f}% {:>10.2f} {:>10.2f} {:>10.2f}", s.stage,
                    s.busy_s, s.idle_s, s.bubble_fraction * 100, s.exposed_comm_s.tp * 1e3,
                    s.exposed_comm_s.pp * 1e3, s.exposed_comm_s.dp * 1e3);
    if (cp) row += fmt::format(" {:>10.2f}", s.exposed_comm_s.cp * 1e3);
    if (ep) row += fmt::format(" {:>10.2f}", s.exposed_comm_s.ep * 1e3);
    add(row + fmt::format(" {:>9}", gib(s.peak_memory_bytes)));
  }
  return out;
}

nlohmann::json simulate_report_json(const CompiledPlan& c, const SimOptions& options,
                                    const SimResult& r) {
  nlohmann::json out;
  out["step_time_s"] = r.step_time_s;
  out["tokens_per_s"] = r.tokens_per_s;
  out["samples_per_s"] = r.samples_per_s;
  out["model_flops_per_step"] = r.model_flops_per_step;
  out["hardware_flops_per_step"] = r.hardware_flops_per_step;
  out["model_tflops_per_gpu"] = r.model_tflops_per_gpu;
  out["hardware_tflops_per_gpu"] = r.hardware_tflops_per_gpu;
  out["mfu"] = r.mfu;
  out["hfu"] = r.hfu;
  out["bubble_fraction"] = r.bubble_fraction;
  out["exposed_comm_s"] = comm_seconds_json(r.exposed_comm_s);
  out["comm_s"] = comm_seconds_json(r.comm_s);
  out["peak_memory_bytes"] = r.peak_memory_bytes;
  out["fits_in_memory"] = r.fits_in_memory;
  out["cost_usd_per_step"] = r.cost_usd_per_step;
  out["cost_usd_per_million_tokens"] = r.cost_usd_per_million_tokens;
  out["energy_joules_per_step"] = r.energy_joules_per_step;
  nlohmann::json stages = nlohmann::json::array();
  for (const StageResult& s : r.per_stage) {
    stages.push_back(stage_result_json(s));
  }
  out["per_stage"] = std::move(stages);

  out["graph_mode"] = to_string(c.graph.mode());
  out["task_count"] = c.graph.size();
  out["engine_events"] = r.engine.events;
  out["engine_activities"] = r.engine.activities;
  out["gpus"] = c.plan.gpus();
  out["tokens_per_step"] = c.plan.tokens_per_step();
  out["device_memory_bytes"] = c.cluster.device.hbm_bytes;
  out["price_usd_per_gpu_hour"] = price_usd_per_gpu_hour(c, options);
  out["calibration"] =
      options.calibration ? nlohmann::json(options.calibration->source) : nlohmann::json();
  nlohmann::json slow = nlohmann::json::array();
  for (const SlowRank& s : options.slow_ranks)
    slow.push_back({{"rank", s.rank}, {"factor", s.factor}});
  out["slow_ranks"] = std::move(slow);
  nlohmann::json devices = nlohmann::json::array();
  for (const RankDevice& d : options.rank_devices)
    devices.push_back({{"first", d.first}, {"last", d.last}, {"device", d.device.name}});
  out["rank_devices"] = std::move(devices);
  out.update(plan_inputs_json(c));
  return out;
}

}  // namespace strata::cli
