// Culling and merging one lane's boxes (viewer/lane_boxes.hpp).

#include "viewer/lane_boxes.hpp"

#include <algorithm>

namespace strata::viewer {

bool EventFilter::shows(const Lane& lane) const {
  return !hidden_pids.contains(lane.pid) && !hidden_threads.contains(lane.thread_name);
}

bool EventFilter::shows_everything() const {
  return hidden_pids.empty() && hidden_threads.empty() &&
         std::all_of(phase_shown.begin(), phase_shown.end(), [](bool b) { return b; }) &&
         std::all_of(kind_shown.begin(), kind_shown.end(), [](bool b) { return b; }) && layer < 0 &&
         micro_batch < 0;
}

bool EventFilter::shows(const TraceEvent& event) const {
  return phase_shown[static_cast<size_t>(event.phase)] &&
         kind_shown[static_cast<size_t>(event.kind)] && (layer < 0 || event.layer == layer) &&
         (micro_batch < 0 || event.micro_batch == micro_batch);
}

bool same_look(const TraceEvent& a, const TraceEvent& b) {
  return a.phase == b.phase && a.kind == b.kind && a.micro_batch == b.micro_batch;
}

namespace {

// The position in lane.events of the first event that can end after `time_ns`.
size_t first_candidate(const Trace& trace, const Lane& lane, double time_ns) {
  const double earliest_start = time_ns - static_cast<double>(lane.longest_ns);
  const auto it = std::lower_bound(
      lane.events.begin(), lane.events.end(), earliest_start, [&](int32_t index, double t) {
        return static_cast<double>(trace.events[static_cast<size_t>(index)].start_ns) < t;
      });
  return static_cast<size_t>(it - lane.events.begin());
}

}  // namespace

void lane_boxes(const Trace& trace, const Lane& lane, const TimeView& view, double width_px,
                double offset_ns, const EventFilter& filter, double merge_px,
                std::vector<LaneBox>& out) {
  out.clear();
  // This loop visits every event on screen (a million when a large trace is fitted): x is one
  // multiply-add, and the filter is skipped when it shows everything.
  const double view_end_ns = view.end_ns(width_px) - offset_ns;
  const double px_per_ns = 1.0 / view.ns_per_px;
  const double shift_ns = offset_ns - view.start_ns;  // x = (t + shift) * px_per_ns
  const bool filtering = !filter.shows_everything();
  const double mixed_px = 2 * merge_px;
  for (size_t i = first_candidate(trace, lane, view.start_ns - offset_ns); i < lane.events.size();
       ++i) {
    const int32_t index = lane.events[i];
    const TraceEvent& e = trace.events[static_cast<size_t>(index)];
    if (static_cast<double>(e.start_ns) > view_end_ns) break;
    const double x0 = (static_cast<double>(e.start_ns) + shift_ns) * px_per_ns;
    const double x1 = x0 + static_cast<double>(e.dur_ns) * px_per_ns;
    if (x1 < 0 || (filtering && !filter.shows(e))) continue;
    const auto left = static_cast<float>(std::max(x0, 0.0));
    const auto right = static_cast<float>(std::min(x1, width_px));
    const bool narrow = x1 - x0 < merge_px;
    // A narrow event within a pixel of the box before it joins that box when both look the
    // same (the box keeps its color), or when the box is still under 2 merge_px wide (it
    // becomes a mixed, neutral box). So every box but the last is a run of one look or at least
    // 2 merge_px wide, and a lane never draws many more boxes than it has pixels.
    if (narrow && !out.empty() && left <= out.back().x1 + 1.0f) {
      LaneBox& box = out.back();
      const bool alike = box.uniform && same_look(trace.events[static_cast<size_t>(box.event)], e);
      if (alike || box.x1 - box.x0 < mixed_px) {
        box.x1 = std::max(box.x1, right);
        ++box.merged;
        box.busy_px += right - left;
        box.uniform = alike;
        // Two touching mixed boxes are drawn the same: one box.
        if (!alike && out.size() >= 2) {
          LaneBox& before = out[out.size() - 2];
          if (!before.uniform && box.x0 <= before.x1 + 1.0f) {
            before.x1 = std::max(before.x1, box.x1);
            before.merged += box.merged;
            before.busy_px += box.busy_px;
            out.pop_back();
          }
        }
        continue;
      }
    }
    out.push_back({left, right, index, 1, true, right - left});
  }
}

int32_t event_at(const Trace& trace, const Lane& lane, const TimeView& view, double x,
                 double offset_ns, const EventFilter& filter) {
  const double time_ns = view.time_at(x) - offset_ns;
  // Half a pixel of slack, so that a box narrower than a pixel can still be hovered.
  const double slack_ns = 0.5 * view.ns_per_px;
  int32_t found = -1;
  for (size_t i = first_candidate(trace, lane, time_ns - slack_ns); i < lane.events.size(); ++i) {
    const int32_t index = lane.events[i];
    const TraceEvent& e = trace.events[static_cast<size_t>(index)];
    if (static_cast<double>(e.start_ns) > time_ns + slack_ns) break;
    if (static_cast<double>(e.end_ns()) + slack_ns >= time_ns && filter.shows(e)) found = index;
  }
  return found;
}

}  // namespace strata::viewer
