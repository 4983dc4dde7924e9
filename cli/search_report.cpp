#include "cli/search_report.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include <fmt/format.h>

#include "cli/plan_report.hpp"
#include "cli/report_text.hpp"
#include "common/error.hpp"
#include "common/units.hpp"
#include "plan/plan_json.hpp"
#include "sim/search_json.hpp"

namespace strata::cli {

namespace {

constexpr double kSecondsPerDay = 86400;

const char* objective_name(Objective objective) {
  switch (objective) {
    case Objective::kTime:
      return "step time";
    case Objective::kCost:
      return "cost per token";
    case Objective::kTokensPerDollar:
      return "tokens per dollar";
  }
  return "?";
}

// Training a token budget with one plan.
struct TrainingCost {
  int64_t steps = 0;
  double seconds = 0;
  double gpu_hours = 0;
  double usd = 0;
  double energy_joules = 0;
};

TrainingCost training_cost(const SearchReportInputs& in, const PlanOutcome& outcome) {
  const ParallelPlan& plan = outcome.plan;
  const PlanFigures& f = outcome.figures;
  TrainingCost cost;
  cost.steps = static_cast<int64_t>(
      std::ceil(*in.train_tokens / static_cast<double>(plan.tokens_per_step())));
  const auto steps = static_cast<double>(cost.steps);
  cost.seconds = steps * f.step_time_s;
  cost.gpu_hours = cost.seconds / kSecondsPerHour * static_cast<double>(plan.gpus());
  cost.usd = steps * f.cost_usd_per_step;
  cost.energy_joules = steps * f.energy_joules_per_step;
  return cost;
}

// 1234567 -> "1.23 M", for dollars and GPU-hours.
std::string large(double value) {
  if (value >= 1e9) return fmt::format("{:.2f} B", value / 1e9);
  if (value >= 1e6) return fmt::format("{:.2f} M", value / 1e6);
  if (value >= 1e3) return fmt::format("{:.2f} K", value / 1e3);
  return fmt::format("{:.2f}", value);
}

std::string yes_no(bool value) { return value ? "on" : "off"; }

// The plan fields in which two plans differ: "tp 4 / 8, pp 8 / 16".
// The overlaps the search chooses per plan (sim/search_space.hpp): "tp+grads+params", "-" none.
std::string overlap_cell(const ParallelPlan& p) {
  std::vector<const char*> overlapped;
  if (p.overlap.tp_comm) overlapped.push_back("tp");
  if (p.overlap.grad_reduce) overlapped.push_back("grads");
  if (p.overlap.param_gather) overlapped.push_back("params");
  return overlapped.empty() ? "-" : fmt::format("{}", fmt::join(overlapped, "+"));
}

std::string plan_differences(const ParallelPlan& a, const ParallelPlan& b) {
  std::vector<std::string> parts;
  const auto field = [&parts](const char* name, const auto& x, const auto& y) {
    if (x != y) parts.push_back(fmt::format("{} {} / {}", name, x, y));
  };
  field("gpus", a.gpus(), b.gpus());
  field("dp", a.dp, b.dp);
  field("tp", a.tp, b.tp);
  field("pp", a.pp, b.pp);
  field("vpp", a.vpp, b.vpp);
  field("ep", a.ep, b.ep);
  field("etp", a.expert_tp(), b.expert_tp());
  field("cp", a.cp, b.cp);
  field("schedule", std::string(to_string(a.schedule)), std::string(to_string(b.schedule)));
  field("micro-batch", a.micro_batch, b.micro_batch);
  field("zero", a.zero_stage, b.zero_stage);
  field("recompute", std::string(to_string(a.recompute)), std::string(to_string(b.recompute)));
  field("sequence parallel", yes_no(a.sequence_parallel), yes_no(b.sequence_parallel));
  field("first stage layers", a.first_stage_layers, b.first_stage_layers);
  field("overlap", overlap_cell(a), overlap_cell(b));
  return fmt::format("{}", fmt::join(parts, ", "));
}

// Why the best plan beat the runner-up: the step-time terms of their busiest stages that differ
// most, largest first.
std::string why_line(const SearchReportInputs& in, const PlanOutcome& best,
                     const PlanOutcome& second) {
  const PlanFigures& a = best.figures;
  const PlanFigures& b = second.figures;
  std::array<std::pair<const char*, double>, 7> terms{{
      {"compute", a.compute_s - b.compute_s},
      {"pipeline bubble", a.bubble_s - b.bubble_s},
      {"exposed tp", a.stage_exposed_comm_s.tp - b.stage_exposed_comm_s.tp},
      {"exposed pp", a.stage_exposed_comm_s.pp - b.stage_exposed_comm_s.pp},
      {"exposed dp", a.stage_exposed_comm_s.dp - b.stage_exposed_comm_s.dp},
      {"exposed cp", a.stage_exposed_comm_s.cp - b.stage_exposed_comm_s.cp},
      {"exposed ep", a.stage_exposed_comm_s.ep - b.stage_exposed_comm_s.ep},
  }};
  std::stable_sort(terms.begin(), terms.end(), [](const auto& x, const auto& y) {
    return std::abs(x.second) > std::abs(y.second);
  });
  std::vector<std::string> parts;
  for (const auto& [name, delta] : terms) {
    if (parts.size() == 3 || std::abs(delta) < 5e-4) break;
    parts.push_back(fmt::format("{} {:+.3f} s", name, delta));
  }
  const double step_delta = b.step_time_s - a.step_time_s;
  std::string text =
      fmt::format("why #1 beats #2: {:.3f} s ({:.1f}%) {} per step", step_delta,
                  100 * step_delta / b.step_time_s, step_delta >= 0 ? "faster" : "slower");
  if (in.options.objective == Objective::kCost) {
    text += fmt::format(", {} against {} per million tokens", usd(a.cost_usd_per_million_tokens),
                        usd(b.cost_usd_per_million_tokens));
  } else if (in.options.objective == Objective::kTokensPerDollar) {
    text += fmt::format(", {:.0f} against {:.0f} tokens per dollar",
                        1e6 / a.cost_usd_per_million_tokens, 1e6 / b.cost_usd_per_million_tokens);
  }
  if (!parts.empty()) text += fmt::format("; {}", fmt::join(parts, ", "));
  text += fmt::format(" (busiest stage, #1 minus #2)\n         the plans differ in {} (#1 / #2)",
                      plan_differences(best.plan, second.plan));
  return text;
}

// An MoE model's table has ep and etp columns (after pp), a search over cp a cp column; a dense
// model's is as it was.
bool shows_ep(const SearchReportInputs& in) { return in.space.model.moe(); }
bool shows_cp(const SearchReportInputs& in) { return in.space.stack.cp > 1; }

std::string table_header(const SearchReportInputs& in) {
  std::string header = fmt::format("{:>4} {:>6} {:>4} {:>3} {:>3}", "#", "gpus", "dp", "tp", "pp");
  if (shows_cp(in)) header += fmt::format(" {:>3}", "cp");
  if (shows_ep(in)) header += fmt::format(" {:>3} {:>3}", "ep", "etp");
  header += fmt::format(
      " {:>3} {:<11} {:>3} {:>4} {:<9} {:>3} {:<15} {:>9} {:>10} "
      "{:>6} {:>6} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8}",
      "vpp", "schedule", "mb", "zero", "recompute", "sp", "overlap", "step s", "tokens/s", "MFU",
      "bubble", "exposed s", "peak GiB", "headroom", "$/step", "$/M tok", "kWh/step");
  if (in.train_tokens) header += fmt::format(" {:>10} {:>10}", "train days", "train $");
  return header;
}

std::string table_row(const SearchReportInputs& in, size_t rank, const PlanOutcome& o) {
  const ParallelPlan& p = o.plan;
  const PlanFigures& f = o.figures;
  std::string row = fmt::format("{:>4} {:>6} {:>4} {:>3} {:>3}", rank, p.gpus(), p.dp, p.tp, p.pp);
  if (shows_cp(in)) row += fmt::format(" {:>3}", p.cp);
  if (shows_ep(in)) row += fmt::format(" {:>3} {:>3}", p.ep, p.expert_tp());
  row += fmt::format(
      " {:>3} {:<11} {:>3} {:>4} {:<9} {:>3} {:<15} {:>9.4g} "
      "{:>10.0f} {:>5.1f}% {:>5.1f}% {:>9.3f} {:>8} {:>8} {:>8} {:>8} {:>8.3g}",
      p.vpp, to_string(p.schedule), p.micro_batch, p.zero_stage, to_string(p.recompute),
      yes_no(p.sequence_parallel), overlap_cell(p), f.step_time_s, f.tokens_per_s, 100 * f.mfu,
      100 * f.bubble_fraction, f.exposed_comm_s.total(), gib(f.peak_memory_bytes),
      gib(f.device_memory_bytes - f.peak_memory_bytes), usd(f.cost_usd_per_step),
      usd(f.cost_usd_per_million_tokens), f.energy_joules_per_step / kJoulesPerKwh);
  if (in.train_tokens) {
    const TrainingCost cost = training_cost(in, o);
    // The dollar sign goes through the format, not operator+ on a temporary string, on which
    // GCC 12 at -O3 reports a false -Wrestrict.
    row += fmt::format(" {:>10.2f} {:>10}", cost.seconds / kSecondsPerDay,
                       fmt::format("${}", large(cost.usd)));
  }
  return row;
}

std::string counts_text(const SearchReportInputs& in, const SearchResult& r, size_t gpu_sizes) {
  const SearchCounts& c = r.counts;
  std::string out;
  auto add = [&out](const std::string& line) { out += line + "\n"; };
  add(fmt::format("plans    {} enumerated over {} cluster size(s)", c.enumerated, gpu_sizes));
  std::vector<std::string> reasons;
  for (const RefusalCount& refusal : r.refusals) {
    if (reasons.size() == 3) break;
    reasons.push_back(
        fmt::format("{} on {}, e.g. \"{}\"", refusal.plans, refusal.field, refusal.example));
  }
  add(fmt::format("         {} refused by the plan checks{}", c.refused,
                  reasons.empty() ? "" : fmt::format(": {}", fmt::join(reasons, "; "))));
  if (in.options.include_oom) {
    add("         plans that do not fit in memory are kept (--include-oom)");
  } else {
    add(
        fmt::format("         {} do not fit in memory: {} by a lower bound (model states and "
                    "stored activations), {} by the memory plan, {} by the simulated timeline",
                    c.over_memory_bound + c.over_memory_plan + c.over_memory_simulated,
                    c.over_memory_bound, c.over_memory_plan, c.over_memory_simulated));
  }
  if (in.options.exhaustive) {
    add("         none skipped (--exhaustive)");
  } else {
    add(fmt::format(
        "         {} skipped unsimulated: a lower bound on their {} is above the "
        "{} simulated{}",
        c.skipped_by_bound, objective_name(in.options.objective),
        in.options.top == 1 ? std::string("best") : fmt::format("{}th best", in.options.top),
        gpu_sizes > 1 ? " and above their cluster size's fastest" : ""));
  }
  if (c.stopped > 0) {
    add(
        fmt::format("         {} stopped mid-simulation: their simulated clock passed the step "
                    "time they had to beat",
                    c.stopped));
  }
  add(
      fmt::format("         {} simulated event by event to the end of the step (folded graphs), "
                  "{} ranked",
                  c.simulated, r.ranked.size()));
  return out;
}

}  // namespace

std::string plan_cell(const ParallelPlan& p) {
  std::string split;
  if (p.first_stage_layers > 0) {
    split = fmt::format(" ({} first, {} last)", p.first_stage_layers, p.last_stage_layers);
  }
  const std::string overlapped = overlap_cell(p);
  std::string axes = fmt::format("dp {} x tp {} x pp {}", p.dp, p.tp, p.pp);
  if (p.vpp > 1) axes += fmt::format(" x vpp {}", p.vpp);
  if (p.ep > 1) axes += fmt::format(" x ep {}", p.ep);
  if (p.expert_tp() != p.tp) axes += fmt::format(" (etp {})", p.expert_tp());
  if (p.cp > 1) axes += fmt::format(" x cp {}", p.cp);
  return fmt::format("{}{}, {}, mb {}, zero {}, recompute {}{}{}", axes, split,
                     to_string(p.schedule), p.micro_batch, p.zero_stage, to_string(p.recompute),
                     p.sequence_parallel ? ", sp" : "",
                     overlapped == "-" ? "" : fmt::format(", overlap {}", overlapped));
}

std::string search_summary(const SearchReportInputs& in, const SearchResult& r) {
  const SearchSpace& space = in.space;
  std::string out;
  auto add = [&out](const std::string& line) { out += line + "\n"; };
  add(model_line(space.model));
  std::vector<std::string> sizes;
  for (const int64_t gpus : space.gpus) sizes.push_back(std::to_string(gpus));
  add(fmt::format("cluster  {}: {} GPUs of {} ({} per node; {:.0f} GB HBM); ${:.2f} per GPU-hour",
                  space.cluster.name, fmt::join(sizes, " or "), space.cluster.device.name,
                  space.cluster.gpus_per_node,
                  static_cast<double>(space.cluster.device.hbm_bytes) / kBytesPerGB,
                  search_price_usd_per_gpu_hour(space, in.options)));
  add(fmt::format("stack    {}", stack_line(space.stack)));
  add("         (the search sets each plan's overlaps: its overlap column, sim/search_space.hpp)");
  add(fmt::format("search   global batch {} x seq {} = {} tokens per step, {}; best by {}",
                  space.global_batch, space.seq_len, space.global_batch * space.seq_len,
                  to_string(space.dtype), objective_name(in.options.objective)));
  out += counts_text(in, r, space.gpus.size());
  add("");
  if (r.ranked.empty()) {
    add("no plan ranked (the counts above say why)");
    return out;
  }
  const size_t shown = std::min(r.ranked.size(), static_cast<size_t>(in.options.top));
  add(
      fmt::format("top {} by {} (exposed s: communication the compute stream waits on; GiB = 2^30 "
                  "bytes; kWh/step an estimate at TDP)",
                  shown, objective_name(in.options.objective)));
  add(table_header(in));
  for (size_t i = 0; i < shown; ++i) add(table_row(in, i + 1, r.ranked[i]));
  if (r.ranked.size() > 1) add(why_line(in, r.ranked[0], r.ranked[1]));
  if (in.train_tokens) {
    const TrainingCost cost = training_cost(in, r.ranked[0]);
    add(fmt::format("train    {:.4g} tokens with #1: {} steps, {:.2f} days, {} GPU-hours, ${}{}",
                    *in.train_tokens, cost.steps, cost.seconds / kSecondsPerDay,
                    large(cost.gpu_hours), large(cost.usd),
                    cost.energy_joules > 0
                        ? fmt::format(", {} (estimate at TDP)", energy_text(cost.energy_joules))
                        : ""));
  }
  if (in.pareto) {
    add("");
    add(fmt::format("Pareto front of step time against cost{} ({} plan(s); # is the rank above)",
                    space.gpus.size() > 1 ? " and GPUs" : "", r.pareto.size()));
    add(table_header(in));
    for (const size_t index : r.pareto) add(table_row(in, index + 1, r.ranked[index]));
  }
  return out;
}

std::string search_csv(const SearchReportInputs& in, const SearchResult& r) {
  std::string out =
      "rank,gpus,dp,tp,pp,vpp,ep,etp,cp,first_stage_layers,last_stage_layers,schedule,micro_batch,"
      "zero_stage,recompute,sequence_parallel,tp_comm_overlap,overlap_grad_reduce,"
      "overlap_param_gather,step_time_s,tokens_per_s,mfu,hfu,bubble_fraction,exposed_tp_s,exposed_"
      "pp_s,exposed_dp_s,"
      "peak_memory_bytes,device_memory_bytes,fits_in_memory,cost_usd_per_step,"
      "cost_usd_per_million_tokens,energy_joules_per_step,bound_step_time_s";
  if (in.train_tokens) out += ",train_steps,train_seconds,train_gpu_hours,train_cost_usd";
  out += "\n";
  for (size_t i = 0; i < r.ranked.size(); ++i) {
    const PlanOutcome& o = r.ranked[i];
    const ParallelPlan& p = o.plan;
    const PlanFigures& f = o.figures;
    out += fmt::format(
        "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},"
        "{},{},{},{},{}",
        i + 1, p.gpus(), p.dp, p.tp, p.pp, p.vpp, p.ep, p.expert_tp(), p.cp, p.first_stage_layers,
        p.last_stage_layers, to_string(p.schedule), p.micro_batch, p.zero_stage,
        to_string(p.recompute), p.sequence_parallel, p.overlap.tp_comm, p.overlap.grad_reduce,
        p.overlap.param_gather, f.step_time_s, f.tokens_per_s, f.mfu, f.hfu, f.bubble_fraction,
        f.exposed_comm_s.tp, f.exposed_comm_s.pp, f.exposed_comm_s.dp, f.peak_memory_bytes,
        f.device_memory_bytes, f.fits_in_memory, f.cost_usd_per_step, f.cost_usd_per_million_tokens,
        f.energy_joules_per_step, o.bound_step_time_s);
    if (in.train_tokens) {
      const TrainingCost cost = training_cost(in, o);
      out += fmt::format(",{},{},{},{}", cost.steps, cost.seconds, cost.gpu_hours, cost.usd);
    }
    out += "\n";
  }
  return out;
}

nlohmann::json search_json(const SearchReportInputs& in, const SearchResult& r) {
  const SearchSpace& space = in.space;
  nlohmann::json search;
  search["model"] = space.model.name;
  search["cluster"] = space.cluster.name;
  search["gpus"] = space.gpus;
  search["global_batch"] = space.global_batch;
  search["seq_len"] = space.seq_len;
  search["dtype"] = to_string(space.dtype);
  search["objective"] = objective_name(in.options.objective);
  search["top"] = in.options.top;
  search["price_usd_per_gpu_hour"] = search_price_usd_per_gpu_hour(space, in.options);
  search["include_oom"] = in.options.include_oom;
  search["exhaustive"] = in.options.exhaustive;
  if (in.train_tokens) search["train_tokens"] = *in.train_tokens;
  const SearchCounts& c = r.counts;
  nlohmann::json counts;
  counts["enumerated"] = c.enumerated;
  counts["refused"] = c.refused;
  counts["over_memory_bound"] = c.over_memory_bound;
  counts["over_memory_plan"] = c.over_memory_plan;
  counts["over_memory_simulated"] = c.over_memory_simulated;
  counts["skipped_by_bound"] = c.skipped_by_bound;
  counts["stopped"] = c.stopped;
  counts["simulated"] = c.simulated;
  nlohmann::json refusals = nlohmann::json::array();
  for (const RefusalCount& refusal : r.refusals) {
    refusals.push_back(
        {{"field", refusal.field}, {"example", refusal.example}, {"plans", refusal.plans}});
  }
  nlohmann::json plans = nlohmann::json::array();
  for (size_t i = 0; i < r.ranked.size(); ++i) {
    nlohmann::json plan = outcome_json(r.ranked[i]);
    plan["rank"] = i + 1;
    if (in.train_tokens) {
      const TrainingCost cost = training_cost(in, r.ranked[i]);
      plan["train"] = {{"steps", cost.steps},
                       {"seconds", cost.seconds},
                       {"gpu_hours", cost.gpu_hours},
                       {"cost_usd", cost.usd},
                       {"energy_joules", cost.energy_joules}};
    }
    plans.push_back(std::move(plan));
  }
  nlohmann::json pareto = nlohmann::json::array();
  for (const size_t index : r.pareto) pareto.push_back(index + 1);
  return {{"search", std::move(search)},
          {"counts", std::move(counts)},
          {"refusals", std::move(refusals)},
          {"plans", std::move(plans)},
          {"pareto_ranks", std::move(pareto)}};
}

void refuse_empty_search(const SearchResult& r) {
  const SearchCounts& c = r.counts;
  if (!r.ranked.empty()) return;
  if (c.refused == c.enumerated && !r.refusals.empty()) {
    const RefusalCount& most = r.refusals.front();
    throw InputError("command line", most.field,
                     fmt::format("every one of the {} plans was refused by the plan checks; {} "
                                 "on this field, e.g. \"{}\"",
                                 c.enumerated, most.plans, most.example),
                     "change what the refusals name: GPU counts, global batch and sequence that "
                     "the model's layers and heads divide (the counts above list each reason)");
  }
  throw InputError("command line", "--gpus",
                   fmt::format("none of the {} plans fits in memory ({} refused by the plan "
                               "checks)",
                               c.enumerated, c.refused),
                   "try more GPUs, a smaller global batch or sequence, or --include-oom to rank "
                   "them anyway");
}

}  // namespace strata::cli
