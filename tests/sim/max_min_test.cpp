// The weighted max-min solver (sim/max_min.hpp): hand-computed allocations, and the bottleneck
// property that characterizes max-min fairness on random problems.

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <utility>
#include <vector>

#include "sim/max_min.hpp"

namespace strata {
namespace {

// A variable as the constraints it crosses: (constraint, weight).
using Crossings = std::initializer_list<std::pair<int32_t, double>>;

MaxMinProblem make_problem(std::initializer_list<double> capacities,
                           std::initializer_list<Crossings> variables) {
  MaxMinProblem problem;
  for (const double c : capacities) problem.add_constraint(c);
  for (const Crossings& crossings : variables) {
    problem.add_variable();
    for (const auto& [constraint, weight] : crossings) problem.add_element(constraint, weight);
  }
  return problem;
}

std::vector<double> solve(const MaxMinProblem& problem) {
  MaxMinSolver solver;
  const std::span<const double> rates = solver.solve(problem);
  return {rates.begin(), rates.end()};
}

// n equal flows on one link of capacity C get C / n each.
TEST_CASE("n flows on one link share it equally", "[max_min]") {
  const std::vector<double> rates = solve(make_problem({12.0}, {{{0, 1}}, {{0, 1}}, {{0, 1}}}));
  CHECK(rates == std::vector<double>{4.0, 4.0, 4.0});
}

// The worked example of max_min.hpp: A (1) carries f, g; B (2) carries f, h. A saturates at 1/2
// (f = g = 0.5); B has 2 - 0.5 = 1.5 left for h.
TEST_CASE("the worked example of max_min.hpp, unweighted", "[max_min]") {
  const std::vector<double> rates =
      solve(make_problem({1.0, 2.0}, {{{0, 1}, {1, 1}}, {{0, 1}}, {{1, 1}}}));
  CHECK(rates == std::vector<double>{0.5, 0.5, 1.5});
}

// With weight 3 for f on A, A saturates at 1 / (3 + 1) = 0.25 (f consumes 0.75 of it, g 0.25);
// B has 2 - 0.25 = 1.75 left for h.
TEST_CASE("the worked example of max_min.hpp, f weighted 3 on A", "[max_min]") {
  const std::vector<double> rates =
      solve(make_problem({1.0, 2.0}, {{{0, 3}, {1, 1}}, {{0, 1}}, {{1, 1}}}));
  CHECK(rates == std::vector<double>{0.25, 0.25, 1.75});
}

// Links L0 (1), L1 (2), L2 (3); f0 on L0+L1, f1 on L1+L2, f2 on L0, f3 on L2, f4 on L1.
// Round 1: levels L0 1/2, L1 2/3, L2 3/2: L0 is the bottleneck, f0 = f2 = 0.5.
// Round 2: L1 (2 - 0.5) / 2 = 0.75, L2 3/2: L1, f1 = f4 = 0.75.
// Round 3: L2 3 - 0.75 = 2.25 for f3.
TEST_CASE("the classic three-link example: rates 0.5, 0.75, 0.5, 2.25, 0.75", "[max_min]") {
  const std::vector<double> rates = solve(make_problem(
      {1.0, 2.0, 3.0}, {{{0, 1}, {1, 1}}, {{1, 1}, {2, 1}}, {{0, 1}}, {{2, 1}}, {{1, 1}}}));
  CHECK(rates == std::vector<double>{0.5, 0.75, 0.5, 2.25, 0.75});
}

// A variable crossing one constraint twice consumes twice its rate there: 1 / 2.
TEST_CASE("a variable crossing a constraint twice gets half its capacity", "[max_min]") {
  CHECK(solve(make_problem({1.0}, {{{0, 1}, {0, 1}}})) == std::vector<double>{0.5});
}

TEST_CASE("a variable with no constraint is unbounded", "[max_min]") {
  const std::vector<double> rates = solve(make_problem({1.0}, {{}, {{0, 1}}}));
  CHECK(rates[0] == std::numeric_limits<double>::infinity());
  CHECK(rates[1] == 1.0);
}

// Max-min fairness (Bertsekas and Gallager, Sec. 6.5.2): the allocation is feasible, and every
// variable crosses a bottleneck, a saturated constraint on which no other variable has a larger
// rate. Checked on random problems with weights 1 to 4.
TEST_CASE("random problems: feasible, and every variable has a bottleneck", "[max_min]") {
  uint64_t seed = 12345;
  const auto next = [&](uint64_t bound) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return (seed >> 33) % bound;
  };
  MaxMinSolver solver;
  for (int trial = 0; trial < 200; ++trial) {
    MaxMinProblem problem;
    const auto constraints = static_cast<int32_t>(1 + next(8));
    for (int32_t c = 0; c < constraints; ++c) problem.add_constraint(1.0 + next(100));
    const int variables = 1 + static_cast<int>(next(20));
    for (int v = 0; v < variables; ++v) {
      problem.add_variable();
      const int hops = 1 + static_cast<int>(next(3));
      for (int h = 0; h < hops; ++h) {
        problem.add_element(static_cast<int32_t>(next(static_cast<uint64_t>(constraints))),
                            1.0 + static_cast<double>(next(4)));
      }
    }
    const std::span<const double> rates = solver.solve(problem);
    INFO("trial " << trial);

    std::vector<double> load(static_cast<size_t>(constraints), 0.0);
    std::vector<double> largest(static_cast<size_t>(constraints), 0.0);
    for (int32_t v = 0; v < problem.variables(); ++v) {
      CHECK(rates[v] > 0);
      for (const MaxMinElement& e : problem.elements(v)) {
        load[e.constraint] += e.weight * rates[v];
        largest[e.constraint] = std::max(largest[e.constraint], rates[v]);
      }
    }
    constexpr double kTolerance = 1e-9;
    for (int32_t c = 0; c < constraints; ++c) {
      CHECK(load[c] <= problem.capacity(c) * (1 + kTolerance));
    }
    for (int32_t v = 0; v < problem.variables(); ++v) {
      bool has_bottleneck = false;
      for (const MaxMinElement& e : problem.elements(v)) {
        const bool saturated =
            load[e.constraint] >= problem.capacity(e.constraint) * (1 - kTolerance);
        if (saturated && rates[v] >= largest[e.constraint] * (1 - kTolerance))
          has_bottleneck = true;
      }
      CHECK(has_bottleneck);
    }
  }
}

}  // namespace
}  // namespace strata
