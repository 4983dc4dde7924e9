#pragma once
// Numbers given as flag text (the flags whose values need more than CLI11's checks).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace strata::cli {

// The whole of `text` as an integer or a finite number; nullopt otherwise.
std::optional<int64_t> parse_int(std::string_view text);
std::optional<double> parse_number(std::string_view text);

// --price: US dollars per GPU-hour, > 0. Throws InputError naming the flag.
double parse_price(const std::string& text);

}  // namespace strata::cli
