#pragma once
// Time intervals and the set arithmetic a step's metrics need: the union of a stream's busy
// intervals, the time covered by one set and not another (communication the compute stream waits
// on). Used by the simulator's step metrics (sim/step_metrics.cpp) and by the viewer, which
// recomputes them from a trace's events.

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace strata {

struct Interval {
  int64_t begin = 0;
  int64_t end = 0;
};

// Sorted, disjoint, non-empty intervals covering the same time as `intervals`.
inline std::vector<Interval> merged(std::vector<Interval> intervals) {
  std::sort(intervals.begin(), intervals.end(),
            [](const Interval& a, const Interval& b) { return a.begin < b.begin; });
  std::vector<Interval> out;
  for (const Interval& i : intervals) {
    if (i.end <= i.begin) continue;
    if (!out.empty() && i.begin <= out.back().end) {
      out.back().end = std::max(out.back().end, i.end);
    } else {
      out.push_back(i);
    }
  }
  return out;
}

inline int64_t length(const std::vector<Interval>& intervals) {
  int64_t total = 0;
  for (const Interval& i : intervals) total += i.end - i.begin;
  return total;
}

// The parts of `a` not covered by `b` (both merged), merged.
inline std::vector<Interval> outside(const std::vector<Interval>& a,
                                     const std::vector<Interval>& b) {
  std::vector<Interval> out;
  size_t j = 0;
  for (const Interval& i : a) {
    int64_t cursor = i.begin;
    while (j < b.size() && b[j].end <= cursor) ++j;
    for (size_t k = j; k < b.size() && b[k].begin < i.end; ++k) {
      if (b[k].begin > cursor) out.push_back({cursor, b[k].begin});
      cursor = std::max(cursor, b[k].end);
    }
    if (cursor < i.end) out.push_back({cursor, i.end});
  }
  return out;
}

// Time covered by `a` and not by `b` (both merged).
inline int64_t length_outside(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  return length(outside(a, b));
}

inline std::vector<Interval> combined(const std::vector<Interval>& a,
                                      const std::vector<Interval>& b) {
  std::vector<Interval> both = a;
  both.insert(both.end(), b.begin(), b.end());
  return merged(std::move(both));
}

}  // namespace strata
