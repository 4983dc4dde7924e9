#include "sim/search_json.hpp"

#include "plan/plan_json.hpp"
#include "sim/result_json.hpp"

namespace strata {

namespace {

CommSeconds comm_from_json(const nlohmann::json& json) {
  CommSeconds comm;
  for (const Axis axis : kNamedAxes) comm[axis] = json.at(to_string(axis)).get<double>();
  return comm;
}

}  // namespace

const char* fate_name(PlanFate fate) {
  switch (fate) {
    case PlanFate::kSimulated:
      return "simulated";
    case PlanFate::kOverMemory:
      return "over_memory";
    case PlanFate::kStopped:
      return "stopped";
  }
  return "?";
}

nlohmann::json outcome_json(const PlanOutcome& outcome) {
  const PlanFigures& f = outcome.figures;
  nlohmann::json figures;
  figures["step_time_s"] = f.step_time_s;
  figures["tokens_per_s"] = f.tokens_per_s;
  figures["mfu"] = f.mfu;
  figures["hfu"] = f.hfu;
  figures["bubble_fraction"] = f.bubble_fraction;
  figures["exposed_comm_s"] = comm_seconds_json(f.exposed_comm_s);
  figures["peak_memory_bytes"] = f.peak_memory_bytes;
  figures["device_memory_bytes"] = f.device_memory_bytes;
  figures["fits_in_memory"] = f.fits_in_memory;
  figures["cost_usd_per_step"] = f.cost_usd_per_step;
  figures["cost_usd_per_million_tokens"] = f.cost_usd_per_million_tokens;
  figures["energy_joules_per_step"] = f.energy_joules_per_step;
  figures["compute_s"] = f.compute_s;
  figures["bubble_s"] = f.bubble_s;
  figures["stage_exposed_comm_s"] = comm_seconds_json(f.stage_exposed_comm_s);
  figures["tasks"] = f.tasks;
  nlohmann::json out;
  out["index"] = outcome.index;
  out["plan"] = plan_to_json(outcome.plan);
  out["bound_step_time_s"] = outcome.bound_step_time_s;
  out["fate"] = fate_name(outcome.fate);
  out["memory_plan_peak_bytes"] = outcome.memory_plan_peak_bytes;
  out["figures"] = std::move(figures);
  return out;
}

PlanOutcome outcome_from_json(const nlohmann::json& json) {
  PlanOutcome outcome;
  outcome.index = json.at("index").get<int64_t>();
  outcome.plan = parse_plan_json(JsonFields(json.at("plan"), "search outcome"), ParallelPlan{});
  outcome.bound_step_time_s = json.at("bound_step_time_s").get<double>();
  const std::string fate = json.at("fate").get<std::string>();
  for (const PlanFate f : {PlanFate::kSimulated, PlanFate::kOverMemory, PlanFate::kStopped}) {
    if (fate == fate_name(f)) outcome.fate = f;
  }
  outcome.memory_plan_peak_bytes = json.at("memory_plan_peak_bytes").get<int64_t>();
  const nlohmann::json& figures = json.at("figures");
  PlanFigures& f = outcome.figures;
  f.step_time_s = figures.at("step_time_s").get<double>();
  f.tokens_per_s = figures.at("tokens_per_s").get<double>();
  f.mfu = figures.at("mfu").get<double>();
  f.hfu = figures.at("hfu").get<double>();
  f.bubble_fraction = figures.at("bubble_fraction").get<double>();
  f.exposed_comm_s = comm_from_json(figures.at("exposed_comm_s"));
  f.peak_memory_bytes = figures.at("peak_memory_bytes").get<int64_t>();
  f.device_memory_bytes = figures.at("device_memory_bytes").get<int64_t>();
  f.fits_in_memory = figures.at("fits_in_memory").get<bool>();
  f.cost_usd_per_step = figures.at("cost_usd_per_step").get<double>();
  f.cost_usd_per_million_tokens = figures.at("cost_usd_per_million_tokens").get<double>();
  f.energy_joules_per_step = figures.at("energy_joules_per_step").get<double>();
  f.compute_s = figures.at("compute_s").get<double>();
  f.bubble_s = figures.at("bubble_s").get<double>();
  f.stage_exposed_comm_s = comm_from_json(figures.at("stage_exposed_comm_s"));
  f.tasks = figures.at("tasks").get<int64_t>();
  return outcome;
}

}  // namespace strata
