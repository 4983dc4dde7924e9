#!/usr/bin/env bash
# scripts/gpu-check without a GPU, as CI can run it: `bundle` packs the kernel tests, the
# benchmark, the libraries a bare CUDA machine lacks and the script into at most 64 MiB, and
# `run` from that bundle, on a machine whose nvidia-smi names an H200 but whose CUDA runtime finds
# no device (a stand-in nvidia-smi and compute-sanitizer first on PATH), runs every check in
# order, reports each kernel-test check failed (the tests exit 77: no device), writes the report
# named by the GPU with a row per check and the checks not built yet, and exits 1.
#
# Usage: gpu_check_test.sh SOURCE_DIR
set -euo pipefail

src=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
  echo "FAILED: $*" >&2
  exit 1
}

"$src/scripts/gpu-check" bundle "$work/bundle" >"$work/bundle.txt"
for file in gpu-check COMMIT bin/strata_tests_kernels_cuda bin/strata_bench_kernels; do
  [[ -e "$work/bundle/$file" ]] || fail "the bundle has no $file"
done
bytes=$(du -sb "$work/bundle" | cut -f1)
((bytes <= 64 * 1024 * 1024)) || fail "the bundle is $bytes bytes, over 64 MiB"

mkdir "$work/bin"
cat >"$work/bin/nvidia-smi" <<'SMI'
#!/usr/bin/env bash
case "$*" in
  *-L*) echo "GPU 0: NVIDIA H200 (UUID: GPU-0)" ;;
  *query-gpu=name*) echo "NVIDIA H200" ;;
  *driver_version*) echo "580.00" ;;
esac
SMI
cat >"$work/bin/compute-sanitizer" <<'SAN'
#!/usr/bin/env bash
while [[ $1 == --* ]]; do shift 2; done
exec "$@"
SAN
chmod +x "$work/bin/nvidia-smi" "$work/bin/compute-sanitizer"

rc=0
(cd "$work" && PATH="$work/bin:$PATH" bundle/gpu-check run results >run.txt 2>&1) || rc=$?
[[ $rc -eq 1 ]] || fail "run exited $rc, expected 1 (no device: the tests fail)"
report="$work/results/h200-gpu-check.md"
[[ -f $report ]] || fail "no $report"
for check in "kernel tests, fp32" "kernel tests, bf16" "determinism" \
  "compute-sanitizer memcheck" "compute-sanitizer synccheck" "compute-sanitizer racecheck"; do
  grep -q "^| $check | .* | FAIL" "$report" || fail "no failed row for '$check'"
done
grep -q "^| strata_bench_kernels | " "$report" || fail "no benchmark row"
[[ $(grep -c "not built yet" "$report") -eq 5 ]] || fail "not 5 rows of checks not built yet"
! grep -q "$work" "$report" || fail "the report names the machine's paths"
for log in tests-fp32 tests-bf16 determinism memcheck synccheck racecheck bench-kernels; do
  [[ -f "$work/results/h200-gpu-check-logs/$log.log" ]] || fail "no $log.log"
done
echo "gpu-check: bundle of $((bytes / 1024 / 1024)) MiB, run without a device reported as expected"
