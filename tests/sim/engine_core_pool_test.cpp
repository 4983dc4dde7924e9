// Core pools (sim/engine.hpp): a CPU host's cores, held by threads one at a time each, handed
// out first come first served, given up when a thread releases (blocks) or when its time slice
// ends while another waits. Each test's times follow in closed form from that rule and are
// checked to the nanosecond.

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <vector>

#include "sim/engine.hpp"

namespace strata {
namespace {

ActivitySpec run(ThreadId thread, TimeNs work_ns) {
  return {.kind = ActivityKind::kRun, .duration_ns = work_ns, .thread = thread};
}

ActivitySpec release(ThreadId thread) { return {.kind = ActivityKind::kRelease, .thread = thread}; }

ActivitySpec acquire(ThreadId thread) { return {.kind = ActivityKind::kAcquire, .thread = thread}; }

ActivitySpec delay(TimeNs duration_ns) {
  return {.kind = ActivityKind::kDelay, .duration_ns = duration_ns};
}

// engine.hpp's worked example: 1 core, slice 1000 ns; from 0, A runs 1500 ns, B runs 300 ns then
// releases. A takes the core (lower id), B queues; at 1000 A's slice ends with B waiting: A
// queues with 500 ns left, B runs 1000-1300, releases, and A runs 1300-1800.
TEST_CASE("a slice that ends while another thread waits preempts the run", "[engine][cores]") {
  Engine engine;
  const CorePoolId pool = engine.add_core_pool(1, 1000);
  const ThreadId a = engine.add_thread(pool);
  const ThreadId b = engine.add_thread(pool);
  const ActivityId run_a = engine.add(run(a, 1500));
  const ActivityId run_b = engine.add(run(b, 300));
  const ActivityId release_b = engine.add(release(b), {{run_b}});
  engine.run();
  CHECK(engine.start_ns(run_b) == 0);  // a run starts when its thread asks: waiting is in it
  CHECK(engine.finish_ns(run_b) == 1300);
  CHECK(engine.finish_ns(release_b) == 1300);
  CHECK(engine.finish_ns(run_a) == 1800);
}

// Round robin keeps every core busy while work is left: k = 4 threads of W = 3000 ns on c = 2
// cores, slice 1000, all from 0, finish together at k W / c = 6000 ns, each having run its
// 3 slices in turn (cores alternate between threads 0, 1 and 2, 3 every 1000 ns), so the first
// two finish at 5000 and the last two at 6000.
TEST_CASE("round robin on a pool: k runs of W on c cores end by k W / c", "[engine][cores]") {
  Engine engine;
  const CorePoolId pool = engine.add_core_pool(2, 1000);
  std::vector<ActivityId> runs;
  for (int t = 0; t < 4; ++t) {
    const ThreadId thread = engine.add_thread(pool);
    runs.push_back(engine.add(run(thread, 3000)));
    engine.add(release(thread), {{runs.back()}});
  }
  engine.run();
  CHECK(engine.finish_ns(runs[0]) == 5000);
  CHECK(engine.finish_ns(runs[1]) == 5000);
  CHECK(engine.finish_ns(runs[2]) == 6000);
  CHECK(engine.finish_ns(runs[3]) == 6000);
}

// A thread keeps its core from run to run within its slice, and gives it up only when it
// releases: 1 core, slice 1000; A runs 400 then 400 (its second run at 400, held 400 < 1000, goes
// on at once), then releases at 800; B, queued from 0, runs 800-900.
TEST_CASE("a thread keeps its core between runs until it releases", "[engine][cores]") {
  Engine engine;
  const CorePoolId pool = engine.add_core_pool(1, 1000);
  const ThreadId a = engine.add_thread(pool);
  const ThreadId b = engine.add_thread(pool);
  const ActivityId first = engine.add(run(a, 400));
  const ActivityId second = engine.add(run(a, 400), {{first}});
  engine.add(release(a), {{second}});
  const ActivityId run_b = engine.add(run(b, 100));
  engine.add(release(b), {{run_b}});
  engine.run();
  CHECK(engine.finish_ns(second) == 800);
  CHECK(engine.finish_ns(run_b) == 900);
}

// A blocked thread waits without a core, then queues for one: 1 core, slice 10000. A runs 100,
// releases (blocks on a 1000 ns wait), then acquires and runs 100 more. B's run of 2000 queued
// from 0 gets the core at 100 and holds it until 2100 (nobody waits before 1100, and its slice
// ends at 10100), so A's acquire from 1100 ends at 2100, when B releases, and A runs 2100-2200.
TEST_CASE("a thread that blocks gives its core up and queues for one after", "[engine][cores]") {
  Engine engine;
  const CorePoolId pool = engine.add_core_pool(1, 10000);
  const ThreadId a = engine.add_thread(pool);
  const ThreadId b = engine.add_thread(pool);
  const ActivityId before = engine.add(run(a, 100));
  const ActivityId blocks = engine.add(release(a), {{before}});
  const ActivityId wait = engine.add(delay(1000), {{blocks}});
  const ActivityId woken = engine.add(acquire(a), {{wait}});
  const ActivityId after = engine.add(run(a, 100), {{woken}});
  const ActivityId run_b = engine.add(run(b, 2000));
  engine.add(release(b), {{run_b}});
  engine.run();
  CHECK(engine.finish_ns(run_b) == 2100);
  CHECK(engine.start_ns(woken) == 1100);
  CHECK(engine.finish_ns(woken) == 2100);
  CHECK(engine.finish_ns(after) == 2200);
}

}  // namespace
}  // namespace strata
