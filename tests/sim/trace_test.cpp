// The Chrome trace-event writer (sim/trace.hpp): what ui.perfetto.dev needs to draw one process
// per rank and one thread per stream, one X event per task at its simulated time to the
// nanosecond, memory counters, and the same bytes for the same inputs.

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "sim/simulate.hpp"
#include "sim/trace.hpp"
#include "tests/plan/plan_fixtures.hpp"

namespace strata {
namespace {

// tiny-gpt on 8 A100s, dp 2 x tp 2 x pp 2, full graph: compute, TP and DP collectives and
// pipeline p2p on every rank.
CompiledPlan small_full_plan() {
  ParallelPlan plan = test::make_plan(2, 2, 2, 1, 8, 128);
  return test::compile_checked(load_model("tiny-gpt"), plan, GraphMode::kFull);
}

// Task i runs [10 i, 10 i + 5] ns, its data moving from 10 i + 2; graph rank k's memory is
// 1000 + k bytes at 100 k ns and 2000 + k bytes at 100 k + 7 ns.
SimResult hand_made_result(const CompiledPlan& compiled) {
  SimResult result;
  result.step_time_s = 1e-8 * static_cast<double>(compiled.graph.size());
  for (TaskId id = 0; id < compiled.graph.size(); ++id) {
    const TimeNs start = 10 * static_cast<TimeNs>(id);
    result.tasks.push_back({start, start + 2, start + 5});
  }
  for (size_t k = 0; k < compiled.graph.ranks().size(); ++k) {
    const auto i = static_cast<int64_t>(k);
    result.memory_timeline.push_back({{100 * i, 1000 + i}, {100 * i + 7, 2000 + i}});
  }
  for (int64_t stage = 0; stage < compiled.plan.pp; ++stage) {
    StageResult s;
    s.stage = stage;
    s.busy_s = 0.5;
    s.idle_s = 0.25;
    s.peak_memory_bytes = 3000 + stage;
    result.per_stage.push_back(s);
  }
  return result;
}

// Nanoseconds from a microsecond value printed with three decimals.
int64_t ns_of(const nlohmann::json& micros) { return std::llround(micros.get<double>() * 1000.0); }

const char* expected_category(const TaskGraph& graph, const Task& task) {
  if (task.kind == TaskKind::kCompute) return task.stream == Stream::kHost ? "host" : "compute";
  if (task.kind == TaskKind::kP2p) return "pp";
  return graph.group(task.group).kind == GroupKind::kTp ? "tp" : "dp";
}

// Chrome's trace-event format: "M" events name processes and threads; Perfetto sorts them by
// process_sort_index / thread_sort_index.
TEST_CASE("the trace names one process per rank and one thread per stream", "[trace]") {
  const CompiledPlan compiled = small_full_plan();
  const nlohmann::json trace =
      nlohmann::json::parse(trace_json(compiled, hand_made_result(compiled)));
  REQUIRE(compiled.graph.ranks().size() == 8);

  std::map<int64_t, std::string> process_names;
  std::map<int64_t, int64_t> process_sort;
  std::map<int64_t, int64_t> process_stages;
  std::map<std::pair<int64_t, int64_t>, std::string> thread_names;
  std::map<std::pair<int64_t, int64_t>, int64_t> thread_sort;
  for (const nlohmann::json& event : trace.at("traceEvents")) {
    if (event.at("ph") != "M") continue;
    const int64_t pid = event.at("pid");
    const int64_t tid = event.at("tid");
    const std::string name = event.at("name");
    if (name == "process_name") {
      process_names[pid] = event.at("args").at("name");
      process_stages[pid] = event.at("args").at("stage");
    }
    if (name == "process_sort_index") process_sort[pid] = event.at("args").at("sort_index");
    if (name == "thread_name") thread_names[{pid, tid}] = event.at("args").at("name");
    if (name == "thread_sort_index") thread_sort[{pid, tid}] = event.at("args").at("sort_index");
  }
  CHECK(process_names.size() == 8);
  CHECK(thread_names.size() == 8 * kStreamCount);
  for (const GraphRank& r : compiled.graph.ranks()) {
    CHECK(process_names[r.rank] == fmt::format("rank {} (stage {})", r.rank, r.stage));
    CHECK(process_stages[r.rank] == r.stage);
    CHECK(process_sort[r.rank] == r.rank);
    for (int stream = 0; stream < kStreamCount; ++stream) {
      CHECK(thread_names[{r.rank, stream}] == to_string(static_cast<Stream>(stream)));
      CHECK(thread_sort[{r.rank, stream}] == stream);
    }
  }
  CHECK(thread_names[{0, 1}] == "tp-comm");
  CHECK(trace.at("displayTimeUnit") == "ns");
}

// Each non-memory task is one X event, in task id order, at [10 i, 10 i + 5] ns exactly, on
// pid = its rank and tid = its stream, named and labelled as the task graph says.
TEST_CASE("the trace has one X event per task at its simulated time, with its labels", "[trace]") {
  const CompiledPlan compiled = small_full_plan();
  const TaskGraph& graph = compiled.graph;
  const nlohmann::json trace =
      nlohmann::json::parse(trace_json(compiled, hand_made_result(compiled)));

  std::vector<TaskId> expected_ids;
  std::set<std::string> categories_seen;
  for (TaskId id = 0; id < graph.size(); ++id) {
    if (graph.task(id).kind != TaskKind::kMemory) expected_ids.push_back(id);
  }
  std::vector<TaskId> ids;
  for (const nlohmann::json& event : trace.at("traceEvents")) {
    if (event.at("ph") != "X") continue;
    const nlohmann::json& args = event.at("args");
    const TaskId id = args.at("task");
    ids.push_back(id);
    const Task& task = graph.task(id);
    INFO("task " << id << ": " << event.dump());
    CHECK(event.at("name") == task_name(graph, task));
    CHECK(event.at("cat") == expected_category(graph, task));
    categories_seen.insert(event.at("cat").get<std::string>());
    CHECK(event.at("pid") == task.rank);
    CHECK(event.at("tid") == static_cast<int>(task.stream));
    CHECK(ns_of(event.at("ts")) == 10 * id);
    CHECK(ns_of(event.at("dur")) == 5);
    CHECK(args.at("phase") == to_string(task.phase));
    CHECK(args.at("role") == to_string(task.role));
    CHECK(args.at("chunk") == task.chunk);
    CHECK(args.contains("layer") == (task.layer >= 0));
    if (task.layer >= 0) CHECK(args.at("layer") == task.layer);
    CHECK(args.contains("micro_batch") == (task.micro_batch >= 0));
    if (task.micro_batch >= 0) CHECK(args.at("micro_batch") == task.micro_batch);
    switch (task.kind) {
      case TaskKind::kCompute:
        CHECK(args.at("op") == to_string(graph.op(task.op).kind));
        CHECK(args.at("flops") == graph.op(task.op).flops);
        CHECK(args.at("bytes") == graph.op(task.op).bytes);
        break;
      case TaskKind::kCollective:
        CHECK(args.at("collective") == to_string(task.collective));
        CHECK(args.at("group") == to_string(graph.group(task.group).kind));
        CHECK(args.at("bytes") == task.bytes);
        CHECK(ns_of(args.at("transfer_us")) == 10 * id + 2);
        break;
      case TaskKind::kP2p:
        CHECK(args.at("p2p") == (task.p2p == P2pKind::kSend ? "send" : "recv"));
        CHECK(args.at("peer") == task.peer);
        CHECK(args.at("bytes") == task.bytes);
        CHECK(ns_of(args.at("transfer_us")) == 10 * id + 2);
        break;
      case TaskKind::kMemory:
        FAIL("a memory task has an X event");
        break;
      case TaskKind::kCopy:
        CHECK(args.at("copy") == (task.copy == CopyDirection::kToHost ? "to_host" : "to_device"));
        CHECK(args.at("bytes") == task.bytes);
        break;
    }
  }
  CHECK(ids == expected_ids);
  CHECK(categories_seen == std::set<std::string>{"compute", "tp", "pp", "dp", "host"});
}

// args.deps is what the viewer highlights for a selected task: the graph's dependencies, with
// memory tasks (which have no event) replaced by what they wait for, plus a recv's matching
// send; every id in it names an X event, none twice.
TEST_CASE("each event's deps are its dependencies through memory tasks and a recv's send",
          "[trace]") {
  const CompiledPlan compiled = small_full_plan();
  const TaskGraph& graph = compiled.graph;
  const nlohmann::json trace =
      nlohmann::json::parse(trace_json(compiled, hand_made_result(compiled)));
  std::map<TaskId, std::vector<TaskId>> deps;
  for (const nlohmann::json& event : trace.at("traceEvents")) {
    if (event.at("ph") != "X") continue;
    deps[event.at("args").at("task")] = event.at("args").at("deps").get<std::vector<TaskId>>();
  }
  // The expected set, by a walk written independently of the writer's.
  std::function<void(TaskId, std::set<TaskId>&)> through_memory = [&](TaskId id,
                                                                      std::set<TaskId>& out) {
    for (const TaskId dep : graph.deps(id)) {
      if (graph.task(dep).kind == TaskKind::kMemory) {
        through_memory(dep, out);
      } else {
        out.insert(dep);
      }
    }
  };
  int recvs = 0;
  for (const auto& [id, listed] : deps) {
    INFO("task " << id);
    std::set<TaskId> expected;
    through_memory(id, expected);
    const Task& task = graph.task(id);
    if (task.kind == TaskKind::kP2p && task.p2p == P2pKind::kRecv) {
      ++recvs;
      for (TaskId other = 0; other < graph.size(); ++other) {
        const Task& t = graph.task(other);
        if (t.kind == TaskKind::kP2p && t.p2p == P2pKind::kSend && t.rank == task.peer &&
            t.peer == task.rank && t.tag == task.tag) {
          expected.insert(other);
        }
      }
    }
    CHECK(std::set<TaskId>(listed.begin(), listed.end()) == expected);
    CHECK(std::set<TaskId>(listed.begin(), listed.end()).size() == listed.size());
    for (const TaskId dep : listed) CHECK(deps.contains(dep));
  }
  CHECK(recvs > 0);
}

// ts and dur are integer nanoseconds printed as microseconds with exactly three decimals, with
// no floating-point rounding: 123456789012 ns is "123456789.012", 5 ns is "0.005".
TEST_CASE("trace times are microseconds with exactly three decimals", "[trace]") {
  const CompiledPlan compiled = small_full_plan();
  SimResult result = hand_made_result(compiled);
  TaskId compute = 0;
  while (compiled.graph.task(compute).kind != TaskKind::kCompute) ++compute;
  result.tasks[static_cast<size_t>(compute)] = {123456789012, 123456789012, 123456789017};
  const std::string text = trace_json(compiled, result);
  CHECK(text.find(fmt::format(R"("task":{},)", compute)) != std::string::npos);
  CHECK(text.find(R"("ts":123456789.012,"dur":0.005,)") != std::string::npos);
  // Task 1 (if not a memory task) starts at 10 ns.
  if (compiled.graph.task(1).kind != TaskKind::kMemory)
    CHECK(text.find(R"("ts":0.010,"dur":0.005,)") != std::string::npos);
}

// Memory in use is a "C" counter named "memory" per rank: one event per MemorySample, in order.
TEST_CASE("the trace's memory counters are the result's memory samples", "[trace]") {
  const CompiledPlan compiled = small_full_plan();
  const SimResult result = hand_made_result(compiled);
  const nlohmann::json trace = nlohmann::json::parse(trace_json(compiled, result));
  std::map<int64_t, std::vector<MemorySample>> counters;
  for (const nlohmann::json& event : trace.at("traceEvents")) {
    if (event.at("ph") != "C") continue;
    CHECK(event.at("name") == "memory");
    counters[event.at("pid")].push_back({ns_of(event.at("ts")), event.at("args").at("bytes")});
  }
  REQUIRE(counters.size() == compiled.graph.ranks().size());
  for (size_t k = 0; k < compiled.graph.ranks().size(); ++k) {
    const std::vector<MemorySample>& got = counters[compiled.graph.ranks()[k].rank];
    const std::vector<MemorySample>& want = result.memory_timeline[k];
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      CHECK(got[i].time_ns == want[i].time_ns);
      CHECK(got[i].bytes == want[i].bytes);
    }
  }
}

TEST_CASE("the trace's metadata carries the step figures and the plan", "[trace]") {
  const CompiledPlan compiled = small_full_plan();
  const SimResult result = hand_made_result(compiled);
  const nlohmann::json meta = nlohmann::json::parse(trace_json(compiled, result)).at("metadata");
  CHECK(meta.at("generator") == "strata simulate");
  CHECK(meta.at("graph_mode") == "full");
  CHECK(meta.at("model") == "tiny-gpt");
  CHECK(meta.at("cluster") == "dgx-a100");
  CHECK(meta.at("step_time_s") == result.step_time_s);
  CHECK(meta.at("plan").at("tp") == 2);
  REQUIRE(meta.at("per_stage").size() == 2);
  CHECK(meta.at("per_stage")[1].at("busy_s") == 0.5);
  CHECK(meta.at("per_stage")[1].at("peak_memory_bytes") == 3001);
  for (const char* kind : {"tp", "pp", "dp"}) {
    CHECK(meta.at("exposed_comm_s").contains(kind));
    CHECK(meta.at("comm_s").contains(kind));
  }
}

// Determinism (docs/design.md): the same inputs give byte-identical traces.
TEST_CASE("the trace is byte-identical for the same inputs", "[trace]") {
  const CompiledPlan compiled = small_full_plan();
  const SimResult result = hand_made_result(compiled);
  const std::string first = trace_json(compiled, result);
  CHECK(first == trace_json(compiled, result));
  CHECK(first == trace_json(small_full_plan(), hand_made_result(small_full_plan())));
}

// A simulated step's trace: every X event lies within [0, step time] and every task is there.
TEST_CASE("a simulated step's trace parses and lies within the step", "[trace][simulate]") {
  for (const GraphMode mode : {GraphMode::kFolded, GraphMode::kFull}) {
    const CompiledPlan compiled =
        test::compile_checked(load_model("tiny-gpt"), test::make_plan(2, 2, 2, 1, 8, 128), mode);
    const SimResult result = simulate(compiled);
    const nlohmann::json trace = nlohmann::json::parse(trace_json(compiled, result));
    const auto step_ns = static_cast<int64_t>(std::llround(result.step_time_s * 1e9));
    REQUIRE(step_ns > 0);
    int64_t events = 0;
    int64_t latest_finish = 0;
    for (const nlohmann::json& event : trace.at("traceEvents")) {
      if (event.at("ph") != "X") continue;
      ++events;
      const int64_t start = ns_of(event.at("ts"));
      const int64_t finish = start + ns_of(event.at("dur"));
      INFO(event.dump());
      CHECK(start >= 0);
      CHECK(finish <= step_ns);
      latest_finish = std::max(latest_finish, finish);
    }
    int64_t expected = 0;
    for (const Task& task : compiled.graph.tasks()) expected += task.kind != TaskKind::kMemory;
    CHECK(events == expected);
    CHECK(latest_finish == step_ns);  // the step ends with its last task
  }
}

}  // namespace
}  // namespace strata
