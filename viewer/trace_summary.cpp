// A step's figures from a trace's events (viewer/trace_summary.hpp).

#include "viewer/trace_summary.hpp"

#include <algorithm>

namespace strata::viewer {

namespace {

size_t comm_index(EventKind kind) {
  switch (kind) {
    case EventKind::kTp:
      return 0;
    case EventKind::kPp:
      return 1;
    case EventKind::kDp:
      return 2;
    case EventKind::kCompute:
    case EventKind::kHost:
      break;
  }
  return 0;
}

// One rank's intervals and figures over the step [start, end].
RankActivity rank_activity(const Trace& trace, int32_t pid, int32_t stage,
                           std::array<int64_t, kEventPhaseCount>& phase_ns) {
  RankActivity rank;
  rank.pid = pid;
  rank.stage = stage;
  std::array<std::vector<Interval>, 3> comm;
  std::vector<Interval> host;
  for (const Lane& lane : trace.lanes) {
    if (lane.pid != pid) continue;
    for (const int32_t index : lane.events) {
      const TraceEvent& e = trace.events[static_cast<size_t>(index)];
      if (e.kind == EventKind::kHost) {  // the host thread, not the GPU
        host.push_back({e.start_ns, e.end_ns()});
        continue;
      }
      if (e.kind == EventKind::kCompute) {
        rank.busy.push_back({e.start_ns, e.end_ns()});
        phase_ns[static_cast<size_t>(e.phase)] += e.dur_ns;
        if (e.phase == EventPhase::kOptimizer) rank.optimizer_ns += e.dur_ns;
      } else {
        comm[comm_index(e.kind)].push_back({e.transfer_ns, e.end_ns()});
      }
    }
  }
  rank.busy = merged(std::move(rank.busy));
  rank.busy_ns = length(rank.busy);
  std::vector<Interval> covered = rank.busy;
  for (size_t k = 0; k < comm.size(); ++k) {
    rank.comm[k] = merged(std::move(comm[k]));
    rank.comm_ns[k] = length(rank.comm[k]);
    rank.exposed_ns[k] = length_outside(rank.comm[k], covered);
    covered = combined(covered, rank.comm[k]);
  }
  // The host holding the GPU back (dispatch, an offloaded optimizer step) is not bubble, as in
  // the simulator's figures (sim/step_metrics.cpp).
  covered = combined(covered, merged(std::move(host)));
  rank.bubbles = outside({{trace.start_ns, trace.end_ns}}, covered);
  rank.bubble_ns = length(rank.bubbles);
  if (const auto memory = trace.memory.find(pid); memory != trace.memory.end()) {
    for (const MemoryPoint& point : memory->second) {
      rank.peak_memory_bytes = std::max(rank.peak_memory_bytes, point.bytes);
    }
  }
  return rank;
}

}  // namespace

TraceSummary summarize(const Trace& trace) {
  TraceSummary summary;
  summary.step_ns = trace.span_ns();
  const std::vector<int32_t> pids = trace.pids();
  std::map<int32_t, StageSummary> stages;
  std::map<int32_t, int64_t> stage_busy;
  for (size_t i = 0; i < pids.size(); ++i) {
    const int32_t known_stage = trace.stage_of(pids[i]);
    const int32_t stage = known_stage >= 0 ? known_stage : static_cast<int32_t>(i);
    std::array<int64_t, kEventPhaseCount> phase_ns = {};
    RankActivity rank = rank_activity(trace, pids[i], stage, phase_ns);

    StageSummary& out = stages[stage];
    out.stage = stage;
    out.peak_memory_bytes = std::max(out.peak_memory_bytes, rank.peak_memory_bytes);
    const auto busiest = stage_busy.find(stage);
    if (busiest == stage_busy.end() || rank.busy_ns > busiest->second) {
      stage_busy[stage] = rank.busy_ns;
      out.pid = rank.pid;
      out.busy_ns = rank.busy_ns;
      out.idle_ns = summary.step_ns - rank.busy_ns;
      out.bubble_ns = rank.bubble_ns;
      out.bubble_fraction = summary.step_ns > 0 ? static_cast<double>(rank.bubble_ns) /
                                                      static_cast<double>(summary.step_ns)
                                                : 0.0;
      out.comm_ns = rank.comm_ns;
      out.exposed_ns = rank.exposed_ns;
      out.phase_ns = phase_ns;
    }
    summary.ranks.push_back(std::move(rank));
  }
  for (auto& [stage, s] : stages) {
    summary.bubble_fraction = std::max(summary.bubble_fraction, s.bubble_fraction);
    for (size_t k = 0; k < s.exposed_ns.size(); ++k) {
      summary.exposed_ns[k] = std::max(summary.exposed_ns[k], s.exposed_ns[k]);
    }
    summary.peak_memory_bytes = std::max(summary.peak_memory_bytes, s.peak_memory_bytes);
    summary.stages.push_back(s);
  }
  return summary;
}

double ComparisonRow::relative() const {
  if (first_ns == 0) return 0.0;
  return static_cast<double>(second_ns - first_ns) / static_cast<double>(first_ns);
}

std::optional<double> ComparisonRow::error() const {
  if (second_ns == 0) return std::nullopt;
  return static_cast<double>(first_ns) / static_cast<double>(second_ns) - 1;
}

std::vector<ComparisonRow> compare(const TraceSummary& first, const TraceSummary& second) {
  std::vector<ComparisonRow> rows;
  rows.push_back({-1, "step", first.step_ns, second.step_ns});
  static constexpr std::array<EventPhase, 4> kPhases = {
      EventPhase::kForward, EventPhase::kBackward, EventPhase::kRecompute, EventPhase::kOptimizer};
  for (const StageSummary& a : first.stages) {
    const auto b = std::find_if(second.stages.begin(), second.stages.end(),
                                [&](const StageSummary& s) { return s.stage == a.stage; });
    if (b == second.stages.end()) continue;
    for (const EventPhase phase : kPhases) {
      const auto p = static_cast<size_t>(phase);
      if (a.phase_ns[p] == 0 && b->phase_ns[p] == 0) continue;
      rows.push_back({a.stage, to_string(phase), a.phase_ns[p], b->phase_ns[p]});
    }
    rows.push_back({a.stage, "busy", a.busy_ns, b->busy_ns});
    rows.push_back({a.stage, "bubble", a.bubble_ns, b->bubble_ns});
    for (size_t k = 0; k < kCommKinds.size(); ++k) {
      if (a.comm_ns[k] == 0 && b->comm_ns[k] == 0) continue;
      rows.push_back({a.stage, std::string("exposed ") + to_string(kCommKinds[k]), a.exposed_ns[k],
                      b->exposed_ns[k]});
    }
  }
  return rows;
}

}  // namespace strata::viewer
