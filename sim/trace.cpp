#include "sim/trace.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "plan/plan_json.hpp"
#include "sim/result_json.hpp"

namespace strata {

namespace {

// The trace is written straight into one buffer: nlohmann would build a tree of a million
// objects first. Every value written is an integer, a fixed-point time or an escaped string.
// (fmt::memory_buffer rather than std::string: fmt formats into it without an intermediate
// buffer; a 730,000-task trace writes in about 0.7 s instead of 1 s.)
class TraceWriter {
 public:
  explicit TraceWriter(size_t reserve_bytes) { out_.reserve(reserve_bytes); }

  template <typename... Args>
  void format(fmt::format_string<Args...> text, Args&&... args) {
    fmt::format_to(fmt::appender(out_), text, std::forward<Args>(args)...);
  }
  void raw(std::string_view text) { out_.append(text); }
  void raw(char c) { out_.push_back(c); }

  // A JSON string literal (RFC 8259 escapes).
  void string(std::string_view text) {
    raw('"');
    for (const char c : text) {
      const auto byte = static_cast<unsigned char>(c);
      if (c == '"' || c == '\\') {
        raw('\\');
        raw(c);
      } else if (byte < 0x20) {
        format("\\u{:04x}", byte);
      } else {
        raw(c);
      }
    }
    raw('"');
  }

  // Microseconds with three decimals from integer nanoseconds: 1234567 -> "1234.567".
  void micros(TimeNs ns) {
    STRATA_ASSERT(ns >= 0, fmt::format("trace time {} ns is negative", ns));
    format("{}.{:03}", ns / 1000, ns % 1000);
  }

  // Separates events: the first one follows "[", the others a ",".
  void next_event() {
    raw(first_event_ ? "\n" : ",\n");
    first_event_ = false;
  }

  std::string text() const { return fmt::to_string(out_); }

 private:
  fmt::memory_buffer out_;
  bool first_event_ = true;
};

// The communication kind a task counts under (as in SimResult's CommSeconds), "compute", or
// "host" for the host thread's dispatch.
const char* category(const TaskGraph& graph, const Task& task) {
  switch (task.kind) {
    case TaskKind::kCompute:
      return task.stream == Stream::kHost || task.role == TaskRole::kHostDispatch ? "host"
                                                                                  : "compute";
    case TaskKind::kCollective:
    case TaskKind::kP2p:
    case TaskKind::kCopy:
      return to_string(comm_axis(graph, task));
    case TaskKind::kMemory:
      return "memory";
  }
  return "compute";
}

void write_metadata_events(TraceWriter& w, const TaskGraph& graph) {
  for (const GraphRank& r : graph.ranks()) {
    w.next_event();
    w.format(R"({{"name":"process_name","ph":"M","pid":{},"tid":0,"args":{{"name":)", r.rank);
    w.string(fmt::format("rank {} (stage {})", r.rank, r.stage));
    w.format(R"(,"stage":{}}}}})", r.stage);
    w.next_event();
    w.format(
        R"({{"name":"process_sort_index","ph":"M","pid":{},"tid":0,"args":{{"sort_index":{}}}}})",
        r.rank, r.rank);
    for (int stream = 0; stream < kStreamCount; ++stream) {
      w.next_event();
      w.format(R"({{"name":"thread_name","ph":"M","pid":{},"tid":{},"args":{{"name":)", r.rank,
               stream);
      w.string(to_string(static_cast<Stream>(stream)));
      w.raw("}}");
      w.next_event();
      w.format(
          R"({{"name":"thread_sort_index","ph":"M","pid":{},"tid":{},"args":{{"sort_index":{}}}}})",
          r.rank, stream, stream);
    }
  }
}

// What each task waits for, as a trace shows it: its dependencies, with memory tasks (which have
// no event) replaced by what they wait for, and a recv's matching send. Sorted, each once.
class TraceDependencies {
 public:
  explicit TraceDependencies(const TaskGraph& graph) : graph_(graph) {
    for (TaskId id = 0; id < graph.size(); ++id) {
      const Task& task = graph.task(id);
      if (task.kind == TaskKind::kP2p && task.p2p == P2pKind::kSend) {
        sends_[{task.rank, task.peer, task.tag}] = id;
      }
    }
  }

  std::vector<TaskId> of(TaskId id) const {
    std::vector<TaskId> out;
    add_deps(id, out);
    const Task& task = graph_.task(id);
    if (task.kind == TaskKind::kP2p && task.p2p == P2pKind::kRecv) {
      const auto send = sends_.find({task.peer, task.rank, task.tag});
      if (send != sends_.end()) out.push_back(send->second);
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }

 private:
  void add_deps(TaskId id, std::vector<TaskId>& out) const {
    for (const TaskId dep : graph_.deps(id)) {
      if (graph_.task(dep).kind == TaskKind::kMemory) {
        add_deps(dep, out);
      } else {
        out.push_back(dep);
      }
    }
  }

  const TaskGraph& graph_;
  std::map<std::tuple<int32_t, int32_t, int32_t>, TaskId> sends_;  // (sender, receiver, tag)
};

void write_task_event(TraceWriter& w, const TaskGraph& graph, const TraceDependencies& deps,
                      TaskId id, const TaskTiming& t, TimeNs cpu_ns) {
  const Task& task = graph.task(id);
  STRATA_ASSERT(t.finish_ns >= t.start_ns && t.transfer_ns >= t.start_ns,
                fmt::format("task {} has timing start {} transfer {} finish {} ns", id, t.start_ns,
                            t.transfer_ns, t.finish_ns));
  w.next_event();
  w.raw(R"({"name":)");
  w.string(task_name(graph, task));
  w.format(R"(,"cat":"{}","ph":"X","pid":{},"tid":{},"ts":)", category(graph, task), task.rank,
           static_cast<int>(task.stream));
  w.micros(t.start_ns);
  w.raw(R"(,"dur":)");
  w.micros(t.finish_ns - t.start_ns);
  w.format(R"(,"args":{{"task":{},"deps":[{}],"phase":"{}",)", id, fmt::join(deps.of(id), ","),
           to_string(task.phase));
  if (task.layer >= 0) w.format(R"("layer":{},)", task.layer);
  if (task.micro_batch >= 0) w.format(R"("micro_batch":{},)", task.micro_batch);
  w.format(R"("chunk":{},"role":"{}")", task.chunk, to_string(task.role));
  switch (task.kind) {
    case TaskKind::kCompute: {
      const OpShape& op = graph.op(task.op);
      w.format(R"(,"op":"{}","flops":{},"bytes":{})", to_string(op.kind), op.flops, op.bytes);
      break;
    }
    case TaskKind::kCollective: {
      const CommGroup& group = graph.group(task.group);
      w.format(R"(,"collective":"{}","group":"{}","group_size":{},"bytes":{},"transfer_us":)",
               to_string(task.collective), to_string(group.kind), group.ranks.size(), task.bytes);
      w.micros(t.transfer_ns);
      break;
    }
    case TaskKind::kP2p:
      w.format(R"(,"p2p":"{}","peer":{},"bytes":{},"transfer_us":)",
               task.p2p == P2pKind::kSend ? "send" : "recv", task.peer, task.bytes);
      w.micros(t.transfer_ns);
      break;
    case TaskKind::kMemory:
      break;
    case TaskKind::kCopy:
      w.format(R"(,"copy":"{}","bytes":{})",
               task.copy == CopyDirection::kToHost ? "to_host" : "to_device", task.bytes);
      break;
  }
  if (cpu_ns >= 0) {
    w.raw(R"(,"cpu_us":)");
    w.micros(cpu_ns);
  }
  w.raw("}}");
}

nlohmann::json metadata_json(const CompiledPlan& compiled, const SimResult& result) {
  nlohmann::json stages = nlohmann::json::array();
  for (const StageResult& s : result.per_stage) {
    stages.push_back(stage_result_json(s));
  }
  return {{"generator", "strata simulate"},
          {"model", compiled.model.name},
          {"cluster", compiled.cluster.name},
          {"device", compiled.cluster.device.name},
          {"gpus", compiled.plan.gpus()},
          {"graph_mode", to_string(compiled.graph.mode())},
          {"ranks_in_trace", compiled.graph.ranks().size()},
          {"tasks", compiled.graph.size()},
          {"plan", plan_to_json(compiled.plan)},
          {"step_time_s", result.step_time_s},
          {"tokens_per_s", result.tokens_per_s},
          {"mfu", result.mfu},
          {"bubble_fraction", result.bubble_fraction},
          {"exposed_comm_s", comm_seconds_json(result.exposed_comm_s)},
          {"comm_s", comm_seconds_json(result.comm_s)},
          {"peak_memory_bytes", result.peak_memory_bytes},
          {"per_stage", std::move(stages)}};
}

}  // namespace

std::string trace_json(const CompiledPlan& compiled, const SimResult& result) {
  return trace_json(compiled, result.tasks, result.memory_timeline,
                    metadata_json(compiled, result));
}

std::string trace_json(const CompiledPlan& compiled, const std::vector<TaskTiming>& tasks,
                       const std::vector<std::vector<MemorySample>>& memory,
                       const nlohmann::json& metadata, const std::vector<TimeNs>& cpu_ns) {
  const TaskGraph& graph = compiled.graph;
  STRATA_ASSERT(cpu_ns.empty() || cpu_ns.size() == tasks.size(),
                fmt::format("{} CPU times for {} tasks", cpu_ns.size(), tasks.size()));
  STRATA_ASSERT(
      static_cast<int64_t>(tasks.size()) == graph.size(),
      fmt::format("the timing has {} tasks; the graph has {}", tasks.size(), graph.size()));
  STRATA_ASSERT(memory.size() == graph.ranks().size(),
                fmt::format("{} memory timelines for a graph of {} ranks", memory.size(),
                            graph.ranks().size()));
  size_t samples = 0;
  for (const auto& timeline : memory) samples += timeline.size();
  // About 250 bytes per task event and 80 per memory sample.
  TraceWriter w(static_cast<size_t>(graph.size()) * 250 + samples * 80 + 65536);
  w.raw(R"({"traceEvents":[)");
  write_metadata_events(w, graph);
  const TraceDependencies deps(graph);
  for (TaskId id = 0; id < graph.size(); ++id) {
    if (graph.task(id).kind == TaskKind::kMemory) continue;
    write_task_event(w, graph, deps, id, tasks[static_cast<size_t>(id)],
                     cpu_ns.empty() ? -1 : cpu_ns[static_cast<size_t>(id)]);
  }
  for (size_t i = 0; i < graph.ranks().size(); ++i) {
    for (const MemorySample& sample : memory[i]) {
      w.next_event();
      w.format(R"({{"name":"memory","ph":"C","pid":{},"tid":0,"ts":)", graph.ranks()[i].rank);
      w.micros(sample.time_ns);
      w.format(R"(,"args":{{"bytes":{}}}}})", sample.bytes);
    }
  }
  w.raw("\n],\n\"displayTimeUnit\":\"ns\",\n\"metadata\":");
  w.raw(metadata.dump());
  w.raw("}\n");
  return w.text();
}

}  // namespace strata
