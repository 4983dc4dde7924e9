#!/usr/bin/env bash
# Runs one refusal case of tests/cli/refusals.txt and checks that strata refuses it the way
# docs/design.md asks of a user's mistake ("Determinism, units, errors"):
#   - the exit code is exactly 2;
#   - stderr matches EXPECTED_REGEX (grep -E), which names the field or flag at fault;
#   - one clear message: stderr is exactly one line, starting with "strata: error:";
#   - nothing on stdout, and no file left behind: the command runs in a fresh empty directory,
#     `plan` cases get `--json out.json --emit-graph graph.json` appended and `simulate` cases
#     `--json out.json --trace trace.json` (each unless the case gives it), and the directory
#     must still be empty afterwards (no output, no temporary file).
#
# Usage: expect_refusal.sh NAME STRATA_BINARY EXPECTED_REGEX ARGS...
set -uo pipefail

if [[ $# -lt 4 ]]; then
  echo "usage: $0 NAME STRATA_BINARY EXPECTED_REGEX ARGS..." >&2
  exit 64
fi
name=$1 strata=$2 regex=$3
shift 3
args=("$@")
# Appends FLAG FILE to the arguments unless they already give FLAG.
add_output() {
  local arg
  for arg in "${args[@]}"; do [[ "$arg" == "$1" ]] && return; done
  args+=("$1" "$2")
}
case "${args[0]:-}" in
  plan) add_output --json out.json; add_output --emit-graph graph.json ;;
  simulate) add_output --json out.json; add_output --trace trace.json ;;
esac

workdir=$(mktemp -d "${TMPDIR:-/tmp}/strata-refusal.XXXXXX")
trap 'rm -rf "$workdir"' EXIT
cd "$workdir" || exit 1

"$strata" "${args[@]}" >stdout.txt 2>stderr.txt </dev/null
rc=$?
stdout=$(<stdout.txt)
stderr=$(<stderr.txt)
rm -f stdout.txt stderr.txt

failures=()
[[ $rc -eq 2 ]] || failures+=("exit code $rc, expected 2")
grep -Eq -- "$regex" <<<"$stderr" || failures+=("stderr does not match /$regex/")
lines=$(grep -c '' <<<"$stderr")
[[ $lines -eq 1 ]] || failures+=("stderr has $lines lines, expected one")
[[ "$stderr" == "strata: error:"* ]] || failures+=("stderr does not start with 'strata: error:'")
[[ -z "$stdout" ]] || failures+=("stdout is not empty")
left=$(ls -A)
[[ -z "$left" ]] || failures+=("files were left behind: $(tr '\n' ' ' <<<"$left")")

echo "case:   $name"
echo "run:    strata ${args[*]}"
echo "exit:   $rc"
echo "stderr: $stderr"
if [[ ${#failures[@]} -gt 0 ]]; then
  [[ -n "$stdout" ]] && echo "stdout: $stdout"
  printf 'FAILED: %s\n' "${failures[@]}"
  exit 1
fi
echo "ok: refused with exit 2, one message matching /$regex/, nothing written"
