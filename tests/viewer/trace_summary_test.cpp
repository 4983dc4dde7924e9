// A step's figures recomputed from a trace (viewer/trace_summary.hpp): the same numbers as the
// simulator's step metrics (sim/step_metrics.cpp) when read from the trace the simulator writes,
// closed-form figures on a hand-made trace, and the rows compare() puts side by side.

#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "sim/simulate.hpp"
#include "sim/trace.hpp"
#include "tests/plan/plan_fixtures.hpp"
#include "viewer/trace_model.hpp"
#include "viewer/trace_summary.hpp"

namespace strata::viewer {
namespace {

int64_t ns_of_seconds(double seconds) { return std::llround(seconds * 1e9); }

// Seconds as the simulator reports them against nanoseconds from the trace: the simulator's
// seconds are integer nanoseconds / 1e9, so they agree to the nanosecond.
void check_ns(double simulated_s, int64_t traced_ns) {
  CHECK(std::llabs(ns_of_seconds(simulated_s) - traced_ns) <= 1);
}

// Parity: simulate the plan, write its trace (sim/trace.hpp), read it back and summarize it.
// The trace carries every non-memory task's [start, finish] and transfer time to the
// nanosecond, and the memory samples, so the viewer's definitions (busy = union of compute,
// exposed TP / PP / DP charged in that order, bubble = step - busy - exposed over busy less
// optimizer, the busiest rank per stage) must give the simulator's per-stage figures exactly.
void check_parity(const CompiledPlan& compiled) {
  const SimResult result = simulate(compiled);
  const Trace trace = parse_trace(trace_json(compiled, result), "simulated.json");
  const TraceSummary summary = summarize(trace);

  CHECK(summary.step_ns == ns_of_seconds(result.step_time_s));
  REQUIRE(summary.stages.size() == result.per_stage.size());
  REQUIRE(static_cast<int64_t>(summary.stages.size()) == compiled.plan.pp);
  for (size_t s = 0; s < summary.stages.size(); ++s) {
    const StageSummary& got = summary.stages[s];
    const StageResult& want = result.per_stage[s];
    INFO("stage " << s);
    CHECK(got.stage == want.stage);
    check_ns(want.busy_s, got.busy_ns);
    check_ns(want.idle_s, got.idle_ns);
    CHECK(got.bubble_fraction == Approx(want.bubble_fraction).epsilon(1e-9).margin(1e-12));
    check_ns(want.exposed_comm_s.tp, got.exposed_ns[0]);
    check_ns(want.exposed_comm_s.pp, got.exposed_ns[1]);
    check_ns(want.exposed_comm_s.dp, got.exposed_ns[2]);
    check_ns(want.comm_s.tp, got.comm_ns[0]);
    check_ns(want.comm_s.pp, got.comm_ns[1]);
    check_ns(want.comm_s.dp, got.comm_ns[2]);
    CHECK(got.peak_memory_bytes == want.peak_memory_bytes);
  }
  CHECK(summary.bubble_fraction == Approx(result.bubble_fraction).epsilon(1e-9).margin(1e-12));
  check_ns(result.exposed_comm_s.tp, summary.exposed_ns[0]);
  check_ns(result.exposed_comm_s.pp, summary.exposed_ns[1]);
  check_ns(result.exposed_comm_s.dp, summary.exposed_ns[2]);
  CHECK(summary.peak_memory_bytes == result.peak_memory_bytes);
  // A pipeline has bubbles: the test would pass vacuously on an all-zero summary otherwise.
  CHECK(summary.bubble_fraction > 0);
}

// tiny-gpt, pp 4, 8 micro-batches, 1F1B (the committed trace's plan): the folded graph has one
// rank per stage.
TEST_CASE("a simulated pp 4 1F1B trace summarizes to the simulator's figures",
          "[viewer][trace_summary]") {
  const CompiledPlan compiled =
      test::compile_checked(load_model("tiny-gpt"), test::make_plan(1, 1, 4, 1, 8, 256));
  REQUIRE(compiled.plan.micro_batches() == 8);
  check_parity(compiled);
}

// dp 2 x tp 2 x pp 2, 8 micro-batches per pipeline, folded and full: TP and DP collectives and
// pipeline p2p on every rank, and in the full graph four ranks per stage of which the busiest
// stands for the stage.
TEST_CASE("a simulated dp 2 x tp 2 x pp 2 trace summarizes to the simulator's figures",
          "[viewer][trace_summary]") {
  for (const GraphMode mode : {GraphMode::kFolded, GraphMode::kFull}) {
    INFO("graph mode " << to_string(mode));
    const CompiledPlan compiled =
        test::compile_checked(load_model("tiny-gpt"), test::make_plan(2, 2, 2, 1, 16, 128), mode);
    REQUIRE(compiled.plan.micro_batches() == 8);
    check_parity(compiled);
  }
}

// A complete event on (pid, tid) at [start, end] ns, with its data moving from `transfer` (a
// communication) and the given phase.
std::string event(const char* cat, int pid, int tid, int64_t start, int64_t end, const char* phase,
                  int64_t transfer = -1) {
  const auto us = [](int64_t ns) { return fmt::format("{}.{:03}", ns / 1000, ns % 1000); };
  std::string args = fmt::format(R"("phase":"{}")", phase);
  if (transfer >= 0) args += fmt::format(R"(,"transfer_us":{})", us(transfer));
  return fmt::format(R"({{"name":"e","cat":"{}","ph":"X","pid":{},"tid":{},"ts":{},"dur":{},)"
                     R"("args":{{{}}}}})",
                     cat, pid, tid, us(start), us(end - start), args);
}

std::string process(int pid, int stage) {
  return fmt::format(
      R"({{"name":"process_name","ph":"M","pid":{},"tid":0,"args":{{"name":"r{}","stage":{}}}}})",
      pid, pid, stage);
}

std::string memory(int pid, int64_t time, int64_t bytes) {
  return fmt::format(R"({{"name":"memory","ph":"C","pid":{},"tid":0,"ts":{}.000,"args":{{)"
                     R"("bytes":{}}}}})",
                     pid, time, bytes);
}

// Three ranks, times in ns multiplied by `scale`:
//  pid 0, stage 0: compute fwd [0,10], bwd [30,38], optimizer [38,40]; a PP recv [20,30] whose
//    data moves over [25,30]; a DP all-reduce [35,50] whose data moves over [38,50];
//    memory 100, 300, 200 bytes.
//  pid 2, stage 0: compute fwd [0,5]; memory 500 bytes.
//  pid 1, stage 1: compute fwd [10,20], bwd [20,25]; a TP all-reduce [5,12] moving over [8,12];
//    a PP send [25,30] moving over [25,30]; memory 50 bytes.
// The step is [0, 50] x scale.
std::string hand_made_trace(int64_t scale) {
  const int64_t k = scale;
  std::vector<std::string> events = {
      process(0, 0),
      process(1, 1),
      process(2, 0),
      event("compute", 0, 0, 0, 10 * k, "fwd"),
      event("compute", 0, 0, 30 * k, 38 * k, "bwd"),
      event("compute", 0, 0, 38 * k, 40 * k, "optimizer"),
      event("pp", 0, 4, 20 * k, 30 * k, "bwd", 25 * k),
      event("dp", 0, 2, 35 * k, 50 * k, "optimizer", 38 * k),
      event("compute", 2, 0, 0, 5 * k, "fwd"),
      event("compute", 1, 0, 10 * k, 20 * k, "fwd"),
      event("compute", 1, 0, 20 * k, 25 * k, "bwd"),
      event("tp", 1, 1, 5 * k, 12 * k, "fwd", 8 * k),
      event("pp", 1, 3, 25 * k, 30 * k, "bwd", 25 * k),
      memory(0, 0, 100),
      memory(0, 10, 300),
      memory(0, 40, 200),
      memory(2, 0, 500),
      memory(1, 0, 50),
  };
  return fmt::format("{{\"traceEvents\":[\n{}\n]}}", fmt::join(events, ",\n"));
}

// The hand-made trace's figures, worked out (scale 1, ns):
//  pid 0: busy = [0,10] + [30,40] = 20, of which optimizer 2.
//    PP transfer [25,30] lies outside busy: exposed pp = 5.
//    DP transfer [38,50] outside busy and PP: [40,50], exposed dp = 10; no TP.
//    Covered: [0,10] u [25,50]; bubbles [10,25] = 15 = 50 - 20 - 5 - 10.
//    Bubble fraction 15 / (20 - 2) = 15/18.
//  pid 2: busy 5, less than pid 0: it does not stand for stage 0, but its 500 bytes are the
//    stage's peak.
//  pid 1: busy = [10,25] = 15. TP transfer [8,12] outside busy: [8,10], exposed tp = 2.
//    PP [25,30]: exposed pp = 5. Covered [8,30]; bubbles [0,8] + [30,50] = 28 = 50 - 15 - 2 - 5.
//    Bubble fraction 28/15.
//  The step: bubble fraction max(15/18, 28/15) = 28/15; exposed per kind the largest stage's:
//  tp 2, pp 5, dp 10; peak memory 500.
TEST_CASE("a hand-made two-stage trace has the figures worked out by hand",
          "[viewer][trace_summary]") {
  const TraceSummary summary = summarize(parse_trace(hand_made_trace(1), "hand.json"));
  CHECK(summary.step_ns == 50);

  REQUIRE(summary.ranks.size() == 3);
  const RankActivity& a = summary.ranks[0];
  CHECK(a.pid == 0);
  CHECK(a.stage == 0);
  CHECK(a.busy_ns == 20);
  CHECK(a.optimizer_ns == 2);
  CHECK(a.comm_ns == std::array<int64_t, 3>{0, 5, 12});
  CHECK(a.exposed_ns == std::array<int64_t, 3>{0, 5, 10});
  REQUIRE(a.bubbles.size() == 1);
  CHECK(a.bubbles[0].begin == 10);
  CHECK(a.bubbles[0].end == 25);
  CHECK(a.bubble_ns == 15);
  CHECK(a.peak_memory_bytes == 300);

  CHECK(summary.ranks[1].pid == 2);  // lanes by stage, then pid
  CHECK(summary.ranks[1].busy_ns == 5);

  const RankActivity& b = summary.ranks[2];
  CHECK(b.pid == 1);
  CHECK(b.stage == 1);
  CHECK(b.busy_ns == 15);
  CHECK(b.comm_ns == std::array<int64_t, 3>{4, 5, 0});
  CHECK(b.exposed_ns == std::array<int64_t, 3>{2, 5, 0});
  REQUIRE(b.bubbles.size() == 2);
  CHECK(b.bubbles[0].begin == 0);
  CHECK(b.bubbles[0].end == 8);
  CHECK(b.bubbles[1].begin == 30);
  CHECK(b.bubbles[1].end == 50);
  CHECK(b.bubble_ns == 28);

  REQUIRE(summary.stages.size() == 2);
  const StageSummary& s0 = summary.stages[0];
  CHECK(s0.stage == 0);
  CHECK(s0.pid == 0);
  CHECK(s0.busy_ns == 20);
  CHECK(s0.idle_ns == 30);
  CHECK(s0.bubble_ns == 15);
  CHECK(s0.bubble_fraction == Approx(15.0 / 50.0).epsilon(1e-12));  // of the 50 ns step
  CHECK(s0.exposed_ns == std::array<int64_t, 3>{0, 5, 10});
  CHECK(s0.phase_ns[static_cast<size_t>(EventPhase::kForward)] == 10);
  CHECK(s0.phase_ns[static_cast<size_t>(EventPhase::kBackward)] == 8);
  CHECK(s0.phase_ns[static_cast<size_t>(EventPhase::kOptimizer)] == 2);
  CHECK(s0.phase_ns[static_cast<size_t>(EventPhase::kRecompute)] == 0);
  CHECK(s0.peak_memory_bytes == 500);

  const StageSummary& s1 = summary.stages[1];
  CHECK(s1.stage == 1);
  CHECK(s1.pid == 1);
  CHECK(s1.busy_ns == 15);
  CHECK(s1.idle_ns == 35);
  CHECK(s1.bubble_fraction == Approx(28.0 / 50.0).epsilon(1e-12));
  CHECK(s1.exposed_ns == std::array<int64_t, 3>{2, 5, 0});
  CHECK(s1.peak_memory_bytes == 50);

  CHECK(summary.bubble_fraction == Approx(28.0 / 50.0).epsilon(1e-12));
  CHECK(summary.exposed_ns == std::array<int64_t, 3>{2, 5, 10});
  CHECK(summary.peak_memory_bytes == 500);
}

// compare(): a "step" row, then per stage the phases with compute time in either trace
// (recompute has none here), busy, bubble, and exposed communication of each kind either trace
// has. Against the same trace at twice the times every figure doubles: relative() = (2x - x) / x
// = 1 on every row.
TEST_CASE("compare() puts each stage's phases and figures side by side",
          "[viewer][trace_summary]") {
  const TraceSummary first = summarize(parse_trace(hand_made_trace(1), "first.json"));
  const TraceSummary second = summarize(parse_trace(hand_made_trace(2), "second.json"));
  const std::vector<ComparisonRow> rows = compare(first, second);
  const std::vector<std::pair<int32_t, std::string>> expected = {
      {-1, "step"},  {0, "fwd"},        {0, "bwd"},        {0, "optimizer"}, {0, "busy"},
      {0, "bubble"}, {0, "exposed pp"}, {0, "exposed dp"}, {1, "fwd"},       {1, "bwd"},
      {1, "busy"},   {1, "bubble"},     {1, "exposed tp"}, {1, "exposed pp"}};
  REQUIRE(rows.size() == expected.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    INFO("row " << i << ": stage " << rows[i].stage << " " << rows[i].quantity);
    CHECK(rows[i].stage == expected[i].first);
    CHECK(rows[i].quantity == expected[i].second);
    CHECK(rows[i].second_ns == 2 * rows[i].first_ns);
    CHECK(rows[i].relative() == Approx(1.0).epsilon(1e-12));
  }
  CHECK(rows[0].first_ns == 50);
  CHECK(rows[5].first_ns == 15);  // stage 0's bubble
  CHECK(rows[12].first_ns == 2);  // stage 1's exposed tp

  // relative() = (second - first) / first, and 0 when there is nothing to compare with.
  CHECK(ComparisonRow{0, "busy", 200, 150}.relative() == Approx(-0.25).epsilon(1e-15));
  CHECK(ComparisonRow{0, "busy", 0, 150}.relative() == 0.0);
}

// A stage that only one trace has gets no rows; the step row is always there.
TEST_CASE("compare() skips stages the second trace lacks", "[viewer][trace_summary]") {
  const TraceSummary first = summarize(parse_trace(hand_made_trace(1), "first.json"));
  TraceSummary second = first;
  second.stages.erase(second.stages.begin());  // stage 0 gone
  const std::vector<ComparisonRow> rows = compare(first, second);
  REQUIRE_FALSE(rows.empty());
  CHECK(rows[0].stage == -1);
  for (size_t i = 1; i < rows.size(); ++i) CHECK(rows[i].stage == 1);
  CHECK(rows.size() == 7);  // step + stage 1's fwd, bwd, busy, bubble, exposed tp, exposed pp
}

}  // namespace
}  // namespace strata::viewer
