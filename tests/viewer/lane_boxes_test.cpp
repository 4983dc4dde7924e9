// What one lane draws (viewer/lane_boxes.hpp): the events on screen that pass the filter, each
// exactly once, in boxes ordered left to right within [0, width], runs narrower than a pixel
// merged (so a lane of 100,000 events costs about one box per pixel), a merged box uniform exactly
// when its events share phase, kind and micro-batch, touching mixed boxes one; the filter; and
// event_at's hit-testing.
// Culling (a binary search from the view's start less the lane's longest event) is checked
// against a walk over every event.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "viewer/lane_boxes.hpp"
#include "viewer/time_view.hpp"
#include "viewer/trace_model.hpp"

namespace strata::viewer {
namespace {

TraceEvent make_event(int64_t start_ns, int64_t dur_ns, EventPhase phase, int32_t micro_batch) {
  TraceEvent e;
  e.start_ns = start_ns;
  e.dur_ns = dur_ns;
  e.transfer_ns = start_ns;
  e.phase = phase;
  e.micro_batch = micro_batch;
  return e;
}

// A trace of one lane (pid 0, "compute") holding `events`, which are in start order.
Trace one_lane(std::vector<TraceEvent> events) {
  Trace trace;
  trace.names = {"e"};
  Lane lane;
  lane.thread_name = "compute";
  for (size_t i = 0; i < events.size(); ++i) {
    lane.events.push_back(static_cast<int32_t>(i));
    lane.longest_ns = std::max(lane.longest_ns, events[i].dur_ns);
  }
  trace.start_ns = events.front().start_ns;
  trace.end_ns = 0;
  for (const TraceEvent& e : events) trace.end_ns = std::max(trace.end_ns, e.end_ns());
  trace.events = std::move(events);
  trace.lanes.push_back(std::move(lane));
  return trace;
}

constexpr int64_t kShortEvents = 100000;
constexpr int64_t kShortNs = 10;
constexpr int64_t kLongStartNs = 4'000'000;
constexpr int64_t kLongNs = 200'000;

// coverage(): a merged box is as busy as the width its events cover. 1000 events of 8 ns every
// 32 ns over 32,000 ns in 250 px (128 ns per pixel: each event 1/16 px, gaps 3/16 px) merge into
// one uniform box covering a quarter of its width; back to back they cover all of it.
TEST_CASE("a merged box's coverage is the share of its width its events fill",
          "[viewer][lane_boxes]") {
  std::vector<TraceEvent> sparse;
  std::vector<TraceEvent> dense;
  for (int64_t i = 0; i < 1000; ++i) {
    sparse.push_back(make_event(32 * i, 8, EventPhase::kForward, 0));
    dense.push_back(make_event(8 * i, 8, EventPhase::kForward, 0));
  }
  std::vector<LaneBox> boxes;
  const Trace sparse_trace = one_lane(sparse);
  lane_boxes(sparse_trace, sparse_trace.lanes[0], TimeView::fit(0.0, 32000.0, 250.0), 250.0, 0.0,
             EventFilter{}, 1.0, boxes);
  REQUIRE(boxes.size() == 1);
  CHECK(boxes[0].merged == 1000);
  CHECK(boxes[0].coverage() == Approx(0.25).epsilon(0.01));
  const Trace dense_trace = one_lane(dense);
  lane_boxes(dense_trace, dense_trace.lanes[0], TimeView::fit(0.0, 8000.0, 250.0), 250.0, 0.0,
             EventFilter{}, 1.0, boxes);
  REQUIRE(boxes.size() == 1);
  CHECK(boxes[0].coverage() == Approx(1.0));
}

// A busy lane: 100,000 events of 10 ns in groups of 100 back to back, each group followed by a
// gap of (g mod 7) x 1000 ns (0 to 6 us, below and above a pixel at most zooms), forward for
// micro-batches 0-4 and backward for 5-9 (10,000 events each), ending before 4 ms; then three long
// optimizer events of 200 us from 4 ms, 50 us apart (at 4, 4.25 and 4.5 ms). Events never overlap
// (a stream runs one at a time).
Trace busy_lane() {
  std::vector<TraceEvent> events;
  int64_t t = 0;
  for (int64_t i = 0; i < kShortEvents; ++i) {
    const auto micro_batch = static_cast<int32_t>(i / 10000);
    events.push_back(make_event(
        t, kShortNs, micro_batch < 5 ? EventPhase::kForward : EventPhase::kBackward, micro_batch));
    t += kShortNs;
    if (i % 100 == 99) t += (i / 100 % 7) * 1000;
  }
  REQUIRE(t < kLongStartNs);
  for (int64_t k = 0; k < 3; ++k) {
    events.push_back(
        make_event(kLongStartNs + k * (kLongNs + 50'000), kLongNs, EventPhase::kOptimizer, -1));
  }
  return one_lane(std::move(events));
}

// The events lane_boxes must show, found by walking the whole lane: those passing the filter that
// start at or before the view's right edge and end at or after its left edge (x1 >= 0), in start
// order.
std::vector<int32_t> visible_events(const Trace& trace, const TimeView& view, double width,
                                    const EventFilter& filter) {
  std::vector<int32_t> out;
  for (const int32_t i : trace.lanes[0].events) {
    const TraceEvent& e = trace.events[static_cast<size_t>(i)];
    if (!filter.shows(e)) continue;
    if (static_cast<double>(e.start_ns) > view.end_ns(width)) continue;
    if (view.x_of(static_cast<double>(e.end_ns())) < 0) continue;
    out.push_back(i);
  }
  return out;
}

// The boxes against the walk: ordered and disjoint within [0, width]; box k stands for the next
// `merged` visible events, starting with box.event, so every visible event is in exactly one box;
// a box spans its events (clipped); it is uniform exactly when its events all look like its first;
// and boxes end only where the merging rule of viewer/lane_boxes.hpp says. Returns the boxes.
std::vector<LaneBox> check_boxes(const Trace& trace, const TimeView& view, double width,
                                 const EventFilter& filter) {
  std::vector<LaneBox> boxes;
  lane_boxes(trace, trace.lanes[0], view, width, 0.0, filter, 1.0, boxes);
  const std::vector<int32_t> visible = visible_events(trace, view, width, filter);
  size_t next = 0;
  for (size_t k = 0; k < boxes.size(); ++k) {
    const LaneBox& box = boxes[k];
    INFO("box " << k << " [" << box.x0 << ", " << box.x1 << "] merged " << box.merged);
    CHECK(box.x0 >= 0.0f);
    CHECK(box.x0 <= box.x1);
    CHECK(box.x1 <= static_cast<float>(width));
    if (k > 0) CHECK(boxes[k - 1].x1 <= box.x0);
    REQUIRE(box.merged >= 1);
    REQUIRE(next + static_cast<size_t>(box.merged) <= visible.size());
    CHECK(box.event == visible[next]);
    const TraceEvent& first = trace.events[static_cast<size_t>(visible[next])];
    const TraceEvent& last =
        trace.events[static_cast<size_t>(visible[next + static_cast<size_t>(box.merged) - 1])];
    const auto clip = [&](double x) { return static_cast<float>(std::clamp(x, 0.0, width)); };
    CHECK(box.x0 == Approx(clip(view.x_of(static_cast<double>(first.start_ns)))).margin(1e-3));
    CHECK(box.x1 == Approx(clip(view.x_of(static_cast<double>(last.end_ns())))).margin(1e-3));
    bool uniform = true;
    for (size_t j = next; j < next + static_cast<size_t>(box.merged); ++j) {
      uniform = uniform && same_look(first, trace.events[static_cast<size_t>(visible[j])]);
    }
    CHECK(box.uniform == uniform);
    // What bounds the count: a box ends only where it is a run of one look, is at least 2 px
    // wide (2 merge_px), or the next event is more than a pixel away or not narrow.
    if (k + 1 < boxes.size()) {
      const LaneBox& after = boxes[k + 1];
      const TraceEvent& opener = trace.events[static_cast<size_t>(after.event)];
      const bool gap = after.x0 > box.x1 + 1.0f;
      const bool wide = static_cast<double>(opener.dur_ns) / view.ns_per_px >= 1.0;
      CHECK((box.uniform || box.x1 - box.x0 >= 2.0f || gap || wide));
      // A run of one look takes every narrow event of its look that follows within a pixel, and
      // touching mixed boxes are one.
      CHECK_FALSE((box.uniform && same_look(first, opener) && !gap && !wide));
      CHECK_FALSE((!box.uniform && !after.uniform && after.x0 <= box.x1 + 1.0f));
    }
    next += static_cast<size_t>(box.merged);
  }
  CHECK(next == visible.size());
  return boxes;
}

// The whole lane in 1000 px (4.7 ms: 4700 ns per pixel, a group of 100 short events is 0.2 px):
// the 100,000 short events and the 3 long ones are all there, in at most one box per pixel plus
// the wide ones.
TEST_CASE("a lane of 100,000 events in 1000 px: one box per pixel at most, every event once",
          "[viewer][lane_boxes]") {
  const Trace trace = busy_lane();
  const double width = 1000.0;
  const TimeView view =
      TimeView::fit(static_cast<double>(trace.start_ns), static_cast<double>(trace.end_ns), width);
  const std::vector<LaneBox> boxes = check_boxes(trace, view, width, EventFilter{});
  int64_t merged = 0;
  bool some_uniform_run = false;
  bool some_mixed_run = false;
  for (const LaneBox& box : boxes) {
    merged += box.merged;
    some_uniform_run = some_uniform_run || (box.merged > 1 && box.uniform);
    some_mixed_run = some_mixed_run || !box.uniform;
  }
  CHECK(merged == kShortEvents + 3);
  CHECK(boxes.size() <= 1000 + 3);
  CHECK(boxes.size() > 3);
  // The three long events are wide (about 43 px) and alone in their boxes.
  REQUIRE(boxes.size() >= 3);
  for (size_t k = boxes.size() - 3; k < boxes.size(); ++k) {
    CHECK(boxes[k].merged == 1);
    CHECK(boxes[k].event == kShortEvents + static_cast<int32_t>(k - (boxes.size() - 3)));
  }
  // Only gaps of 5 and 6 us are more than a pixel: the runs between them hold 1 to 7 groups, of
  // one micro-batch or straddling two.
  CHECK(some_uniform_run);
  CHECK(some_mixed_run);
}

// Zoomed in anywhere, only what is on screen comes back, each event once, at every scale from
// 1/10 px per event (merged) to 10 px per event (not merged), with and without a filter.
TEST_CASE("zoomed views return exactly the events on screen", "[viewer][lane_boxes]") {
  const Trace trace = busy_lane();
  const double width = 800.0;
  EventFilter backward_only;
  backward_only.phase_shown[static_cast<size_t>(EventPhase::kForward)] = false;
  EventFilter micro_batch_7;
  micro_batch_7.micro_batch = 7;
  for (const double ns_per_px : {100.0, 7.0, 1.0, 0.9}) {
    for (const double start_ns : {0.0, 333'333.3, 1'500'000.0, 3'997'000.0 - 700.0}) {
      INFO("start " << start_ns << " ns_per_px " << ns_per_px);
      const TimeView view{start_ns, ns_per_px};
      check_boxes(trace, view, width, EventFilter{});
      check_boxes(trace, view, width, backward_only);
      check_boxes(trace, view, width, micro_batch_7);
    }
  }
}

// A window [4.1 ms, 4.15 ms] lies inside the first long event [4.0 ms, 4.2 ms]: that event starts
// 100 us before the window, which only the search back by the lane's longest event (200 us)
// finds; it fills the screen, clipped to [0, width]. A window in a gap between two long events
// ([4.21 ms, 4.24 ms]) shows nothing, and no short event from before 4 ms comes back.
TEST_CASE("an event starting before the window and ending inside it is shown",
          "[viewer][lane_boxes]") {
  const Trace trace = busy_lane();
  const double width = 500.0;
  std::vector<LaneBox> boxes;
  const TimeView inside = TimeView::fit(4.1e6, 4.15e6, width);
  lane_boxes(trace, trace.lanes[0], inside, width, 0.0, EventFilter{}, 1.0, boxes);
  REQUIRE(boxes.size() == 1);
  CHECK(boxes[0].event == kShortEvents);
  CHECK(boxes[0].x0 == 0.0f);
  CHECK(boxes[0].x1 == static_cast<float>(width));

  // [4.15 ms, 4.25 ms]: the first long event ends at 4.2 ms (x = 250), the second starts at
  // 4.25 ms (x = 500, the right edge, still shown).
  const TimeView straddle = TimeView::fit(4.15e6, 4.25e6, width);
  lane_boxes(trace, trace.lanes[0], straddle, width, 0.0, EventFilter{}, 1.0, boxes);
  REQUIRE(boxes.size() == 2);
  CHECK(boxes[0].event == kShortEvents);
  CHECK(boxes[0].x0 == 0.0f);
  CHECK(boxes[0].x1 == 250.0f);
  CHECK(boxes[1].event == kShortEvents + 1);
  CHECK(boxes[1].x0 == 500.0f);

  const TimeView gap = TimeView::fit(4.21e6, 4.24e6, width);
  lane_boxes(trace, trace.lanes[0], gap, width, 0.0, EventFilter{}, 1.0, boxes);
  CHECK(boxes.empty());
}

// offset_ns shifts every event (a second trace aligned at step start): the boxes of a view with
// an offset are those of the view moved back by the offset.
TEST_CASE("an offset shifts the boxes as moving the view back would", "[viewer][lane_boxes]") {
  const Trace trace = busy_lane();
  const double width = 640.0;
  const TimeView view{1'000'000.0, 50.0};
  const TimeView moved{1'000'000.0 - 4096.0, 50.0};
  std::vector<LaneBox> with_offset;
  std::vector<LaneBox> without;
  lane_boxes(trace, trace.lanes[0], view, width, 4096.0, EventFilter{}, 1.0, with_offset);
  lane_boxes(trace, trace.lanes[0], moved, width, 0.0, EventFilter{}, 1.0, without);
  REQUIRE(with_offset.size() == without.size());
  REQUIRE_FALSE(without.empty());
  for (size_t k = 0; k < without.size(); ++k) {
    CHECK(with_offset[k].event == without[k].event);
    CHECK(with_offset[k].merged == without[k].merged);
    CHECK(with_offset[k].x0 == Approx(without[k].x0).margin(1e-3));
    CHECK(with_offset[k].x1 == Approx(without[k].x1).margin(1e-3));
  }
}

// Merging by look, at 32 ns per pixel with events of 8 ns back to back (a quarter pixel each, so
// every x is exact), merge_px 1:
//  - 1000 events of one micro-batch's forward: one uniform box [0, 250] of 1000 events;
//  - event 500 of another phase, kind or micro-batch: it cannot join the uniform run [0, 125],
//    so it opens a box that the following events join (mixed) until it is 2 merge_px wide,
//    [125, 127] with 8 events; the run resumes uniform in [127, 250] with the other 492;
//  - phases alternating forward, backward: touching mixed boxes are one box, [0, 250] of 1000
//    events; groups of 16 alternating events 1.25 px apart stay one mixed box per group.
TEST_CASE("a run of one look is one uniform box, an odd event opens a 2 merge_px mixed box",
          "[viewer][lane_boxes]") {
  std::vector<TraceEvent> events;
  for (int64_t i = 0; i < 1000; ++i) {
    events.push_back(make_event(8 * i, 8, EventPhase::kForward, 3));
  }
  const double width = 250.0;
  const TimeView view = TimeView::fit(0.0, 8000.0, width);
  REQUIRE(view.ns_per_px == 32.0);
  std::vector<LaneBox> boxes;
  {
    const Trace trace = one_lane(events);
    lane_boxes(trace, trace.lanes[0], view, width, 0.0, EventFilter{}, 1.0, boxes);
    REQUIRE(boxes.size() == 1);
    CHECK(boxes[0].merged == 1000);
    CHECK(boxes[0].uniform);
    CHECK(boxes[0].x0 == 0.0f);
    CHECK(boxes[0].x1 == 250.0f);
  }
  for (const int odd : {0, 1, 2}) {
    INFO("odd one out: " << odd);
    std::vector<TraceEvent> changed = events;
    TraceEvent& e = changed[500];
    if (odd == 0) e.phase = EventPhase::kBackward;
    if (odd == 1) e.kind = EventKind::kTp;
    if (odd == 2) e.micro_batch = 4;
    const Trace trace = one_lane(changed);
    lane_boxes(trace, trace.lanes[0], view, width, 0.0, EventFilter{}, 1.0, boxes);
    REQUIRE(boxes.size() == 3);
    CHECK(boxes[0].event == 0);
    CHECK(boxes[0].merged == 500);
    CHECK(boxes[0].uniform);
    CHECK(boxes[0].x1 == 125.0f);
    CHECK(boxes[1].event == 500);
    CHECK(boxes[1].merged == 8);
    CHECK_FALSE(boxes[1].uniform);
    CHECK(boxes[1].x0 == 125.0f);
    CHECK(boxes[1].x1 == 127.0f);
    CHECK(boxes[2].event == 508);
    CHECK(boxes[2].merged == 492);
    CHECK(boxes[2].uniform);
    CHECK(boxes[2].x1 == 250.0f);
  }
  {
    std::vector<TraceEvent> alternating = events;
    for (size_t i = 1; i < alternating.size(); i += 2) alternating[i].phase = EventPhase::kBackward;
    const Trace trace = one_lane(alternating);
    lane_boxes(trace, trace.lanes[0], view, width, 0.0, EventFilter{}, 1.0, boxes);
    REQUIRE(boxes.size() == 1);
    CHECK(boxes[0].event == 0);
    CHECK(boxes[0].merged == 1000);
    CHECK_FALSE(boxes[0].uniform);
    CHECK(boxes[0].x0 == 0.0f);
    CHECK(boxes[0].x1 == 250.0f);
  }
  {
    // The same alternation in 40 groups of 16 events (4 px) with 40 ns (1.25 px) after each:
    // the gaps keep the groups apart, one mixed box each, [5.25 g, 5.25 g + 4].
    std::vector<TraceEvent> grouped;
    for (int64_t i = 0; i < 640; ++i) {
      grouped.push_back(make_event(8 * i + 40 * (i / 16), 8,
                                   i % 2 == 0 ? EventPhase::kForward : EventPhase::kBackward, 3));
    }
    const Trace trace = one_lane(grouped);
    lane_boxes(trace, trace.lanes[0], view, width, 0.0, EventFilter{}, 1.0, boxes);
    REQUIRE(boxes.size() == 40);
    for (size_t g = 0; g < boxes.size(); ++g) {
      INFO("group " << g);
      CHECK(boxes[g].event == static_cast<int32_t>(16 * g));
      CHECK(boxes[g].merged == 16);
      CHECK_FALSE(boxes[g].uniform);
      CHECK(boxes[g].x0 == static_cast<float>(5.25 * static_cast<double>(g)));
      CHECK(boxes[g].x1 == static_cast<float>(5.25 * static_cast<double>(g) + 4));
    }
  }
}

// The filter: a lane is hidden by its pid or thread name; an event by its phase or kind, or by
// another layer or micro-batch when one is chosen (-1: any).
TEST_CASE("the event filter hides exactly what it names", "[viewer][lane_boxes]") {
  Lane compute;
  compute.pid = 4;
  compute.thread_name = "compute";
  Lane tp_comm;
  tp_comm.pid = 5;
  tp_comm.thread_name = "tp-comm";

  EventFilter filter;
  CHECK(filter.shows(compute));
  CHECK(filter.shows(tp_comm));
  filter.hidden_pids = {4};
  CHECK_FALSE(filter.shows(compute));
  CHECK(filter.shows(tp_comm));
  filter.hidden_pids.clear();
  filter.hidden_threads = {"tp-comm"};
  CHECK(filter.shows(compute));
  CHECK_FALSE(filter.shows(tp_comm));

  TraceEvent e = make_event(0, 10, EventPhase::kBackward, 2);
  e.kind = EventKind::kDp;
  e.layer = 7;
  CHECK(EventFilter{}.shows(e));
  for (int phase = 0; phase < kEventPhaseCount; ++phase) {
    EventFilter f;
    f.phase_shown[static_cast<size_t>(phase)] = false;
    CHECK(f.shows(e) == (phase != static_cast<int>(EventPhase::kBackward)));
  }
  for (int kind = 0; kind < kEventKindCount; ++kind) {
    EventFilter f;
    f.kind_shown[static_cast<size_t>(kind)] = false;
    CHECK(f.shows(e) == (kind != static_cast<int>(EventKind::kDp)));
  }
  EventFilter layer;
  layer.layer = 7;
  CHECK(layer.shows(e));
  layer.layer = 6;
  CHECK_FALSE(layer.shows(e));
  EventFilter micro_batch;
  micro_batch.micro_batch = 2;
  CHECK(micro_batch.shows(e));
  micro_batch.micro_batch = 0;
  CHECK_FALSE(micro_batch.shows(e));
  TraceEvent unlabelled = make_event(0, 10, EventPhase::kOther, -1);
  CHECK_FALSE(micro_batch.shows(unlabelled));  // a chosen micro-batch hides events without one
}

// event_at at 1 ns per pixel, events [0,100], [100,200], [500,600], [600,600]: x = 50 is
// event 0, x = 150 event 1; x = 100 touches both and answers the later (drawn last); x = 300 is
// a gap (-1). Half a pixel of slack: x = 499.6 finds event 2, x = 499.4 nothing; x = 600.3 is
// the instant event 3 (drawn after event 2). A filtered-out event is not found; an offset moves
// what is under x.
TEST_CASE("event_at finds the event under x and -1 in a gap", "[viewer][lane_boxes]") {
  std::vector<TraceEvent> events = {
      make_event(0, 100, EventPhase::kForward, 0), make_event(100, 100, EventPhase::kBackward, 0),
      make_event(500, 100, EventPhase::kForward, 1), make_event(600, 0, EventPhase::kForward, 2)};
  const Trace trace = one_lane(events);
  const Lane& lane = trace.lanes[0];
  const TimeView view{0.0, 1.0};
  const EventFilter all;
  CHECK(event_at(trace, lane, view, 50.0, 0.0, all) == 0);
  CHECK(event_at(trace, lane, view, 150.0, 0.0, all) == 1);
  CHECK(event_at(trace, lane, view, 100.0, 0.0, all) == 1);
  CHECK(event_at(trace, lane, view, 300.0, 0.0, all) == -1);
  CHECK(event_at(trace, lane, view, 499.6, 0.0, all) == 2);
  CHECK(event_at(trace, lane, view, 499.4, 0.0, all) == -1);
  CHECK(event_at(trace, lane, view, 600.3, 0.0, all) == 3);
  CHECK(event_at(trace, lane, view, 700.0, 0.0, all) == -1);
  CHECK(event_at(trace, lane, view, -10.0, 0.0, all) == -1);

  EventFilter forward_only;
  forward_only.phase_shown[static_cast<size_t>(EventPhase::kBackward)] = false;
  CHECK(event_at(trace, lane, view, 150.0, 0.0, forward_only) == -1);
  CHECK(event_at(trace, lane, view, 100.0, 0.0, forward_only) == 0);

  CHECK(event_at(trace, lane, view, 1050.0, 1000.0, all) == 0);
  CHECK(event_at(trace, lane, view, 50.0, 1000.0, all) == -1);

  // Zoomed out to 10 ns per pixel the slack is 5 ns: x = 49.6 (496 ns) reaches event 2.
  const TimeView wide{0.0, 10.0};
  CHECK(event_at(trace, lane, wide, 49.6, 0.0, all) == 2);
  CHECK(event_at(trace, lane, wide, 30.0, 0.0, all) == -1);
}

}  // namespace
}  // namespace strata::viewer
