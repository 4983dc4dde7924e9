# What plan_outputs.sh and simulate_outputs.sh share (sourced by both, after they set $check and
# $strata): a fresh working directory, removed on exit; fail(); run_strata().

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
