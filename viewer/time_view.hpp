#pragma once
// The visible time window of the timeline and its mapping to pixels: zoom about a point, pan,
// fit, and the time axis's ticks in units a reader expects (ns, us, ms, s).
//
// Times are nanoseconds as doubles (a zoomed-in view shows fractions of a nanosecond per pixel);
// x is in pixels from the left edge of the lanes.

#include <cstdint>
#include <string>
#include <vector>

namespace strata::viewer {

struct TimeView {
  double start_ns = 0;   // the time at x = 0
  double ns_per_px = 1;  // > 0

  double x_of(double time_ns) const { return (time_ns - start_ns) / ns_per_px; }
  double time_at(double x) const { return start_ns + x * ns_per_px; }
  double end_ns(double width_px) const { return time_at(width_px); }

  // [begin_ns, end_ns] across `width_px`, with no margin.
  static TimeView fit(double begin_ns, double end_ns, double width_px);
  // Scales by `factor` (< 1 zooms in) keeping the time under x where it is; the scale stays
  // within [kMinNsPerPx, max_ns_per_px].
  void zoom_at(double x, double factor, double max_ns_per_px);
  // Moves the content right by dx pixels (a drag to the right shows earlier times).
  void pan(double dx) { start_ns -= dx * ns_per_px; }
};

// The finest zoom: 1/100 ns per pixel.
inline constexpr double kMinNsPerPx = 0.01;

struct AxisTick {
  double time_ns = 0;
  std::string label;
};
// Ticks at 1, 2 or 5 x 10^k ns, the smallest such step at least `min_spacing_px` apart, across
// [0, width_px]; labels relative to `origin_ns` in the largest unit not above the step, so a
// step of 500 us reads "0 us", "500 us", "1000 us" and one of 2 ms "0 ms", "2 ms".
std::vector<AxisTick> axis_ticks(const TimeView& view, double width_px, double min_spacing_px,
                                 double origin_ns);

// A duration for people: "850 ns", "12.4 us", "3.21 ms", "1.05 s" (three significant digits).
std::string format_duration(double ns);
// Bytes for people: "512 B", "1.50 KiB", "3.00 MiB", "1.25 GiB".
std::string format_bytes(double bytes);

// A time range from the command line, "T0:T1", each a number with an optional unit (ns, us,
// ms, s; microseconds, the trace's unit, when none): "0:1.5ms", "200:800". Throws InputError
// naming `flag` when it does not read.
struct TimeRange {
  double begin_ns = 0;
  double end_ns = 0;
};
TimeRange parse_time_range(const std::string& text, const std::string& flag);

}  // namespace strata::viewer
