#pragma once
// The emulator's choices among the orders a GPU may take (strata_emu.hpp's Order): which of n
// ready things runs next, and the order to visit n things in.

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace strata::emu {

// The generator of Order::kRandom, seeded by Options::seed (restarted by set_options).
std::mt19937_64& random_generator();

// 0..n-1 in the options' order: forward, reversed, or shuffled anew at each call.
std::vector<int64_t> visit_order(int64_t n);

// Which of n ready candidates, listed oldest first, runs next: the oldest (forward), the newest
// (reverse) or one at random.
size_t pick_next(size_t n);

}  // namespace strata::emu
