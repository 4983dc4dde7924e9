#pragma once
// The engine's steady-state fast-forward (Engine::set_period_map): exact skipping of the periods
// in which a schedule repeats itself. Internal to the engine library.
//
// In the middle of a pipeline schedule every stage repeats one pattern of tasks per micro-batch.
// At the end of each pass of the event loop in which a period's anchor started, the engine's
// state is recorded relative to the clock (a checkpoint): the running activities in the order
// their completions are queued (time left, priority, work left, rate, when it started and when
// its work was last counted, its places in its links' flow lists), and each processor's
// contention and running computes in order. When a checkpoint at t2 equals one at t1 with every
// activity renamed k periods on (PeriodMap::next applied k times), the events logged in
// (t1, t2] are a candidate for (t2, t2 + P], P = t2 - t1, renamed again; copying them forward
// period by period, each copied event is checked against the engine's rules and whole periods
// that pass are kept. Why a period that passes is what simulating would have given:
//  - the completions of the running activities are fixed by their state, equal renamed, and by
//    their rates: the same flows, renamed, share the same links (a renamed flow has the same
//    path), and each processor's contention is the same;
//  - an activity starts only when its last dependency finishes: for each copied finish, the
//    engine's own successors of the renamed activity are counted down, and those that reach zero
//    must be exactly the renamed starts logged after it, in the same order, none started before;
//    a count that reaches zero anywhere else (a task that does not repeat, such as the optimizer
//    waiting for every micro-batch) ends the copy;
//  - a started activity must have the logged one's kind, priority, work, resource and touched
//    processors, so it runs as the logged one did;
//  - ties at one time are answered in queue order: the queue at t2 is t1's renamed, in order, and
//    the period's pushes happen in the logged order.
// Ticks (their completion aligns to absolute multiples of a period) and core pools (threads'
// slices are not in the checkpoint) are never copied: a tick that starts in a period ends the
// copy, a state with a tick running is never copied from, and an engine with core pools does not
// fast-forward.

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "sim/engine.hpp"
#include "sim/engine_state.hpp"

namespace strata::engine_detail {

class FastForward {
 public:
  FastForward(PeriodMap map, size_t activities);

  // The event loop's hooks: every start (with its work then) and finish is logged.
  void started(ActivityId id, TimeNs now_ns, double amount) {
    log_.push_back({now_ns, amount, id, true});
    if (is_anchor_[static_cast<size_t>(id)]) anchor_started_ = id;
  }
  void finished(ActivityId id, TimeNs now_ns) { log_.push_back({now_ns, 0, id, false}); }

  // At the end of each pass of the event loop (rates settled): records a checkpoint if an anchor
  // started in the pass, and skips the whole periods it can without passing `horizon_ns`.
  void end_of_pass(Engine::State& s, TimeNs horizon_ns);

 private:
  struct LogEntry {
    TimeNs time_ns = 0;
    double amount = 0;  // a start: the activity's work when it started
    ActivityId activity = kNoActivity;
    bool start = false;
  };

  // A running activity at a checkpoint; times relative to the checkpoint's.
  struct Running {
    ActivityId activity = kNoActivity;
    int16_t priority = 0;
    TimeNs due_ns = 0;    // its queued completion
    TimeNs start_ns = 0;  // when it started
    TimeNs since_ns = 0;  // a compute or a flow: when its work left was last brought up to date
    uint64_t amount_bits = 0;
    uint64_t rate_bits = 0;  // a flow: bytes per second

    bool same_but_name(const Running& o) const {
      return priority == o.priority && due_ns == o.due_ns && start_ns == o.start_ns &&
             since_ns == o.since_ns && amount_bits == o.amount_bits && rate_bits == o.rate_bits;
    }
  };

  struct Checkpoint {
    TimeNs time_ns = 0;
    int32_t anchor = 0;  // into PeriodMap::anchors
    size_t log_end = 0;  // absolute index into the log of the first entry after it
    int64_t rate_updates = 0;
    bool has_tick = false;             // a tick is running
    std::vector<Running> running;      // in queue order
    std::vector<int32_t> link_places;  // per running flow and hop: its index, the list's size
    std::vector<int32_t> processors;   // per processor: contended, flows touching it
    std::vector<ActivityId> computes;  // per processor: running computes in order, then -1
  };

  // A change the copy made, to undo a period that fails its checks.
  struct Change {
    ActivityId activity = kNoActivity;
    enum class Kind : uint8_t { kStart, kFinish, kCountDown } kind = Kind::kStart;
  };

  Checkpoint record(const Engine::State& s, int32_t anchor) const;
  // How many periods on `later` is from `earlier` (anchors), 0 if none within max_periods.
  int32_t periods_between(int32_t earlier, int32_t later) const;
  bool same_state(const Checkpoint& a, const Checkpoint& b, int32_t k) const;
  // The activity `steps` periods after `id`, or kNoActivity.
  ActivityId image(ActivityId id, int64_t steps) const;
  // Copies the periods after `b` (b is k periods after a); false if not one passed.
  bool skip(Engine::State& s, const Checkpoint& a, const Checkpoint& b, int32_t k,
            TimeNs horizon_ns);
  // One period's copy of `window`, its activities in `names`, `shift_ns` later; false (and
  // undone) if an event does not check.
  bool copy_period(Engine::State& s, std::span<const LogEntry> window,
                   std::span<const ActivityId> names, TimeNs shift_ns);
  void forget_before(size_t absolute);

  PeriodMap map_;
  std::vector<uint8_t> is_anchor_;
  std::unordered_map<ActivityId, int32_t> anchor_index_;
  ActivityId anchor_started_ = kNoActivity;
  std::vector<LogEntry> log_;
  size_t log_offset_ = 0;                // absolute index of log_[0]
  std::vector<Checkpoint> checkpoints_;  // oldest first, at most max_periods
  std::vector<Change> changes_;          // scratch of copy_period()
  std::vector<ActivityId> names_;        // scratch of skip()
};

}  // namespace strata::engine_detail
