# What the *_outputs.sh drivers share (sourced by each, after they set $check and $strata): a
# fresh working directory, removed on exit; fail(); run_strata(); check_py().

workdir=$(mktemp -d "${TMPDIR:-/tmp}/strata-outputs.XXXXXX")
trap 'rm -rf "$workdir"' EXIT
cd "$workdir"

fail() {
  echo "FAILED ($check): $*"
  exit 1
}

# Runs strata with the given arguments, requiring exit code 0; stdout goes to stdout.txt.
run_strata() {
  echo "run: strata $*"
  local rc=0
  "$strata" "$@" >stdout.txt 2>stderr.txt </dev/null || rc=$?
  [[ $rc -eq 0 ]] || fail "exit code $rc, expected 0; stderr: $(<stderr.txt)"
}

# Runs a python3 program given as text with the remaining arguments; its failure (an assertion
# with a message) fails the check.
check_py() {
  local program=$1
  shift
  python3 -c "$program" "$@" || fail "the python check above failed"
}
