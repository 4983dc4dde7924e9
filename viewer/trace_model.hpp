#pragma once
// A trace as the viewer holds it: the complete ("X") events of a Chrome trace-event file, in
// lanes of one (process, thread) each, with Strata's labels where the trace has them
// (sim/trace.hpp writes them; any other Chrome trace reads too, with fewer labels).
//
// - Times are integer nanoseconds, rounded from the file's microseconds.
// - Lanes are ordered by pipeline stage (a Strata process_name's args.stage; a trace without
//   stages groups each process on its own), then process sort index and pid, then thread sort
//   index and tid. Each lane's events are sorted by start.
// - Memory is the "C" counter events named "memory" (args.bytes), per process.
// - Dependencies are Strata's args.deps (task ids), resolved to event indices.
// Events are stored compactly (one million of them in about 100 MB with their names).

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata::viewer {

enum class EventPhase : uint8_t { kForward, kBackward, kRecompute, kOptimizer, kOther };
inline constexpr int kEventPhaseCount = 5;
// The kind of work an event is: Strata's cat ("compute", "tp", "pp", "dp"); any other cat is
// compute.
// kHost: the host thread issuing work (a trace's "host" lane): neither GPU work nor
// communication, so it counts towards no busy, exposed or bubble time.
enum class EventKind : uint8_t { kCompute, kTp, kPp, kDp, kHost };
inline constexpr int kEventKindCount = 5;

const char* to_string(EventPhase phase);
const char* to_string(EventKind kind);

struct TraceEvent {
  int64_t start_ns = 0;
  int64_t dur_ns = 0;
  // When a communication's data began to move (args.transfer_us), else start_ns: the time
  // before it is waiting for the other members.
  int64_t transfer_ns = 0;
  int64_t bytes = -1;  // args.bytes, -1 when absent
  int64_t flops = -1;  // args.flops, -1 when absent
  int32_t name = 0;    // into Trace::names
  int32_t lane = 0;    // into Trace::lanes
  int32_t task = -1;   // args.task
  int32_t layer = -1;
  int32_t micro_batch = -1;
  int32_t first_dep = 0;  // into Trace::deps
  int32_t dep_count = 0;
  int16_t chunk = -1;
  EventPhase phase = EventPhase::kOther;
  EventKind kind = EventKind::kCompute;

  int64_t end_ns() const { return start_ns + dur_ns; }
};

struct Lane {
  int32_t pid = 0;
  int32_t tid = 0;
  int32_t stage = -1;  // -1 when the trace does not say
  std::string process_name;
  std::string thread_name;
  std::vector<int32_t> events;  // into Trace::events, by start
  int64_t longest_ns = 0;       // the longest event, for finding what overlaps a time range
};

struct MemoryPoint {
  int64_t time_ns = 0;
  int64_t bytes = 0;
};

struct Trace {
  std::string path;
  std::vector<TraceEvent> events;  // file order
  std::vector<std::string> names;  // distinct event names
  std::vector<int32_t> deps;       // event indices, see TraceEvent::first_dep
  std::vector<Lane> lanes;
  std::map<int32_t, std::vector<MemoryPoint>> memory;  // by pid, by time
  nlohmann::json metadata = nlohmann::json::object();  // the file's "metadata", if any
  int64_t start_ns = 0;                                // earliest event start
  int64_t end_ns = 0;                                  // latest event end

  int64_t span_ns() const { return end_ns - start_ns; }
  // The pids in lane order, each once.
  std::vector<int32_t> pids() const;
  // The stage of a pid's lanes (-1 when unknown).
  int32_t stage_of(int32_t pid) const;
  // Dependencies of event i (event indices).
  std::span<const int32_t> dependencies(int32_t event) const;
};

// Reads a trace file; a file that is not a trace with at least one complete event is refused
// with an InputError naming the file and what is wrong (before any window opens).
Trace load_trace(const std::string& path);
// The same from text; `where` names it in errors.
Trace parse_trace(std::string_view text, const std::string& where);

}  // namespace strata::viewer
