#pragma once
// How the reports print quantities: memory in GiB, dollars, durations and energy with units.

#include <cstdint>
#include <string>

namespace strata::cli {

// 46.28e9 bytes -> "43.10" (GiB = 2^30 bytes).
std::string gib(int64_t bytes);
// Dollars: cents above $1, three significant digits below: "$5.50", "$0.0123".
std::string usd(double dollars);
// 12.3456 -> "12.346 s", 0.0123 -> "12.300 ms", 1.2e-5 -> "12.000 us".
std::string duration_text(double seconds);
// Joules in kWh or MWh: 3.6e6 -> "1.00 kWh", 7.2e9 -> "2.00 MWh".
std::string energy_text(double joules);

}  // namespace strata::cli
