#pragma once
// Weighted max-min fair sharing (SimGrid's lmm in miniature): the rates at which flows cross
// links when every link is shared fairly.
//
// A problem has constraints (links, each with a capacity in bytes/s) and variables (flows). A
// variable has elements (constraint, weight): while its rate is x it consumes weight * x of that
// constraint's capacity. The solution is the max-min fair allocation: no rate can grow without
// shrinking one that is no larger. Progressive filling computes it (Bertsekas and Gallager, Data
// Networks, Sec. 6.5.2): raise every unfixed rate together; when a constraint saturates, fix the
// rates of its unfixed variables at the current level; repeat. Constraint c saturates at level
//   (capacity_c - load of the fixed variables on c) / (sum of the weights of its unfixed variables)
// so the next bottleneck is the constraint with the smallest such level.
//
// Worked example: link A (1 GB/s) carries flows f, g; link B (2 GB/s) carries f, h. A saturates
// first at 1/2, fixing f = g = 0.5 GB/s; B then has 1.5 GB/s left for h alone: h = 1.5 GB/s.
// With weight 3 for f on A instead, A saturates at 1/(3+1): f = g = 0.25 GB/s and h = 1.75 GB/s.
//
// Cost: O(E log E) for E elements (a heap of constraint levels with lazy invalidation).
// Ties between constraints at one level are broken by constraint index, so results are
// reproducible.

#include <cstdint>
#include <span>
#include <vector>

namespace strata {

struct MaxMinElement {
  int32_t constraint = 0;
  double weight = 1.0;  // > 0
};

// Constraints and variables, built by appending; variables are numbered in the order added.
class MaxMinProblem {
 public:
  void clear();

  // Returns the constraint's index. `capacity` > 0 (any unit; rates come out in the same unit).
  int32_t add_constraint(double capacity);
  // Returns the variable's index; its elements are the add_element() calls that follow.
  int32_t add_variable();
  // Adds an element to the last variable added. A variable may cross one constraint twice: the
  // weights add up.
  void add_element(int32_t constraint, double weight);

  int32_t constraints() const { return static_cast<int32_t>(capacity_.size()); }
  int32_t variables() const { return static_cast<int32_t>(first_element_.size()) - 1; }
  double capacity(int32_t constraint) const { return capacity_[constraint]; }
  std::span<const MaxMinElement> elements(int32_t variable) const {
    return {elements_.data() + first_element_[variable],
            elements_.data() + first_element_[variable + 1]};
  }
  int64_t element_count() const { return static_cast<int64_t>(elements_.size()); }

 private:
  std::vector<double> capacity_;
  std::vector<int32_t> first_element_{0};  // variable v's elements: [first_element_[v], [v + 1])
  std::vector<MaxMinElement> elements_;
};

// Solves problems one after another, reusing its scratch space.
class MaxMinSolver {
 public:
  // The max-min fair rate of every variable of `problem`, indexed like the variables; valid until
  // the next call. A variable with no element is unconstrained: its rate is +infinity.
  std::span<const double> solve(const MaxMinProblem& problem);

 private:
  struct Level {
    double level = 0;  // the rate at which the constraint saturates
    int32_t constraint = 0;
    uint32_t stamp = 0;  // stale unless equal to stamp_[constraint]
  };

  void push_level(int32_t constraint);

  std::vector<double> rate_;
  std::vector<double> free_capacity_;   // capacity minus the load of fixed variables
  std::vector<double> open_weight_;     // sum of weights of unfixed variables
  std::vector<int32_t> open_elements_;  // number of elements of unfixed variables
  std::vector<uint32_t> stamp_;
  std::vector<int32_t> first_user_;  // constraint c's variables: users_[first_user_[c], [c + 1])
  std::vector<int32_t> users_;
  std::vector<Level> heap_;
};

}  // namespace strata
