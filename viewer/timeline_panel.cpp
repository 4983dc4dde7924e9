// The Timeline tab (viewer/viewer_app.hpp): the time axis, one row per (rank, stream) grouped
// by stage, boxes colored by phase and communication kind, bubble shading, the hovered event's
// tooltip, the selected event with what it waits for and what waits for it, and the range
// selection. Mouse: wheel zooms about the cursor (shift + wheel scrolls the lanes), a left drag
// pans, a left click selects, a right drag selects a time range; Home fits, Escape clears.

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <imgui.h>

#include "viewer/palette.hpp"
#include "viewer/viewer_app.hpp"

namespace strata::viewer {

namespace {

constexpr float kLabelWidth = 170.0f;
constexpr float kAxisHeight = 22.0f;
constexpr float kLaneHeight = 18.0f;
constexpr float kHeaderHeight = 16.0f;
constexpr float kDetailsHeight = 120.0f;
constexpr double kMergePx = 1.0;       // boxes narrower than a pixel merge
constexpr double kZoomStep = 0.85;     // per wheel notch
constexpr float kClickSlackPx = 3.0f;  // a press that moves less is a click

// The label of a group of lanes: its stage, or its process when the trace has no stages.
std::string group_label(const Lane& lane) {
  if (lane.stage >= 0) return fmt::format("stage {}", lane.stage);
  return lane.process_name;
}

// "rank 3 compute" from "rank 3 (stage 1)" and "compute": the process name up to " (".
std::string lane_label(const Lane& lane) {
  const size_t paren = lane.process_name.find(" (");
  return fmt::format("{} {}", lane.process_name.substr(0, paren), lane.thread_name);
}

// The micro-batch number, centered on each run of boxes of one micro-batch and phase (a
// micro-batch's forward on a stage is one op after another) that is wide enough to hold it.
void draw_micro_batch_labels(const Trace& trace, const std::vector<LaneBox>& boxes, float left,
                             const LaneRow& row) {
  ImDrawList* draw = ImGui::GetWindowDrawList();
  for (size_t i = 0; i < boxes.size();) {
    const TraceEvent& first = trace.events[static_cast<size_t>(boxes[i].event)];
    float x1 = boxes[i].x1;
    size_t j = i + 1;
    while (j < boxes.size() && boxes[j].uniform && boxes[j].x0 <= x1 + 1.0f &&
           same_look(first, trace.events[static_cast<size_t>(boxes[j].event)])) {
      x1 = std::max(x1, boxes[j].x1);
      ++j;
    }
    // A communication still waiting for its peers is hollow: no label on it.
    if (boxes[i].uniform && first.micro_batch >= 0 && first.transfer_ns == first.start_ns) {
      const std::string label = std::to_string(first.micro_batch);
      const ImVec2 size = ImGui::CalcTextSize(label.c_str());
      if (size.x + 4.0f <= x1 - boxes[i].x0) {
        draw->AddText(
            ImVec2(left + (boxes[i].x0 + x1 - size.x) / 2, (row.y0 + row.y1 - size.y) / 2),
            kBoxTextColor, label.c_str());
      }
    }
    i = j;
  }
}

// Shades a rank's bubbles (sorted, disjoint) on its row: only those on screen, and bubbles
// within a pixel of each other as one rectangle.
void draw_bubbles(const std::vector<Interval>& bubbles, const TimeView& view, double offset_ns,
                  float left, float width, const LaneRow& row) {
  ImDrawList* draw = ImGui::GetWindowDrawList();
  const double view_begin_ns = view.start_ns - offset_ns;
  auto it =
      std::lower_bound(bubbles.begin(), bubbles.end(), view_begin_ns,
                       [](const Interval& i, double t) { return static_cast<double>(i.end) < t; });
  std::optional<std::pair<double, double>> open;  // x0, x1 of the rectangle being extended
  auto flush = [&] {
    if (!open) return;
    draw->AddRectFilled(
        ImVec2(left + static_cast<float>(std::max(open->first, -1.0)), row.y0),
        ImVec2(left + static_cast<float>(std::min(open->second, width + 1.0)), row.y1),
        kBubbleColor);
    open.reset();
  };
  for (; it != bubbles.end(); ++it) {
    const double x0 = view.x_of(static_cast<double>(it->begin) + offset_ns);
    if (x0 > width) break;
    const double x1 = view.x_of(static_cast<double>(it->end) + offset_ns);
    if (open && x0 <= open->second + 1.0) {
      open->second = x1;
      continue;
    }
    flush();
    open = std::make_pair(x0, x1);
  }
  flush();
}

}  // namespace

void ViewerApp::draw_timeline_tab() {
  const ImVec2 available = ImGui::GetContentRegionAvail();
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const float lanes_height = std::max(50.0f, available.y - kAxisHeight - kDetailsHeight);
  const float width = std::max(10.0f, available.x - kLabelWidth - ImGui::GetStyle().ScrollbarSize);
  const float left = origin.x + kLabelWidth;
  set_first_view(width);
  draw_axis(left, width);
  ImGui::SetCursorScreenPos(ImVec2(origin.x, origin.y + kAxisHeight));
  ImGui::BeginChild("lanes", ImVec2(available.x, lanes_height), false,
                    ImGuiWindowFlags_NoScrollWithMouse);
  draw_lanes(left, width);
  ImGui::EndChild();
  draw_details();
}

void ViewerApp::draw_axis(float left, float width) {
  ImDrawList* draw = ImGui::GetWindowDrawList();
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const float bottom = origin.y + kAxisHeight;
  draw->AddLine(ImVec2(left, bottom - 1), ImVec2(left + width, bottom - 1), kGridColor);
  for (const AxisTick& tick : axis_ticks(view_, width, 90.0, 0.0)) {
    const auto x = static_cast<float>(left + view_.x_of(tick.time_ns));
    draw->AddLine(ImVec2(x, bottom - 6), ImVec2(x, bottom), kTextColor);
    draw->AddText(ImVec2(x + 3, origin.y + 2), kTextColor, tick.label.c_str());
  }
  ImGui::Dummy(ImVec2(width, kAxisHeight));
}

void ViewerApp::draw_lanes(float left, float width) {
  ImDrawList* draw = ImGui::GetWindowDrawList();
  const ImVec2 content = ImGui::GetCursorScreenPos();
  const float visible_top = ImGui::GetWindowPos().y;
  const float visible_bottom = visible_top + ImGui::GetWindowHeight();
  const ImVec2 mouse = ImGui::GetIO().MousePos;

  // Rows first: every shown lane's place, so dependencies can be drawn between any two.
  geometry_ = {};
  geometry_.left = left;
  geometry_.width = width;
  geometry_.bottom = visible_bottom;
  std::vector<std::vector<int32_t>> row_of(sources_.size());  // per source, lane -> row
  float y = content.y;
  for (size_t s = 0; s < sources_.size(); ++s) {
    const Trace& trace = sources_[s].trace;
    row_of[s].assign(trace.lanes.size(), -1);
    if (sources_.size() > 1) {
      draw->AddText(ImVec2(content.x + 2, y + 1), kTextColor, sources_[s].label.c_str());
      draw->AddLine(ImVec2(content.x, y), ImVec2(left + width, y), kTextColor);
      y += kHeaderHeight;
    }
    std::string group;
    for (size_t l = 0; l < trace.lanes.size(); ++l) {
      const Lane& lane = trace.lanes[l];
      if (!filter_.shows(lane)) continue;
      if (const std::string g = group_label(lane); g != group) {
        group = g;
        draw->AddLine(ImVec2(content.x, y), ImVec2(left + width, y), kGridColor);
        draw->AddText(ImVec2(content.x + 2, y + 1), kTextColor, group.c_str());
        y += kHeaderHeight;
      }
      row_of[s][l] = static_cast<int32_t>(geometry_.rows.size());
      geometry_.rows.push_back(
          {static_cast<int32_t>(s), static_cast<int32_t>(l), y, y + kLaneHeight});
      y += kLaneHeight;
    }
  }
  // One invisible button over all rows takes the mouse: a press on it makes it the active item
  // (so ImGui does not take the press as the start of a window move) and it stays hovered
  // while held.
  ImGui::InvisibleButton("lanes", ImVec2(kLabelWidth + width, std::max(1.0f, y - content.y)),
                         ImGuiButtonFlags_MouseButtonLeft | ImGuiButtonFlags_MouseButtonRight);
  const bool lanes_hovered = ImGui::IsItemHovered() && mouse.x >= left;

  std::optional<EventRef> hovered;
  boxes_drawn_ = 0;
  draw->PushClipRect(ImVec2(left, visible_top), ImVec2(left + width, visible_bottom), true);
  int32_t previous_pid = -1;
  for (size_t r = 0; r < geometry_.rows.size(); ++r) {
    const LaneRow& row = geometry_.rows[r];
    const TimelineSource& source = sources_[static_cast<size_t>(row.source)];
    const Lane& lane = source.trace.lanes[static_cast<size_t>(row.lane)];
    const bool first_of_rank =
        r == 0 || lane.pid != previous_pid || geometry_.rows[r - 1].source != row.source;
    previous_pid = lane.pid;
    if (row.y1 < visible_top || row.y0 > visible_bottom) continue;
    if (r % 2 == 1) {
      draw->AddRectFilled(ImVec2(left, row.y0), ImVec2(left + width, row.y1), kLaneColor);
    }
    // Bubbles on the rank's first lane (its compute stream in a Strata trace).
    if (first_of_rank) {
      for (const RankActivity& rank : source.summary.ranks) {
        if (rank.pid == lane.pid) {
          draw_bubbles(rank.bubbles, view_, source.offset_ns, left, width, row);
        }
      }
    }
    lane_boxes(source.trace, lane, view_, width, source.offset_ns, filter_, kMergePx, boxes_);
    boxes_drawn_ += static_cast<int64_t>(boxes_.size());
    for (const LaneBox& box : boxes_) {
      const TraceEvent& e = source.trace.events[static_cast<size_t>(box.event)];
      const ImVec2 a(left + box.x0, row.y0 + 1);
      const ImVec2 b(left + std::max(box.x1, box.x0 + 1.0f), row.y1 - 1);
      // A merged box is as opaque as its events cover it (at least faintly visible).
      const ImU32 solid = box.uniform ? event_color(e) : kMergedColor;
      const ImU32 color =
          box.merged == 1
              ? solid
              : with_alpha(solid, static_cast<uint8_t>(std::lround(
                                      kMinMergedAlpha + (255 - kMinMergedAlpha) * box.coverage())));
      if (box.merged == 1 && e.transfer_ns > e.start_ns) {
        // A communication waiting for its peers before its data moves: the wait is hollow.
        const auto transfer_x = static_cast<float>(
            std::clamp(left + view_.x_of(static_cast<double>(e.transfer_ns) + source.offset_ns),
                       static_cast<double>(a.x), static_cast<double>(b.x)));
        draw->AddRect(a, ImVec2(transfer_x + 1, b.y), with_alpha(color, kWaitingAlpha));
        draw->AddRectFilled(ImVec2(transfer_x, a.y), b, color);
      } else {
        draw->AddRectFilled(a, b, color);
      }
    }
    draw_micro_batch_labels(source.trace, boxes_, left, row);
    if (lanes_hovered && mouse.y >= row.y0 && mouse.y < row.y1) {
      const int32_t event =
          event_at(source.trace, lane, view_, mouse.x - left, source.offset_ns, filter_);
      if (event >= 0) hovered = EventRef{row.source, event};
    }
  }

  // The selected event, what it waits for (lines from their ends) and what waits for it.
  auto outline = [&](const EventRef& ref, ImU32 color, float thickness) -> std::optional<ImVec4> {
    const TimelineSource& source = sources_[static_cast<size_t>(ref.source)];
    const TraceEvent& e = source.trace.events[static_cast<size_t>(ref.event)];
    const int32_t row = row_of[static_cast<size_t>(ref.source)][static_cast<size_t>(e.lane)];
    if (row < 0) return std::nullopt;
    const LaneRow& r = geometry_.rows[static_cast<size_t>(row)];
    const auto x0 =
        left + static_cast<float>(view_.x_of(static_cast<double>(e.start_ns) + source.offset_ns));
    const auto x1 =
        left + static_cast<float>(view_.x_of(static_cast<double>(e.end_ns()) + source.offset_ns));
    draw->AddRect(ImVec2(x0 - 1, r.y0), ImVec2(std::max(x1, x0 + 1) + 1, r.y1), color, 0.0f, 0,
                  thickness);
    return ImVec4(x0, r.y0, x1, r.y1);
  };
  if (selected_.valid()) {
    const std::optional<ImVec4> target = outline(selected_, kSelectedColor, 2.0f);
    const Trace& trace = sources_[static_cast<size_t>(selected_.source)].trace;
    for (const int32_t dep : trace.dependencies(selected_.event)) {
      const std::optional<ImVec4> from = outline({selected_.source, dep}, kDependencyColor, 2.0f);
      if (from && target) {
        draw->AddLine(ImVec2(from->z, (from->y + from->w) / 2),
                      ImVec2(target->x, (target->y + target->w) / 2), kDependencyColor, 1.5f);
      }
    }
    for (const EventRef& dependent : dependents_) {
      const std::optional<ImVec4> to = outline(dependent, kDependentColor, 2.0f);
      if (to && target) {
        draw->AddLine(ImVec2(target->z, (target->y + target->w) / 2),
                      ImVec2(to->x, (to->y + to->w) / 2), kDependentColor, 1.5f);
      }
    }
  }
  if (range_) {
    const auto x0 = left + static_cast<float>(view_.x_of(range_->begin_ns));
    const auto x1 = left + static_cast<float>(view_.x_of(range_->end_ns));
    draw->AddRectFilled(ImVec2(x0, visible_top), ImVec2(x1, visible_bottom), kRangeColor);
    const std::string label = format_duration(range_->end_ns - range_->begin_ns);
    draw->AddText(ImVec2(x0 + 4, visible_top + 2), kSelectedColor, label.c_str());
  }
  draw->PopClipRect();

  // Lane labels, in the column left of the lanes.
  for (const LaneRow& row : geometry_.rows) {
    if (row.y1 < visible_top || row.y0 > visible_bottom) continue;
    const Lane& lane =
        sources_[static_cast<size_t>(row.source)].trace.lanes[static_cast<size_t>(row.lane)];
    draw->AddText(ImVec2(content.x + 10, row.y0 + 2), kTextColor, lane_label(lane).c_str());
  }

  handle_timeline_input(left, width, lanes_hovered, hovered);
  if (lanes_hovered && hovered) draw_event_tooltip(*hovered);
}

void ViewerApp::handle_timeline_input(float left, float width, bool over_lanes,
                                      const std::optional<EventRef>& hovered) {
  const ImGuiIO& io = ImGui::GetIO();
  const double mouse_x = io.MousePos.x - left;
  const double max_ns_per_px = 2.0 * static_cast<double>(step_ns()) / width;
  if (over_lanes && io.MouseWheel != 0.0f) {
    if (io.KeyShift) {
      ImGui::SetScrollY(ImGui::GetScrollY() - io.MouseWheel * 3 * kLaneHeight);
    } else {
      view_.zoom_at(mouse_x, std::pow(kZoomStep, io.MouseWheel), max_ns_per_px);
    }
  }
  // Left button: drag pans, a click selects (or clears on empty space).
  if (over_lanes && ImGui::IsMouseClicked(ImGuiMouseButton_Left)) panning_ = true;
  if (panning_ && ImGui::IsMouseDown(ImGuiMouseButton_Left)) view_.pan(io.MouseDelta.x);
  if (panning_ && ImGui::IsMouseReleased(ImGuiMouseButton_Left)) {
    panning_ = false;
    if (io.MouseDragMaxDistanceSqr[ImGuiMouseButton_Left] < kClickSlackPx * kClickSlackPx) {
      select(hovered.value_or(EventRef{}));
    }
  }
  // Right button: drag selects a range; a click clears it.
  if (over_lanes && ImGui::IsMouseClicked(ImGuiMouseButton_Right)) {
    range_anchor_ns_ = view_.time_at(mouse_x);
    range_.reset();
  }
  if (range_anchor_ns_ && ImGui::IsMouseDown(ImGuiMouseButton_Right)) {
    const double now_ns = view_.time_at(mouse_x);
    if (std::abs(now_ns - *range_anchor_ns_) > view_.ns_per_px * kClickSlackPx) {
      range_ = TimeRange{std::min(now_ns, *range_anchor_ns_), std::max(now_ns, *range_anchor_ns_)};
    }
  }
  if (ImGui::IsMouseReleased(ImGuiMouseButton_Right)) range_anchor_ns_.reset();
  if (ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_Home))) {
    view_ = TimeView::fit(0, static_cast<double>(step_ns()), width);
  }
  if (ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_Escape))) {
    select({});
    range_.reset();
  }
}

void ViewerApp::draw_event_tooltip(const EventRef& ref) const {
  const TimelineSource& source = sources_[static_cast<size_t>(ref.source)];
  const Trace& trace = source.trace;
  const TraceEvent& e = trace.events[static_cast<size_t>(ref.event)];
  const Lane& lane = trace.lanes[static_cast<size_t>(e.lane)];
  ImGui::BeginTooltip();
  ImGui::TextUnformatted(trace.names[static_cast<size_t>(e.name)].c_str());
  ImGui::Separator();
  ImGui::Text("%s, %s", lane.process_name.c_str(), lane.thread_name.c_str());
  if (e.kind == EventKind::kCompute || e.kind == EventKind::kHost) {
    ImGui::Text("phase %s", to_string(e.phase));
  } else {
    ImGui::Text("phase %s, %s communication", to_string(e.phase), to_string(e.kind));
  }
  if (e.layer >= 0) ImGui::Text("layer %d", e.layer);
  if (e.micro_batch >= 0) ImGui::Text("micro-batch %d", e.micro_batch);
  ImGui::Text("start %s",
              format_duration(static_cast<double>(e.start_ns) + source.offset_ns).c_str());
  ImGui::Text("duration %s", format_duration(static_cast<double>(e.dur_ns)).c_str());
  if (e.transfer_ns > e.start_ns) {
    ImGui::Text("waiting %s, moving data %s",
                format_duration(static_cast<double>(e.transfer_ns - e.start_ns)).c_str(),
                format_duration(static_cast<double>(e.end_ns() - e.transfer_ns)).c_str());
  }
  if (e.flops >= 0) ImGui::Text("%.3g FLOPs", static_cast<double>(e.flops));
  if (e.bytes >= 0) ImGui::Text("%s", format_bytes(static_cast<double>(e.bytes)).c_str());
  ImGui::EndTooltip();
}

void ViewerApp::draw_details() {
  ImGui::BeginChild("details", ImVec2(0, 0), true);
  if (!selected_.valid()) {
    ImGui::PushTextWrapPos(0.0f);
    ImGui::TextDisabled(
        "Click a box to select it and see what it waits for. Wheel: zoom, shift+wheel: scroll, "
        "drag: pan, right drag: measure a range, Home: fit, Esc: clear.");
    ImGui::PopTextWrapPos();
    ImGui::EndChild();
    return;
  }
  const TimelineSource& source = sources_[static_cast<size_t>(selected_.source)];
  const Trace& trace = source.trace;
  const TraceEvent& e = trace.events[static_cast<size_t>(selected_.event)];
  const Lane& lane = trace.lanes[static_cast<size_t>(e.lane)];
  ImGui::Text("%s  (%s, %s)  start %s  duration %s",
              trace.names[static_cast<size_t>(e.name)].c_str(), lane.process_name.c_str(),
              lane.thread_name.c_str(),
              format_duration(static_cast<double>(e.start_ns) + source.offset_ns).c_str(),
              format_duration(static_cast<double>(e.dur_ns)).c_str());
  // Clicking a dependency selects it; the click is applied after the lists are drawn.
  std::optional<EventRef> clicked;
  auto list = [&](const char* title, ImU32 color, const std::vector<EventRef>& refs) {
    ImGui::PushStyleColor(ImGuiCol_Text, color);
    ImGui::TextUnformatted(title);
    ImGui::PopStyleColor();
    for (const EventRef& ref : refs) {
      const Trace& t = sources_[static_cast<size_t>(ref.source)].trace;
      const TraceEvent& d = t.events[static_cast<size_t>(ref.event)];
      const Lane& l = t.lanes[static_cast<size_t>(d.lane)];
      const std::string text = fmt::format(
          "  {}  ({}, {}) ends {}##{}", t.names[static_cast<size_t>(d.name)], l.process_name,
          l.thread_name, format_duration(static_cast<double>(d.end_ns()) + source.offset_ns),
          ref.event);
      if (ImGui::Selectable(text.c_str())) clicked = ref;
    }
  };
  std::vector<EventRef> waits_for;
  for (const int32_t dep : trace.dependencies(selected_.event)) {
    waits_for.push_back({selected_.source, dep});
  }
  list(waits_for.empty() ? "waits for: only the task before it on its stream" : "waits for:",
       kDependencyColor, waits_for);
  list(dependents_.empty() ? "waited on by: none besides the next task on its stream"
                           : "waited on by:",
       kDependentColor, dependents_);
  ImGui::EndChild();
  if (clicked) select(*clicked);
}

void ViewerApp::select(const EventRef& ref) {
  selected_ = ref;
  dependents_.clear();
  if (!ref.valid()) return;
  const Trace& trace = sources_[static_cast<size_t>(ref.source)].trace;
  for (size_t i = 0; i < trace.events.size(); ++i) {
    for (const int32_t dep : trace.dependencies(static_cast<int32_t>(i))) {
      if (dep == ref.event) dependents_.push_back({ref.source, static_cast<int32_t>(i)});
    }
  }
}

}  // namespace strata::viewer
