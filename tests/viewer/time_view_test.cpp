// The timeline's time window (viewer/time_view.hpp): zoom keeps the time under the cursor, pan and
// fit map times to pixels as x = (t - start) / ns_per_px, axis ticks fall at 1, 2 or 5 x 10^k ns
// at least the minimum spacing apart, durations and sizes read as people write them, and --range
// reads "T0:T1" or names the flag when it cannot.

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "tests/input_error.hpp"
#include "viewer/time_view.hpp"

namespace strata::viewer {
namespace {

using strata::test::input_error_of;

// zoom_at(x, factor): ns_per_px becomes ns_per_px x factor, and time_at(x) before = after, i.e.
// start' = start + x (ns_per_px - ns_per_px'), for cursors anywhere on the lanes.
TEST_CASE("zoom keeps the time under the cursor where it is", "[viewer][time_view]") {
  for (const double x : {0.0, 1.0, 123.5, 640.0, 1999.0}) {
    for (const double factor : {0.5, 0.8, 1.0 / 1.1, 1.25, 3.0}) {
      TimeView view{12345.0, 10.0};
      const double anchor_ns = view.time_at(x);
      view.zoom_at(x, factor, 1e9);
      INFO("x " << x << " factor " << factor);
      CHECK(view.ns_per_px == Approx(10.0 * factor).epsilon(1e-12));
      CHECK(view.time_at(x) == Approx(anchor_ns).epsilon(1e-12));
      CHECK(view.start_ns == Approx(12345.0 + x * (10.0 - 10.0 * factor)).epsilon(1e-12));
    }
  }
}

// The scale stays within [kMinNsPerPx, max]: zooming in past 0.01 ns per pixel stops there,
// zooming out past the maximum stops there, and the cursor's time still holds.
TEST_CASE("zoom clamps at the finest and the widest scale", "[viewer][time_view]") {
  TimeView fine{500.0, 0.02};
  const double fine_anchor = fine.time_at(300.0);
  fine.zoom_at(300.0, 0.1, 1e6);
  CHECK(fine.ns_per_px == kMinNsPerPx);
  CHECK(fine.time_at(300.0) == Approx(fine_anchor).epsilon(1e-12));

  TimeView wide{500.0, 100.0};
  const double wide_anchor = wide.time_at(250.0);
  wide.zoom_at(250.0, 10.0, 500.0);
  CHECK(wide.ns_per_px == 500.0);
  CHECK(wide.time_at(250.0) == Approx(wide_anchor).epsilon(1e-12));
  wide.zoom_at(250.0, 2.0, 500.0);  // already at the maximum: nothing moves
  CHECK(wide.ns_per_px == 500.0);
  CHECK(wide.time_at(250.0) == Approx(wide_anchor).epsilon(1e-12));
}

// pan(dx) moves the content right by dx pixels: start goes back by dx x ns_per_px, so what was
// at x is now at x + dx.
TEST_CASE("pan moves by dx pixels times the scale", "[viewer][time_view]") {
  TimeView view{1000.0, 4.0};
  const double t = view.time_at(100.0);
  view.pan(25.0);
  CHECK(view.start_ns == 900.0);
  CHECK(view.time_at(125.0) == t);
  view.pan(-10.0);
  CHECK(view.start_ns == 940.0);
  CHECK(view.ns_per_px == 4.0);
}

// fit(begin, end, width): begin at x = 0 and end at x = width; a span narrower than width x 0.01
// ns is shown at the finest scale from begin.
TEST_CASE("fit maps begin to 0 and end to the width", "[viewer][time_view]") {
  const TimeView view = TimeView::fit(2000.0, 12000.0, 1000.0);
  CHECK(view.start_ns == 2000.0);
  CHECK(view.ns_per_px == 10.0);
  CHECK(view.x_of(2000.0) == 0.0);
  CHECK(view.x_of(12000.0) == 1000.0);
  CHECK(view.end_ns(1000.0) == 12000.0);

  const TimeView odd = TimeView::fit(1.5e6, 1.5e6 + 7777.0, 333.0);
  CHECK(odd.x_of(1.5e6) == 0.0);
  CHECK(odd.x_of(1.5e6 + 7777.0) == Approx(333.0).epsilon(1e-12));

  const TimeView tiny = TimeView::fit(100.0, 101.0, 1000.0);
  CHECK(tiny.start_ns == 100.0);
  CHECK(tiny.ns_per_px == kMinNsPerPx);
}

std::vector<std::string> labels_of(const std::vector<AxisTick>& ticks) {
  std::vector<std::string> labels;
  for (const AxisTick& tick : ticks) labels.push_back(tick.label);
  return labels;
}

// 10 ms over 1000 px is 10^4 ns per pixel. A 90 px minimum spacing is 9 x 10^5 ns: of 10^5 x
// {1, 2, 5, 10}, the first at least that is 10^6 ns, 1 ms (100 px): ticks "0 ms" .. "10 ms", the
// last at x = 1000. A 150 px minimum is 1.5 x 10^6 ns: 2 ms steps (200 px), "0 ms" .. "10 ms".
TEST_CASE("axis ticks over a 10 ms view", "[viewer][time_view]") {
  const TimeView view = TimeView::fit(0.0, 1e7, 1000.0);
  const std::vector<AxisTick> ms = axis_ticks(view, 1000.0, 90.0, 0.0);
  CHECK(labels_of(ms) == std::vector<std::string>{"0 ms", "1 ms", "2 ms", "3 ms", "4 ms", "5 ms",
                                                  "6 ms", "7 ms", "8 ms", "9 ms", "10 ms"});
  for (size_t i = 0; i < ms.size(); ++i) CHECK(ms[i].time_ns == 1e6 * static_cast<double>(i));

  const std::vector<AxisTick> two_ms = axis_ticks(view, 1000.0, 150.0, 0.0);
  CHECK(labels_of(two_ms) ==
        std::vector<std::string>{"0 ms", "2 ms", "4 ms", "6 ms", "8 ms", "10 ms"});
}

// Labels are relative to the origin, in the step's unit. [0.5 ms, 1.5 ms] over 1000 px is 1000 ns
// per pixel; 90 px is 9 x 10^4 ns, so 100 us steps. From origin 0: "500 us" .. "1500 us"; from
// origin 1 ms: "-500 us" .. "500 us" with "0 us" at 1 ms. Below a nanosecond the step keeps its
// decimals: [100, 110] ns over 1000 px is 0.01 ns per pixel; 40 px is 0.4 ns, so 0.5 ns steps,
// one decimal: "100.0 ns", "100.5 ns", ...
TEST_CASE("axis tick labels are relative to the origin, in the step's unit",
          "[viewer][time_view]") {
  const TimeView view = TimeView::fit(5e5, 1.5e6, 1000.0);
  const std::vector<AxisTick> from_zero = axis_ticks(view, 1000.0, 90.0, 0.0);
  REQUIRE(from_zero.size() == 11);
  CHECK(from_zero.front().label == "500 us");
  CHECK(from_zero[1].label == "600 us");
  CHECK(from_zero.back().label == "1500 us");

  const std::vector<AxisTick> from_1ms = axis_ticks(view, 1000.0, 90.0, 1e6);
  REQUIRE(from_1ms.size() == 11);
  CHECK(from_1ms.front().label == "-500 us");
  CHECK(from_1ms[5].label == "0 us");
  CHECK(from_1ms[5].time_ns == 1e6);
  CHECK(from_1ms.back().label == "500 us");

  const TimeView fine{100.0, kMinNsPerPx};
  const std::vector<AxisTick> sub_ns = axis_ticks(fine, 1001.0, 40.0, 0.0);
  REQUIRE(sub_ns.size() == 21);
  CHECK(sub_ns[0].label == "100.0 ns");
  CHECK(sub_ns[1].label == "100.5 ns");
  CHECK(sub_ns[20].label == "110.0 ns");
}

// For any view: the step is 1, 2 or 5 x 10^k ns, at least min_spacing px and less than 2.5 x
// min_spacing px (the worst case is a minimum just above 2 x 10^k, rounded up to 5 x 10^k); the
// ticks are one step apart, within [0, width], none missing at either end; each label is the
// tick's time from the origin, in the largest unit (ns, us, ms, s) not above the step.
TEST_CASE("axis ticks are 1-2-5 steps at least the minimum spacing apart", "[viewer][time_view]") {
  const double width = 1280.0;
  int views = 0;
  for (double ns_per_px = 0.013; ns_per_px < 1e8; ns_per_px *= 1.7) {
    for (const double min_spacing : {40.0, 90.0, 150.0}) {
      for (const double origin : {0.0, 12345.678}) {
        const TimeView view{3.3e5 * ns_per_px, ns_per_px};
        const std::vector<AxisTick> ticks = axis_ticks(view, width, min_spacing, origin);
        INFO("ns_per_px " << ns_per_px << " min spacing " << min_spacing << " origin " << origin);
        REQUIRE(ticks.size() >= 2);
        ++views;
        const double step = ticks[1].time_ns - ticks[0].time_ns;
        const double decade = std::pow(10.0, std::floor(std::log10(step) + 1e-9));
        const double mantissa = step / decade;
        CHECK((std::abs(mantissa - 1) < 1e-6 || std::abs(mantissa - 2) < 1e-6 ||
               std::abs(mantissa - 5) < 1e-6));
        const double spacing_px = step / ns_per_px;
        CHECK(spacing_px >= min_spacing * (1 - 1e-9));
        CHECK(spacing_px < 2.5 * min_spacing);

        const double unit_ns = step >= 1e9 ? 1e9 : step >= 1e6 ? 1e6 : step >= 1e3 ? 1e3 : 1.0;
        const std::string unit = step >= 1e9   ? " s"
                                 : step >= 1e6 ? " ms"
                                 : step >= 1e3 ? " us"
                                               : " ns";
        for (size_t i = 0; i < ticks.size(); ++i) {
          const double x = view.x_of(ticks[i].time_ns);
          CHECK(x >= -1e-6);
          CHECK(x <= width);
          if (i > 0) {
            CHECK(ticks[i].time_ns - ticks[i - 1].time_ns == Approx(step).epsilon(1e-6));
          }
          const std::string& label = ticks[i].label;
          REQUIRE(label.size() > unit.size());
          CHECK(label.substr(label.size() - unit.size()) == unit);
          const double value = std::strtod(label.c_str(), nullptr);
          CHECK(std::abs(value * unit_ns - (ticks[i].time_ns - origin)) <= 1e-6 * step);
        }
        CHECK(view.x_of(ticks.front().time_ns - step) < 0);
        CHECK(view.x_of(ticks.back().time_ns + step) > width);
      }
    }
  }
  CHECK(views > 100);
}

// Three significant digits in the largest unit not above the value; bytes in powers of 1024.
TEST_CASE("durations and sizes read as people write them", "[viewer][time_view]") {
  CHECK(format_duration(0) == "0 ns");
  CHECK(format_duration(850) == "850 ns");
  CHECK(format_duration(999) == "999 ns");
  CHECK(format_duration(1000) == "1.00 us");
  CHECK(format_duration(12400) == "12.4 us");
  CHECK(format_duration(123456) == "123 us");
  CHECK(format_duration(3.21e6) == "3.21 ms");
  CHECK(format_duration(1.05e9) == "1.05 s");
  CHECK(format_duration(2.5e10) == "25.0 s");
  CHECK(format_duration(-12400) == "-12.4 us");

  CHECK(format_bytes(0) == "0 B");
  CHECK(format_bytes(512) == "512 B");
  CHECK(format_bytes(1023) == "1023 B");
  CHECK(format_bytes(1024) == "1.00 KiB");
  CHECK(format_bytes(1536) == "1.50 KiB");
  CHECK(format_bytes(3.0 * 1024 * 1024) == "3.00 MiB");
  CHECK(format_bytes(1.25 * 1024 * 1024 * 1024) == "1.25 GiB");
  CHECK(format_bytes(2.0 * 1024 * 1024 * 1024 * 1024) == "2.00 TiB");
  CHECK(format_bytes(1024.0 * 1024 * 1024 * 1024 * 1024) == "1024.00 TiB");  // no unit above TiB
}

// "T0:T1", each a number with an optional unit (ns, us, ms, s); no unit is microseconds.
TEST_CASE("parse_time_range reads T0:T1 with units", "[viewer][time_view]") {
  struct Case {
    const char* text;
    double begin_ns, end_ns;
  };
  for (const Case& c : std::vector<Case>{{"0:1.5ms", 0, 1.5e6},
                                         {"200:800", 2e5, 8e5},
                                         {"1s:2s", 1e9, 2e9},
                                         {"100ns:2us", 100, 2000},
                                         {"0.5ms:1s", 5e5, 1e9},
                                         {"-5:5", -5000, 5000},
                                         {"1e3:2e3us", 1e6, 2e6}}) {
    INFO(c.text);
    const TimeRange range = parse_time_range(c.text, "--range");
    CHECK(range.begin_ns == Approx(c.begin_ns).epsilon(1e-15));
    CHECK(range.end_ns == Approx(c.end_ns).epsilon(1e-15));
  }
}

// What is not "T0:T1" with T0 < T1 is an InputError from the command line naming the flag.
TEST_CASE("parse_time_range refuses what does not read, naming --range", "[viewer][time_view]") {
  for (const char* text :
       {"", "5", "3:1", "1:1", "a:b", "1:2xs", "1:", ":2", "ms:2ms", "1:2:3", "nan:1", "0:inf"}) {
    INFO("'" << text << "'");
    const std::optional<InputError> error =
        input_error_of([&] { parse_time_range(text, "--range"); });
    REQUIRE(error.has_value());
    CHECK(error->where() == "command line");
    CHECK(error->field() == "--range");
    CHECK_THAT(std::string(error->what()), Catch::Contains("--range"));
  }
}

}  // namespace
}  // namespace strata::viewer
