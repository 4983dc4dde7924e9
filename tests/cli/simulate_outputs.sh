#!/usr/bin/env bash
# What `strata simulate` writes when it succeeds. Each check runs in a fresh temporary directory and
# prints what it ran and why it failed. Reports and traces are read with python3's json module
# (python3 is on every machine the project builds on; docs/design.md's Perfetto format is JSON).
#
# Usage: simulate_outputs.sh CHECK STRATA_BINARY SOURCE_DIR
set -euo pipefail

check=$1 strata=$2 src=$3
# shellcheck source=tests/cli/output_helpers.sh
source "$(dirname "${BASH_SOURCE[0]}")/output_helpers.sh"

# A full graph of tiny-gpt with every kind of task: TP, PP and DP on 8 A100s.
tiny_full=(--model tiny-gpt --cluster dgx-a100 --seq-len 256 --gpus 8 --tp 2 --pp 2
           --global-batch 8 --graph full)
# A plan whose compute dominates (GPT-2 124M, 1024 tokens), full graph, pp 2 x dp 4.
gpt2_full=(--model gpt2-124m --cluster dgx-h100 --seq-len 1024 --gpus 8 --pp 2 --global-batch 16
           --graph full)

case "$check" in
  report_keys)
    run_strata simulate --scenario "$src/scenarios/default.json" --json out.json
    check_py '
import json, sys
report = json.load(open(sys.argv[1]))
top = ["step_time_s", "tokens_per_s", "samples_per_s", "model_flops_per_step",
       "hardware_flops_per_step", "model_tflops_per_gpu", "hardware_tflops_per_gpu", "mfu",
       "hfu", "bubble_fraction", "exposed_comm_s", "comm_s", "peak_memory_bytes",
       "fits_in_memory", "cost_usd_per_step", "cost_usd_per_million_tokens", "per_stage",
       "plan", "model", "cluster"]
missing = [k for k in top if k not in report]
assert not missing, f"the report lacks {missing}"
for key in ["exposed_comm_s", "comm_s"]:
    assert sorted(report[key]) == ["cp", "dp", "ep", "pp", "tp"], f"{key} has {sorted(report[key])}"
stage_keys = ["stage", "busy_s", "idle_s", "bubble_fraction", "peak_memory_bytes", "memory"]
memory_keys = ["params", "grads", "optimizer", "activations", "buffers"]
stages = report["per_stage"]
assert len(stages) == 4, f"{len(stages)} stages, expected pp 4"
for index, stage in enumerate(stages):
    missing = [k for k in stage_keys if k not in stage]
    assert not missing, f"stage {index} lacks {missing}"
    missing = [k for k in memory_keys if k not in stage["memory"]]
    assert not missing, f"stage {index} memory lacks {missing}"
assert report["step_time_s"] > 0 and 0 < report["mfu"] < 1, "step time or MFU out of range"
assert report["fits_in_memory"] is True, "the default scenario should fit"
assert report["plan"]["tp"] == 8 and report["model"]["name"] == "llama3-70b"
' out.json
    for label in "step " "tokens/s" "MFU" "HFU" "bubble " "exposed " "total " "fits" \
                 "per million tokens" "busy s"; do
      grep -q -- "$label" stdout.txt || fail "the summary lacks '$label'"
    done
    ;;
  trace_valid)
    run_strata simulate "${tiny_full[@]}" --trace trace.json --json out.json
    check_py '
import json, sys
trace = json.load(open(sys.argv[1]))
events = trace["traceEvents"]
processes = {e["pid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "process_name"}
assert sorted(processes) == list(range(8)), f"processes {sorted(processes)}, expected ranks 0-7"
assert processes[5] == "rank 5 (stage 1)", processes[5]
threads = {(e["pid"], e["args"]["name"]) for e in events
           if e["ph"] == "M" and e["name"] == "thread_name"}
assert len(threads) == 8 * 8, f"{len(threads)} named threads, expected 8 ranks x 8 streams"
spans = [e for e in events if e["ph"] == "X"]
assert spans, "no X events"
step_us = json.load(open(sys.argv[2]))["step_time_s"] * 1e6
for e in spans:
    assert e["ts"] >= 0 and e["ts"] + e["dur"] <= step_us + 1e-3, f"outside the step: {e}"
assert {e["cat"] for e in spans} == {"compute", "tp", "pp", "dp", "host"}, {e["cat"] for e in spans}
assert any(e["ph"] == "C" and e["name"] == "memory" for e in events), "no memory counters"
assert trace["metadata"]["generator"] == "strata simulate"
' trace.json out.json
    ;;
  deterministic)
    # Stragglers, mixed devices and ZeRO 3 too: every option of the simulator's input.
    args=(simulate "${tiny_full[@]}" --zero 3 --sequence-parallel --slow-rank 3:1.5
          --rank-device 4-7:h100-sxm --price 3)
    run_strata "${args[@]}" --json r1.json --trace t1.json
    mv stdout.txt s1.txt
    run_strata "${args[@]}" --json r2.json --trace t2.json
    [[ -s t1.json ]] || fail "t1.json is empty"
    cmp r1.json r2.json || fail "two runs wrote different reports"
    cmp t1.json t2.json || fail "two runs wrote different traces"
    cmp s1.txt stdout.txt || fail "two runs printed different summaries"
    ;;
  slow_rank)
    run_strata simulate "${gpt2_full[@]}" --json uniform.json
    run_strata simulate "${gpt2_full[@]}" --slow-rank 0:2 --json slow.json
    grep -q 'rank 0 computes 2x slower' stdout.txt || fail "the summary does not name the slow rank"
    check_py '
import json, sys
uniform = json.load(open(sys.argv[1]))["step_time_s"]
slow = json.load(open(sys.argv[2]))["step_time_s"]
assert slow > uniform * 1.2, f"a rank at half speed: step {slow} s, uniform {uniform} s"
' uniform.json slow.json
    ;;
  slow_rank_selects_full)
    # --slow-rank without --graph simulates the full graph: every rank, not one per stage.
    run_strata simulate --model tiny-gpt --cluster dgx-a100 --seq-len 256 --gpus 8 --pp 2 \
      --global-batch 8 --slow-rank 1:1.5 --json out.json
    grep -q '^  "graph_mode": "full",$' out.json || fail 'out.json lacks "graph_mode": "full"'
    ;;
  rank_device)
    # Ranks 0-3 (pipeline stage 0) on A100s instead of H100s: that stage, and the step, slow down.
    run_strata simulate "${gpt2_full[@]}" --json uniform.json
    run_strata simulate "${gpt2_full[@]}" --rank-device 0-3:a100-40gb --json mixed.json
    check_py '
import json, sys
uniform = json.load(open(sys.argv[1]))["step_time_s"]
mixed = json.load(open(sys.argv[2]))["step_time_s"]
assert mixed > uniform * 1.2, f"half the ranks on A100s: step {mixed} s, all H100s {uniform} s"
' uniform.json mixed.json
    ;;
  price)
    # Cost is linear in the price: $4 per GPU-hour costs twice $2.
    run_strata simulate "${tiny_full[@]}" --price 2 --json two.json
    run_strata simulate "${tiny_full[@]}" --price 4 --json four.json
    check_py '
import json, sys
two, four = (json.load(open(p)) for p in sys.argv[1:3])
for key in ["cost_usd_per_step", "cost_usd_per_million_tokens"]:
    assert abs(four[key] - 2 * two[key]) <= 1e-12 * four[key], f"{key}: {four[key]} vs {two[key]}"
assert two["price_usd_per_gpu_hour"] == 2
' two.json four.json
    ;;
  does_not_fit)
    # As for plan: not an error; the summary says DOES NOT FIT and the report says false.
    run_strata simulate --model llama3-70b --cluster dgx-a100 --gpus 8 --tp 8 --global-batch 8 \
      --seq-len 8192 --json out.json
    grep -q 'DOES NOT FIT' stdout.txt || fail "the summary does not say DOES NOT FIT"
    grep -q '^  "fits_in_memory": false,$' out.json || fail 'out.json lacks "fits_in_memory": false'
    ;;
  *)
    echo "unknown check '$check'" >&2
    exit 64
    ;;
esac
echo "ok: $check"
