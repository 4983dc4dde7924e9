#include "cli/number_flags.hpp"

#include <charconv>
#include <cmath>

#include "common/error.hpp"

namespace strata::cli {

std::optional<int64_t> parse_int(std::string_view text) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || stop != end) return std::nullopt;
  return value;
}

std::optional<double> parse_number(std::string_view text) {
  double value = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || stop != end || !std::isfinite(value))
    return std::nullopt;
  return value;
}

double parse_price(const std::string& text) {
  const std::optional<double> price = parse_number(text);
  if (!price || *price <= 0) {
    throw InputError("command line", "--price",
                     "'" + text + "': USD_PER_GPU_HOUR must be a number > 0",
                     "give the price of one GPU for one hour in US dollars, e.g. --price 2.5");
  }
  return *price;
}

}  // namespace strata::cli
