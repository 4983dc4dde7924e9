#pragma once
// The viewer's colors (ImGui's packed ABGR, IM_COL32): compute by phase, communication by kind,
// and the overlays. Chosen to stay apart on the dark background and for common color blindness
// (blue / orange for forward / backward).

#include <cstdint>

#include <imgui.h>

#include "viewer/trace_model.hpp"

namespace strata::viewer {

inline constexpr ImU32 kForwardColor = IM_COL32(66, 133, 244, 255);    // blue
inline constexpr ImU32 kBackwardColor = IM_COL32(245, 145, 40, 255);   // orange
inline constexpr ImU32 kRecomputeColor = IM_COL32(171, 99, 220, 255);  // purple
inline constexpr ImU32 kOptimizerColor = IM_COL32(120, 200, 90, 255);  // green
inline constexpr ImU32 kOtherComputeColor = IM_COL32(140, 150, 170, 255);
inline constexpr ImU32 kTpColor = IM_COL32(240, 210, 60, 255);     // yellow
inline constexpr ImU32 kPpColor = IM_COL32(230, 80, 120, 255);     // pink
inline constexpr ImU32 kDpColor = IM_COL32(60, 200, 190, 255);     // teal
inline constexpr ImU32 kHostColor = IM_COL32(205, 205, 215, 255);  // light grey: the host thread
inline constexpr ImU32 kMergedColor = IM_COL32(150, 150, 150, 255);
inline constexpr ImU32 kBubbleColor = IM_COL32(200, 50, 50, 90);  // translucent red
inline constexpr ImU32 kLaneColor = IM_COL32(255, 255, 255, 10);  // every other lane
inline constexpr ImU32 kSelectedColor = IM_COL32(255, 255, 255, 255);
inline constexpr ImU32 kDependencyColor = IM_COL32(255, 80, 40, 255);  // what it waits for
inline constexpr ImU32 kDependentColor = IM_COL32(80, 230, 255, 255);  // what waits for it
inline constexpr ImU32 kRangeColor = IM_COL32(255, 255, 255, 40);
inline constexpr ImU32 kTextColor = IM_COL32(230, 230, 230, 255);
inline constexpr ImU32 kBoxTextColor = IM_COL32(0, 0, 0, 255);
inline constexpr ImU32 kGridColor = IM_COL32(255, 255, 255, 30);

// A merged box's alpha runs from this (its events cover none of it) to opaque (all of it).
inline constexpr int kMinMergedAlpha = 60;

// The part of a communication's box spent waiting for its peers is an outline at this alpha.
inline constexpr uint8_t kWaitingAlpha = 160;

inline ImU32 with_alpha(ImU32 color, uint8_t alpha) {
  return (color & ~IM_COL32_A_MASK) | (static_cast<ImU32>(alpha) << IM_COL32_A_SHIFT);
}

// The fill of an event's box: compute by phase, communication by kind.
inline ImU32 event_color(const TraceEvent& event) {
  switch (event.kind) {
    case EventKind::kTp:
      return kTpColor;
    case EventKind::kPp:
      return kPpColor;
    case EventKind::kDp:
      return kDpColor;
    case EventKind::kHost:
      return kHostColor;
    case EventKind::kCompute:
      break;
  }
  switch (event.phase) {
    case EventPhase::kForward:
      return kForwardColor;
    case EventPhase::kBackward:
      return kBackwardColor;
    case EventPhase::kRecompute:
      return kRecomputeColor;
    case EventPhase::kOptimizer:
      return kOptimizerColor;
    case EventPhase::kOther:
      break;
  }
  return kOtherComputeColor;
}

// A line color per rank for the memory plot, cycling.
ImU32 rank_color(int32_t index);

}  // namespace strata::viewer
