#pragma once
// A searched plan's outcome as JSON: what `strata search --json` writes per plan, and what MPI
// ranks exchange (doubles round-trip exactly through nlohmann's shortest representation, so a
// gathered ranking is byte-identical to a local one). Keys:
//   {"index", "plan": {plan_json.hpp}, "bound_step_time_s", "fate":
//   "simulated|over_memory|stopped",
//    "memory_plan_peak_bytes", "figures": {step_time_s, tokens_per_s, mfu, hfu, bubble_fraction,
//    exposed_comm_s {tp, cp, ep, dp, pp}, peak_memory_bytes, device_memory_bytes, fits_in_memory,
//    cost_usd_per_step, cost_usd_per_million_tokens, energy_joules_per_step, compute_s,
//    bubble_s, stage_exposed_comm_s {tp, cp, ep, dp, pp}, tasks}}

#include <nlohmann/json.hpp>

#include "sim/search.hpp"

namespace strata {

const char* fate_name(PlanFate fate);
// The horizon is not written: it matters only before the plan is simulated.
nlohmann::json outcome_json(const PlanOutcome& outcome);
// Reads what outcome_json wrote (an internal exchange: a malformed object is a bug).
PlanOutcome outcome_from_json(const nlohmann::json& json);

}  // namespace strata
