#!/usr/bin/env bash
# Checks `strata view` and `strata compare` as a user runs them, one check per call, in a fresh
# directory.
#
# Usage: view_outputs.sh CHECK STRATA_BINARY SOURCE_DIR
# Exit 77 (CTest's SKIP_RETURN_CODE for these tests) when a check needs a tool that is missing:
# the window check without xvfb-run.
set -euo pipefail

check=$1 strata=$2 src=$3
kSkip=77
source "$src/tests/cli/output_helpers.sh"

trace="$src/tests/viewer/data/tiny_pp4_1f1b.json"

# PNG dimensions from the IHDR chunk, and that the picture is not blank: a uniform image
# compresses to a few hundred bytes; the viewer's is tens of kilobytes.
png_is() {
  check_py '
import struct, sys
path, width, height = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
data = open(path, "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
w, h = struct.unpack(">II", data[16:24])
assert (w, h) == (width, height), (w, h)
assert len(data) > 10000, f"{len(data)} bytes: blank?"
' "$@"
}

case $check in
  screenshot_headless)
    # --screenshot renders without a display (no DISPLAY in the environment) at --size, writes
    # only the PNG, and the same trace gives the same bytes twice.
    unset DISPLAY WAYLAND_DISPLAY
    run_strata view "$trace" --screenshot a.png --size 900x500
    grep -q "wrote a.png (900x500" stdout.txt || fail "stdout: $(<stdout.txt)"
    png_is a.png 900 500
    run_strata view "$trace" --screenshot b.png --size 900x500
    cmp a.png b.png || fail "two renderings of one trace differ"
    [[ $(ls | sort | tr '\n' ' ') == "a.png b.png stderr.txt stdout.txt " ]] ||
      fail "unexpected files: $(ls)"
    ;;
  range_and_tabs)
    # --range shows part of the step, --tab memory the memory plot and, with two traces, --tab
    # compare the comparison: each renders a different picture.
    run_strata view "$trace" --screenshot whole.png --size 800x450
    run_strata view "$trace" --screenshot range.png --size 800x450 --range 0:200us
    run_strata view "$trace" --screenshot memory.png --size 800x450 --tab memory
    run_strata view "$trace" "$trace" --screenshot compare.png --size 800x450 --tab compare
    for png in whole range memory compare; do png_is $png.png 800 450; done
    ! cmp -s whole.png range.png || fail "--range drew the whole step"
    ! cmp -s whole.png memory.png || fail "--tab memory drew the timeline"
    ! cmp -s whole.png compare.png || fail "--tab compare drew the timeline"
    ;;
  predicted_vs_measured)
    # What the viewer is for: a step measured by `strata train --trace` next to the same plan
    # predicted by `strata simulate --trace`, stacked and compared; both traces read, each on
    # its own tab.
    shape=(--model tiny-gpt --dp 2 --tp 2 --pp 2 --seq-len 32 --micro-batch 2 --global-batch 8)
    run_strata train "${shape[@]}" --steps 2 --trace measured.json
    run_strata simulate "${shape[@]}" --dtype fp32 --graph full --cluster dgx-a100 \
      --trace predicted.json
    for tab in timeline memory compare; do
      run_strata view predicted.json measured.json --screenshot $tab.png --size 1000x600 \
        --tab $tab
      png_is $tab.png 1000 600
    done
    ! cmp -s timeline.png compare.png || fail "--tab compare drew the timeline"
    ;;
  compare_self)
    # `strata compare` of a trace with itself: every part equal, error 0, the step row first and
    # each of the trace's 4 stages with its phases, busy and bubble; the JSON holds the same rows.
    run_strata compare "$trace" "$trace" --json compare.json
    grep -q "^ step  step" stdout.txt || fail "no step row"
    check_py '
import json, sys
rows = json.load(open("compare.json"))["rows"]
assert rows[0]["stage"] == -1 and rows[0]["part"] == "step", rows[0]
assert all(r["error"] == 0 and r["predicted_s"] == r["measured_s"] for r in rows), rows
stages = {r["stage"] for r in rows}
assert stages == {-1, 0, 1, 2, 3}, stages
for stage in range(4):
    parts = {r["part"] for r in rows if r["stage"] == stage}
    assert {"fwd", "bwd", "busy", "bubble"} <= parts, (stage, parts)
'
    ;;
  compare_parts)
    # `strata compare PREDICTED MEASURED` on a step measured by `strata train --trace` and the
    # same plan predicted by `strata simulate --trace`: each trace's step row is its own span (its
    # last event end minus its first event start, read here from the JSON), the error is
    # predicted / measured - 1, and both pipeline stages have forward and backward rows.
    shape=(--model tiny-gpt --dp 2 --tp 2 --pp 2 --seq-len 32 --micro-batch 2 --global-batch 8)
    run_strata train "${shape[@]}" --steps 2 --trace measured.json
    run_strata simulate "${shape[@]}" --dtype fp32 --graph full --cluster dgx-a100 \
      --trace predicted.json
    run_strata compare predicted.json measured.json --json compare.json
    check_py '
import json
def span(path):
    events = [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X"]
    return (max(e["ts"] + e["dur"] for e in events) - min(e["ts"] for e in events)) * 1e-6
rows = json.load(open("compare.json"))["rows"]
step = rows[0]
assert step["part"] == "step", step
assert abs(step["predicted_s"] - span("predicted.json")) < 1e-6, (step, span("predicted.json"))
assert abs(step["measured_s"] - span("measured.json")) < 1e-6, (step, span("measured.json"))
assert abs(step["error"] - (step["predicted_s"] / step["measured_s"] - 1)) < 1e-9, step
for stage in (0, 1):
    parts = {r["part"] for r in rows if r["stage"] == stage}
    assert {"fwd", "bwd"} <= parts, (stage, parts)
'
    ;;
  no_display_refused)
    # Without a display and without --screenshot there is no window to open: one clear message
    # naming DISPLAY and the way out (--screenshot), exit code 2, nothing written.
    echo "run: strata view (no DISPLAY)"
    rc=0
    env -u DISPLAY -u WAYLAND_DISPLAY "$strata" view "$trace" >stdout.txt 2>stderr.txt || rc=$?
    [[ $rc -eq 2 ]] || fail "exit code $rc, expected 2"
    [[ $(wc -l <stderr.txt) -eq 1 ]] || fail "expected one line of error: $(<stderr.txt)"
    grep -q "field 'DISPLAY'.*--screenshot" stderr.txt || fail "stderr: $(<stderr.txt)"
    [[ $(ls | sort | tr '\n' ' ') == "stderr.txt stdout.txt " ]] || fail "files: $(ls)"
    ;;
  window_under_xvfb)
    # The real GLFW window on a virtual X server: it opens, renders 5 frames, and its back
    # buffer is written as the screenshot.
    command -v xvfb-run >/dev/null || { echo "SKIP: xvfb-run not found"; exit $kSkip; }
    echo "run: xvfb-run strata view --window --screenshot window.png"
    xvfb-run -a -s "-screen 0 1280x800x24" "$strata" view "$trace" --window \
      --screenshot window.png --frames 5 --size 1000x600 >stdout.txt 2>stderr.txt ||
      fail "exit code $?; stderr: $(<stderr.txt)"
    grep -q "wrote window.png (1000x600, window)" stdout.txt || fail "stdout: $(<stdout.txt)"
    png_is window.png 1000 600
    ;;
  *)
    fail "unknown check"
    ;;
esac
echo "OK: $check"
