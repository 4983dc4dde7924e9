#pragma once
// What `strata search` prints and writes: the ranked table of the top plans with why the best beat
// the runner-up, the counts of plans enumerated, refused, pruned and simulated, the Pareto front,
// and every simulated plan as CSV or JSON.

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "sim/search.hpp"

namespace strata::cli {

struct SearchReportInputs {
  const SearchSpace& space;
  const SearchOptions& options;
  std::optional<double> train_tokens;  // --train-tokens: add time and cost to train them
  bool pareto = false;                 // --pareto: print the front
};

std::string search_summary(const SearchReportInputs& inputs, const SearchResult& result);

// Throws InputError when no plan ranked, naming the cause: every plan refused (the most common
// refusal's field and an example), or none fitting in memory.
void refuse_empty_search(const SearchResult& result);
std::string search_csv(const SearchReportInputs& inputs, const SearchResult& result);
nlohmann::json search_json(const SearchReportInputs& inputs, const SearchResult& result);

// "dp 32 x tp 4 x pp 8, 1f1b, mb 1, zero 1, recompute selective, sp" (one table cell).
std::string plan_cell(const ParallelPlan& plan);

}  // namespace strata::cli
