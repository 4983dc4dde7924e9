// Reading a Chrome trace-event file into the viewer's lanes (viewer/trace_model.hpp): lanes
// ordered by (stage, process sort index, pid, thread sort index, tid) whatever the file order,
// each lane's events by start, times in integer nanoseconds from the file's three-decimal
// microseconds, args.deps resolved from task ids to event indices, memory counters by time; the
// JSON Array Format too; and refusals (an InputError naming the file and the field) for what is
// not a trace with at least one complete event.

#include <catch2/catch.hpp>

#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/error.hpp"
#include "tests/input_error.hpp"
#include "viewer/trace_model.hpp"

namespace strata::viewer {
namespace {

using strata::test::input_error_of;

// A Strata-style trace written out of order: the metadata object first, processes and threads
// named after their events, lanes in no particular order. Expected lanes, by (stage, process sort
// index, pid, thread sort index, tid):
//   0: pid 9 tid 0 "compute"   stage 0 (process sort 0)
//   1: pid 9 tid 4 "pp-recv"   (thread sort 1)
//   2: pid 9 tid 1 "tp-comm"   (thread sort 2)
//   3: pid 4 tid 0 "compute"   stage 0 (process sort 5: after pid 9 despite its smaller pid)
//   4: pid 4 tid 2 "dp-comm"
//   5: pid 1 tid 0 "compute"   stage 1 (the smallest pid and sort index, but the later stage)
//   6: pid 1 tid 3 "pp-send"
// X events, by file index:
//   0: pid 1 tid 3 pp   [2500, 2750]     task 10 deps [3]      transfer 2600
//   1: pid 9 tid 0 cmp  [1234567, +10001] task 3
//   2: pid 9 tid 0 cmp  [1000, 1500]     task 2 deps [99]     (no task 99: dropped)
//   3: pid 9 tid 1 tp   [1500, 1600]     task 4 deps [2, 3]   transfer 1550
//   4: pid 9 tid 4 pp   [3000, 4000]     task 5 deps [10, 77] transfer 3400
//   5: pid 4 tid 2 dp   [0, 5000]        task 6               transfer 1000
//   6: pid 4 tid 0 cmp  [6000, 8000]     task 7 optimizer
//   7: pid 1 tid 0 cmp  [4250, 6000]     task 8 deps [10]     bwd
//   8: pid 1 tid 0 cmp  [4000, 4250]     task 9               recompute
//   9: pid 4 tid 0 "other" cat, no args [9000, 9500]
constexpr const char* kStrataTrace = R"json({
"metadata": {"generator": "hand-written", "step_time_s": 0.0012445680, "per_stage": [{"stage": 0}]},
"traceEvents": [
{"name":"send fwd mb0","cat":"pp","ph":"X","pid":1,"tid":3,"ts":2.500,"dur":0.250,
 "args":{"task":10,"deps":[3],"phase":"fwd","micro_batch":0,"chunk":0,"p2p":"send","bytes":4096,"transfer_us":2.600}},
{"name":"memory","ph":"C","pid":9,"tid":0,"ts":5.000,"args":{"bytes":300}},
{"name":"fwd L0 mb0 qkv","cat":"compute","ph":"X","pid":9,"tid":0,"ts":1234.567,"dur":10.001,
 "args":{"task":3,"deps":[],"phase":"fwd","layer":0,"micro_batch":0,"chunk":0,"op":"matmul","flops":1000000,"bytes":2048}},
{"name":"fwd L0 mb0 mlp","cat":"compute","ph":"X","pid":9,"tid":0,"ts":1.000,"dur":0.500,
 "args":{"task":2,"deps":[99],"phase":"fwd","layer":0,"micro_batch":0,"chunk":0}},
{"name":"memory","ph":"C","pid":9,"tid":0,"ts":1.000,"args":{"bytes":100}},
{"name":"tp all-reduce","cat":"tp","ph":"X","pid":9,"tid":1,"ts":1.500,"dur":0.100,
 "args":{"task":4,"deps":[2,3],"phase":"fwd","layer":0,"micro_batch":0,"bytes":1024,"transfer_us":1.550}},
{"name":"recv bwd mb0","cat":"pp","ph":"X","pid":9,"tid":4,"ts":3.000,"dur":1.000,
 "args":{"task":5,"deps":[10,77],"phase":"bwd","micro_batch":0,"transfer_us":3.400}},
{"name":"dp all-reduce","cat":"dp","ph":"X","pid":4,"tid":2,"ts":0.000,"dur":5.000,
 "args":{"task":6,"deps":[],"phase":"optimizer","bytes":8192,"transfer_us":1.000}},
{"name":"optimizer step","cat":"compute","ph":"X","pid":4,"tid":0,"ts":6.000,"dur":2.000,
 "args":{"task":7,"deps":[6],"phase":"optimizer"}},
{"name":"bwd L1 mb0","cat":"compute","ph":"X","pid":1,"tid":0,"ts":4.250,"dur":1.750,
 "args":{"task":8,"deps":[10],"phase":"bwd","layer":1,"micro_batch":0,"chunk":0}},
{"name":"recompute L1 mb0","cat":"compute","ph":"X","pid":1,"tid":0,"ts":4.000,"dur":0.250,
 "args":{"task":9,"deps":[],"phase":"recompute","layer":1,"micro_batch":0}},
{"name":"untagged","cat":"other","ph":"X","pid":4,"tid":0,"ts":9.000,"dur":0.500},
{"name":"memory","ph":"C","pid":9,"tid":0,"ts":3.000,"args":{"bytes":200}},
{"name":"memory","ph":"C","pid":1,"tid":0,"ts":0.000,"args":{"bytes":50}},
{"name":"queue depth","ph":"C","pid":1,"tid":0,"ts":0.000,"args":{"depth":3}},
{"name":"instant","ph":"i","pid":1,"tid":0,"ts":0.000},
{"name":"thread_name","ph":"M","pid":1,"tid":3,"args":{"name":"pp-send"}},
{"name":"thread_sort_index","ph":"M","pid":1,"tid":3,"args":{"sort_index":3}},
{"name":"thread_name","ph":"M","pid":1,"tid":0,"args":{"name":"compute"}},
{"name":"thread_sort_index","ph":"M","pid":1,"tid":0,"args":{"sort_index":0}},
{"name":"process_name","ph":"M","pid":1,"tid":0,"args":{"name":"rank 1 (stage 1)","stage":1}},
{"name":"process_sort_index","ph":"M","pid":1,"tid":0,"args":{"sort_index":0}},
{"name":"process_name","ph":"M","pid":4,"tid":0,"args":{"name":"rank 4 (stage 0)","stage":0}},
{"name":"process_sort_index","ph":"M","pid":4,"tid":0,"args":{"sort_index":5}},
{"name":"thread_name","ph":"M","pid":4,"tid":2,"args":{"name":"dp-comm"}},
{"name":"thread_sort_index","ph":"M","pid":4,"tid":2,"args":{"sort_index":2}},
{"name":"thread_name","ph":"M","pid":4,"tid":0,"args":{"name":"compute"}},
{"name":"thread_sort_index","ph":"M","pid":4,"tid":0,"args":{"sort_index":0}},
{"name":"process_name","ph":"M","pid":9,"tid":0,"args":{"name":"rank 9 (stage 0)","stage":0}},
{"name":"process_sort_index","ph":"M","pid":9,"tid":0,"args":{"sort_index":0}},
{"name":"thread_name","ph":"M","pid":9,"tid":0,"args":{"name":"compute"}},
{"name":"thread_sort_index","ph":"M","pid":9,"tid":0,"args":{"sort_index":0}},
{"name":"thread_name","ph":"M","pid":9,"tid":1,"args":{"name":"tp-comm"}},
{"name":"thread_sort_index","ph":"M","pid":9,"tid":1,"args":{"sort_index":2}},
{"name":"thread_name","ph":"M","pid":9,"tid":4,"args":{"name":"pp-recv"}},
{"name":"thread_sort_index","ph":"M","pid":9,"tid":4,"args":{"sort_index":1}}
],
"displayTimeUnit": "ns"
})json";

std::vector<int32_t> dependencies_of(const Trace& trace, int32_t event) {
  const auto deps = trace.dependencies(event);
  return {deps.begin(), deps.end()};
}

std::string name_of(const Trace& trace, int32_t event) {
  return trace.names[static_cast<size_t>(trace.events[static_cast<size_t>(event)].name)];
}

// The lane order of the header: stage, then process sort index and pid, then thread sort index
// and tid; names from the M events, stage from process_name's args.stage.
TEST_CASE("a Strata trace's lanes are ordered by stage, process and thread",
          "[viewer][trace_model]") {
  const Trace trace = parse_trace(kStrataTrace, "hand.json");
  CHECK(trace.path == "hand.json");
  struct Expected {
    int32_t pid, tid, stage;
    std::string process_name, thread_name;
  };
  const std::vector<Expected> expected = {
      {9, 0, 0, "rank 9 (stage 0)", "compute"}, {9, 4, 0, "rank 9 (stage 0)", "pp-recv"},
      {9, 1, 0, "rank 9 (stage 0)", "tp-comm"}, {4, 0, 0, "rank 4 (stage 0)", "compute"},
      {4, 2, 0, "rank 4 (stage 0)", "dp-comm"}, {1, 0, 1, "rank 1 (stage 1)", "compute"},
      {1, 3, 1, "rank 1 (stage 1)", "pp-send"}};
  REQUIRE(trace.lanes.size() == expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    INFO("lane " << i);
    CHECK(trace.lanes[i].pid == expected[i].pid);
    CHECK(trace.lanes[i].tid == expected[i].tid);
    CHECK(trace.lanes[i].stage == expected[i].stage);
    CHECK(trace.lanes[i].process_name == expected[i].process_name);
    CHECK(trace.lanes[i].thread_name == expected[i].thread_name);
  }
  CHECK(trace.pids() == std::vector<int32_t>{9, 4, 1});
  CHECK(trace.stage_of(4) == 0);
  CHECK(trace.stage_of(1) == 1);
  CHECK(trace.stage_of(42) == -1);
}

// Each lane holds its events by start (the file has lane 0's two events in the other order), and
// every X event is in exactly one lane, the lane of its (pid, tid); longest_ns is the lane's
// longest duration.
TEST_CASE("a lane holds its events sorted by start", "[viewer][trace_model]") {
  const Trace trace = parse_trace(kStrataTrace, "hand.json");
  REQUIRE(trace.events.size() == 10);
  const std::vector<std::vector<int32_t>> expected = {{2, 1}, {4}, {3}, {6, 9}, {5}, {8, 7}, {0}};
  REQUIRE(trace.lanes.size() == expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    INFO("lane " << i);
    CHECK(trace.lanes[i].events == expected[i]);
    for (const int32_t e : trace.lanes[i].events) {
      CHECK(trace.events[static_cast<size_t>(e)].lane == static_cast<int32_t>(i));
    }
  }
  CHECK(trace.lanes[0].longest_ns == 10001);
  CHECK(trace.lanes[3].longest_ns == 2000);
  CHECK(trace.lanes[6].longest_ns == 250);
}

// ts and dur are microseconds with three decimals: 1234.567 us is 1234567 ns exactly, 10.001 us
// 10001 ns; a communication's transfer_us gives transfer_ns, any other event's is its start.
// Labels come from args and cat (an unknown cat is compute; no args: phase other, no task).
TEST_CASE("event times are exact nanoseconds and labels come from args", "[viewer][trace_model]") {
  const Trace trace = parse_trace(kStrataTrace, "hand.json");
  REQUIRE(trace.events.size() == 10);
  const TraceEvent& qkv = trace.events[1];
  CHECK(name_of(trace, 1) == "fwd L0 mb0 qkv");
  CHECK(qkv.start_ns == 1234567);
  CHECK(qkv.dur_ns == 10001);
  CHECK(qkv.end_ns() == 1244568);
  CHECK(qkv.transfer_ns == qkv.start_ns);
  CHECK(qkv.kind == EventKind::kCompute);
  CHECK(qkv.phase == EventPhase::kForward);
  CHECK(qkv.task == 3);
  CHECK(qkv.layer == 0);
  CHECK(qkv.micro_batch == 0);
  CHECK(qkv.chunk == 0);
  CHECK(qkv.flops == 1000000);
  CHECK(qkv.bytes == 2048);

  const TraceEvent& send = trace.events[0];
  CHECK(send.kind == EventKind::kPp);
  CHECK(send.start_ns == 2500);
  CHECK(send.dur_ns == 250);
  CHECK(send.transfer_ns == 2600);
  CHECK(send.layer == -1);
  CHECK(send.flops == -1);
  CHECK(send.bytes == 4096);

  CHECK(trace.events[3].kind == EventKind::kTp);
  CHECK(trace.events[3].transfer_ns == 1550);
  CHECK(trace.events[4].kind == EventKind::kPp);
  CHECK(trace.events[4].phase == EventPhase::kBackward);
  CHECK(trace.events[4].transfer_ns == 3400);
  CHECK(trace.events[5].kind == EventKind::kDp);
  CHECK(trace.events[5].start_ns == 0);
  CHECK(trace.events[5].transfer_ns == 1000);
  CHECK(trace.events[6].phase == EventPhase::kOptimizer);
  CHECK(trace.events[8].phase == EventPhase::kRecompute);

  const TraceEvent& untagged = trace.events[9];
  CHECK(name_of(trace, 9) == "untagged");
  CHECK(untagged.kind == EventKind::kCompute);
  CHECK(untagged.phase == EventPhase::kOther);
  CHECK(untagged.task == -1);
  CHECK(untagged.micro_batch == -1);
  CHECK(untagged.bytes == -1);
  CHECK(untagged.dep_count == 0);

  // The step: from the dp all-reduce's start at 0 to the qkv's end.
  CHECK(trace.start_ns == 0);
  CHECK(trace.end_ns == 1244568);
  CHECK(trace.span_ns() == 1244568);
}

// args.deps are task ids; each becomes the index of the event with that args.task (whether it
// comes before or after in the file), and an id with no event (99, 77: a memory task) is dropped.
TEST_CASE("dependencies resolve from task ids to event indices", "[viewer][trace_model]") {
  const Trace trace = parse_trace(kStrataTrace, "hand.json");
  CHECK(dependencies_of(trace, 0) == std::vector<int32_t>{1});     // task 3
  CHECK(dependencies_of(trace, 1).empty());                        // []
  CHECK(dependencies_of(trace, 2).empty());                        // [99]
  CHECK(dependencies_of(trace, 3) == std::vector<int32_t>{2, 1});  // tasks 2, 3
  CHECK(dependencies_of(trace, 4) == std::vector<int32_t>{0});     // tasks 10, 77
  CHECK(dependencies_of(trace, 6) == std::vector<int32_t>{5});     // task 6
  CHECK(dependencies_of(trace, 7) == std::vector<int32_t>{0});     // task 10
  CHECK(trace.deps.size() == 6);
}

// Memory is the "memory" counters per pid, sorted by time (the file has them out of order);
// other counters are not memory. The file's metadata object is kept as it is.
TEST_CASE("memory counters are sorted by time and metadata is kept", "[viewer][trace_model]") {
  const Trace trace = parse_trace(kStrataTrace, "hand.json");
  REQUIRE(trace.memory.size() == 2);
  const std::vector<MemoryPoint>& rank9 = trace.memory.at(9);
  REQUIRE(rank9.size() == 3);
  CHECK(rank9[0].time_ns == 1000);
  CHECK(rank9[0].bytes == 100);
  CHECK(rank9[1].time_ns == 3000);
  CHECK(rank9[1].bytes == 200);
  CHECK(rank9[2].time_ns == 5000);
  CHECK(rank9[2].bytes == 300);
  const std::vector<MemoryPoint>& rank1 = trace.memory.at(1);
  REQUIRE(rank1.size() == 1);
  CHECK(rank1[0].time_ns == 0);
  CHECK(rank1[0].bytes == 50);

  CHECK(trace.metadata.at("generator") == "hand-written");
  CHECK(trace.metadata.at("step_time_s") == 0.0012445680);
  CHECK(trace.metadata.at("per_stage").size() == 1);
}

// The JSON Array Format (Chrome's other layout: a bare array of events) reads the same way. With
// no process carrying a stage, every lane's stage is -1 and lanes go by pid then tid; processes
// and threads without names get "pid N" / "tid N".
TEST_CASE("a trace in the JSON Array Format reads, with no stages", "[viewer][trace_model]") {
  const Trace trace = parse_trace(R"([
{"name":"a","ph":"X","pid":2,"tid":0,"ts":1,"dur":2},
{"name":"b","ph":"X","pid":1,"tid":5,"ts":0.5,"dur":1},
{"name":"c","ph":"X","pid":1,"tid":3,"ts":4,"dur":0.001},
{"name":"process_name","ph":"M","pid":2,"tid":0,"args":{"name":"GPU 2"}}
])",
                                  "array.json");
  REQUIRE(trace.events.size() == 3);
  REQUIRE(trace.lanes.size() == 3);
  CHECK(trace.lanes[0].pid == 1);
  CHECK(trace.lanes[0].tid == 3);
  CHECK(trace.lanes[1].pid == 1);
  CHECK(trace.lanes[1].tid == 5);
  CHECK(trace.lanes[2].pid == 2);
  for (const Lane& lane : trace.lanes) CHECK(lane.stage == -1);
  CHECK(trace.lanes[0].process_name == "pid 1");
  CHECK(trace.lanes[0].thread_name == "tid 3");
  CHECK(trace.lanes[2].process_name == "GPU 2");
  CHECK(trace.events[2].dur_ns == 1);
  CHECK(trace.start_ns == 500);
  CHECK(trace.end_ns == 4001);
  CHECK(trace.metadata.empty());
  CHECK(trace.memory.empty());
}

// Every refusal is an InputError naming the file (`where`) and the field at fault.
TEST_CASE("what is not a trace with a complete event is refused, naming file and field",
          "[viewer][trace_model]") {
  const auto refusal = [](const char* text) {
    return input_error_of([&] { parse_trace(text, "bad.json"); });
  };
  struct Case {
    const char* text;
    const char* field;
    const char* problem;  // a part of the problem's wording
  };
  const std::vector<Case> cases = {
      // Malformed JSON: where is "bad.json:LINE:COLUMN", as for every JSON input.
      {"{\"traceEvents\": [", "", "malformed JSON at line 1, column 18"},
      {"not json at all", "", "malformed JSON at line 1, column 2"},
      {R"({"a":1})", "traceEvents", "missing"},
      {R"({"traceEvents": 3})", "traceEvents", "missing"},
      {R"({"traceEvents":[{"name":"process_name","ph":"M","pid":0,"tid":0,"args":{"name":"r"}}]})",
       "traceEvents", "no complete"},
      {R"({"traceEvents":[]})", "traceEvents", "no complete"},
      {"[]", "traceEvents", "no complete"},
      {R"({"traceEvents":[{"ph":"M","name":"x","pid":0,"tid":0},{"ph":"X","pid":0,"tid":0,"dur":1}]})",
       "traceEvents[1].ts", "missing"},
      {R"({"traceEvents":[{"ph":"X","pid":0,"tid":0,"ts":"1.0","dur":1}]})", "traceEvents[0].ts",
       "not a number"},
      {R"({"traceEvents":[{"ph":"X","pid":0,"tid":0,"ts":1,"dur":-0.5}]})", "traceEvents[0].dur",
       "negative"},
      {R"({"traceEvents":[{"ph":"X","tid":0,"ts":1,"dur":1}]})", "traceEvents[0].pid", "missing"},
      {R"({"traceEvents":[{"ph":"X","pid":0,"tid":0,"ts":1,"dur":1},{"ph":"C","name":"memory","pid":0,"ts":1,"args":{}}]})",
       "traceEvents[1].args.bytes", "missing"},
      // Fields of the wrong type or range are named too (not a JSON library's type error).
      {R"({"traceEvents":[{"ph":1,"pid":0,"tid":0,"ts":1,"dur":1}]})", "traceEvents[0].ph",
       "not a string"},
      {R"({"traceEvents":[{"ph":"X","name":5,"pid":0,"tid":0,"ts":1,"dur":1}]})",
       "traceEvents[0].name", "not a string"},
      {R"({"traceEvents":[{"ph":"X","pid":0,"tid":0,"ts":1,"dur":1,"args":{"task":"7"}}]})",
       "traceEvents[0].args.task", "not an integer"},
      {R"({"traceEvents":[{"ph":"X","pid":5000000000,"tid":0,"ts":1,"dur":1}]})",
       "traceEvents[0].pid", "not an integer in"},
      {R"({"traceEvents":[{"ph":"X","pid":0,"tid":0,"ts":1,"dur":1,"args":{"deps":[1,-2]}}]})",
       "traceEvents[0].args.deps", "not an integer in"},
  };
  for (const Case& c : cases) {
    INFO(c.text);
    const std::optional<InputError> error = refusal(c.text);
    REQUIRE(error.has_value());
    CHECK_THAT(error->where(), Catch::StartsWith("bad.json"));
    CHECK(error->field() == c.field);
    CHECK_THAT(error->problem(), Catch::Contains(c.problem));
    CHECK_THAT(std::string(error->what()), Catch::Contains("bad.json") && Catch::Contains(c.field));
  }
}

// A path that cannot be read is refused naming the path, before anything is parsed.
TEST_CASE("load_trace refuses a missing file naming it", "[viewer][trace_model]") {
  const std::string path = "/nonexistent/strata/no_such_trace.json";
  const std::optional<InputError> error = input_error_of([&] { load_trace(path); });
  REQUIRE(error.has_value());
  CHECK(error->where() == path);
  CHECK(error->field().empty());
  CHECK_THAT(std::string(error->what()), Catch::Contains(path));
}

// The committed trace of `strata simulate` for tiny-gpt, pp 4, 8 micro-batches, 1F1B: one
// process per stage, 810 X events (the graph's 1082 tasks less its memory tasks). A lane is a
// (process, thread) with events: with tp 1 the tp-comm stream (tid 1) has none, so each stage
// shows 4 of its 5 named streams, 16 lanes. 1F1B begins with stage 0's forward of micro-batch 0
// at time 0.
TEST_CASE("the committed pp 4 1F1B trace loads into 4 stages of 4 lanes", "[viewer][trace_model]") {
  const Trace trace = load_trace(STRATA_SOURCE_DIR "/tests/viewer/data/tiny_pp4_1f1b.json");
  CHECK(trace.events.size() == 810);
  const std::vector<int32_t> tids = {0, 2, 3, 4};
  const std::vector<std::string> threads = {"compute", "dp-comm", "pp-send", "pp-recv"};
  REQUIRE(trace.lanes.size() == 16);
  for (size_t i = 0; i < trace.lanes.size(); ++i) {
    INFO("lane " << i);
    CHECK(trace.lanes[i].stage == static_cast<int32_t>(i / 4));
    CHECK(trace.lanes[i].pid == static_cast<int32_t>(i / 4));
    CHECK(trace.lanes[i].tid == tids[i % 4]);
    CHECK(trace.lanes[i].thread_name == threads[i % 4]);
    CHECK(trace.lanes[i].process_name ==
          "rank " + std::to_string(i / 4) + " (stage " + std::to_string(i / 4) + ")");
  }
  CHECK(trace.pids() == std::vector<int32_t>{0, 1, 2, 3});
  REQUIRE_FALSE(trace.lanes[0].events.empty());
  const TraceEvent& first = trace.events[static_cast<size_t>(trace.lanes[0].events.front())];
  CHECK(first.kind == EventKind::kCompute);
  CHECK(first.phase == EventPhase::kForward);
  CHECK(first.micro_batch == 0);
  CHECK(first.start_ns == 0);
  CHECK(trace.start_ns == 0);
  // The metadata's step time is the last event's end.
  CHECK(trace.end_ns == std::llround(trace.metadata.at("step_time_s").get<double>() * 1e9));
  CHECK(trace.metadata.at("plan").at("pp") == 4);
  CHECK(trace.memory.size() == 4);
}

}  // namespace
}  // namespace strata::viewer
