#!/usr/bin/env bash
# What `strata check` prints, writes and exits with. Each check runs in a fresh temporary
# directory and prints what it ran and why it failed. JUnit files are read with python3's
# xml.etree and validated with xmllint (Debian's libxml2-utils, installed by scripts/setup)
# against tests/cli/data/junit.xsd; scenario files with python3's json module.
#
# Usage: check_outputs.sh CHECK STRATA_BINARY SOURCE_DIR
set -euo pipefail

check=$1 strata=$2 src=$3
# shellcheck source=tests/cli/output_helpers.sh
source "$(dirname "${BASH_SOURCE[0]}")/output_helpers.sh"

# Runs strata with the given arguments, requiring exit code $1; stdout goes to stdout.txt.
run_strata_expecting() {
  local expected=$1 rc=0
  shift
  echo "run: strata $* (expecting exit $expected)"
  "$strata" "$@" >stdout.txt 2>stderr.txt </dev/null || rc=$?
  [[ $rc -eq $expected ]] || fail "exit code $rc, expected $expected; stderr: $(<stderr.txt)"
}

# Copies shipped scenarios whose models are zoo names (no path to carry along) into copies/.
copy_scenarios() {
  mkdir -p copies
  local name
  for name in "$@"; do cp "$src/scenarios/$name.json" copies/; done
}

# Multiplies the expected value of METRIC in FILE by FACTOR (the file stays valid JSON, key
# order kept).
perturb() {
  python3 - "$@" <<'EOF'
import json, sys
path, metric, factor = sys.argv[1], sys.argv[2], float(sys.argv[3])
scenario = json.load(open(path))
scenario["expect"][metric]["value"] *= factor
json.dump(scenario, open(path, "w"), indent=2)
EOF
}

case "$check" in
  scenarios_hold)
    # The shipped expectations hold: exit 0, every scenarios/*.json (and no model file of
    # scenarios/models/) in the table, the summary says all hold, published figures beside.
    run_strata check "$src/scenarios/" --junit report.xml
    grep -q 'expectations: all hold$' stdout.txt || fail "the summary does not say 'all hold'"
    check_py '
import glob, os, sys
table = open(sys.argv[1]).read().split("\n\n")[0].splitlines()[1:]
shown = sorted({row.split()[0] for row in table})
files = sorted(os.path.basename(p)[:-5] for p in glob.glob(os.path.join(sys.argv[2], "*.json")))
assert shown == files, f"the table shows {shown}, scenarios/ has {files}"
assert "korthikanti2022-175b" in shown and "default" in shown
' stdout.txt "$src/scenarios"
    # The published step time of korthikanti2022-175b (13.75 s) beside its prediction.
    grep -Eq '^korthikanti2022-175b +step_time_s .* ok +13\.75 +[-+][0-9.]+ \([-+][0-9.]+%\)$' \
      stdout.txt || fail "the published step time of korthikanti2022-175b is not printed beside"
    grep -q "^  korthikanti2022-175b: data/reference/korthikanti2022.csv row '175B (GPT-3)'" \
      stdout.txt || fail "the source of korthikanti2022-175b's published figures is not printed"
    ;;
  regression)
    # step_time_s of tiny-gpt expected 1.5 x higher (rel_tol 0.02): exit 1, the table marks that
    # row REGRESSED and only it, and the JUnit file has a <failure> on exactly the testcase
    # (tiny-gpt-dgx-a100, step_time_s), none on the other 7 testcases of the two scenarios.
    copy_scenarios tiny-gpt-dgx-a100 gpt2-124m-dgx-h100
    perturb copies/tiny-gpt-dgx-a100.json step_time_s 1.5
    run_strata_expecting 1 check copies/ --junit report.xml
    [[ $(grep -c 'REGRESSED' stdout.txt) -eq 2 ]] || fail "expected one REGRESSED row and the summary"
    grep -Eq '^tiny-gpt-dgx-a100 +step_time_s .*-33\.33%.*rel 2% +REGRESSED$' stdout.txt ||
      fail "the table does not mark tiny-gpt-dgx-a100 step_time_s REGRESSED at -33.33%"
    grep -q '1 REGRESSED: tiny-gpt-dgx-a100 step_time_s$' stdout.txt ||
      fail "the summary does not name the regression"
    check_py '
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
cases = [(c.get("classname"), c.get("name"), c.find("failure")) for c in root.iter("testcase")]
assert len(cases) == 8, f"{len(cases)} testcases, expected 4 metrics x 2 scenarios"
failed = [(c, n) for c, n, f in cases if f is not None]
assert failed == [("tiny-gpt-dgx-a100", "step_time_s")], f"failures on {failed}"
message = [f for c, n, f in cases if f is not None][0].get("message")
for word in ["expected", "predicted", "difference", "tolerance rel 2%"]:
    assert word in message, f"the failure message lacks {word!r}: {message}"
suites = list(root.iter("testsuite"))
assert sum(int(s.get("failures")) for s in suites) == 1, [s.attrib for s in suites]
assert sum(int(s.get("tests")) for s in suites) == 8, [s.attrib for s in suites]
' report.xml
    ;;
  junit_valid)
    # The JUnit file validates against Jenkins' JUnit schema and Ant's strict one (a timestamp
    # and host name on each testsuite, no attributes on testsuites, no "skipped"), with a failure
    # in it and a scenario with published figures (properties), and when everything holds.
    copy_scenarios tiny-gpt-dgx-a100
    perturb copies/tiny-gpt-dgx-a100.json mfu 0.5
    run_strata_expecting 1 check "$src/scenarios/korthikanti2022-22b.json" copies/ --junit failing.xml
    grep -q '<failure ' failing.xml || fail "failing.xml has no <failure>"
    grep -q '<property name="published.step_time_s" value="1.1"/>' failing.xml ||
      fail "failing.xml lacks the published step time of korthikanti2022-22b"
    run_strata check "$src/scenarios/korthikanti2022-22b.json" --junit passing.xml
    for file in failing.xml passing.xml; do
      for schema in junit.xsd junit-ant.xsd; do
        xmllint --noout --schema "$src/tests/cli/data/$schema" "$file" ||
          fail "$file does not validate against tests/cli/data/$schema"
      done
    done
    ;;
  update)
    # --update on a copy with wrong values (step_time_s x 1.5, mfu x 0.5) rewrites them to the
    # predictions (what `strata simulate --scenario FILE --json` reports), keeps the tolerances,
    # every other key and the key order; exit 0; then `strata check` on it exits 0 and a second
    # --update rewrites nothing (same bytes).
    copy_scenarios gpt2-124m-dgx-h100
    file=copies/gpt2-124m-dgx-h100.json
    cp "$file" original.json
    perturb "$file" step_time_s 1.5
    perturb "$file" mfu 0.5
    run_strata check --update "$file"
    grep -q "^rewrote $file$" stdout.txt || fail "--update does not say it rewrote $file"
    run_strata simulate --scenario "$file" --json report.json
    check_py '
import json, sys
from collections import OrderedDict
load = lambda p: json.load(open(p), object_pairs_hook=OrderedDict)
original, updated, report = load(sys.argv[1]), load(sys.argv[2]), json.load(open(sys.argv[3]))
def keys(value, path=""):
    if isinstance(value, dict):
        return [(path, list(value))] + [k for key, v in value.items() for k in keys(v, path + "." + key)]
    return []
assert keys(original) == keys(updated), "the keys or their order changed"
for metric in ["step_time_s", "mfu"]:
    expectation = updated["expect"][metric]
    assert expectation["value"] == report[metric], f"{metric}: {expectation} vs report {report[metric]}"
    assert expectation["rel_tol"] == original["expect"][metric]["rel_tol"], f"{metric}: rel_tol changed"
for key in original:
    if key != "expect":
        assert original[key] == updated[key], f"{key} changed"
' original.json "$file" report.json
    cp "$file" updated.json
    run_strata check "$file"
    run_strata check --update "$file"
    grep -q '^no file rewritten' stdout.txt || fail "a second --update rewrote the file"
    cmp updated.json "$file" || fail "a second --update changed the file"
    ;;
  deterministic)
    # Same inputs, same bytes: two runs, and --jobs 1 against --jobs 2, print the same table and
    # write the same JUnit file (one expectation regressed, so that failures are compared too).
    copy_scenarios tiny-gpt-dgx-a100 gpt2-124m-dgx-h100 gpt3-175b-dgx-h100 llama3-8b-dgx-h200
    perturb copies/gpt3-175b-dgx-h100.json step_time_s 1.5
    # The JUnit file's timestamp is SOURCE_DATE_EPOCH's when set (reproducible builds' convention).
    export SOURCE_DATE_EPOCH=1700000000
    run_strata_expecting 1 check copies/ --jobs 2 --junit j2a.xml
    mv stdout.txt s2a.txt
    run_strata_expecting 1 check copies/ --jobs 2 --junit j2b.xml
    mv stdout.txt s2b.txt
    run_strata_expecting 1 check copies/ --jobs 1 --junit j1.xml
    cmp s2a.txt s2b.txt || fail "two runs printed different tables"
    cmp j2a.xml j2b.xml || fail "two runs wrote different JUnit files"
    cmp s2a.txt stdout.txt || fail "--jobs 1 and --jobs 2 printed different tables"
    cmp j2a.xml j1.xml || fail "--jobs 1 and --jobs 2 wrote different JUnit files"
    ;;
  *)
    echo "unknown check '$check'" >&2
    exit 64
    ;;
esac
echo "ok: $check"
