#include "cli/report_text.hpp"

#include <fmt/format.h>

#include "common/units.hpp"

namespace strata::cli {

std::string gib(int64_t bytes) {
  return fmt::format("{:.2f}", static_cast<double>(bytes) / kBytesPerGiB);
}

std::string usd(double dollars) {
  return dollars >= 1 ? fmt::format("${:.2f}", dollars) : fmt::format("${:.3g}", dollars);
}

std::string duration_text(double seconds) {
  if (seconds >= 1) return fmt::format("{:.3f} s", seconds);
  if (seconds >= 1e-3) return fmt::format("{:.3f} ms", seconds * 1e3);
  return fmt::format("{:.3f} us", seconds * 1e6);
}

std::string energy_text(double joules) {
  const double kwh = joules / kJoulesPerKwh;
  if (kwh >= 1000) return fmt::format("{:.2f} MWh", kwh / 1000);
  return fmt::format("{:.2f} kWh", kwh);
}

}  // namespace strata::cli
