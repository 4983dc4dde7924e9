#include "sim/max_min.hpp"

#include <algorithm>
#include <limits>

#include "common/error.hpp"

namespace strata {

namespace {

// The heap of constraint levels is a min-heap on (level, constraint): std::push_heap keeps the
// largest first, so "less" is "comes out later".
struct LaterLevel {
  template <class Level>
  bool operator()(const Level& a, const Level& b) const {
    return a.level > b.level || (a.level == b.level && a.constraint > b.constraint);
  }
};

}  // namespace

void MaxMinProblem::clear() {
  capacity_.clear();
  first_element_.assign(1, 0);
  elements_.clear();
}

int32_t MaxMinProblem::add_constraint(double capacity) {
  STRATA_ASSERT(capacity > 0, "a max-min constraint needs a positive capacity");
  capacity_.push_back(capacity);
  return constraints() - 1;
}

int32_t MaxMinProblem::add_variable() {
  first_element_.push_back(static_cast<int32_t>(elements_.size()));
  return variables() - 1;
}

void MaxMinProblem::add_element(int32_t constraint, double weight) {
  STRATA_ASSERT(variables() > 0, "add_element() before any add_variable()");
  STRATA_ASSERT(constraint >= 0 && constraint < constraints(), "unknown max-min constraint");
  STRATA_ASSERT(weight > 0, "a max-min element needs a positive weight");
  elements_.push_back({constraint, weight});
  first_element_.back() = static_cast<int32_t>(elements_.size());
}

void MaxMinSolver::push_level(int32_t constraint) {
  heap_.push_back(
      {free_capacity_[constraint] / open_weight_[constraint], constraint, ++stamp_[constraint]});
  std::push_heap(heap_.begin(), heap_.end(), LaterLevel{});
}

std::span<const double> MaxMinSolver::solve(const MaxMinProblem& problem) {
  const int32_t constraints = problem.constraints();
  const int32_t variables = problem.variables();
  constexpr double kUnfixed = -1;
  rate_.assign(static_cast<size_t>(variables), kUnfixed);
  free_capacity_.resize(static_cast<size_t>(constraints));
  open_weight_.assign(static_cast<size_t>(constraints), 0);
  open_elements_.assign(static_cast<size_t>(constraints), 0);
  stamp_.assign(static_cast<size_t>(constraints), 0);
  first_user_.assign(static_cast<size_t>(constraints) + 1, 0);

  // Constraint -> variables, in variable order (a variable crossing a constraint twice is listed
  // twice; the second visit finds it fixed).
  for (int32_t v = 0; v < variables; ++v) {
    if (problem.elements(v).empty()) rate_[v] = std::numeric_limits<double>::infinity();
    for (const MaxMinElement& e : problem.elements(v)) {
      ++first_user_[e.constraint + 1];
      open_weight_[e.constraint] += e.weight;
      ++open_elements_[e.constraint];
    }
  }
  for (int32_t c = 0; c < constraints; ++c) first_user_[c + 1] += first_user_[c];
  users_.resize(static_cast<size_t>(first_user_[constraints]));
  // Filling advances first_user_[c] to the start of c + 1; shifting by one restores it.
  for (int32_t v = 0; v < variables; ++v) {
    for (const MaxMinElement& e : problem.elements(v)) users_[first_user_[e.constraint]++] = v;
  }
  for (int32_t c = constraints; c > 0; --c) first_user_[c] = first_user_[c - 1];
  first_user_[0] = 0;

  heap_.clear();
  for (int32_t c = 0; c < constraints; ++c) {
    free_capacity_[c] = problem.capacity(c);
    if (open_elements_[c] > 0) push_level(c);
  }

  // Progressive filling. Levels only rise in exact arithmetic; taking the max with the previous
  // level keeps rounding (a free capacity a hair below zero) from producing a lower or negative
  // rate.
  double level = 0;
  while (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), LaterLevel{});
    const Level next = heap_.back();
    heap_.pop_back();
    const int32_t c = next.constraint;
    if (next.stamp != stamp_[c] || open_elements_[c] == 0) continue;
    level = std::max(level, next.level);
    for (int32_t u = first_user_[c]; u < first_user_[c + 1]; ++u) {
      const int32_t v = users_[u];
      if (rate_[v] != kUnfixed) continue;
      rate_[v] = level;
      for (const MaxMinElement& e : problem.elements(v)) {
        free_capacity_[e.constraint] -= e.weight * level;
        open_weight_[e.constraint] -= e.weight;
        --open_elements_[e.constraint];
      }
      for (const MaxMinElement& e : problem.elements(v)) {
        if (e.constraint != c && open_elements_[e.constraint] > 0) push_level(e.constraint);
      }
    }
  }
  return rate_;
}

}  // namespace strata
