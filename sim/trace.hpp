#pragma once
// A simulated step as a Chrome trace-event JSON file (docs/design.md, "Outputs"), which
// ui.perfetto.dev and chrome://tracing open and `strata view` reads:
//
//   {"traceEvents": [
//     {"name":"process_name","ph":"M","pid":R,"tid":0,
//      "args":{"name":"rank R (stage S)","stage":S}},
//     {"name":"process_sort_index","ph":"M","pid":R,"tid":0,"args":{"sort_index":R}},
//     {"name":"thread_name","ph":"M","pid":R,"tid":T,"args":{"name":"compute"}},   (per stream)
//     {"name":"thread_sort_index","ph":"M","pid":R,"tid":T,"args":{"sort_index":T}},
//     ...
//     {"name":"fwd L0 mb0 qkv","cat":"compute","ph":"X","pid":R,"tid":T,"ts":1.250,"dur":0.500,
//      "args":{"task":7,"deps":[3],"phase":"fwd","layer":0,"micro_batch":0,"chunk":0,"role":"qkv",
//              "op":"matmul","flops":N,"bytes":N}},                         (per task, id order)
//     ...
//     {"name":"memory","ph":"C","pid":R,"tid":0,"ts":1.250,"args":{"bytes":N}}, (per sample)
//   ],
//   "displayTimeUnit": "ns",
//   "metadata": {"generator": "strata simulate", "step_time_s": ..., ...}}
//
// - One process per rank of the graph (pid = global rank; a folded graph has one rank per
//   pipeline stage), one thread per stream (tid = the Stream's index, named by to_string).
// - One "X" (complete) event per task that is not a memory task: ts = TaskTiming::start_ns and
//   dur = finish_ns - start_ns in microseconds, printed with exactly three decimals, i.e. the
//   simulated integer nanoseconds without rounding (1234567 ns -> 1234.567). cat is "compute",
//   or the communication kind as SimResult counts it: "tp" (collectives on a tensor-parallel
//   group), "pp" (pipeline send/recv), "dp" (every other collective).
// - args: task id, deps (the tasks it waits for besides the one before it on its stream: its
//   dependencies, through memory tasks to what they wait for, and a recv's matching send), phase,
//   role, chunk, and layer / micro_batch where the task has one; compute
//   adds op, flops, bytes; a collective adds collective, group, group_size, bytes and
//   transfer_us (when its data began to move, after every member had arrived); a p2p task adds
//   p2p ("send" / "recv"), peer, bytes and transfer_us; a measured trace adds cpu_us to every
//   task (the CPU time its thread spent in it).
// - One "C" (counter) event named "memory" per MemorySample of the rank: bytes in use.
// - metadata: the step's figures (step time, bubble, communication per kind, per-stage busy,
//   idle, bubble and peak memory), the plan, model and cluster names, the graph mode.
//
// One event per line; the same inputs give the same bytes.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/compile.hpp"
#include "sim/result.hpp"

namespace strata {

// `result` must come from simulating `compiled` (one timing per task, one memory timeline per
// graph rank); asserts otherwise.
std::string trace_json(const CompiledPlan& compiled, const SimResult& result);

// The same format for any timing of the graph's tasks (the executor's measured step): one timing
// per task, one memory timeline per graph rank (may be empty), and the metadata object; with
// `cpu_ns` (one per task), each task's args add cpu_us, the CPU time its rank's thread spent in
// it (exec/rank_runtime.hpp, MeasuredTask).
std::string trace_json(const CompiledPlan& compiled, const std::vector<TaskTiming>& tasks,
                       const std::vector<std::vector<MemorySample>>& memory,
                       const nlohmann::json& metadata, const std::vector<TimeNs>& cpu_ns = {});

}  // namespace strata
