// Zoom, pan, fit and the time axis (viewer/time_view.hpp).

#include "viewer/time_view.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "common/error.hpp"

namespace strata::viewer {

TimeView TimeView::fit(double begin_ns, double end_ns, double width_px) {
  TimeView view;
  view.start_ns = begin_ns;
  view.ns_per_px = std::max(kMinNsPerPx, (end_ns - begin_ns) / std::max(width_px, 1.0));
  return view;
}

void TimeView::zoom_at(double x, double factor, double max_ns_per_px) {
  const double anchor_ns = time_at(x);
  ns_per_px = std::clamp(ns_per_px * factor, kMinNsPerPx, std::max(kMinNsPerPx, max_ns_per_px));
  start_ns = anchor_ns - x * ns_per_px;
}

namespace {

struct Unit {
  double ns;
  const char* name;
};
// Microseconds are "us": Dear ImGui's built-in font (ProggyClean) has no µ.
constexpr std::array<Unit, 4> kUnits = {{{1, "ns"}, {1e3, "us"}, {1e6, "ms"}, {1e9, "s"}}};

const Unit& unit_for(double ns) {
  const double magnitude = std::abs(ns);
  for (size_t i = kUnits.size(); i-- > 1;) {
    if (magnitude >= kUnits[i].ns) return kUnits[i];
  }
  return kUnits[0];
}

}  // namespace

std::vector<AxisTick> axis_ticks(const TimeView& view, double width_px, double min_spacing_px,
                                 double origin_ns) {
  const double min_step_ns = min_spacing_px * view.ns_per_px;
  double step_ns = std::pow(10.0, std::floor(std::log10(min_step_ns)));
  for (const double multiple : {1.0, 2.0, 5.0, 10.0}) {
    if (step_ns * multiple >= min_step_ns) {
      step_ns *= multiple;
      break;
    }
  }
  const Unit& unit = unit_for(step_ns);
  // The step is at least 1 in its unit but for steps under 1 ns: those need decimals (0.5 ns).
  const double step_in_unit = step_ns / unit.ns;
  const int decimals = std::max(0, static_cast<int>(std::ceil(-std::log10(step_in_unit) - 1e-9)));
  std::vector<AxisTick> ticks;
  const double first = std::ceil((view.start_ns - origin_ns) / step_ns);
  for (double k = first;; k += 1) {
    const double relative_ns = k * step_ns;
    const double time_ns = origin_ns + relative_ns;
    if (view.x_of(time_ns) > width_px) break;
    const double value = relative_ns / unit.ns;
    ticks.push_back({time_ns, fmt::format("{:.{}f} {}", std::abs(value) < 1e-12 ? 0.0 : value,
                                          decimals, unit.name)});
  }
  return ticks;
}

std::string format_duration(double ns) {
  const Unit& unit = unit_for(ns);
  const double value = ns / unit.ns;
  if (unit.ns == 1) return fmt::format("{:.0f} ns", value);
  const int decimals = std::abs(value) >= 100 ? 0 : std::abs(value) >= 10 ? 1 : 2;
  return fmt::format("{:.{}f} {}", value, decimals, unit.name);
}

std::string format_bytes(double bytes) {
  static constexpr std::array<const char*, 5> kNames = {"B", "KiB", "MiB", "GiB", "TiB"};
  size_t i = 0;
  while (i + 1 < kNames.size() && std::abs(bytes) >= 1024.0) {
    bytes /= 1024.0;
    ++i;
  }
  if (i == 0) return fmt::format("{:.0f} B", bytes);
  return fmt::format("{:.2f} {}", bytes, kNames[i]);
}

namespace {

// "1.5ms" -> 1.5e6; no unit: microseconds.
bool parse_time(std::string text, double& ns) {
  double scale = 1e3;
  for (const Unit& unit : kUnits) {
    const std::string name = unit.name;
    if (text.size() > name.size() && text.ends_with(name)) {  // "s" last: after ns, us, ms
      scale = unit.ns;
      text.resize(text.size() - name.size());
      break;
    }
  }
  if (text.empty()) return false;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || !std::isfinite(value)) return false;
  ns = value * scale;
  // Within a day either side of the step's start: beyond it no step lies, and the axis' tick loop
  // would run without end.
  constexpr double kDayNs = 86400e9;
  return std::abs(ns) <= kDayNs;
}

}  // namespace

TimeRange parse_time_range(const std::string& text, const std::string& flag) {
  const size_t colon = text.find(':');
  TimeRange range;
  if (colon == std::string::npos || !parse_time(text.substr(0, colon), range.begin_ns) ||
      !parse_time(text.substr(colon + 1), range.end_ns) || range.end_ns <= range.begin_ns) {
    throw InputError("command line", flag,
                     fmt::format("'{}' is not a time range T0:T1 with T0 < T1, each within a day "
                                 "of the step's start",
                                 text),
                     "write e.g. --range 0:1.5ms or --range 200:800 (microseconds; units ns, "
                     "us, ms, s)");
  }
  return range;
}

}  // namespace strata::viewer
