#pragma once
// The engine's future events: the projected completions of running activities, answered in the
// fixed order (time, priority, sequence) so that runs are reproducible to the byte. The sequence
// is the order in which events were pushed, so two events at one time and one priority come out
// first-pushed first.
//
// A 4-ary min-heap of 24-byte entries: a pop touches log4(n) levels of four adjacent children,
// which stays in cache for the few hundred to few thousand activities a simulation has running.
// An entry carries the activity's version when it was pushed; the engine re-rates an activity by
// bumping its version and pushing again, and skips entries whose version is stale when they come
// out (lazy invalidation).

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
  uint32_t version = 0;
};

// Whether `a` is answered before `b`: by time, then priority, then sequence.
inline bool answered_before(const Event& a, const Event& b) {
  return a.time_ns < b.time_ns || (a.time_ns == b.time_ns && a.order < b.order);
}

class EventQueue {
 public:
  void push(TimeNs time_ns, int16_t priority, ActivityId activity, uint32_t version) {
    STRATA_ASSERT(next_sequence_ < kSequenceLimit, "more than 2^48 events pushed");
    const uint64_t biased_priority = static_cast<uint64_t>(static_cast<int32_t>(priority) + 32768);
    const Event event{time_ns, (biased_priority << kSequenceBits) | next_sequence_++, activity,
                      version};
    heap_.push_back(event);
    sift_up(heap_.size() - 1, event);
  }

  bool empty() const { return heap_.empty(); }
  size_t size() const { return heap_.size(); }
  const Event& top() const { return heap_.front(); }

  Event pop() {
    const Event first = heap_.front();
    const Event last = heap_.back();
    heap_.pop_back();
    if (!heap_.empty()) sift_down(0, last);
    return first;
  }

  // Every entry, stale ones too, in no particular order.
  std::span<const Event> entries() const { return heap_; }

  // Moves every entry `shift_ns` later and lets `rename(entry)` give its new activity. The order
  // in which entries come out is unchanged: every time moves by the same amount, and priorities
  // and sequences stay.
  template <class Rename>
  void shift(TimeNs shift_ns, Rename rename) {
    for (Event& e : heap_) {
      e.time_ns += shift_ns;
      e.activity = rename(e);
    }
  }

  // Drops every entry for which `is_stale(entry)` holds and restores the heap. The order in
  // which the remaining entries come out is unchanged (it is a total order on their keys).
  template <class IsStale>
  void remove_if(IsStale is_stale) {
    std::erase_if(heap_, is_stale);
    for (size_t i = heap_.size(); i-- > 0;) sift_down(i, heap_[i]);
  }

 private:
  static constexpr int kSequenceBits = 48;
  static constexpr uint64_t kSequenceLimit = uint64_t{1} << kSequenceBits;
  static constexpr size_t kArity = 4;

  // Moves `event` up from the hole at `hole` to its place.
  void sift_up(size_t hole, Event event) {
    while (hole > 0) {
      const size_t parent = (hole - 1) / kArity;
      if (!answered_before(event, heap_[parent])) break;
      heap_[hole] = heap_[parent];
      hole = parent;
    }
    heap_[hole] = event;
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
      heap_[hole] = heap_[best];
      hole = best;
    }
    heap_[hole] = event;
  }

  std::vector<Event> heap_;
  uint64_t next_sequence_ = 0;
};

}  // namespace strata
