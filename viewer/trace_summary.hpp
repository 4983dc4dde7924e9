#pragma once
// A step's figures recomputed from a trace's events, with the simulator's definitions
// (sim/step_metrics.cpp), so a measured trace and a predicted one are read the same way:
//  - busy: the union of a rank's compute events; communication: the union of each kind's
//    events from when their data began to move (args.transfer_us) to their end;
//  - exposed communication: TP outside busy, PP outside busy and TP, DP outside all three (each
//    instant counted once);
//  - bubbles: the step's time with neither compute nor communication on the rank (waiting for a
//    pipeline peer), so bubble = step - busy - exposed; the bubble fraction divides it by busy
//    time without the optimizer step;
//  - per stage, the rank with the most busy time stands for it (as in the simulator).
// The step runs from the trace's first event start to its last event end.

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/intervals.hpp"
#include "viewer/trace_model.hpp"

namespace strata::viewer {

// Communication kinds in the order exposure is charged: TP, PP, DP.
inline constexpr std::array<EventKind, 3> kCommKinds = {EventKind::kTp, EventKind::kPp,
                                                        EventKind::kDp};

struct RankActivity {
  int32_t pid = 0;
  int32_t stage = -1;
  std::vector<Interval> busy;                 // compute, merged
  std::array<std::vector<Interval>, 3> comm;  // by kCommKinds, merged
  std::vector<Interval> bubbles;              // no compute nor communication, merged
  int64_t busy_ns = 0;
  int64_t optimizer_ns = 0;
  std::array<int64_t, 3> comm_ns = {};
  std::array<int64_t, 3> exposed_ns = {};
  int64_t bubble_ns = 0;
  int64_t peak_memory_bytes = -1;  // -1 without memory counters
};

struct StageSummary {
  int32_t stage = 0;
  int32_t pid = 0;  // the rank standing for the stage
  int64_t busy_ns = 0;
  int64_t idle_ns = 0;
  int64_t bubble_ns = 0;
  double bubble_fraction = 0;
  std::array<int64_t, 3> comm_ns = {};
  std::array<int64_t, 3> exposed_ns = {};
  std::array<int64_t, kEventPhaseCount> phase_ns = {};  // compute time by phase
  int64_t peak_memory_bytes = -1;                       // the stage's ranks' largest
};

struct TraceSummary {
  int64_t step_ns = 0;
  std::vector<RankActivity> ranks;         // Trace::pids() order
  std::vector<StageSummary> stages;        // by stage; a trace without stages has one per process
  double bubble_fraction = 0;              // the largest stage's
  std::array<int64_t, 3> exposed_ns = {};  // the largest stage's, per kind
  int64_t peak_memory_bytes = -1;
};

TraceSummary summarize(const Trace& trace);

// A stage's compute time by phase and its summary figures, one trace against another (predicted
// against measured): one row per (stage, quantity).
struct ComparisonRow {
  int32_t stage = -1;  // -1: the whole step
  std::string quantity;
  int64_t first_ns = 0;
  int64_t second_ns = 0;
  double relative() const;  // (second - first) / first; 0 when first is 0
  // first / second - 1: the first trace (predicted) against the second (measured), as
  // `strata compare` prints it; nullopt when the second is 0.
  std::optional<double> error() const;
};
std::vector<ComparisonRow> compare(const TraceSummary& first, const TraceSummary& second);

}  // namespace strata::viewer
