// The engine's event loop. How the simulated world behaves is in engine.hpp; this file says how
// it is computed:
//  - activities live in one array of 48-byte records plus a successor CSR built by run()
//    (sim/engine_state.hpp);
//  - the future is an EventQueue of projected completions, one per running activity, moved in
//    place when a re-rate changes it;
//  - the clock jumps from one distinct event time to the next; after answering every event of a
//    time, settle() re-solves the links whose flows changed (only the connected component of
//    links and flows reachable from them: max-min allocations of disjoint components are
//    independent) and re-rates the computes of processors whose contention flipped;
//  - with a period map, every start and finish is logged and each pass ends by letting the
//    steady-state fast-forward (sim/engine_fast_forward.hpp) skip what repeats.

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/units.hpp"
#include "sim/engine.hpp"
#include "sim/engine_fast_forward.hpp"
#include "sim/engine_state.hpp"

namespace strata {

using namespace engine_detail;  // NOLINT(google-build-using-namespace): the engine's own state

namespace {

// Floating-point error in remaining work divided by a rate, absorbed before rounding a duration
// up to whole nanoseconds: 1 ps, far below anything modelled, far above the error of a double
// over simulated spans up to hours. It makes exact closed forms (1000 bytes at 1 GB/s) land on
// their integer nanosecond instead of one past it.
constexpr double kRoundingSlackNs = 1e-3;

// The whole nanoseconds needed to do `work_ns` of work at rate 1 (at least 0).
TimeNs ceil_ns(double work_ns) {
  const double rounded = std::ceil(work_ns - kRoundingSlackNs);
  STRATA_ASSERT(rounded < 4e18, "an activity would finish beyond the representable time");
  return rounded > 0 ? static_cast<TimeNs>(rounded) : 0;
}

// Durations are held as doubles, exact up to 2^53 ns (104 days).
constexpr TimeNs kMaxDurationNs = TimeNs{1} << 53;

}  // namespace

// Successor lists in CSR form, each in increasing id order, from the deps given to add() and
// add_dependency().
void Engine::State::build_successors() {
  const size_t n = activities.size();
  const size_t edges = deps.size() + late_deps.size();
  STRATA_ASSERT(edges < static_cast<size_t>(std::numeric_limits<int32_t>::max()),
                "more than 2^31 dependency edges");
  std::stable_sort(
      late_deps.begin(), late_deps.end(),
      [](const LateDependency& x, const LateDependency& y) { return x.activity < y.activity; });
  first_successor.assign(n + 1, 0);
  for (const ActivityId d : deps) ++first_successor[static_cast<size_t>(d) + 1];
  for (const LateDependency& late : late_deps) ++first_successor[static_cast<size_t>(late.dep) + 1];
  for (size_t a = 0; a < n; ++a) first_successor[a + 1] += first_successor[a];
  successors.resize(edges);
  std::vector<int32_t> next(first_successor.begin(), first_successor.end() - 1);
  size_t edge = 0;
  size_t late = 0;
  for (size_t a = 0; a < n; ++a) {
    const auto id = static_cast<ActivityId>(a);
    size_t late_end = late;
    while (late_end < late_deps.size() && late_deps[late_end].activity == id) ++late_end;
    const auto add_deps = activities[a].pending_or_slot - static_cast<int32_t>(late_end - late);
    for (int32_t k = 0; k < add_deps; ++k) successors[next[deps[edge++]]++] = id;
    for (; late < late_end; ++late) successors[next[late_deps[late].dep]++] = id;
  }
  std::vector<ActivityId>().swap(deps);
  std::vector<LateDependency>().swap(late_deps);
}

// A run or an acquire: at once for a thread that holds its core, or when a core is free.
void Engine::State::acquire(ActivityId id) {
  Thread& thread = threads[activities[id].resource];
  CorePool& pool = pools[thread.pool];
  if (!thread.holds_core) {
    if (pool.free_cores == 0) {
      pool.waiting.push_back(id);
      return;
    }
    --pool.free_cores;
    thread.holds_core = true;
    thread.held_since_ns = now_ns;
  }
  if (activities[id].kind == ActivityKind::kRun) {
    run_on_core(id);
  } else {
    schedule(id, now_ns);
  }
}

void Engine::State::release(ThreadId id) {
  Thread& thread = threads[id];
  if (!thread.holds_core) return;
  thread.holds_core = false;
  CorePool& pool = pools[thread.pool];
  if (pool.waiting.empty()) {
    ++pool.free_cores;
    return;
  }
  grant_next(pool);
}

// A core just given up goes to the longest-waiting run or acquire.
void Engine::State::grant_next(CorePool& pool) {
  const ActivityId next = pool.waiting.front();
  pool.waiting.pop_front();
  Thread& thread = threads[activities[next].resource];
  thread.holds_core = true;
  thread.held_since_ns = now_ns;
  if (activities[next].kind == ActivityKind::kRun) {
    run_on_core(next);
  } else {
    schedule(next, now_ns);
  }
}

// The thread holds its core: the run goes on until it is done or the slice ends, whichever is
// first (run_done() answers that event). A slice already over starts again when nobody waits,
// else the thread yields at once.
void Engine::State::run_on_core(ActivityId id) {
  Activity& a = activities[id];
  Thread& thread = threads[a.resource];
  CorePool& pool = pools[thread.pool];
  if (now_ns - thread.held_since_ns >= pool.slice_ns) {
    if (!pool.waiting.empty()) {
      thread.holds_core = false;
      grant_next(pool);
      pool.waiting.push_back(id);
      return;
    }
    thread.held_since_ns = now_ns;
  }
  thread.running_since_ns = now_ns;
  const TimeNs slice_end = thread.held_since_ns + pool.slice_ns;
  schedule(id, std::min(now_ns + static_cast<TimeNs>(a.amount), slice_end));
}

// A run's event: true when its work is done; otherwise its slice ended, and the thread goes on
// (nobody waits: a new slice) or is preempted to the back of the queue.
bool Engine::State::run_done(ActivityId id) {
  Activity& a = activities[id];
  Thread& thread = threads[a.resource];
  a.amount = std::max(0.0, a.amount - static_cast<double>(now_ns - thread.running_since_ns));
  if (a.amount <= 0) return true;
  CorePool& pool = pools[thread.pool];
  if (pool.waiting.empty()) {
    thread.held_since_ns = now_ns;
    run_on_core(id);
    return false;
  }
  thread.holds_core = false;
  grant_next(pool);
  pool.waiting.push_back(id);
  return false;
}

void Engine::State::start(ActivityId id) {
  Activity& a = activities[id];
  if (fast_forward) fast_forward->started(id, now_ns, a.amount);
  a.start_ns = now_ns;
  ++running;
  ++stats.events;
  switch (a.kind) {
    case ActivityKind::kDelay:
      schedule(id, now_ns + static_cast<TimeNs>(a.amount));
      return;
    case ActivityKind::kTick: {
      const auto period = static_cast<TimeNs>(a.amount);
      schedule(id, (now_ns + period - 1) / period * period);
      return;
    }
    case ActivityKind::kCompute: {
      // Uncontended, the whole duration (an exact integer) at rate 1.
      Processor& p = processors[a.resource];
      schedule(id, now_ns + (p.contended ? ceil_ns(a.amount / p.contended_rate)
                                         : static_cast<TimeNs>(a.amount)));
      if (p.computes.size() > 2 * static_cast<size_t>(p.running_computes) + 64) {
        std::erase_if(p.computes, [&](ActivityId c) { return activities[c].finish_ns >= 0; });
      }
      p.computes.push_back(id);
      ++p.running_computes;
      return;
    }
    case ActivityKind::kFlow:
      start_flow(id);
      return;
    case ActivityKind::kRun:
    case ActivityKind::kAcquire:
      acquire(id);
      return;
    case ActivityKind::kRelease:
      release(a.resource);
      schedule(id, now_ns);
      return;
  }
}

void Engine::State::start_flow(ActivityId id) {
  Activity& a = activities[id];
  if (!(a.amount > 0)) {
    a.pending_or_slot = kNoFlowSlot;
    schedule(id, now_ns);
    return;
  }
  int32_t slot = 0;
  if (free_flow_slots.empty()) {
    slot = static_cast<int32_t>(flows.size());
    flows.emplace_back();
  } else {
    slot = free_flow_slots.back();
    free_flow_slots.pop_back();
  }
  flows[slot] = ActiveFlow{id, 0, now_ns, 0};
  a.pending_or_slot = slot;
  for (const PathHop& hop : path(a.resource)) {
    links[hop.link].flow_slots.push_back(slot);
    mark_link(hop.link);
  }
  touch(a.touches[0], +1);
  touch(a.touches[1], +1);
  // Its first completion is scheduled by settle(), once the rates at this time are known.
}

void Engine::State::end_flow(const Activity& a) {
  const int32_t slot = a.pending_or_slot;
  for (const PathHop& hop : path(a.resource)) {
    std::vector<int32_t>& on_link = links[hop.link].flow_slots;
    const auto it = std::find(on_link.begin(), on_link.end(), slot);
    STRATA_ASSERT(it != on_link.end(), "an ending flow is missing from a link of its path");
    on_link.erase(it);
    mark_link(hop.link);
  }
  touch(a.touches[0], -1);
  touch(a.touches[1], -1);
  flows[slot].activity = kNoActivity;
  free_flow_slots.push_back(slot);
}

void Engine::State::finish(ActivityId id) {
  Activity& a = activities[id];
  if (fast_forward) fast_forward->finished(id, now_ns);
  a.finish_ns = now_ns;
  ++finished;
  ++stats.events;
  --running;
  if (a.kind == ActivityKind::kFlow && a.pending_or_slot != kNoFlowSlot) end_flow(a);
  if (a.kind == ActivityKind::kCompute) --processors[a.resource].running_computes;
  for (int32_t s = first_successor[id]; s < first_successor[id + 1]; ++s) {
    const ActivityId next = successors[s];
    if (--activities[next].pending_or_slot == 0) start(next);
  }
}

void Engine::State::settle() {
  if (!dirty_links.empty()) solve_dirty_links();
  for (const ProcessorId id : dirty_processors) {
    Processor& p = processors[id];
    p.dirty = false;
    const bool contended = p.touching_flows > 0;
    if (contended != p.contended) rerate_processor(p, contended);
  }
  dirty_processors.clear();
}

// Re-solves the max-min allocation of every flow connected (through shared links) to a link
// whose flows changed at this time, and reschedules the flows whose rate changed.
void Engine::State::solve_dirty_links() {
  ++solve_mark;
  component_links.clear();
  component_flows.clear();
  const auto visit_link = [&](LinkId l) {
    if (links[l].mark == solve_mark) return;
    links[l].mark = solve_mark;
    links[l].local = static_cast<int32_t>(component_links.size());
    component_links.push_back(l);
  };
  for (const LinkId l : dirty_links) {
    links[l].dirty = false;
    visit_link(l);
  }
  dirty_links.clear();
  for (size_t i = 0; i < component_links.size(); ++i) {
    for (const int32_t slot : links[component_links[i]].flow_slots) {
      if (flows[slot].mark == solve_mark) continue;
      flows[slot].mark = solve_mark;
      component_flows.push_back(slot);
      for (const PathHop& hop : path(activities[flows[slot].activity].resource)) {
        visit_link(hop.link);
      }
    }
  }
  if (component_flows.empty()) return;  // only flows ended: the links are idle now

  problem.clear();
  for (const LinkId l : component_links) problem.add_constraint(links[l].capacity_bytes_per_s);
  for (const int32_t slot : component_flows) {
    problem.add_variable();
    for (const PathHop& hop : path(activities[flows[slot].activity].resource)) {
      problem.add_element(links[hop.link].local, hop.weight);
    }
  }
  const std::span<const double> rates = solver.solve(problem);
  ++stats.rate_updates;

  for (size_t i = 0; i < component_flows.size(); ++i) {
    ActiveFlow& f = flows[component_flows[i]];
    const double rate = rates[i];
    if (rate == f.rate_bytes_per_s) continue;  // its scheduled completion still holds
    Activity& a = activities[f.activity];
    const double elapsed_s = static_cast<double>(now_ns - f.updated_ns) / kNsPerSecond;
    a.amount = std::max(0.0, a.amount - f.rate_bytes_per_s * elapsed_s);
    f.updated_ns = now_ns;
    f.rate_bytes_per_s = rate;
    schedule(f.activity, now_ns + ceil_ns(a.amount / rate * kNsPerSecond));
  }
}

// Brings the running computes of `p` up to date at the old rate and reschedules them at the new.
void Engine::State::rerate_processor(Processor& p, bool contended) {
  const double old_rate = p.contended ? p.contended_rate : 1.0;
  const double new_rate = contended ? p.contended_rate : 1.0;
  size_t kept = 0;
  for (const ActivityId id : p.computes) {
    Activity& a = activities[id];
    if (a.finish_ns >= 0) continue;
    const TimeNs elapsed_ns = now_ns - std::max(a.start_ns, p.changed_ns);
    a.amount = std::max(0.0, a.amount - old_rate * static_cast<double>(elapsed_ns));
    schedule(id, now_ns + ceil_ns(a.amount / new_rate));
    p.computes[kept++] = id;
  }
  p.computes.resize(kept);
  p.contended = contended;
  p.changed_ns = now_ns;
}

CorePoolId Engine::add_core_pool(int32_t cores, TimeNs slice_ns) {
  STRATA_ASSERT(cores > 0 && slice_ns > 0, "a core pool needs cores and a slice");
  state_->pools.push_back(CorePool{cores, slice_ns, {}});
  return static_cast<CorePoolId>(state_->pools.size() - 1);
}

ThreadId Engine::add_thread(CorePoolId pool) {
  STRATA_ASSERT(pool >= 0 && pool < static_cast<CorePoolId>(state_->pools.size()),
                "a thread names an unknown core pool");
  state_->threads.push_back(Thread{pool, false, 0});
  return static_cast<ThreadId>(state_->threads.size() - 1);
}

Engine::Engine() : state_(std::make_unique<State>()) {}
Engine::~Engine() = default;

LinkId Engine::add_link(double capacity_bytes_per_s) {
  STRATA_ASSERT(capacity_bytes_per_s > 0, "a link needs a positive capacity in bytes/s");
  state_->links.push_back(Link{capacity_bytes_per_s, {}, 0, 0, false});
  return static_cast<LinkId>(state_->links.size() - 1);
}

ProcessorId Engine::add_processor(double contended_rate) {
  STRATA_ASSERT(contended_rate > 0 && contended_rate <= 1,
                "a processor's contended rate must be in (0, 1]");
  Processor p;
  p.contended_rate = contended_rate;
  state_->processors.push_back(std::move(p));
  return static_cast<ProcessorId>(state_->processors.size() - 1);
}

PathId Engine::add_path(std::span<const PathHop> hops) {
  State& s = *state_;
  STRATA_ASSERT(!hops.empty(), "a path needs at least one link");
  for (const PathHop& hop : hops) {
    STRATA_ASSERT(hop.link >= 0 && hop.link < static_cast<LinkId>(s.links.size()),
                  "a path hop names an unknown link");
    STRATA_ASSERT(hop.weight > 0, "a path hop needs a positive weight");
  }
  s.hops.insert(s.hops.end(), hops.begin(), hops.end());
  s.first_hop.push_back(static_cast<int32_t>(s.hops.size()));
  return static_cast<PathId>(s.first_hop.size() - 2);
}

void Engine::reserve(int64_t activities) {
  State& s = *state_;
  STRATA_ASSERT(activities >= 0, "reserve() takes a count of activities");
  const double edges_per_activity =
      s.activities.empty()
          ? 1.0
          : static_cast<double>(s.deps.size()) / static_cast<double>(s.activities.size());
  s.activities.reserve(static_cast<size_t>(activities));
  s.deps.reserve(static_cast<size_t>(edges_per_activity * static_cast<double>(activities)));
}

ActivityId Engine::add(const ActivitySpec& spec, std::span<const ActivityId> deps) {
  State& s = *state_;
  STRATA_ASSERT(!s.ran, "activities may be added only before run()");
  STRATA_ASSERT(s.activities.size() < static_cast<size_t>(std::numeric_limits<int32_t>::max()),
                "more than 2^31 activities");
  const auto id = static_cast<ActivityId>(s.activities.size());
  for (const ActivityId d : deps) {
    STRATA_ASSERT(d >= 0 && d < id, "a dependency must be an activity added before");
  }
  Activity a;
  a.kind = spec.kind;
  a.priority = spec.priority;
  a.pending_or_slot = static_cast<int32_t>(deps.size());
  switch (spec.kind) {
    case ActivityKind::kDelay:
      STRATA_ASSERT(spec.duration_ns >= 0 && spec.duration_ns <= kMaxDurationNs,
                    "a delay needs a duration in [0, 2^53] ns");
      a.amount = static_cast<double>(spec.duration_ns);
      break;
    case ActivityKind::kTick:
      STRATA_ASSERT(spec.duration_ns > 0 && spec.duration_ns <= kMaxDurationNs,
                    "a tick needs a period in (0, 2^53] ns");
      a.amount = static_cast<double>(spec.duration_ns);
      break;
    case ActivityKind::kCompute:
      STRATA_ASSERT(spec.duration_ns >= 0 && spec.duration_ns <= kMaxDurationNs,
                    "a compute needs a duration in [0, 2^53] ns");
      STRATA_ASSERT(
          spec.processor >= 0 && spec.processor < static_cast<ProcessorId>(s.processors.size()),
          "a compute names an unknown processor");
      a.amount = static_cast<double>(spec.duration_ns);
      a.resource = spec.processor;
      break;
    case ActivityKind::kFlow:
      STRATA_ASSERT(spec.path >= 0 && spec.path < static_cast<PathId>(s.first_hop.size() - 1),
                    "a flow names an unknown path");
      for (const ProcessorId p : spec.touches) {
        STRATA_ASSERT(
            p == kNoProcessor || (p >= 0 && p < static_cast<ProcessorId>(s.processors.size())),
            "a flow touches an unknown processor");
      }
      a.amount = spec.bytes;
      a.resource = spec.path;
      a.touches = spec.touches;
      break;
    case ActivityKind::kRun:
      STRATA_ASSERT(spec.duration_ns >= 0 && spec.duration_ns <= kMaxDurationNs,
                    "a run needs a duration in [0, 2^53] ns");
      a.amount = static_cast<double>(spec.duration_ns);
      [[fallthrough]];
    case ActivityKind::kAcquire:
    case ActivityKind::kRelease:
      STRATA_ASSERT(spec.thread >= 0 && spec.thread < static_cast<ThreadId>(s.threads.size()),
                    "an acquire or release names an unknown thread");
      a.resource = spec.thread;
      break;
  }
  s.activities.push_back(a);
  s.deps.insert(s.deps.end(), deps.begin(), deps.end());
  ++s.stats.activities;
  return id;
}

void Engine::add_dependency(ActivityId activity, ActivityId dep) {
  State& s = *state_;
  STRATA_ASSERT(!s.ran, "dependencies may be added only before run()");
  const auto count = static_cast<ActivityId>(s.activities.size());
  STRATA_ASSERT(activity >= 0 && activity < count && dep >= 0 && dep < count,
                "add_dependency() names an unknown activity");
  STRATA_ASSERT(activity != dep, "an activity cannot wait for itself");
  ++s.activities[activity].pending_or_slot;
  s.late_deps.push_back({activity, dep});
}

void Engine::set_period_map(PeriodMap map) {
  STRATA_ASSERT(!state_->ran, "the period map is set before run()");
  state_->period_map = std::move(map);
}

bool Engine::run(TimeNs horizon_ns) {
  State& s = *state_;
  STRATA_ASSERT(!s.ran, "run() may be called once");
  s.ran = true;
  s.build_successors();
  // Core pools' threads carry slices the fast-forward does not compare: none with them.
  if (s.period_map && s.threads.empty()) {
    s.fast_forward = std::make_unique<FastForward>(std::move(*s.period_map), s.activities.size());
  }
  s.period_map.reset();
  s.now_ns = 0;
  const auto count = static_cast<ActivityId>(s.activities.size());
  for (ActivityId id = 0; id < count; ++id) {
    if (s.activities[id].pending_or_slot == 0 && s.activities[id].start_ns < 0) s.start(id);
  }
  // One pass per distinct event time: answer its events in queue order, then settle the rates.
  // settle() may schedule a completion at the same time (nothing left to move); the next pass
  // answers it.
  while (true) {
    while (!s.queue.empty() && s.queue.top().time_ns == s.now_ns) {
      const Event e = s.queue.pop();
      if (s.activities[e.activity].kind == ActivityKind::kRun && !s.run_done(e.activity)) continue;
      s.finish(e.activity);
    }
    s.settle();
    if (s.fast_forward) s.fast_forward->end_of_pass(s, horizon_ns);
    if (s.queue.empty()) break;
    if (s.queue.top().time_ns > horizon_ns) return false;
    s.now_ns = s.queue.top().time_ns;
  }
  s.fast_forward.reset();
  STRATA_ASSERT(s.finished == s.stats.activities,
                std::to_string(s.stats.activities - s.finished) +
                    " activities never finished (their dependencies never completed)");
  return true;
}

TimeNs Engine::start_ns(ActivityId id) const {
  STRATA_ASSERT(id >= 0 && id < static_cast<ActivityId>(state_->activities.size()),
                "unknown activity");
  return state_->activities[id].start_ns;
}

TimeNs Engine::finish_ns(ActivityId id) const {
  STRATA_ASSERT(id >= 0 && id < static_cast<ActivityId>(state_->activities.size()),
                "unknown activity");
  return state_->activities[id].finish_ns;
}

TimeNs Engine::now_ns() const { return state_->now_ns; }

int64_t Engine::size() const { return static_cast<int64_t>(state_->activities.size()); }

EngineStats Engine::stats() const { return state_->stats; }

}  // namespace strata
