// The emulation's options (strata_emu.hpp), read from the environment on first use, and the
// orders they choose (order.hpp).

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <string>

#include "kernels/emu/order.hpp"
#include "strata_emu.hpp"

namespace strata::emu {
namespace {

Order order_from_environment() {
  const char* value = std::getenv("STRATA_EMU_ORDER");
  if (value == nullptr) return Order::kForward;
  const std::string order = value;
  if (order == "forward") return Order::kForward;
  if (order == "reverse") return Order::kReverse;
  if (order == "random") return Order::kRandom;
  fail("STRATA_EMU_ORDER='" + order + "' is not one of forward, reverse, random");
}

uint64_t seed_from_environment() {
  const char* value = std::getenv("STRATA_EMU_SEED");
  if (value == nullptr) return Options{}.seed;
  char* end = nullptr;
  const unsigned long long seed = std::strtoull(value, &end, 10);
  if (*value == '\0' || *end != '\0') {
    fail(std::string("STRATA_EMU_SEED='") + value + "' is not a non-negative integer");
  }
  return seed;
}

bool racecheck_from_environment() {
  const char* value = std::getenv("STRATA_EMU_RACECHECK");
  if (value == nullptr) return false;
  const std::string racecheck = value;
  if (racecheck == "0") return false;
  if (racecheck == "1") return true;
  fail("STRATA_EMU_RACECHECK='" + racecheck + "' is not 0 or 1");
}

struct State {
  Options options;
  std::mt19937_64 generator;
};

State& state() {
  static State instance = [] {
    State s;
    s.options = {order_from_environment(), seed_from_environment(), racecheck_from_environment()};
    s.generator.seed(s.options.seed);
    return s;
  }();
  return instance;
}

}  // namespace

const Options& options() { return state().options; }

void set_options(const Options& options) {
  state().options = options;
  state().generator.seed(options.seed);
}

std::mt19937_64& random_generator() { return state().generator; }

std::vector<int64_t> visit_order(int64_t n) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  switch (options().order) {
    case Order::kForward:
      std::iota(order.begin(), order.end(), 0);
      break;
    case Order::kReverse:
      std::iota(order.rbegin(), order.rend(), 0);
      break;
    case Order::kRandom:
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), random_generator());
      break;
  }
  return order;
}

size_t pick_next(size_t n) {
  switch (options().order) {
    case Order::kForward:
      return 0;
    case Order::kReverse:
      return n - 1;
    case Order::kRandom:
      return std::uniform_int_distribution<size_t>(0, n - 1)(random_generator());
  }
  return 0;
}

}  // namespace strata::emu
