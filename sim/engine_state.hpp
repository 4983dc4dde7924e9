#pragma once
// The engine's state (sim/engine.cpp), shared with its steady-state fast-forward
// (sim/engine_fast_forward.cpp). Internal to the engine library: nothing outside sim/engine*.cpp
// includes it.

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "sim/engine.hpp"
#include "sim/event_queue.hpp"
#include "sim/max_min.hpp"

namespace strata::engine_detail {

constexpr int32_t kNoFlowSlot = -1;

// One activity, as the engine tracks it from add() to its completion.
struct Activity {
  TimeNs start_ns = -1;   // -1 until it starts
  TimeNs finish_ns = -1;  // -1 until it finishes
  // kDelay: the duration; kCompute: uncontended work left in ns; kFlow: bytes left. Computes and
  // flows bring it up to date only when their rate changes.
  double amount = 0;
  int32_t resource = -1;  // kCompute: processor; kFlow: path; kAcquire, kRelease: thread
  std::array<ProcessorId, 2> touches{kNoProcessor, kNoProcessor};
  // Before the start: dependencies not finished yet. A running flow: its slot in State::flows,
  // or kNoFlowSlot for one with no bytes to move.
  int32_t pending_or_slot = 0;
  int16_t priority = 0;
  ActivityKind kind = ActivityKind::kDelay;
};
static_assert(sizeof(Activity) == 48, "keep the per-activity record compact");

struct Link {
  double capacity_bytes_per_s = 0;
  std::vector<int32_t> flow_slots;  // active flows crossing it, in the order they started
  uint64_t mark = 0;                // == State::solve_mark while in the component being solved
  int32_t local = 0;                // its constraint index in that solve
  bool dirty = false;               // a flow crossing it started or ended at this time
};

struct Processor {
  double contended_rate = 1;
  int32_t touching_flows = 0;  // active flows that touch it
  bool contended = false;      // the rate its computes run at now: contended_rate if true, else 1
  bool dirty = false;          // touching_flows changed at this time
  TimeNs changed_ns = 0;       // when `contended` last flipped
  // Computes started here, finished ones dropped lazily (when re-rating, or when more than half
  // the list has finished).
  std::vector<ActivityId> computes;
  int64_t running_computes = 0;
};

// A CPU host's cores (engine.hpp): how many are free, and the runs and acquires waiting.
struct CorePool {
  int32_t free_cores = 0;
  TimeNs slice_ns = 0;
  std::deque<ActivityId> waiting;  // runs and acquires, first come first served
};

struct Thread {
  CorePoolId pool = 0;
  bool holds_core = false;
  TimeNs held_since_ns = 0;     // when its slice began
  TimeNs running_since_ns = 0;  // when its run on the core last got it
};

// A dependency added after its activity by add_dependency().
struct LateDependency {
  ActivityId activity = kNoActivity;
  ActivityId dep = kNoActivity;
};

// A running flow with bytes to move.
struct ActiveFlow {
  ActivityId activity = kNoActivity;
  double rate_bytes_per_s = 0;  // 0 until its first solve
  TimeNs updated_ns = 0;        // when its `amount` was last brought up to date
  uint64_t mark = 0;            // == State::solve_mark while in the component being solved
};

class FastForward;

}  // namespace strata::engine_detail

namespace strata {

struct Engine::State {
  using Activity = engine_detail::Activity;
  using ActiveFlow = engine_detail::ActiveFlow;
  using CorePool = engine_detail::CorePool;
  using LateDependency = engine_detail::LateDependency;
  using Link = engine_detail::Link;
  using Processor = engine_detail::Processor;
  using Thread = engine_detail::Thread;

  std::vector<Activity> activities;
  std::vector<ActivityId> deps;           // every add()'s deps in order; dropped by run()
  std::vector<LateDependency> late_deps;  // from add_dependency(); dropped by run()
  std::vector<int32_t> first_successor;   // successors of a: successors[first[a], first[a + 1])
  std::vector<ActivityId> successors;
  std::vector<Link> links;
  std::vector<Processor> processors;
  std::vector<int32_t> first_hop{0};  // hops of path p: hops[first_hop[p], first_hop[p + 1])
  std::vector<PathHop> hops;
  std::vector<ActiveFlow> flows;
  std::vector<int32_t> free_flow_slots;
  std::vector<CorePool> pools;
  std::vector<Thread> threads;

  std::optional<PeriodMap> period_map;                       // from set_period_map(), until run()
  std::unique_ptr<engine_detail::FastForward> fast_forward;  // while run() looks for periods

  EventQueue queue;
  TimeNs now_ns = 0;
  int64_t running = 0;  // started, not finished
  int64_t finished = 0;
  bool ran = false;
  EngineStats stats;

  // Scratch of settle(), kept to reuse its memory.
  std::vector<LinkId> dirty_links;
  std::vector<ProcessorId> dirty_processors;
  std::vector<LinkId> component_links;
  std::vector<int32_t> component_flows;
  uint64_t solve_mark = 0;
  MaxMinProblem problem;
  MaxMinSolver solver;

  std::span<const PathHop> path(PathId p) const {
    return {hops.data() + first_hop[p], hops.data() + first_hop[p + 1]};
  }

  // Its completion at `finish_ns`, replacing the one it had (a re-rate).
  void schedule(ActivityId id, TimeNs finish_ns) {
    queue.schedule(finish_ns, activities[id].priority, id);
  }

  void mark_link(LinkId l) {
    if (links[l].dirty) return;
    links[l].dirty = true;
    dirty_links.push_back(l);
  }

  void touch(ProcessorId p, int32_t delta) {
    if (p == kNoProcessor) return;
    processors[p].touching_flows += delta;
    if (processors[p].dirty) return;
    processors[p].dirty = true;
    dirty_processors.push_back(p);
  }

  void build_successors();
  void acquire(ActivityId id);
  void release(ThreadId thread);
  void grant_next(CorePool& pool);
  void run_on_core(ActivityId id);
  bool run_done(ActivityId id);
  void start(ActivityId id);
  void finish(ActivityId id);
  void start_flow(ActivityId id);
  void end_flow(const Activity& a);
  void settle();
  void solve_dirty_links();
  void rerate_processor(Processor& p, bool contended);
};

}  // namespace strata
