// The steady-state fast-forward (sim/engine_fast_forward.hpp).

#include "sim/engine_fast_forward.hpp"

#include <algorithm>
#include <bit>
#include <limits>
#include <utility>

#include "common/error.hpp"

namespace strata::engine_detail {

FastForward::FastForward(PeriodMap map, size_t activities)
    : map_(std::move(map)), is_anchor_(activities, 0) {
  map_.next.resize(activities, kNoActivity);
  for (size_t j = 0; j < map_.anchors.size(); ++j) {
    const ActivityId anchor = map_.anchors[j];
    STRATA_ASSERT(anchor >= 0 && static_cast<size_t>(anchor) < activities,
                  "a period anchor names an unknown activity");
    is_anchor_[static_cast<size_t>(anchor)] = 1;
    anchor_index_[anchor] = static_cast<int32_t>(j);
  }
  for (const ActivityId next : map_.next) {
    STRATA_ASSERT(next == kNoActivity || (next >= 0 && static_cast<size_t>(next) < activities),
                  "a period map names an unknown activity");
  }
  map_.max_periods = std::max(map_.max_periods, 1);
}

ActivityId FastForward::image(ActivityId id, int64_t steps) const {
  for (int64_t i = 0; i < steps && id != kNoActivity; ++i) id = map_.next[static_cast<size_t>(id)];
  return id;
}

void FastForward::end_of_pass(Engine::State& s, TimeNs horizon_ns) {
  if (anchor_started_ == kNoActivity) {
    // Nothing before the first checkpoint is ever copied.
    if (checkpoints_.empty()) forget_before(log_offset_ + log_.size());
    return;
  }
  const int32_t anchor = anchor_index_.at(anchor_started_);
  anchor_started_ = kNoActivity;
  Checkpoint now = record(s, anchor);
  for (size_t i = checkpoints_.size(); i-- > 0;) {
    const Checkpoint& earlier = checkpoints_[i];
    const int32_t k = periods_between(earlier.anchor, now.anchor);
    if (k == 0 || !same_state(earlier, now, k)) continue;
    if (skip(s, earlier, now, k, horizon_ns)) {
      // The state is the last checkpoint's, renamed and shifted: start looking afresh.
      checkpoints_.clear();
      forget_before(log_offset_ + log_.size());
      return;
    }
  }
  checkpoints_.push_back(std::move(now));
  if (checkpoints_.size() > static_cast<size_t>(map_.max_periods)) {
    checkpoints_.erase(checkpoints_.begin());
  }
  forget_before(checkpoints_.front().log_end);
}

void FastForward::forget_before(size_t absolute) {
  const size_t drop = absolute - log_offset_;
  if (drop == log_.size()) {
    log_.clear();
  } else if (drop > log_.size() / 2) {  // amortized: drop the front once it is half the log
    log_.erase(log_.begin(), log_.begin() + static_cast<std::ptrdiff_t>(drop));
  } else {
    return;
  }
  log_offset_ = absolute;
}

FastForward::Checkpoint FastForward::record(const Engine::State& s, int32_t anchor) const {
  Checkpoint c;
  c.time_ns = s.now_ns;
  c.anchor = anchor;
  c.log_end = log_offset_ + log_.size();
  c.rate_updates = s.stats.rate_updates;
  std::vector<Event> queued(s.queue.entries().begin(), s.queue.entries().end());
  std::sort(queued.begin(), queued.end(), answered_before);
  c.running.reserve(queued.size());
  for (const Event& e : queued) {
    const Activity& a = s.activities[static_cast<size_t>(e.activity)];
    // A running tick ends at a multiple of its period, not at a time relative to its start: a
    // state with one is never copied from.
    if (a.kind == ActivityKind::kTick) c.has_tick = true;
    Running r;
    r.activity = e.activity;
    r.priority = a.priority;
    r.due_ns = e.time_ns - c.time_ns;
    r.start_ns = a.start_ns - c.time_ns;
    r.amount_bits = std::bit_cast<uint64_t>(a.amount);
    if (a.kind == ActivityKind::kCompute) {
      const Processor& p = s.processors[static_cast<size_t>(a.resource)];
      r.since_ns = std::max(a.start_ns, p.changed_ns) - c.time_ns;
    } else if (a.kind == ActivityKind::kFlow && a.pending_or_slot != kNoFlowSlot) {
      const ActiveFlow& f = s.flows[static_cast<size_t>(a.pending_or_slot)];
      r.since_ns = f.updated_ns - c.time_ns;
      r.rate_bits = std::bit_cast<uint64_t>(f.rate_bytes_per_s);
      for (const PathHop& hop : s.path(a.resource)) {
        const std::vector<int32_t>& on_link = s.links[static_cast<size_t>(hop.link)].flow_slots;
        const auto place = std::find(on_link.begin(), on_link.end(), a.pending_or_slot);
        c.link_places.push_back(static_cast<int32_t>(place - on_link.begin()));
        c.link_places.push_back(static_cast<int32_t>(on_link.size()));
      }
    }
    c.running.push_back(r);
  }
  c.processors.reserve(2 * s.processors.size());
  for (const Processor& p : s.processors) {
    c.processors.push_back(p.contended ? 1 : 0);
    c.processors.push_back(p.touching_flows);
    for (const ActivityId id : p.computes) {
      if (s.activities[static_cast<size_t>(id)].finish_ns < 0) c.computes.push_back(id);
    }
    c.computes.push_back(kNoActivity);
  }
  return c;
}

int32_t FastForward::periods_between(int32_t earlier, int32_t later) const {
  ActivityId id = map_.anchors[static_cast<size_t>(earlier)];
  const ActivityId target = map_.anchors[static_cast<size_t>(later)];
  for (int32_t k = 1; k <= map_.max_periods; ++k) {
    id = image(id, 1);
    if (id == kNoActivity) return 0;
    if (id == target) return k;
  }
  return 0;
}

bool FastForward::same_state(const Checkpoint& a, const Checkpoint& b, int32_t k) const {
  if (a.has_tick || b.has_tick || a.running.size() != b.running.size() ||
      a.link_places != b.link_places || a.processors != b.processors ||
      a.computes.size() != b.computes.size()) {
    return false;
  }
  for (size_t i = 0; i < a.running.size(); ++i) {
    if (!a.running[i].same_but_name(b.running[i]) ||
        image(a.running[i].activity, k) != b.running[i].activity) {
      return false;
    }
  }
  for (size_t i = 0; i < a.computes.size(); ++i) {
    const ActivityId id = a.computes[i];
    if ((id == kNoActivity ? kNoActivity : image(id, k)) != b.computes[i]) return false;
  }
  return true;
}

bool FastForward::skip(Engine::State& s, const Checkpoint& a, const Checkpoint& b, int32_t k,
                       TimeNs horizon_ns) {
  const TimeNs period_ns = b.time_ns - a.time_ns;
  if (period_ns <= 0 || b.log_end == a.log_end) return false;
  const std::span<const LogEntry> window(log_.data() + (a.log_end - log_offset_),
                                         b.log_end - a.log_end);
  int64_t max_periods = std::numeric_limits<int64_t>::max();
  if (horizon_ns != kNoHorizon) max_periods = (horizon_ns - b.time_ns) / period_ns;
  if (max_periods < 1) return false;

  // names[i]: the activity that window[i]'s plays in the period being copied.
  std::vector<ActivityId>& names = names_;
  names.resize(window.size());
  for (size_t i = 0; i < window.size(); ++i) names[i] = window[i].activity;
  int64_t periods = 0;
  while (periods < max_periods) {
    bool named = true;
    for (ActivityId& name : names) {
      name = image(name, k);
      named = named && name != kNoActivity;
    }
    if (!named || !copy_period(s, window, names, (periods + 1) * period_ns)) break;
    ++periods;
  }
  if (periods == 0) return false;

  // The running activities at b hand their state to their renamed selves `periods` on (each was
  // started by the copy, and its earlier self finished by it).
  const TimeNs shift_ns = periods * period_ns;
  const int64_t steps = periods * k;
  std::vector<std::pair<ActivityId, ActivityId>> renamed;
  renamed.reserve(b.running.size());
  for (const Running& r : b.running) {
    const ActivityId to = image(r.activity, steps);
    const Activity& from = s.activities[static_cast<size_t>(r.activity)];
    Activity& next = s.activities[static_cast<size_t>(to)];
    STRATA_ASSERT(next.start_ns == from.start_ns + shift_ns && next.finish_ns < 0,
                  "fast-forward: a running activity's image did not start with it");
    next.amount = from.amount;
    next.pending_or_slot = from.pending_or_slot;
    if (next.kind == ActivityKind::kFlow && next.pending_or_slot != kNoFlowSlot) {
      ActiveFlow& f = s.flows[static_cast<size_t>(next.pending_or_slot)];
      f.activity = to;
      f.updated_ns += shift_ns;
    }
    renamed.emplace_back(r.activity, to);
  }
  std::sort(renamed.begin(), renamed.end());
  s.queue.shift(shift_ns, [&](const Event& e) {
    const auto it = std::lower_bound(renamed.begin(), renamed.end(),
                                     std::pair{e.activity, std::numeric_limits<ActivityId>::min()});
    STRATA_ASSERT(it != renamed.end() && it->first == e.activity,
                  "fast-forward: a queued completion is not a running activity's");
    return it->second;
  });
  size_t next_compute = 0;
  for (Processor& p : s.processors) {
    p.changed_ns += shift_ns;
    p.computes.clear();
    for (; b.computes[next_compute] != kNoActivity; ++next_compute) {
      p.computes.push_back(image(b.computes[next_compute], steps));
    }
    ++next_compute;
  }
  s.now_ns += shift_ns;
  int64_t finishes = 0;
  for (const LogEntry& e : window) finishes += e.start ? 0 : 1;
  s.finished += periods * finishes;
  s.stats.fast_forwarded += periods * finishes;
  s.stats.events += periods * static_cast<int64_t>(window.size());
  s.stats.rate_updates += periods * (b.rate_updates - a.rate_updates);
  return true;
}

bool FastForward::copy_period(Engine::State& s, std::span<const LogEntry> window,
                              std::span<const ActivityId> names, TimeNs shift_ns) {
  changes_.clear();
  bool ok = true;
  for (size_t i = 0; ok && i < window.size(); ++i) {
    const LogEntry& e = window[i];
    Activity& a = s.activities[static_cast<size_t>(names[i])];
    if (e.start) {
      // Its count reached zero at the finish before it (checked there); it must run as the
      // logged one did.
      const Activity& logged = s.activities[static_cast<size_t>(e.activity)];
      ok = a.start_ns < 0 && a.kind == logged.kind && a.kind != ActivityKind::kTick &&
           a.priority == logged.priority && a.resource == logged.resource &&
           a.touches == logged.touches &&
           std::bit_cast<uint64_t>(a.amount) == std::bit_cast<uint64_t>(e.amount);
      if (!ok) break;
      a.start_ns = e.time_ns + shift_ns;
      changes_.push_back({names[i], Change::Kind::kStart});
      continue;
    }
    if (a.start_ns < 0 || a.finish_ns >= 0) {
      ok = false;
      break;
    }
    a.finish_ns = e.time_ns + shift_ns;
    changes_.push_back({names[i], Change::Kind::kFinish});
    // The successors that reach zero must be the starts logged right after this finish.
    size_t next_start = i + 1;
    const ActivityId id = names[i];
    for (int32_t edge = s.first_successor[static_cast<size_t>(id)];
         edge < s.first_successor[static_cast<size_t>(id) + 1]; ++edge) {
      const ActivityId successor = s.successors[static_cast<size_t>(edge)];
      Activity& after = s.activities[static_cast<size_t>(successor)];
      if (after.start_ns >= 0) {
        ok = false;
        break;
      }
      changes_.push_back({successor, Change::Kind::kCountDown});
      if (--after.pending_or_slot > 0) continue;
      if (next_start >= window.size() || !window[next_start].start ||
          names[next_start] != successor) {
        ok = false;
        break;
      }
      ++next_start;
    }
    ok = ok && (next_start == window.size() || !window[next_start].start);
  }
  if (ok) return true;
  for (size_t i = changes_.size(); i-- > 0;) {
    Activity& a = s.activities[static_cast<size_t>(changes_[i].activity)];
    switch (changes_[i].kind) {
      case Change::Kind::kStart:
        a.start_ns = -1;
        break;
      case Change::Kind::kFinish:
        a.finish_ns = -1;
        break;
      case Change::Kind::kCountDown:
        ++a.pending_or_slot;
        break;
    }
  }
  return false;
}

}  // namespace strata::engine_detail
