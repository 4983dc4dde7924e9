// The Memory tab (viewer/viewer_app.hpp): memory in use over time per rank, from the trace's
// "memory" counter events, on the timeline's time axis (zooming one zooms the other). A counter
// holds its value until the next sample, so each rank is drawn as steps. With two traces the
// second's lines are dimmer.

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <imgui.h>

#include "viewer/palette.hpp"
#include "viewer/viewer_app.hpp"

namespace strata::viewer {

namespace {

constexpr float kAxisWidth = 80.0f;
constexpr float kLegendWidth = 220.0f;
constexpr int kByteTicks = 5;

constexpr uint8_t kSecondTraceAlpha = 110;

}  // namespace

void ViewerApp::draw_memory_tab() {
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const ImVec2 available = ImGui::GetContentRegionAvail();
  ImDrawList* draw = ImGui::GetWindowDrawList();
  int64_t peak = 0;
  bool any = false;
  for (const TimelineSource& source : sources_) {
    for (const auto& [pid, points] : source.trace.memory) {
      for (const MemoryPoint& point : points) peak = std::max(peak, point.bytes);
      any = any || !points.empty();
    }
  }
  if (!any) {
    ImGui::TextDisabled("This trace has no memory counter events (\"C\" events named memory).");
    return;
  }
  const float left = origin.x + kAxisWidth;
  const float width = std::max(10.0f, available.x - kAxisWidth - kLegendWidth);
  const float top = origin.y + 8;
  const float bottom = origin.y + available.y - 24;
  const double bytes_per_px = static_cast<double>(std::max<int64_t>(peak, 1)) / (bottom - top);
  set_first_view(width);

  for (int i = 0; i <= kByteTicks; ++i) {
    const float y = bottom - (bottom - top) * static_cast<float>(i) / kByteTicks;
    draw->AddLine(ImVec2(left, y), ImVec2(left + width, y), kGridColor);
    const std::string label = format_bytes(static_cast<double>(peak) * i / kByteTicks);
    draw->AddText(ImVec2(origin.x, y - 7), kTextColor, label.c_str());
  }
  for (const AxisTick& tick : axis_ticks(view_, width, 90.0, 0.0)) {
    const auto x = static_cast<float>(left + view_.x_of(tick.time_ns));
    draw->AddLine(ImVec2(x, top), ImVec2(x, bottom + 4), kGridColor);
    draw->AddText(ImVec2(x + 3, bottom + 4), kTextColor, tick.label.c_str());
  }

  draw->PushClipRect(ImVec2(left, top - 2), ImVec2(left + width, bottom + 2), true);
  int32_t line = 0;
  std::vector<std::string> legend;
  std::vector<ImU32> legend_colors;
  for (size_t s = 0; s < sources_.size(); ++s) {
    const TimelineSource& source = sources_[s];
    for (const auto& [pid, points] : source.trace.memory) {
      if (filter_.hidden_pids.contains(pid) || points.empty()) continue;
      const ImU32 color =
          s == 0 ? rank_color(line) : with_alpha(rank_color(line), kSecondTraceAlpha);
      ++line;
      auto y_of = [&](int64_t bytes) {
        return bottom - static_cast<float>(static_cast<double>(bytes) / bytes_per_px);
      };
      auto x_of = [&](int64_t time_ns) {
        return left +
               static_cast<float>(view_.x_of(static_cast<double>(time_ns) + source.offset_ns));
      };
      int64_t rank_peak = 0;
      for (size_t i = 0; i < points.size(); ++i) {
        rank_peak = std::max(rank_peak, points[i].bytes);
        const float x0 = x_of(points[i].time_ns);
        const float x1 =
            i + 1 < points.size() ? x_of(points[i + 1].time_ns) : x_of(source.trace.end_ns);
        if (x1 < left || x0 > left + width) continue;
        const float y = y_of(points[i].bytes);
        draw->AddLine(ImVec2(x0, y), ImVec2(std::max(x1, x0 + 1), y), color, 1.5f);
        if (i + 1 < points.size()) {
          draw->AddLine(ImVec2(x1, y), ImVec2(x1, y_of(points[i + 1].bytes)), color, 1.5f);
        }
      }
      const int32_t stage = source.trace.stage_of(pid);
      legend.push_back(fmt::format("{}rank {}{}: peak {}",
                                   sources_.size() > 1 ? source.label + " " : "", pid,
                                   stage >= 0 ? fmt::format(" (stage {})", stage) : "",
                                   format_bytes(static_cast<double>(rank_peak))));
      legend_colors.push_back(color);
    }
  }
  draw->PopClipRect();

  const float legend_x = left + width + 10;
  for (size_t i = 0; i < legend.size(); ++i) {
    const float y = top + 16.0f * static_cast<float>(i);
    if (y > bottom) break;
    draw->AddRectFilled(ImVec2(legend_x, y + 3), ImVec2(legend_x + 12, y + 11), legend_colors[i]);
    draw->AddText(ImVec2(legend_x + 16, y), kTextColor, legend[i].c_str());
  }

  ImGui::InvisibleButton("memory plot", available);
  if (ImGui::IsItemHovered()) {
    const ImGuiIO& io = ImGui::GetIO();
    if (io.MouseWheel != 0.0f) {
      view_.zoom_at(io.MousePos.x - left, std::pow(0.85, io.MouseWheel), 2.0 * step_ns() / width);
    }
    if (ImGui::IsMouseDragging(ImGuiMouseButton_Left)) view_.pan(io.MouseDelta.x);
  }
}

}  // namespace strata::viewer
