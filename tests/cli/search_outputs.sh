#!/usr/bin/env bash
# What `strata search` writes and prints when it succeeds. Each check runs in a fresh temporary
# directory and prints what it ran and why it failed. Reports and traces are read with python3's
# json and csv modules. The searches are small (a few seconds at most).
#
# Usage: search_outputs.sh CHECK STRATA_BINARY SOURCE_DIR
# Exit 77 (CTest's SKIP_RETURN_CODE for these tests) when a check needs a tool that is missing:
# the mpi check without mpirun.
set -euo pipefail

check=$1 strata=$2 src=$3
# shellcheck source=tests/cli/output_helpers.sh
source "$(dirname "${BASH_SOURCE[0]}")/output_helpers.sh"

readonly kSkip=77

# Llama 3 8B on 8 H100s at seq 4096: some plans do not fit (by the bound and by the memory plan),
# and the top 3 mix tp, sp, pp and interleaving.
llama=(--model llama3-8b --cluster dgx-a100 --gpus 4 --global-batch 8 --seq-len 8192)
# GPT-2 124M on 8 or 16 A100s: two cluster sizes, every plan fits.
gpt2=(--model gpt2-124m --cluster dgx-a100 --gpus 8,16 --global-batch 32 --seq-len 1024)

case "$check" in
  figures_equal_simulate)
    # The search's figures are what `strata simulate` predicts for the same plan, exactly.
    run_strata search "${llama[@]}" --top 3 --json search.json
    grep -q '^checked  the 3 plan(s) shown pass the task graph validator' stdout.txt ||
      fail "the summary does not say the 3 plans shown pass the graph validator"
    check_py '
import json, sys
plans = json.load(open(sys.argv[1]))["plans"][:3]
assert len(plans) == 3, f"{len(plans)} plans ranked, expected at least 3"
with open("flags.txt", "w") as out:
    for entry in plans:
        p = entry["plan"]
        flags = ["--gpus", p["dp"] * p["tp"] * p["pp"], "--dp", p["dp"], "--tp", p["tp"],
                 "--pp", p["pp"], "--vpp", p["vpp"], "--schedule", p["schedule"],
                 "--micro-batch", p["micro_batch"], "--zero", p["zero_stage"],
                 "--recompute", p["recompute"], "--global-batch", p["global_batch"],
                 "--seq-len", p["seq_len"], "--dtype", p["dtype"], "--attention", p["attention"]]
        if p["sequence_parallel"]:
            flags.append("--sequence-parallel")
        for key, flag in (("tp_comm_overlap", "--tp-comm-overlap"),
                          ("overlap_grad_reduce", "--overlap-grad-reduce"),
                          ("overlap_param_gather", "--overlap-param-gather")):
            if p[key]:
                flags.append(flag)
        if p.get("first_stage_layers", 0) > 0:
            flags += ["--first-stage-layers", p["first_stage_layers"],
                      "--last-stage-layers", p["last_stage_layers"]]
        print(" ".join(str(f) for f in flags), file=out)
' search.json
    rank=0
    while read -r -a flags; do
      rank=$((rank + 1))
      run_strata simulate --model llama3-8b --cluster dgx-a100 "${flags[@]}" \
        --json "simulate$rank.json"
    done <flags.txt
    [[ $rank -eq 3 ]] || fail "simulated $rank plans, expected 3"
    check_py '
import json, sys
plans = json.load(open(sys.argv[1]))["plans"]
keys = ["step_time_s", "mfu", "peak_memory_bytes", "cost_usd_per_step",
        "cost_usd_per_million_tokens"]
for rank in range(1, 4):
    plan, figures = plans[rank - 1]["plan"], plans[rank - 1]["figures"]
    simulated = json.load(open(f"simulate{rank}.json"))
    for key in keys:
        assert figures[key] == simulated[key], \
            f"#{rank} {plan}: search {key} {figures[key]!r}, simulate {simulated[key]!r}"
' search.json
    ;;
  counts_add_up)
    # Every enumerated plan is accounted for once; the CSV has a row per ranked plan; the summary
    # has the table and the why line. Two searches: one with plans over memory (both by the bound
    # and by the memory plan), one over two sizes with a plan stopped mid-simulation.
    for space in llama gpt2; do
      declare -n args=$space
      run_strata search "${args[@]}" --top 3 --csv "$space.csv" --json "$space.json"
      check_py '
import csv, json, sys
report = json.load(open(sys.argv[1]))
c = report["counts"]
parts = ["refused", "over_memory_bound", "over_memory_plan", "skipped_by_bound", "stopped",
         "simulated"]
assert c["enumerated"] == sum(c[k] for k in parts), f"counts do not add up: {c}"
assert c["enumerated"] > 0 and c["simulated"] > 0 and c["skipped_by_bound"] > 0, c
ranked = c["simulated"] - c["over_memory_simulated"]
listed = len(report["plans"])
assert listed == ranked, f"{listed} plans in the JSON, {ranked} ranked"
rows = list(csv.reader(open(sys.argv[2])))
assert rows[0][:3] == ["rank", "gpus", "dp"], f"CSV header {rows[0][:3]}"
assert len(rows) == ranked + 1, f"{len(rows)} CSV rows, expected {ranked} plans + a header"
assert [int(r[0]) for r in rows[1:]] == list(range(1, ranked + 1)), "CSV ranks not 1..N"
' "$space.json" "$space.csv"
      grep -q "^plans    [0-9]* enumerated" stdout.txt || fail "the summary lacks the plan count"
      grep -q '^top 3 by step time' stdout.txt || fail "the summary lacks the table's title"
      grep -Eq '^ +# +gpus +dp +tp +pp +vpp +schedule' stdout.txt || fail "no table header"
      grep -Eq '^ +3 +(4|8|16) ' stdout.txt || fail "the table lacks row #3"
      grep -q '^why #1 beats #2: ' stdout.txt || fail "the summary lacks the why line"
      unset -n args
    done
    check_py '
import json, sys
llama = json.load(open(sys.argv[1]))["counts"]
gpt2 = json.load(open(sys.argv[2]))["counts"]
assert llama["over_memory_bound"] > 0 and llama["over_memory_plan"] > 0, llama
assert gpt2["stopped"] > 0, gpt2
' llama.json gpt2.json
    ;;
  deterministic)
    # Same inputs, same bytes: two runs, and one thread against two, print and write the same.
    run_strata search "${llama[@]}" --top 5 --pareto --csv a.csv --json a.json
    mv stdout.txt a.txt
    run_strata search "${llama[@]}" --top 5 --pareto --csv b.csv --json b.json
    mv stdout.txt b.txt
    run_strata search "${llama[@]}" --top 5 --pareto --csv j1.csv --json j1.json --jobs 1
    mv stdout.txt j1.txt
    run_strata search "${llama[@]}" --top 5 --pareto --csv j2.csv --json j2.json --jobs 2
    mv stdout.txt j2.txt
    [[ -s a.json && -s a.csv ]] || fail "a.json or a.csv is empty"
    for name in txt csv json; do
      cmp "a.$name" "b.$name" || fail "two runs wrote different $name"
      cmp "j1.$name" "j2.$name" || fail "--jobs 1 and --jobs 2 wrote different $name"
      cmp "a.$name" "j1.$name" || fail "--jobs 1 and the default wrote different $name"
    done
    ;;
  progress_bar)
    # The progress bar is for a person at a terminal: with stderr a file, nothing is written
    # there; with a terminal (script(1) from util-linux gives one) the bar is drawn on stderr.
    run_strata search "${gpt2[@]}"
    [[ ! -s stderr.txt ]] || fail "stderr is not a terminal, yet it has: $(<stderr.txt)"
    if ! command -v script >/dev/null; then
      echo "skipped the terminal half: script(1) (util-linux) is not installed"
      exit 0
    fi
    command=$(printf '%q ' "$strata" search "${gpt2[@]}")
    # stdout goes to a file inside the terminal, so what script records is stderr alone.
    script -qec "$command >tty_stdout.txt" /dev/null >tty.txt </dev/null ||
      fail "strata under script(1) failed: $(<tty.txt)"
    grep -q 'search \[.*\] [0-9]*/[0-9]* plans decided, [0-9]* s' tty.txt ||
      fail "no progress bar on a terminal's stderr: $(cat -v tty.txt)"
    grep -q '^why #1 beats #2' tty_stdout.txt ||
      fail "the search under script(1) printed no summary"
    ;;
  nothing_fits)
    # No plan of Llama 3 70B fits one H100: exit 2 with one error line naming the cause and a fix
    # that fits it, the counts on stdout, and none of the requested outputs written.
    rc=0
    "$strata" search --model llama3-70b --cluster dgx-h100 --gpus 1 --global-batch 8 \
      --seq-len 8192 --trace t.json --json s.json >stdout.txt 2>stderr.txt || rc=$?
    [[ $rc -eq 2 ]] || fail "exit code $rc, expected 2"
    [[ $(grep -c '^strata: error:' stderr.txt) -eq 1 ]] || fail "not one error line: $(<stderr.txt)"
    grep -q 'none of the 8 plans fits in memory.*--include-oom' stderr.txt ||
      fail "the error does not name the cause and its fix: $(<stderr.txt)"
    grep -q '^no plan ranked' stdout.txt || fail "stdout lacks the counts' conclusion"
    [[ ! -e t.json && ! -e s.json ]] || fail "an output was written for a search with no answer"
    ;;
  mpi)
    # Under mpirun, ranks split each batch and exchange outcomes as JSON (doubles round-trip
    # exactly), and rank 0 alone prints: the same bytes as one process. Were MPI not in use, both
    # processes would print (stdout twice), or refuse to run (a strata built without MPI).
    if ! command -v mpirun >/dev/null; then
      echo "skipped: mpirun is not installed (scripts/setup installs openmpi-bin)"
      exit $kSkip
    fi
    run_strata search "${gpt2[@]}" --top 5 --pareto --json single.json
    mv stdout.txt single.txt
    # Open MPI's components keep allocations until exit and are unloaded by then, so under
    # AddressSanitizer (make test-asan) LeakSanitizer reports them from unknown modules that no
    # suppression can name: leak checking is off for the processes mpirun starts (address and UB
    # checks stay on); the single-process searches leak-check the same search code.
    export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
    mpi=(mpirun -np 2 --oversubscribe)
    [[ $(id -u) -eq 0 ]] && mpi+=(--allow-run-as-root)
    echo "run: ${mpi[*]} strata search ${gpt2[*]} --top 5 --pareto --json mpi.json"
    rc=0
    "${mpi[@]}" "$strata" search "${gpt2[@]}" --top 5 --pareto --json mpi.json \
      >mpi.txt 2>mpi_stderr.txt </dev/null || rc=$?
    [[ $rc -eq 0 ]] || fail "mpirun exited $rc; stderr: $(<mpi_stderr.txt)"
    cmp single.txt mpi.txt || fail "mpirun -np 2 printed another summary than one process"
    cmp single.json mpi.json || fail "mpirun -np 2 wrote another --json than one process"
    ;;
  cost)
    # Price: the same top plan at $4 costs exactly twice as much per step as at $2.
    run_strata search "${gpt2[@]}" --price 2 --json price2.json
    run_strata search "${gpt2[@]}" --price 4 --json price4.json
    check_py '
import json, sys
two = json.load(open(sys.argv[1]))
four = json.load(open(sys.argv[2]))
prices = (two["search"]["price_usd_per_gpu_hour"], four["search"]["price_usd_per_gpu_hour"])
assert prices == (2, 4), f"prices {prices}"
a, b = two["plans"][0], four["plans"][0]
assert a["plan"] == b["plan"], "the top plan changed with the price"
for key in ["cost_usd_per_step", "cost_usd_per_million_tokens"]:
    at2, at4 = a["figures"][key], b["figures"][key]
    assert at4 == 2 * at2, f"{key}: {at4!r} at $4, {at2!r} at $2"
' price2.json price4.json
    # Training tokens: steps = ceil(tokens / tokens per step), dollars = steps x $ per step.
    run_strata search "${gpt2[@]}" --train-tokens 1B --json train.json
    grep -q '^train    1e+09 tokens with #1: ' stdout.txt || fail "the summary lacks the train line"
    check_py '
import json, math, sys
report = json.load(open(sys.argv[1]))
assert report["search"]["train_tokens"] == 1e9, report["search"]["train_tokens"]
assert report["plans"], "no plan ranked"
for entry in report["plans"]:
    p, train = entry["plan"], entry["train"]
    steps = math.ceil(1e9 / (p["global_batch"] * p["seq_len"]))
    found = train["steps"]
    assert found == steps, f"{found} steps, expected {steps}"
    cost, found = steps * entry["figures"]["cost_usd_per_step"], train["cost_usd"]
    assert found == cost, f"train cost {found!r}, expected {cost!r}"
' train.json
    # Objective cost over two sizes: ranked by $ per million tokens, and the front (step time,
    # $ per step, GPUs) holds exactly the plans no other ranked plan dominates.
    run_strata search "${gpt2[@]}" --objective cost --pareto --json cost.json
    grep -q '^top 10 by cost per token' stdout.txt || fail "the table is not ranked by cost"
    grep -q '^Pareto front of step time against cost and GPUs' stdout.txt ||
      fail "the summary lacks the Pareto front"
    check_py '
import json, sys
report = json.load(open(sys.argv[1]))
plans = report["plans"]
costs = [e["figures"]["cost_usd_per_million_tokens"] for e in plans]
assert costs == sorted(costs), "plans are not in order of cost per million tokens"
assert {e["plan"]["dp"] * e["plan"]["tp"] * e["plan"]["pp"] for e in plans} == {8, 16}, \
    "the ranking lacks one of the two sizes"
def key(e):
    f, p = e["figures"], e["plan"]
    return (f["step_time_s"], f["cost_usd_per_step"], p["dp"] * p["tp"] * p["pp"])
def dominates(q, p):
    a, b = key(q), key(p)
    return all(x <= y for x, y in zip(a, b)) and a != b
front = [rank - 1 for rank in report["pareto_ranks"]]
expected = [i for i, p in enumerate(plans) if not any(dominates(q, p) for q in plans)]
assert front, "the Pareto front is empty"
assert sorted(front) == expected, f"front ranks {sorted(front)}, non-dominated {expected}"
' cost.json
    ;;
  trace_valid)
    # --trace writes the best plan's step as Chrome trace events that parse, with X events inside
    # the step time the search reports for it.
    run_strata search "${llama[@]}" --top 3 --trace trace.json --json search.json
    grep -q "#1's trace: trace.json" stdout.txt || fail "the summary does not name the trace"
    check_py '
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
step_us = json.load(open(sys.argv[2]))["plans"][0]["figures"]["step_time_s"] * 1e6
spans = [e for e in events if e["ph"] == "X"]
assert spans, "no X events"
assert {e["cat"] for e in spans} >= {"compute"}, {e["cat"] for e in spans}
end = max(e["ts"] + e["dur"] for e in spans)
assert end <= step_us + 1e-3, f"an event ends at {end} us, after the step ({step_us} us)"
assert end >= 0.99 * step_us, f"the events end at {end} us, well before the step ({step_us} us)"
' trace.json search.json
    ;;
  *)
    fail "unknown check"
    ;;
esac
echo "ok: $check"
