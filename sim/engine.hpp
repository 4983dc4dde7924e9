#pragma once
// The discrete-event engine (SimGrid's kernel in miniature): activities over resources.
//
// An activity is a delay (fixed duration), a tick (it ends at the first multiple of its period at
// or after its start: a thread that wakes every period, as Horovod's background cycle), a compute
// (work on a processor, slowed while communication touches that processor) or a flow (bytes over a
// path of links, sharing each link max-min fairly with the other flows). An activity starts when
// all its dependencies have finished; the engine advances the clock to the next completion. It
// knows nothing about transformers, ranks or streams: the simulator (sim/simulate.cpp) maps a task
// graph onto it.
//
// Time is an integer number of nanoseconds. Events at the same time are answered in a fixed order
// (time, priority, sequence of creation), so that runs are reproducible to the byte. An event is a
// completion; the activities it releases start at once, in increasing id order. Rates are settled
// only after every event of a time has been answered, so the order decides how work is processed
// (and the order of floating-point sums), never what a time's rates are.
//
// Resources:
//  - a link has a capacity in bytes per second; the flows crossing it share it max-min fairly
//    (weighted: a flow with weight w on a link consumes w times its rate there; folded simulation
//    uses the weight for the symmetric copies of a flow it does not simulate). Rates are
//    recomputed whenever a flow starts or ends (once per distinct event time), for the flows
//    connected to it through shared links (sim/max_min.hpp). A flow of S bytes alone on a link
//    of B bytes/s takes ceil(S / B s) in ns; two equal flows on it take twice as long.
//  - a processor runs compute activities at rate 1, or at `contended_rate` (< 1) while at least
//    one active flow touches it (communication kernels share the GPU's SMs and memory). Computes
//    on one processor do not slow each other: the simulator serializes a stream's kernels with
//    dependencies, and kernels of concurrent streams are modelled as overlapping freely. Worked
//    example: a 1000 ns compute at contended rate 0.75 while a flow touches its processor from
//    200 ns to 600 ns finishes at 1000 + 400 * (1 - 0.75) = 1100 ns.
//  - a core pool is a CPU host's cores, which its threads hold one at a time each, handed out as
//    an operating system's round-robin scheduler does. A run (work of a thread) goes on while its
//    thread holds a core, at rate 1; a thread without one waits in the pool's queue (first come,
//    first served; ties in event order) and takes the next core given up. A thread keeps its
//    core from one run to the next until it releases it (it blocks: waits for a peer), or until
//    its time slice ends while others queue: it is preempted, mid-run if need be, and queues at
//    the back (with nobody waiting, its slice starts again). An acquire ends once its thread holds
//    a core. Worked example: 1 core, slice 1000 ns; from 0, thread A runs 1500 ns and thread B
//    runs 300 ns then releases. A takes the core, B queues; at 1000 A's slice ends with B
//    waiting, so A queues with 500 ns left and B runs 1000-1300; B releases at 1300 and A runs
//    1300-1800.
// Durations computed from rates are rounded up to whole nanoseconds.

#include <array>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <vector>

namespace strata {

using TimeNs = int64_t;
using ActivityId = int32_t;
using LinkId = int32_t;
using ProcessorId = int32_t;
using PathId = int32_t;
using CorePoolId = int32_t;
using ThreadId = int32_t;
inline constexpr ActivityId kNoActivity = -1;
inline constexpr ProcessorId kNoProcessor = -1;

// kRun is work of a thread on its core pool (duration_ns at rate 1, while it holds a core).
// kAcquire and kRelease take no time of their own: an acquire ends when its thread holds a core,
// a release when it has given it back.
enum class ActivityKind : uint8_t { kDelay, kCompute, kFlow, kTick, kRun, kAcquire, kRelease };

// One link of a flow's path, and the flow's weight there (>= 1).
struct PathHop {
  LinkId link = 0;
  float weight = 1.0f;
};

// What to run. Fields that do not apply to the kind are ignored.
struct ActivitySpec {
  ActivityKind kind = ActivityKind::kDelay;
  int16_t priority = 0;  // completions at the same time: lower priority answered first
  // kDelay: fixed; kCompute: uncontended duration (>= 0); kTick: period; kRun: work on a core
  TimeNs duration_ns = 0;
  ProcessorId processor = kNoProcessor;  // kCompute: where it runs
  double bytes = 0;  // kFlow: bytes to move (<= 0: it finishes when it starts, touching nothing)
  PathId path = -1;  // kFlow: from add_path()
  // kFlow: processors whose compute slows while this flow is active (its two end GPUs).
  std::array<ProcessorId, 2> touches{kNoProcessor, kNoProcessor};
  ThreadId thread = -1;  // kRun, kAcquire, kRelease: the thread (from add_thread())
};

struct EngineStats {
  int64_t activities = 0;
  int64_t events = 0;        // activity starts plus completions answered (2 per activity)
  int64_t rate_updates = 0;  // max-min solves (one per distinct time at which flows change)
  // Activities whose start and finish the steady-state fast-forward copied from an earlier
  // period instead of simulating them (their events and solves are counted above as if
  // simulated: the two ways give the same figures).
  int64_t fast_forwarded = 0;
};

// What lets the engine skip repeating periods of a schedule (sim/engine_fast_forward.hpp): for
// every activity, the activity that plays its role one period later (the same task one
// micro-batch later), and one anchor per period whose start marks where the period begins.
struct PeriodMap {
  std::vector<ActivityId> next;     // by activity id; kNoActivity where no role repeats
  std::vector<ActivityId> anchors;  // in schedule order: next[anchors[j]] == anchors[j + 1]
  int32_t max_periods = 4;          // the longest repeat looked for, in periods
};

inline constexpr TimeNs kNoHorizon = std::numeric_limits<TimeNs>::max();

namespace engine_detail {
class FastForward;
}

class Engine {
 public:
  Engine();
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // capacity_bytes_per_s > 0.
  LinkId add_link(double capacity_bytes_per_s);
  // contended_rate in (0, 1].
  ProcessorId add_processor(double contended_rate);
  // At least one hop, each on an existing link with weight > 0; a link may appear twice.
  PathId add_path(std::span<const PathHop> hops);
  // cores > 0, slice_ns > 0.
  CorePoolId add_core_pool(int32_t cores, TimeNs slice_ns);
  // A thread that runs on the pool's cores; it holds none at first.
  ThreadId add_thread(CorePoolId pool);

  // Room for this many activities in all, and for their dependency edges at the rate added so
  // far, so that add() does not move the arrays as they grow (large graphs: the move copies them
  // and briefly holds both). A guess: more is only address space until used, fewer means
  // growing as without it.
  void reserve(int64_t activities);

  // Adds an activity that starts once every activity in `deps` has finished (deps must already
  // exist). Activities may be added only before run().
  ActivityId add(const ActivitySpec& spec, std::span<const ActivityId> deps = {});
  // Adds one more dependency to an existing activity, before run(); `dep` may be any activity,
  // also a later one (a collective's members are created before the transfer they wait for).
  void add_dependency(ActivityId activity, ActivityId dep);

  // Turns on the steady-state fast-forward for run(): when the engine's state at an anchor's
  // start repeats, renamed by `map`, the state at an earlier anchor's, the periods between are
  // copied forward for as long as the copy is verified to be what simulating would do. Exact:
  // start and finish times, and the stats, are those of a run without it. Before run().
  void set_period_map(PeriodMap map);

  // Runs until every activity has finished and returns true. Asserts that no dependency cycle
  // strands an activity (add() alone cannot make one, its deps point to earlier ids;
  // add_dependency() can). With a horizon, stops instead (returning false, activities left
  // unfinished) when the next event would come after it: for callers that only need to know
  // whether everything finishes by then.
  bool run(TimeNs horizon_ns = kNoHorizon);

  // When the activity started and finished; -1 before it did.
  TimeNs start_ns(ActivityId id) const;
  TimeNs finish_ns(ActivityId id) const;
  // The clock: after run(), the time of the last completion.
  TimeNs now_ns() const;
  int64_t size() const;
  EngineStats stats() const;

 private:
  friend class engine_detail::FastForward;
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace strata
