// The Compare tab (viewer/viewer_app.hpp): with two traces (a prediction and a measurement, in
// either order), each stage's compute time by phase, busy time, bubble and exposed communication
// side by side, with the difference and its ratio, so a reader sees where the two disagree. The
// two are aligned at step start on the timeline; here only durations are compared.

#include <cmath>

#include <imgui.h>

#include "viewer/palette.hpp"
#include "viewer/viewer_app.hpp"

namespace strata::viewer {

void ViewerApp::draw_compare_tab() const {
  const TimelineSource& first = sources_[0];
  const TimelineSource& second = sources_[1];
  ImGui::Text("%s    %s", first.label.c_str(), second.label.c_str());
  ImGui::TextDisabled("difference = second - first; relative to first");
  const std::vector<ComparisonRow> rows = compare(first.summary, second.summary);
  if (!ImGui::BeginTable("compare", 6,
                         ImGuiTableFlags_Borders | ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollY |
                             ImGuiTableFlags_SizingStretchProp)) {
    return;
  }
  ImGui::TableSetupScrollFreeze(0, 1);
  for (const char* column : {"stage", "quantity", "first", "second", "difference", "relative"}) {
    ImGui::TableSetupColumn(column);
  }
  ImGui::TableHeadersRow();
  for (const ComparisonRow& row : rows) {
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    if (row.stage < 0) {
      ImGui::TextUnformatted("all");
    } else {
      ImGui::Text("%d", row.stage);
    }
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(row.quantity.c_str());
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(format_duration(static_cast<double>(row.first_ns)).c_str());
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(format_duration(static_cast<double>(row.second_ns)).c_str());
    ImGui::TableNextColumn();
    const double difference = static_cast<double>(row.second_ns - row.first_ns);
    ImGui::Text("%s%s", difference > 0 ? "+" : "", format_duration(difference).c_str());
    ImGui::TableNextColumn();
    ImGui::Text("%+.1f%%", 100.0 * row.relative());
  }
  ImGui::EndTable();
}

}  // namespace strata::viewer
