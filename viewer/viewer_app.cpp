// The viewer's frame: toolbar, tabs and side panel (viewer/viewer_app.hpp). The Timeline tab is
// in timeline_panel.cpp, the Memory and Compare tabs in memory_panel.cpp and compare_panel.cpp.

#include "viewer/viewer_app.hpp"

#include <algorithm>
#include <array>
#include <set>

#include <fmt/format.h>
#include <imgui.h>

#include "viewer/palette.hpp"

namespace strata::viewer {

namespace {

constexpr float kSidePanelWidth = 380.0f;

std::string file_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

ImU32 rank_color(int32_t index) {
  static constexpr std::array<ImU32, 8> kColors = {
      IM_COL32(66, 133, 244, 255), IM_COL32(245, 145, 40, 255), IM_COL32(120, 200, 90, 255),
      IM_COL32(230, 80, 120, 255), IM_COL32(171, 99, 220, 255), IM_COL32(60, 200, 190, 255),
      IM_COL32(240, 210, 60, 255), IM_COL32(200, 200, 200, 255)};
  return kColors[static_cast<size_t>(index) % kColors.size()];
}

ViewerApp::ViewerApp(std::vector<Trace> traces, ViewerOptions options)
    : options_(std::move(options)) {
  for (size_t i = 0; i < traces.size(); ++i) {
    TimelineSource source;
    source.summary = summarize(traces[i]);
    source.offset_ns = -static_cast<double>(traces[i].start_ns);
    // With two traces, the first is the prediction and the second the measurement (as
    // `strata view PREDICTED.json MEASURED.json`); the generator in the metadata says so too.
    const std::string name = file_name(traces[i].path);
    if (traces.size() == 1) {
      source.label = name;
    } else {
      source.label = fmt::format("{}: {}", i == 0 ? "first" : "second", name);
    }
    source.trace = std::move(traces[i]);
    sources_.push_back(std::move(source));
  }
}

double ViewerApp::step_ns() const {
  int64_t longest = 1;
  for (const TimelineSource& source : sources_) {
    longest = std::max(longest, source.summary.step_ns);
  }
  return static_cast<double>(longest);
}

void ViewerApp::set_first_view(double width_px) {
  if (view_set_) return;
  view_ = options_.range ? TimeView::fit(options_.range->begin_ns, options_.range->end_ns, width_px)
                         : TimeView::fit(0, step_ns(), width_px);
  view_set_ = true;
}

void ViewerApp::draw() {
  const ImGuiIO& io = ImGui::GetIO();
  ImGui::SetNextWindowPos(ImVec2(0, 0));
  ImGui::SetNextWindowSize(io.DisplaySize);
  ImGui::Begin("strata view", nullptr,
               ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoMove |
                   ImGuiWindowFlags_NoBringToFrontOnFocus | ImGuiWindowFlags_NoSavedSettings);
  draw_toolbar();
  const float main_width =
      ImGui::GetContentRegionAvail().x - kSidePanelWidth - ImGui::GetStyle().ItemSpacing.x;
  ImGui::BeginChild("main", ImVec2(main_width, 0), false);
  if (ImGui::BeginTabBar("tabs")) {
    // The tab chosen on the command line is selected on the first frame only.
    auto tab = [&](const char* name, Tab which) {
      const bool choose = !tab_chosen_ && options_.tab == which;
      return ImGui::BeginTabItem(name, nullptr, choose ? ImGuiTabItemFlags_SetSelected : 0);
    };
    if (tab("Timeline", Tab::kTimeline)) {
      draw_timeline_tab();
      ImGui::EndTabItem();
    }
    if (tab("Memory", Tab::kMemory)) {
      draw_memory_tab();
      ImGui::EndTabItem();
    }
    if (sources_.size() > 1 && tab("Compare", Tab::kCompare)) {
      draw_compare_tab();
      ImGui::EndTabItem();
    }
    ImGui::EndTabBar();
    tab_chosen_ = true;
  }
  ImGui::EndChild();
  ImGui::SameLine();
  draw_side_panel();
  ImGui::End();
}

void ViewerApp::draw_toolbar() {
  for (size_t i = 0; i < sources_.size(); ++i) {
    if (i > 0) ImGui::SameLine(0, 20);
    const Trace& trace = sources_[i].trace;
    ImGui::Text("%s  (%zu events, %zu lanes)", sources_[i].label.c_str(), trace.events.size(),
                trace.lanes.size());
  }
  const double width = std::max(1.0, static_cast<double>(geometry_.width));
  if (ImGui::Button("Fit")) view_ = TimeView::fit(0, step_ns(), width);
  ImGui::SameLine();
  ImGui::Text("view %s - %s (%s per pixel)", format_duration(view_.start_ns).c_str(),
              format_duration(view_.end_ns(width)).c_str(),
              format_duration(view_.ns_per_px).c_str());
  if (range_) {
    ImGui::SameLine(0, 20);
    ImGui::Text("range %s - %s: %s", format_duration(range_->begin_ns).c_str(),
                format_duration(range_->end_ns).c_str(),
                format_duration(range_->end_ns - range_->begin_ns).c_str());
  }
}

void ViewerApp::draw_side_panel() {
  ImGui::BeginChild("side", ImVec2(0, 0), true);
  if (ImGui::CollapsingHeader("Summary", ImGuiTreeNodeFlags_DefaultOpen)) draw_summary();
  if (ImGui::CollapsingHeader("Filter")) draw_filter();
  if (ImGui::CollapsingHeader("Legend", ImGuiTreeNodeFlags_DefaultOpen)) {
    static constexpr std::array<std::pair<const char*, ImU32>, 9> kLegend = {
        {{"forward", kForwardColor},
         {"backward", kBackwardColor},
         {"recompute", kRecomputeColor},
         {"optimizer", kOptimizerColor},
         {"TP communication", kTpColor},
         {"PP send / recv", kPpColor},
         {"DP communication", kDpColor},
         {"bubble (nothing runs)", kBubbleColor},
         {"merged (< 1 pixel each; fainter: less busy)", kMergedColor}}};
    ImDrawList* draw = ImGui::GetWindowDrawList();
    auto entry = [&](const char* name, ImU32 color, bool filled) {
      const ImVec2 at = ImGui::GetCursorScreenPos();
      if (filled) {
        draw->AddRectFilled(ImVec2(at.x, at.y + 2), ImVec2(at.x + 14, at.y + 12), color);
      } else {
        draw->AddRect(ImVec2(at.x, at.y + 2), ImVec2(at.x + 14, at.y + 12), color);
      }
      ImGui::SetCursorScreenPos(ImVec2(at.x + 20, at.y));
      ImGui::TextUnformatted(name);
    };
    for (const auto& [name, color] : kLegend) entry(name, color, true);
    entry("communication waiting for its peers", with_alpha(kPpColor, kWaitingAlpha), false);
  }
  ImGui::EndChild();
}

void ViewerApp::draw_summary() const {
  for (const TimelineSource& source : sources_) {
    const TraceSummary& s = source.summary;
    const nlohmann::json& meta = source.trace.metadata;
    ImGui::TextUnformatted(source.label.c_str());
    // What Strata's metadata says of the run: the simulator names the device, the executor
    // its backend.
    if (meta.contains("model") && meta.contains("plan") && meta.at("plan").is_object()) {
      const nlohmann::json& plan = meta.at("plan");
      const std::string on = meta.contains("device")    ? meta.value("device", "")
                             : meta.contains("backend") ? meta.value("backend", "") + " backend"
                                                        : "";
      ImGui::TextWrapped("%s%s%s: dp %d tp %d pp %d, %s (%s)", meta.value("model", "").c_str(),
                         on.empty() ? "" : " on ", on.c_str(), plan.value("dp", 0),
                         plan.value("tp", 0), plan.value("pp", 0),
                         plan.value("schedule", "").c_str(), meta.value("generator", "").c_str());
    }
    ImGui::Text("step %s   bubble %.1f%%", format_duration(static_cast<double>(s.step_ns)).c_str(),
                100.0 * s.bubble_fraction);
    ImGui::Text("exposed TP %s  PP %s  DP %s",
                format_duration(static_cast<double>(s.exposed_ns[0])).c_str(),
                format_duration(static_cast<double>(s.exposed_ns[1])).c_str(),
                format_duration(static_cast<double>(s.exposed_ns[2])).c_str());
    if (s.peak_memory_bytes >= 0) {
      ImGui::Text("peak memory %s", format_bytes(static_cast<double>(s.peak_memory_bytes)).c_str());
    }
    const std::string table_id = "stages##" + source.label;
    if (ImGui::BeginTable(table_id.c_str(), 6,
                          ImGuiTableFlags_Borders | ImGuiTableFlags_SizingFixedFit)) {
      ImGui::TableSetupColumn("stage");
      ImGui::TableSetupColumn("bubble");
      ImGui::TableSetupColumn("exp TP");
      ImGui::TableSetupColumn("exp PP");
      ImGui::TableSetupColumn("exp DP");
      ImGui::TableSetupColumn("peak mem");
      ImGui::TableHeadersRow();
      for (const StageSummary& stage : s.stages) {
        ImGui::TableNextRow();
        ImGui::TableNextColumn();
        ImGui::Text("%d", stage.stage);
        ImGui::TableNextColumn();
        ImGui::Text("%.1f%%", 100.0 * stage.bubble_fraction);
        for (const int64_t exposed : stage.exposed_ns) {
          ImGui::TableNextColumn();
          ImGui::TextUnformatted(format_duration(static_cast<double>(exposed)).c_str());
        }
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(
            stage.peak_memory_bytes < 0
                ? "-"
                : format_bytes(static_cast<double>(stage.peak_memory_bytes)).c_str());
      }
      ImGui::EndTable();
    }
    const std::string ranks_id = "peak memory per rank##" + source.label;
    constexpr size_t kRanksShownOpen = 16;  // more start folded
    if (s.peak_memory_bytes >= 0) {
      ImGui::SetNextItemOpen(s.ranks.size() <= kRanksShownOpen, ImGuiCond_Once);
    }
    if (s.peak_memory_bytes >= 0 && ImGui::TreeNode(ranks_id.c_str())) {
      for (const RankActivity& rank : s.ranks) {
        ImGui::Text("rank %d (stage %d): %s", rank.pid, rank.stage,
                    rank.peak_memory_bytes < 0
                        ? "-"
                        : format_bytes(static_cast<double>(rank.peak_memory_bytes)).c_str());
      }
      ImGui::TreePop();
    }
    ImGui::Spacing();
  }
}

void ViewerApp::draw_filter() {
  // Checkboxes flow left to right and wrap where the panel ends.
  auto flowing_checkbox = [](const char* label, bool* value) {
    const float width = ImGui::GetFrameHeight() + ImGui::GetStyle().ItemInnerSpacing.x +
                        ImGui::CalcTextSize(label).x;
    if (ImGui::GetContentRegionAvail().x < width) ImGui::NewLine();
    ImGui::Checkbox(label, value);
    ImGui::SameLine();
  };
  ImGui::TextUnformatted("phase");
  ImGui::SameLine();
  for (int p = 0; p < kEventPhaseCount; ++p) {
    flowing_checkbox(to_string(static_cast<EventPhase>(p)),
                     &filter_.phase_shown[static_cast<size_t>(p)]);
  }
  ImGui::NewLine();
  ImGui::TextUnformatted("kind");
  ImGui::SameLine();
  for (int k = 0; k < kEventKindCount; ++k) {
    flowing_checkbox(to_string(static_cast<EventKind>(k)),
                     &filter_.kind_shown[static_cast<size_t>(k)]);
  }
  ImGui::NewLine();
  ImGui::PushItemWidth(120);
  ImGui::InputInt("layer (-1: all)", &filter_.layer);
  ImGui::InputInt("micro-batch (-1: all)", &filter_.micro_batch);
  ImGui::PopItemWidth();
  filter_.layer = std::max(filter_.layer, -1);
  filter_.micro_batch = std::max(filter_.micro_batch, -1);

  std::set<std::string> threads;
  std::set<std::pair<int32_t, std::string>> processes;
  for (const TimelineSource& source : sources_) {
    for (const Lane& lane : source.trace.lanes) {
      threads.insert(lane.thread_name);
      processes.insert({lane.pid, lane.process_name});
    }
  }
  ImGui::TextUnformatted("streams");
  for (const std::string& thread : threads) {
    bool shown = !filter_.hidden_threads.contains(thread);
    if (ImGui::Checkbox(thread.c_str(), &shown)) {
      if (shown) {
        filter_.hidden_threads.erase(thread);
      } else {
        filter_.hidden_threads.insert(thread);
      }
    }
  }
  ImGui::TextUnformatted("ranks");
  ImGui::BeginChild("ranks", ImVec2(0, 160), true);
  for (const auto& [pid, name] : processes) {
    bool shown = !filter_.hidden_pids.contains(pid);
    const std::string label = fmt::format("{}##pid{}", name, pid);
    if (ImGui::Checkbox(label.c_str(), &shown)) {
      if (shown) {
        filter_.hidden_pids.erase(pid);
      } else {
        filter_.hidden_pids.insert(pid);
      }
    }
  }
  ImGui::EndChild();
}

}  // namespace strata::viewer
