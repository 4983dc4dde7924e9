#pragma once
// The viewer's user interface, drawn with Dear ImGui once per frame into the whole display: a
// toolbar, tabs (Timeline, Memory, Compare with two traces) and a side panel (Summary, Filter).
// The same code draws in a window and headless (viewer/gl_surface.hpp).

#include <optional>
#include <string>
#include <vector>

#include "viewer/lane_boxes.hpp"
#include "viewer/time_view.hpp"
#include "viewer/trace_model.hpp"
#include "viewer/trace_summary.hpp"

namespace strata::viewer {

enum class Tab { kTimeline, kMemory, kCompare };

struct ViewerOptions {
  std::optional<TimeRange> range;  // the first view, relative to step start; else the whole step
  Tab tab = Tab::kTimeline;
};

// A trace on the timeline: its lanes drawn after the previous source's, its times shifted so
// that its step starts at 0.
struct TimelineSource {
  Trace trace;
  TraceSummary summary;
  std::string label;  // "predicted", "measured" or the file name
  double offset_ns = 0;
};

// An event of one source.
struct EventRef {
  int32_t source = -1;
  int32_t event = -1;
  bool valid() const { return source >= 0; }
  bool operator==(const EventRef&) const = default;
};

// Where things are on screen, for tests' pixel probes and the bench: the lanes' area and each
// lane row's vertical extent in display pixels (as of the last frame drawn).
struct LaneRow {
  int32_t source = 0;
  int32_t lane = 0;  // into the source's Trace::lanes
  float y0 = 0;
  float y1 = 0;
};
struct TimelineGeometry {
  float left = 0;    // x of time view's x = 0
  float width = 0;   // of the lanes' area
  float bottom = 0;  // the lanes' visible area ends here
  std::vector<LaneRow> rows;
};

class ViewerApp {
 public:
  ViewerApp(std::vector<Trace> traces, ViewerOptions options);

  // Draws one frame (between ImGui::NewFrame and ImGui::Render).
  void draw();

  const std::vector<TimelineSource>& sources() const { return sources_; }
  const TimeView& view() const { return view_; }
  // Shows this view from the next frame on (benchmarks and tests drive the view directly).
  void set_view(const TimeView& view) {
    view_ = view;
    view_set_ = true;
  }
  const TimelineGeometry& geometry() const { return geometry_; }
  const EventRef& selected() const { return selected_; }
  // What the side panel's Filter section edits (tests set it directly).
  EventFilter& filter() { return filter_; }
  int64_t boxes_drawn() const { return boxes_drawn_; }

 private:
  void draw_toolbar();
  void draw_timeline_tab();
  void draw_axis(float left, float width);
  void draw_lanes(float left, float width);
  void handle_timeline_input(float left, float width, bool over_lanes,
                             const std::optional<EventRef>& hovered);
  void draw_event_tooltip(const EventRef& ref) const;
  void draw_details();
  void draw_memory_tab();
  void draw_compare_tab() const;
  void draw_side_panel();
  void draw_summary() const;
  void draw_filter();
  void select(const EventRef& ref);
  double step_ns() const;  // the longest source's step
  // On the first frame, when the plot's width is known: --range, or the whole step.
  void set_first_view(double width_px);

  std::vector<TimelineSource> sources_;
  ViewerOptions options_;
  bool tab_chosen_ = false;  // options_.tab has been selected
  TimeView view_;
  bool view_set_ = false;  // set on the first frame, when the lanes' width is known
  EventFilter filter_;
  EventRef selected_;
  std::vector<EventRef> dependents_;  // of the selected event
  bool panning_ = false;              // a left press began on the lanes
  std::optional<double> range_anchor_ns_;
  std::optional<TimeRange> range_;  // a range selection, in view time
  TimelineGeometry geometry_;
  std::vector<LaneBox> boxes_;  // reused by each lane
  int64_t boxes_drawn_ = 0;
};

}  // namespace strata::viewer
