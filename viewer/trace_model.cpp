// Reading a Chrome trace-event file into lanes of events (viewer/trace_model.hpp).

#include "viewer/trace_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>
#include <unordered_map>

#include <fmt/format.h>

#include "common/error.hpp"
#include "common/json_input.hpp"

namespace strata::viewer {

const char* to_string(EventPhase phase) {
  switch (phase) {
    case EventPhase::kForward:
      return "fwd";
    case EventPhase::kBackward:
      return "bwd";
    case EventPhase::kRecompute:
      return "recompute";
    case EventPhase::kOptimizer:
      return "optimizer";
    case EventPhase::kOther:
      return "other";
  }
  return "other";
}

const char* to_string(EventKind kind) {
  switch (kind) {
    case EventKind::kCompute:
      return "compute";
    case EventKind::kTp:
      return "tp";
    case EventKind::kPp:
      return "pp";
    case EventKind::kDp:
      return "dp";
    case EventKind::kHost:
      return "host";
  }
  return "compute";
}

std::vector<int32_t> Trace::pids() const {
  std::vector<int32_t> out;
  for (const Lane& lane : lanes) {
    if (out.empty() || out.back() != lane.pid) out.push_back(lane.pid);
  }
  return out;
}

int32_t Trace::stage_of(int32_t pid) const {
  for (const Lane& lane : lanes) {
    if (lane.pid == pid) return lane.stage;
  }
  return -1;
}

std::span<const int32_t> Trace::dependencies(int32_t event) const {
  const TraceEvent& e = events[static_cast<size_t>(event)];
  return std::span<const int32_t>(deps).subspan(static_cast<size_t>(e.first_dep),
                                                static_cast<size_t>(e.dep_count));
}

namespace {

using nlohmann::json;

EventPhase phase_of(const std::string& phase) {
  if (phase == "fwd") return EventPhase::kForward;
  if (phase == "bwd") return EventPhase::kBackward;
  if (phase == "recompute") return EventPhase::kRecompute;
  if (phase == "optimizer") return EventPhase::kOptimizer;
  return EventPhase::kOther;
}

EventKind kind_of(const std::string& category) {
  if (category == "tp") return EventKind::kTp;
  if (category == "pp") return EventKind::kPp;
  if (category == "dp") return EventKind::kDp;
  if (category == "host") return EventKind::kHost;
  return EventKind::kCompute;
}

// Builds a Trace from the events the parser hands over one at a time, so that a million-event
// file never exists as one JSON tree.
class TraceBuilder {
 public:
  explicit TraceBuilder(std::string where) : where_(std::move(where)) {}

  void add(const json& event, int64_t index) {
    if (!event.is_object()) refuse(index, "", "is not an object");
    const std::string ph = text(event, "ph", "", index);
    if (ph == "X") {
      add_complete(event, index);
    } else if (ph == "M") {
      add_metadata(event, index);
    } else if (ph == "C" && text(event, "name", "", index) == "memory") {
      add_counter(event, index);
    }
  }

  Trace finish(json metadata) {
    if (trace_.events.empty()) {
      throw InputError(where_, "traceEvents", "has no complete (\"X\") events to show",
                       "pass a trace written by `strata simulate --trace` or `strata train "
                       "--trace`, or any Chrome trace with \"ph\":\"X\" events");
    }
    if (metadata.is_object()) trace_.metadata = std::move(metadata);
    order_lanes();
    resolve_dependencies();
    for (auto& [pid, points] : trace_.memory) {
      std::stable_sort(
          points.begin(), points.end(),
          [](const MemoryPoint& a, const MemoryPoint& b) { return a.time_ns < b.time_ns; });
    }
    trace_.path = where_;
    return std::move(trace_);
  }

 private:
  struct LaneInfo {
    int32_t process_sort = std::numeric_limits<int32_t>::max();
    int32_t thread_sort = std::numeric_limits<int32_t>::max();
  };

  [[noreturn]] void refuse(int64_t index, const std::string& field,
                           const std::string& problem) const {
    throw InputError(where_,
                     fmt::format("traceEvents[{}]{}{}", index, field.empty() ? "" : ".", field),
                     problem, "fix or regenerate the trace (Chrome trace-event format)");
  }

  // A required integer field that fits in 32 bits (pid, tid).
  int32_t integer(const json& event, const char* field, int64_t index) const {
    if (!event.contains(field)) refuse(index, field, "is missing");
    return static_cast<int32_t>(whole(event, field, 0, index, ""));
  }

  // An optional integer field within [min, max], `fallback` when absent; `prefix` is "args." for
  // a field of args, to name it in errors.
  int64_t whole(const json& object, const char* field, int64_t fallback, int64_t index,
                const char* prefix, int64_t min = INT32_MIN, int64_t max = INT32_MAX) const {
    const auto it = object.find(field);
    if (it == object.end()) return fallback;
    return checked_integer(*it, index, prefix, field, min, max);
  }

  int64_t checked_integer(const json& value, int64_t index, const char* prefix, const char* field,
                          int64_t min, int64_t max) const {
    const bool fits =
        value.is_number_integer() &&
        (value.is_number_unsigned() ? value.get<uint64_t>() <= static_cast<uint64_t>(max)
                                    : value.get<int64_t>() >= min && value.get<int64_t>() <= max);
    if (!fits) {
      refuse(index, std::string(prefix) + field,
             fmt::format("is {}, not an integer in [{}, {}]", value.dump(), min, max));
    }
    return value.get<int64_t>();
  }

  // An optional string field, `fallback` when absent.
  std::string text(const json& object, const char* field, const char* fallback, int64_t index,
                   const char* prefix = "") const {
    const auto it = object.find(field);
    if (it == object.end()) return fallback;
    if (!it->is_string()) {
      refuse(index, std::string(prefix) + field, fmt::format("is {}, not a string", it->dump()));
    }
    return it->get<std::string>();
  }

  // Microseconds (a JSON number) as integer nanoseconds; `field` names it in errors.
  int64_t microseconds_value(const json& value, int64_t index, const char* field) const {
    if (!value.is_number() || !std::isfinite(value.get<double>())) {
      refuse(index, field, "is missing or not a number of microseconds");
    }
    return std::llround(value.get<double>() * 1000.0);
  }

  // A required microseconds field of the event as integer nanoseconds.
  int64_t nanoseconds(const json& event, const char* field, int64_t index) const {
    const auto it = event.find(field);
    if (it == event.end()) refuse(index, field, "is missing");
    return microseconds_value(*it, index, field);
  }

  int32_t lane_index(int32_t pid, int32_t tid) {
    const auto [it, added] = lane_of_.try_emplace({pid, tid}, 0);
    if (added) {
      it->second = static_cast<int32_t>(trace_.lanes.size());
      Lane lane;
      lane.pid = pid;
      lane.tid = tid;
      lane.process_name = fmt::format("pid {}", pid);
      lane.thread_name = fmt::format("tid {}", tid);
      trace_.lanes.push_back(std::move(lane));
    }
    return it->second;
  }

  int32_t name_index(const std::string& name) {
    const auto [it, added] = name_of_.try_emplace(name, static_cast<int32_t>(trace_.names.size()));
    if (added) trace_.names.push_back(name);
    return it->second;
  }

  void add_complete(const json& event, int64_t index) {
    TraceEvent e;
    e.start_ns = nanoseconds(event, "ts", index);
    e.dur_ns = nanoseconds(event, "dur", index);
    if (e.dur_ns < 0) refuse(index, "dur", "is negative");
    e.transfer_ns = e.start_ns;
    e.lane = lane_index(integer(event, "pid", index), integer(event, "tid", index));
    e.name = name_index(text(event, "name", "", index));
    e.kind = kind_of(text(event, "cat", "", index));
    std::vector<int32_t> deps;
    if (const auto args = event.find("args"); args != event.end() && args->is_object()) {
      const char* in_args = "args.";
      e.phase = phase_of(text(*args, "phase", "", index, in_args));
      e.task = static_cast<int32_t>(whole(*args, "task", -1, index, in_args));
      e.layer = static_cast<int32_t>(whole(*args, "layer", -1, index, in_args));
      e.micro_batch = static_cast<int32_t>(whole(*args, "micro_batch", -1, index, in_args));
      e.chunk =
          static_cast<int16_t>(whole(*args, "chunk", -1, index, in_args, INT16_MIN, INT16_MAX));
      e.bytes = whole(*args, "bytes", -1, index, in_args, -1, INT64_MAX);
      e.flops = whole(*args, "flops", -1, index, in_args, -1, INT64_MAX);
      if (const auto t = args->find("transfer_us"); t != args->end()) {
        e.transfer_ns =
            std::clamp(microseconds_value(*t, index, "args.transfer_us"), e.start_ns, e.end_ns());
      }
      if (const auto d = args->find("deps"); d != args->end()) {
        if (!d->is_array()) refuse(index, "args.deps", "is not an array of task ids");
        for (const json& dep : *d) {
          deps.push_back(
              static_cast<int32_t>(checked_integer(dep, index, "args.", "deps", 0, INT32_MAX)));
        }
      }
    }
    e.first_dep = static_cast<int32_t>(task_deps_.size());
    e.dep_count = static_cast<int32_t>(deps.size());
    task_deps_.insert(task_deps_.end(), deps.begin(), deps.end());
    if (e.task >= 0) event_of_task_.try_emplace(e.task, static_cast<int32_t>(trace_.events.size()));
    trace_.events.push_back(e);
  }

  void add_metadata(const json& event, int64_t index) {
    const std::string name = text(event, "name", "", index);
    const auto args = event.find("args");
    if (args == event.end() || !args->is_object()) return;
    const int32_t pid = integer(event, "pid", index);
    if (name == "process_name") {
      process_names_[pid] = text(*args, "name", "", index, "args.");
      if (args->contains("stage")) {
        stages_[pid] = static_cast<int32_t>(whole(*args, "stage", -1, index, "args.", 0));
      }
    } else if (name == "process_sort_index") {
      info_[{pid, -1}].process_sort =
          static_cast<int32_t>(whole(*args, "sort_index", 0, index, "args."));
    } else if (name == "thread_name") {
      thread_names_[{pid, integer(event, "tid", index)}] = text(*args, "name", "", index, "args.");
    } else if (name == "thread_sort_index") {
      info_[{pid, integer(event, "tid", index)}].thread_sort =
          static_cast<int32_t>(whole(*args, "sort_index", 0, index, "args."));
    }
  }

  void add_counter(const json& event, int64_t index) {
    const auto args = event.find("args");
    if (args == event.end() || !args->is_object()) refuse(index, "args", "is missing");
    const auto bytes = args->find("bytes");
    if (bytes == args->end()) refuse(index, "args.bytes", "is missing");
    trace_.memory[integer(event, "pid", index)].push_back(
        {nanoseconds(event, "ts", index), whole(*args, "bytes", 0, index, "args.", 0, INT64_MAX)});
  }

  // Lanes by (stage, process sort index, pid, thread sort index, tid); events by start.
  void order_lanes() {
    const bool staged = !stages_.empty();
    for (Lane& lane : trace_.lanes) {
      if (const auto it = process_names_.find(lane.pid); it != process_names_.end()) {
        lane.process_name = it->second;
      }
      if (const auto it = thread_names_.find({lane.pid, lane.tid}); it != thread_names_.end()) {
        lane.thread_name = it->second;
      }
      if (const auto it = stages_.find(lane.pid); it != stages_.end()) lane.stage = it->second;
    }
    auto sort_key = [&](const Lane& lane) {
      const LaneInfo process = info_[{lane.pid, -1}];
      const LaneInfo thread = info_[{lane.pid, lane.tid}];
      return std::make_tuple(staged ? lane.stage : 0, process.process_sort, lane.pid,
                             thread.thread_sort, lane.tid);
    };
    std::vector<int32_t> order(trace_.lanes.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return sort_key(trace_.lanes[static_cast<size_t>(a)]) <
             sort_key(trace_.lanes[static_cast<size_t>(b)]);
    });
    std::vector<int32_t> new_index(order.size());
    std::vector<Lane> lanes;
    for (size_t i = 0; i < order.size(); ++i) {
      new_index[static_cast<size_t>(order[i])] = static_cast<int32_t>(i);
      lanes.push_back(std::move(trace_.lanes[static_cast<size_t>(order[i])]));
    }
    trace_.lanes = std::move(lanes);

    trace_.start_ns = std::numeric_limits<int64_t>::max();
    trace_.end_ns = std::numeric_limits<int64_t>::min();
    for (size_t i = 0; i < trace_.events.size(); ++i) {
      TraceEvent& e = trace_.events[i];
      e.lane = new_index[static_cast<size_t>(e.lane)];
      Lane& lane = trace_.lanes[static_cast<size_t>(e.lane)];
      lane.events.push_back(static_cast<int32_t>(i));
      lane.longest_ns = std::max(lane.longest_ns, e.dur_ns);
      trace_.start_ns = std::min(trace_.start_ns, e.start_ns);
      trace_.end_ns = std::max(trace_.end_ns, e.end_ns());
    }
    for (Lane& lane : trace_.lanes) {
      std::stable_sort(lane.events.begin(), lane.events.end(), [&](int32_t a, int32_t b) {
        return trace_.events[static_cast<size_t>(a)].start_ns <
               trace_.events[static_cast<size_t>(b)].start_ns;
      });
    }
  }

  // Task ids in args.deps to event indices; ids without an event are dropped.
  void resolve_dependencies() {
    for (TraceEvent& e : trace_.events) {
      const int32_t first = static_cast<int32_t>(trace_.deps.size());
      for (int32_t i = 0; i < e.dep_count; ++i) {
        const int32_t task = task_deps_[static_cast<size_t>(e.first_dep + i)];
        if (const auto it = event_of_task_.find(task); it != event_of_task_.end()) {
          trace_.deps.push_back(it->second);
        }
      }
      e.first_dep = first;
      e.dep_count = static_cast<int32_t>(trace_.deps.size()) - first;
    }
  }

  std::string where_;
  Trace trace_;
  std::map<std::pair<int32_t, int32_t>, int32_t> lane_of_;
  std::unordered_map<std::string, int32_t> name_of_;
  std::map<int32_t, std::string> process_names_;
  std::map<int32_t, int32_t> stages_;
  std::map<std::pair<int32_t, int32_t>, std::string> thread_names_;
  std::map<std::pair<int32_t, int32_t>, LaneInfo> info_;  // tid -1: the process's
  std::vector<int32_t> task_deps_;                        // args.deps as task ids
  std::unordered_map<int32_t, int32_t> event_of_task_;
};

}  // namespace

Trace parse_trace(std::string_view text, const std::string& where) {
  TraceBuilder builder(where);
  json metadata;
  // The callback sees each value as it completes: an event (an object in the top-level
  // "traceEvents" array, or in a top-level array) goes to the builder and is dropped from the
  // tree; "metadata" is kept.
  bool array_format = false;
  std::string top_key;
  int64_t index = 0;
  const auto callback = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 0 && event == json::parse_event_t::array_start) array_format = true;
    if (depth == 1 && event == json::parse_event_t::key) top_key = parsed.get<std::string>();
    const int event_depth = array_format ? 1 : 2;
    const bool in_events = array_format || top_key == "traceEvents";
    if (depth == event_depth && in_events &&
        (event == json::parse_event_t::object_end || event == json::parse_event_t::value)) {
      builder.add(parsed, index++);
      return false;
    }
    if (depth == 1 && !array_format && event == json::parse_event_t::object_end &&
        top_key == "metadata") {
      metadata = parsed;
    }
    return true;
  };
  json top;
  try {
    top = json::parse(text, callback);
  } catch (const json::parse_error& error) {
    throw_malformed_json(text, where, error);
  } catch (const json::out_of_range& error) {
    throw_number_overflow(where, error);
  }
  if (!array_format) {
    if (!top.is_object() || !top.contains("traceEvents") || !top.at("traceEvents").is_array()) {
      throw InputError(where, "traceEvents",
                       "is missing: the file is not a Chrome trace (an object with a "
                       "\"traceEvents\" array, or an array of events)",
                       "pass a trace written by `strata simulate --trace` or `strata train "
                       "--trace`");
    }
  }
  return builder.finish(std::move(metadata));
}

Trace load_trace(const std::string& path) { return parse_trace(read_text_file(path), path); }

}  // namespace strata::viewer
