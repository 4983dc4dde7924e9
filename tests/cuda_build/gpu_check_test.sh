#!/usr/bin/env bash
# scripts/gpu-check without a GPU, as CI can run it: `bundle` packs the kernel tests, the
# benchmark, the CUDA backend's, calibration's and NCCL's tests, the strata CLI, the training text,
# the libraries a bare CUDA machine lacks and the script into at most 64 MiB, and `run` from that
# bundle, on a machine whose nvidia-smi names an H200 but whose CUDA runtime finds no device (a
# stand-in nvidia-smi and compute-sanitizer first on PATH), runs every check in order, reports
# each check that needs the device failed (the tests exit 77: no device; strata calibrate refuses
# with exit 2), writes the report named by the GPU with a row per check, and exits 1.
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
for file in gpu-check COMMIT payload.tar.xz; do
  [[ -e "$work/bundle/$file" ]] || fail "the bundle has no $file"
done
payload=$(tar -tJf "$work/bundle/payload.tar.xz")
for file in bin/strata_tests_kernels_cuda bin/strata_bench_kernels bin/strata_tests_exec_cuda \
  bin/strata_tests_cuda_calibration bin/strata share/strata/scenarios/data/kjv-genesis-exodus.txt; do
  grep -qx "./$file" <<<"$payload" || fail "the bundle's payload has no $file"
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
  "compute-sanitizer memcheck" "compute-sanitizer synccheck" "compute-sanitizer racecheck" \
  "cuBLASLt heuristic sweep" "emulator goldens" "training parity on the GPU" \
  "strata calibrate --backend cuda"; do
  grep -q "^| $check | .* | FAIL" "$report" || fail "no failed row for '$check'"
done
grep -q "^| strata_bench_kernels | " "$report" || fail "no benchmark row"
grep -Eq "^\| 1-GPU NCCL smoke test \| .* \| (FAIL|not built)" "$report" || fail "no NCCL row"
! grep -q "not built yet" "$report" || fail "the report lists checks not built yet"
grep -q "tests/kernels_cuda/goldens/h200.json" "$report" || fail "the report names no goldens' home"
! grep -q "$work" "$report" || fail "the report names the machine's paths"
for log in tests-fp32 tests-bf16 determinism memcheck synccheck racecheck bench-kernels \
  cublaslt-heuristic goldens training-parity calibrate; do
  [[ -f "$work/results/h200-gpu-check-logs/$log.log" ]] || fail "no $log.log"
done
grep -q "no CUDA device" "$work/results/h200-gpu-check-logs/calibrate.log" ||
  fail "strata calibrate did not refuse for want of a device"
echo "gpu-check: bundle of $((bytes / 1024 / 1024)) MiB, run without a device reported as expected"
