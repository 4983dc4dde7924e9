#pragma once
// What one lane draws at the current zoom: the boxes of its events that pass the filter and are
// on screen, with runs of boxes narrower than a pixel merged, so a frame costs what the screen
// shows (a few thousand boxes per lane at most), not what the trace holds.
//
// Culling: events are sorted by start, so the first one that can be visible is found by binary
// search at (view start - the lane's longest event), and the walk stops at the first event
// starting right of the screen.
// Merging: an event under `merge_px` wide that starts within a pixel of the box before it joins
// that box when both look the same (phase, kind, micro-batch: a run of one micro-batch's
// forward ops keeps its color), or when that box is still under 2 `merge_px` wide (it becomes a
// mixed box, drawn in one neutral color), and touching mixed boxes are one box. A box is then
// a run of one look, or at least 2 `merge_px` wide, or followed by a gap or a wide event: a lane
// draws about one box per run of one look and per gap, whatever the number of events behind it
// (each box is two triangles for the rasterizer to set up, about a microsecond each on llvmpipe).

#include <algorithm>
#include <array>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "viewer/time_view.hpp"
#include "viewer/trace_model.hpp"

namespace strata::viewer {

// Which events are shown. A lane is hidden when its process or thread is; an event when its
// phase or kind is, or when a layer or micro-batch is chosen and it has another one.
struct EventFilter {
  std::set<int32_t> hidden_pids;
  std::set<std::string> hidden_threads;  // by thread name ("compute", "tp-comm", ...)
  std::array<bool, kEventPhaseCount> phase_shown = {true, true, true, true, true};
  std::array<bool, kEventKindCount> kind_shown = {true, true, true, true, true};
  int32_t layer = -1;        // -1: every layer
  int32_t micro_batch = -1;  // -1: every micro-batch

  bool shows_everything() const;
  bool shows(const Lane& lane) const;
  bool shows(const TraceEvent& event) const;
};

struct LaneBox {
  float x0 = 0;  // pixels from the lanes' left edge, clipped to [0, width]
  float x1 = 0;
  int32_t event = -1;   // into Trace::events; the first event of a merged box
  int32_t merged = 1;   // how many events the box stands for
  bool uniform = true;  // its events share phase, kind and micro-batch
  float busy_px = 0;    // the width its events cover (< x1 - x0 when a merged box has gaps)

  // The share of the box its events cover, in [0, 1]: a merged box of TP collectives between
  // computes is mostly idle, and is drawn so.
  float coverage() const { return x1 > x0 ? std::min(1.0f, busy_px / (x1 - x0)) : 1.0f; }
};

// Whether two events look the same on the timeline: same phase, kind and micro-batch.
bool same_look(const TraceEvent& a, const TraceEvent& b);

// Appends the lane's boxes at this view to `out` (cleared first), left to right; `offset_ns` is
// added to every event's times (to align a second trace at step start).
void lane_boxes(const Trace& trace, const Lane& lane, const TimeView& view, double width_px,
                double offset_ns, const EventFilter& filter, double merge_px,
                std::vector<LaneBox>& out);

// The event of the lane under x (the last one drawn there), or -1.
int32_t event_at(const Trace& trace, const Lane& lane, const TimeView& view, double x,
                 double offset_ns, const EventFilter& filter);

}  // namespace strata::viewer
