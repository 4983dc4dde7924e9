// The discrete-event engine (sim/engine.hpp): each test builds a small activity graph whose
// start and finish times follow in closed form, and checks them to the nanosecond.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "sim/engine.hpp"
#include "sim/event_queue.hpp"

namespace strata {
namespace {

constexpr double kGBps = 1e9;  // bytes per second

ActivitySpec delay(TimeNs duration_ns) {
  ActivitySpec spec;
  spec.kind = ActivityKind::kDelay;
  spec.duration_ns = duration_ns;
  return spec;
}

ActivitySpec compute(ProcessorId processor, TimeNs duration_ns) {
  ActivitySpec spec;
  spec.kind = ActivityKind::kCompute;
  spec.processor = processor;
  spec.duration_ns = duration_ns;
  return spec;
}

ActivitySpec flow(PathId path, double bytes, ProcessorId touches = kNoProcessor) {
  ActivitySpec spec;
  spec.kind = ActivityKind::kFlow;
  spec.path = path;
  spec.bytes = bytes;
  spec.touches = {touches, kNoProcessor};
  return spec;
}

PathId one_hop(Engine& engine, LinkId link, float weight = 1.0f) {
  const PathHop hop{link, weight};
  return engine.add_path({&hop, 1});
}

// Delays 5, 7 and 11 ns in a chain: each starts when the previous ends; the last ends at 23.
TEST_CASE("a chain of delays ends at the sum of their durations", "[engine]") {
  Engine engine;
  const ActivityId a = engine.add(delay(5));
  const ActivityId b = engine.add(delay(7), {{a}});
  const ActivityId c = engine.add(delay(11), {{b}});
  engine.run();
  CHECK(engine.start_ns(b) == 5);
  CHECK(engine.start_ns(c) == 12);
  CHECK(engine.finish_ns(c) == 23);
  CHECK(engine.now_ns() == 23);
}

// A tick of period 10 ends at the first multiple of 10 at or after its start: after a 23 ns
// delay at 30; after a 30 ns delay at once (30); a tick at time 0 at once.
TEST_CASE("a tick ends at the next multiple of its period", "[engine]") {
  Engine engine;
  const ActivitySpec tick{.kind = ActivityKind::kTick, .duration_ns = 10};
  const ActivityId at_zero = engine.add(tick);
  const ActivityId late = engine.add(tick, {{engine.add(delay(23))}});
  const ActivityId aligned = engine.add(tick, {{engine.add(delay(30))}});
  engine.run();
  CHECK(engine.finish_ns(at_zero) == 0);
  CHECK(engine.start_ns(late) == 23);
  CHECK(engine.finish_ns(late) == 30);
  CHECK(engine.finish_ns(aligned) == 30);
}

// A join of delays 10, 30 and 20 ns starts at max(10, 30, 20) = 30.
TEST_CASE("a join starts when the last of its dependencies finishes", "[engine]") {
  Engine engine;
  const std::vector<ActivityId> deps{engine.add(delay(10)), engine.add(delay(30)),
                                     engine.add(delay(20))};
  const ActivityId join = engine.add(delay(1), deps);
  engine.run();
  CHECK(engine.start_ns(join) == 30);
  CHECK(engine.finish_ns(join) == 31);
}

// add_dependency() lets an activity wait for one created after it: a 5 ns delay made to wait for
// a later 20 ns delay runs over [20, 25]; one added after it with add() starts at 25.
TEST_CASE("a dependency added later may point to a later activity", "[engine]") {
  Engine engine;
  const ActivityId early = engine.add(delay(5));
  const ActivityId late = engine.add(delay(20));
  const ActivityId after = engine.add(delay(1), {{early}});
  engine.add_dependency(early, late);
  engine.run();
  CHECK(engine.start_ns(early) == 20);
  CHECK(engine.finish_ns(early) == 25);
  CHECK(engine.start_ns(after) == 25);
  CHECK(engine.stats().events == 6);
}

// The engine answers completions in (time, priority, sequence) order: events at t = 5 come out
// by priority (-2, 0, 0, 1), the two of priority 0 in the order they were scheduled.
TEST_CASE("same-time events come out by priority, then in the order scheduled", "[engine]") {
  EventQueue queue;
  queue.schedule(5, 1, 0);
  queue.schedule(5, 0, 1);
  queue.schedule(9, -7, 2);
  queue.schedule(5, 0, 3);
  queue.schedule(3, 9, 4);
  queue.schedule(5, -2, 5);
  std::vector<ActivityId> order;
  while (!queue.empty()) order.push_back(queue.pop().activity);
  CHECK(order == std::vector<ActivityId>{4, 5, 1, 3, 0, 2});
}

// Scheduling an activity again moves its one entry: it comes out once, at its last time, after
// the events of that time and priority scheduled before the move (what a second push would give,
// the first entry skipped). 100 activities at (37 id mod 11); every third moved to (id mod 7),
// then every ninth moved back to 0; checked against the order of the last schedule calls.
TEST_CASE("scheduling an activity again moves its entry, keeping the order", "[engine]") {
  EventQueue queue;
  struct Last {
    TimeNs time;
    int order;
  };
  std::vector<Last> last(100);
  int calls = 0;
  const auto schedule = [&](TimeNs time, ActivityId id) {
    queue.schedule(time, 0, id);
    last[static_cast<size_t>(id)] = {time, calls++};
  };
  for (ActivityId id = 0; id < 100; ++id) schedule((id * 37) % 11, id);
  for (ActivityId id = 0; id < 100; id += 3) schedule(id % 7, id);
  for (ActivityId id = 0; id < 100; id += 9) schedule(0, id);
  CHECK(queue.size() == 100);
  std::vector<ActivityId> expected(100);
  for (ActivityId id = 0; id < 100; ++id) expected[static_cast<size_t>(id)] = id;
  std::sort(expected.begin(), expected.end(), [&](ActivityId a, ActivityId b) {
    const Last& x = last[static_cast<size_t>(a)];
    const Last& y = last[static_cast<size_t>(b)];
    return x.time != y.time ? x.time < y.time : x.order < y.order;
  });
  std::vector<ActivityId> order;
  while (!queue.empty()) {
    const Event e = queue.pop();
    CHECK(e.time_ns == last[static_cast<size_t>(e.activity)].time);
    order.push_back(e.activity);
  }
  CHECK(order == expected);
}

// Zero-length activities at one time form a chain that all starts and ends at that time; a
// completion released at t is answered at t, whatever the priorities.
TEST_CASE("zero-duration activities start and finish at their release time", "[engine]") {
  Engine engine;
  const ActivityId a = engine.add(delay(40));
  ActivitySpec urgent = delay(0);
  urgent.priority = -5;
  ActivitySpec late = delay(0);
  late.priority = 5;
  const ActivityId b = engine.add(late, {{a}});
  const ActivityId c = engine.add(urgent, {{b}});
  engine.run();
  CHECK(engine.start_ns(c) == 40);
  CHECK(engine.finish_ns(c) == 40);
}

// One flow of S = 1000 bytes on a link of B = 3 GB/s: ceil(1000 / 3e9 s) = ceil(333.3 ns) = 334 ns.
// And S = 1 MB at 1 GB/s takes exactly 1,000,000 ns, not one more.
TEST_CASE("one flow of S bytes on a link of B bytes/s takes ceil(S / B) ns", "[engine]") {
  Engine engine;
  const PathId slow = one_hop(engine, engine.add_link(3 * kGBps));
  const PathId fast = one_hop(engine, engine.add_link(1 * kGBps));
  const ActivityId a = engine.add(flow(slow, 1000));
  const ActivityId b = engine.add(flow(fast, 1e6));
  engine.run();
  CHECK(engine.finish_ns(a) == 334);
  CHECK(engine.finish_ns(b) == 1'000'000);
}

// Nine flows of S = 1 MB on one link of B = 1 GB/s, each at B/9: all end at 9 S / B = 9 ms
// exactly. In doubles S / (B/9) is 9e-3 s plus one ulp; rounding up without the engine's 1 ps
// slack would give 9,000,001 ns.
TEST_CASE("n equal flows on one link end at n S / B, not a nanosecond later", "[engine]") {
  Engine engine;
  const PathId path = one_hop(engine, engine.add_link(1 * kGBps));
  std::vector<ActivityId> flows;
  for (int i = 0; i < 9; ++i) flows.push_back(engine.add(flow(path, 1e6)));
  engine.run();
  for (const ActivityId f : flows) CHECK(engine.finish_ns(f) == 9'000'000);
}

// Two flows, S1 = 1000 and S2 = 3000 bytes, on one link of B = 1 GB/s: both at B/2 until the
// smaller finishes at 2 S1 / B = 2000 ns, then the larger at B: (S1 + S2) / B = 4000 ns.
TEST_CASE("two flows share a link equally, then the survivor takes it all", "[engine]") {
  Engine engine;
  const PathId path = one_hop(engine, engine.add_link(1 * kGBps));
  const ActivityId small = engine.add(flow(path, 1000));
  const ActivityId large = engine.add(flow(path, 3000));
  engine.run();
  CHECK(engine.finish_ns(small) == 2000);
  CHECK(engine.finish_ns(large) == 4000);
  // Solves at 0 (both start) and 2000 (one ends); none at 4000, when the link falls idle.
  CHECK(engine.stats().rate_updates == 2);
}

// A flow of 2000 bytes alone on 1 GB/s moves 1000 bytes by t = 1000; a 500-byte flow joins and
// both run at B/2: the newcomer ends at 1000 + 500 / 0.5 = 2000 ns, the first has 500 left and
// ends at 2000 + 500 / 1 = 2500 ns.
TEST_CASE("a flow joining mid-way re-rates the flow already on the link", "[engine]") {
  Engine engine;
  const PathId path = one_hop(engine, engine.add_link(1 * kGBps));
  const ActivityId first = engine.add(flow(path, 2000));
  const ActivityId wait = engine.add(delay(1000));
  const ActivityId second = engine.add(flow(path, 500), {{wait}});
  engine.run();
  CHECK(engine.finish_ns(second) == 2000);
  CHECK(engine.finish_ns(first) == 2500);
}

// Weight 3 (three symmetric copies) and weight 1 on one link of B: the common rate r satisfies
// 3r + r = B, so r = B/4. With S1 = 1000 bytes (weight 3) and S2 = 2000 bytes (weight 1), the
// weighted flow ends at 4 S1 / B = 4000 ns; the other then has S2 - S1 = 1000 bytes at B: 5000.
TEST_CASE("a weight-3 flow consumes three shares of the link it shares", "[engine]") {
  Engine engine;
  const LinkId link = engine.add_link(1 * kGBps);
  const ActivityId weighted = engine.add(flow(one_hop(engine, link, 3.0f), 1000));
  const ActivityId plain = engine.add(flow(one_hop(engine, link), 2000));
  engine.run();
  CHECK(engine.finish_ns(weighted) == 4000);
  CHECK(engine.finish_ns(plain) == 5000);
}

// Links L0 1 GB/s, L1 2 GB/s, L2 3 GB/s; f0 on L0+L1, f1 on L1+L2, f2 on L0, f3 on L2, f4 on L1.
// Progressive filling: L0 saturates first at 1/2 (f0 = f2 = 0.5 GB/s); L1 has 2 - 0.5 = 1.5 for
// f1, f4 (0.75 each); L2 has 3 - 0.75 = 2.25 for f3. Sized at rate x 1 s, all five end at 1 s;
// any other allocation would end one of them earlier.
TEST_CASE("the classic max-min example: all five flows end together at 1 s", "[engine]") {
  Engine engine;
  const LinkId l0 = engine.add_link(1 * kGBps);
  const LinkId l1 = engine.add_link(2 * kGBps);
  const LinkId l2 = engine.add_link(3 * kGBps);
  const std::vector<PathHop> p01{{l0, 1.0f}, {l1, 1.0f}};
  const std::vector<PathHop> p12{{l1, 1.0f}, {l2, 1.0f}};
  const std::vector<ActivityId> flows{
      engine.add(flow(engine.add_path(p01), 0.5 * kGBps)),
      engine.add(flow(engine.add_path(p12), 0.75 * kGBps)),
      engine.add(flow(one_hop(engine, l0), 0.5 * kGBps)),
      engine.add(flow(one_hop(engine, l2), 2.25 * kGBps)),
      engine.add(flow(one_hop(engine, l1), 0.75 * kGBps)),
  };
  engine.run();
  for (const ActivityId f : flows) CHECK(engine.finish_ns(f) == 1'000'000'000);
}

// Two 1000-byte flows on two different 1 GB/s links each run at the full 1 GB/s: 1000 ns.
TEST_CASE("flows on disjoint links do not interact", "[engine]") {
  Engine engine;
  const ActivityId a = engine.add(flow(one_hop(engine, engine.add_link(1 * kGBps)), 1000));
  const ActivityId b = engine.add(flow(one_hop(engine, engine.add_link(1 * kGBps)), 1000));
  engine.run();
  CHECK(engine.finish_ns(a) == 1000);
  CHECK(engine.finish_ns(b) == 1000);
}

// A 0-byte flow released at 50 ns finishes at 50 ns, and touching its processor for no time
// leaves a compute there uncontended (100 ns).
TEST_CASE("a 0-byte flow finishes when it starts", "[engine]") {
  Engine engine;
  const ProcessorId gpu = engine.add_processor(0.5);
  const PathId path = one_hop(engine, engine.add_link(1 * kGBps));
  const ActivityId wait = engine.add(delay(50));
  const ActivityId empty = engine.add(flow(path, 0, gpu), {{wait}});
  const ActivityId work = engine.add(compute(gpu, 100), {{wait}});
  engine.run();
  CHECK(engine.start_ns(empty) == 50);
  CHECK(engine.finish_ns(empty) == 50);
  CHECK(engine.finish_ns(work) == 150);
}

// A compute of D = 1000 ns at contended rate r = 0.75 while a flow touches its processor from
// 200 to 600 ns (400 bytes at 1 GB/s after a 200 ns delay): 200 ns of work by t = 200, 300 more
// by t = 600, the last 500 by t = 1100 = D + 400 (1 - r).
TEST_CASE("a compute slows to the contended rate while a flow touches its processor", "[engine]") {
  Engine engine;
  const ProcessorId gpu = engine.add_processor(0.75);
  const PathId path = one_hop(engine, engine.add_link(1 * kGBps));
  const ActivityId work = engine.add(compute(gpu, 1000));
  const ActivityId wait = engine.add(delay(200));
  const ActivityId comm = engine.add(flow(path, 400, gpu), {{wait}});
  engine.run();
  CHECK(engine.finish_ns(comm) == 600);
  CHECK(engine.finish_ns(work) == 1100);
}

// Contended throughout: D = 100 ns at r = 0.9 takes ceil(100 / 0.9) = ceil(111.1) = 112 ns.
TEST_CASE("a compute contended throughout takes ceil(D / r)", "[engine]") {
  Engine engine;
  const ProcessorId gpu = engine.add_processor(0.9);
  const ActivityId comm = engine.add(flow(one_hop(engine, engine.add_link(1 * kGBps)), 1000, gpu));
  const ActivityId work = engine.add(compute(gpu, 100));
  engine.run();
  CHECK(engine.finish_ns(comm) == 1000);
  CHECK(engine.finish_ns(work) == 112);
}

// Flows touching one processor over [0, 400] and [200, 800] contend it over their union, 800 ns:
// D = 1000 at r = 0.5 ends at D + 800 (1 - r) = 1400 ns.
TEST_CASE("overlapping flows contend a processor over the union of their times", "[engine]") {
  Engine engine;
  const ProcessorId gpu = engine.add_processor(0.5);
  const ActivityId work = engine.add(compute(gpu, 1000));
  const ActivityId a = engine.add(flow(one_hop(engine, engine.add_link(1 * kGBps)), 400, gpu));
  const ActivityId wait = engine.add(delay(200));
  const ActivityId b =
      engine.add(flow(one_hop(engine, engine.add_link(1 * kGBps)), 600, gpu), {{wait}});
  engine.run();
  CHECK(engine.finish_ns(a) == 400);
  CHECK(engine.finish_ns(b) == 800);
  CHECK(engine.finish_ns(work) == 1400);
}

// A flow touching the processor ends at 1000 ns, when a 100 ns compute is released there (its
// delay's completion is answered first): the compute is re-rated when contention ends at that
// same time, so it runs uncontended and ends at 1100 (not 1000 + 100 / 0.5 = 1200).
TEST_CASE("a compute released as contention ends runs uncontended", "[engine]") {
  Engine engine;
  const ProcessorId gpu = engine.add_processor(0.5);
  engine.add(flow(one_hop(engine, engine.add_link(1 * kGBps)), 1000, gpu));
  const ActivityId wait = engine.add(delay(1000));
  const ActivityId work = engine.add(compute(gpu, 100), {{wait}});
  engine.run();
  CHECK(engine.finish_ns(work) == 1100);
}

// Two 100 ns computes on one idle processor at once both end at 100 ns: computes on a processor
// do not slow each other.
TEST_CASE("computes on one processor run concurrently without slowing each other", "[engine]") {
  Engine engine;
  const ProcessorId gpu = engine.add_processor(0.5);
  const ActivityId a = engine.add(compute(gpu, 100));
  const ActivityId b = engine.add(compute(gpu, 100));
  engine.run();
  CHECK(engine.finish_ns(a) == 100);
  CHECK(engine.finish_ns(b) == 100);
}

// Every activity is started and completed once: events = 2 x activities.
TEST_CASE("events count one start and one completion per activity", "[engine]") {
  Engine engine;
  const PathId path = one_hop(engine, engine.add_link(1 * kGBps));
  const ActivityId a = engine.add(delay(3));
  const ActivityId b = engine.add(flow(path, 10), {{a}});
  engine.add(flow(path, 0), {{a, b}});
  engine.run();
  CHECK(engine.stats().activities == 3);
  CHECK(engine.stats().events == 6);
}

// A random graph of delays, computes and flows over shared links, built twice.
void build_random_graph(Engine& engine, uint64_t seed) {
  const auto next = [&](uint64_t bound) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return (seed >> 33) % bound;
  };
  std::vector<ProcessorId> gpus;
  for (int i = 0; i < 4; ++i) gpus.push_back(engine.add_processor(0.8));
  std::vector<LinkId> links;
  for (int i = 0; i < 6; ++i) links.push_back(engine.add_link((1.0 + next(5)) * kGBps));
  std::vector<PathId> paths;
  for (int i = 0; i < 10; ++i) {
    const std::vector<PathHop> hops{{links[next(6)], 1.0f},
                                    {links[next(6)], static_cast<float>(1 + next(3))}};
    paths.push_back(engine.add_path(hops));
  }
  for (ActivityId id = 0; id < 2000; ++id) {
    std::vector<ActivityId> deps;
    for (int d = 0; d < 2 && id > 0; ++d) {
      deps.push_back(id - 1 - static_cast<ActivityId>(next(std::min<uint64_t>(id, 20))));
    }
    ActivitySpec spec;
    switch (next(3)) {
      case 0:
        spec = delay(static_cast<TimeNs>(next(500)));
        break;
      case 1:
        spec = compute(gpus[next(4)], static_cast<TimeNs>(next(5000)));
        break;
      default:
        spec = flow(paths[next(10)], static_cast<double>(next(100000)), gpus[next(4)]);
        break;
    }
    spec.priority = static_cast<int16_t>(next(3));
    engine.add(spec, deps);
  }
}

// Same graph, same results: every start and finish time equal in two separate engines.
TEST_CASE("two identical engines give identical start and finish times", "[engine]") {
  Engine first;
  Engine second;
  build_random_graph(first, 42);
  build_random_graph(second, 42);
  first.run();
  second.run();
  REQUIRE(first.size() == second.size());
  for (ActivityId id = 0; id < first.size(); ++id) {
    INFO("activity " << id);
    CHECK(first.start_ns(id) == second.start_ns(id));
    CHECK(first.finish_ns(id) == second.finish_ns(id));
    CHECK(first.finish_ns(id) >= first.start_ns(id));
  }
  CHECK(first.stats().events == 2 * first.size());
  CHECK(first.stats().rate_updates == second.stats().rate_updates);
}

}  // namespace
}  // namespace strata
