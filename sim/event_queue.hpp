#pragma once
// The engine's future events: the projected completion of each running activity, answered in
// the fixed order (time, priority, sequence) so that runs are reproducible to the byte. The
// sequence is the order in which completions were scheduled, so two events at one time and one
// priority come out first-scheduled first.
//
// A 4-ary min-heap of 24-byte entries: a pop touches log4(n) levels of four adjacent children,
// which stays in cache for the few hundred to few thousand activities a simulation has running.
// An activity has at most one entry: scheduling it again (the engine re-rates a flow or a
// compute) moves its entry to the new time with a new sequence, in place, where a heap without
// an index would push a second entry and skip the stale one when it came out.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/error.hpp"
#include "sim/engine.hpp"

namespace strata {

struct Event {
  TimeNs time_ns = 0;
  uint64_t order = 0;  // priority (biased to unsigned) in the top 16 bits, sequence in the low 48
  ActivityId activity = kNoActivity;
};

// Whether `a` is answered before `b`: by time, then priority, then sequence.
inline bool answered_before(const Event& a, const Event& b) {
  return a.time_ns < b.time_ns || (a.time_ns == b.time_ns && a.order < b.order);
}

class EventQueue {
 public:
  // `activity`'s completion at `time_ns`, replacing the one it had: it comes out after every
  // event of its time and priority scheduled before this call.
  void schedule(TimeNs time_ns, int16_t priority, ActivityId activity) {
    STRATA_ASSERT(next_sequence_ < kSequenceLimit, "more than 2^48 events scheduled");
    const uint64_t biased_priority = static_cast<uint64_t>(static_cast<int32_t>(priority) + 32768);
    const Event event{time_ns, (biased_priority << kSequenceBits) | next_sequence_++, activity};
    const auto a = static_cast<size_t>(activity);
    if (a >= slot_.size()) slot_.resize(std::max(a + 1, 2 * slot_.size()), kNoSlot);
    if (slot_[a] == kNoSlot) {
      heap_.push_back(event);
      sift_up(heap_.size() - 1, event);
      return;
    }
    const auto hole = static_cast<size_t>(slot_[a]);
    if (answered_before(event, heap_[hole])) {
      sift_up(hole, event);
    } else {
      sift_down(hole, event);
    }
  }

  bool empty() const { return heap_.empty(); }
  size_t size() const { return heap_.size(); }
  const Event& top() const { return heap_.front(); }

  Event pop() {
    const Event first = heap_.front();
    slot_[static_cast<size_t>(first.activity)] = kNoSlot;
    const Event last = heap_.back();
    heap_.pop_back();
    if (!heap_.empty()) sift_down(0, last);
    return first;
  }

  // Every entry, one per scheduled activity, in no particular order.
  std::span<const Event> entries() const { return heap_; }

  // Moves every entry `shift_ns` later and gives it the activity `rename(entry)` (distinct
  // entries to distinct activities, none of them scheduled but by a renamed entry). The order
  // in which entries come out is unchanged: every time moves by the same amount, and priorities
  // and sequences stay.
  template <class Rename>
  void shift(TimeNs shift_ns, Rename rename) {
    for (const Event& e : heap_) slot_[static_cast<size_t>(e.activity)] = kNoSlot;
    for (size_t i = 0; i < heap_.size(); ++i) {
      Event& e = heap_[i];
      e.time_ns += shift_ns;
      e.activity = rename(e);
      const auto a = static_cast<size_t>(e.activity);
      if (a >= slot_.size()) slot_.resize(std::max(a + 1, 2 * slot_.size()), kNoSlot);
      slot_[a] = static_cast<int32_t>(i);
    }
  }

 private:
  static constexpr int kSequenceBits = 48;
  static constexpr uint64_t kSequenceLimit = uint64_t{1} << kSequenceBits;
  static constexpr size_t kArity = 4;
  static constexpr int32_t kNoSlot = -1;

  void place(size_t hole, const Event& event) {
    heap_[hole] = event;
    slot_[static_cast<size_t>(event.activity)] = static_cast<int32_t>(hole);
  }

  // Moves `event` up from the hole at `hole` to its place.
  void sift_up(size_t hole, Event event) {
    while (hole > 0) {
      const size_t parent = (hole - 1) / kArity;
      if (!answered_before(event, heap_[parent])) break;
      place(hole, heap_[parent]);
      hole = parent;
    }
    place(hole, event);
  }

  // Moves `event` down from the hole at `hole` to its place (by value: it may be the entry at
  // `hole` itself).
  void sift_down(size_t hole, Event event) {
    const size_t n = heap_.size();
    while (true) {
      const size_t first_child = hole * kArity + 1;
      if (first_child >= n) break;
      const size_t end = first_child + kArity < n ? first_child + kArity : n;
      size_t best = first_child;
      for (size_t child = first_child + 1; child < end; ++child) {
        if (answered_before(heap_[child], heap_[best])) best = child;
      }
      if (!answered_before(heap_[best], event)) break;
      place(hole, heap_[best]);
      hole = best;
    }
    place(hole, event);
  }

  std::vector<Event> heap_;
  std::vector<int32_t> slot_;  // by activity: its entry's index in heap_, or kNoSlot
  uint64_t next_sequence_ = 0;
};

}  // namespace strata
