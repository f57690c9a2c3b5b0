#!/usr/bin/env bash
# Builds and runs the whole SGEMM ladder on a GPU machine in one call (< 5 min on an H100).
#
#   bash benchmarks/sgemm/run_ladder.sh [OUT_DIR]      (default: $OUT, else ./sgemm_out)
#
# Writes to OUT_DIR: meta.txt (date, commit, nvidia-smi, nvcc, cuBLAS found), build.log,
# resources.txt (registers / smem / spills per kernel), sass.txt (LDS.128 / LDGSTS / FFMA counts),
# check.txt (correctness only: edge + MNIST shapes, aligned and misaligned, every kernel),
# sanitizer.txt (compute-sanitizer memcheck and racecheck on small shapes), mnist.txt / mnist.json
# and sq4096.txt / sq4096.json (correctness + timing). The last thing printed is the two summary
# tables. Exit status: non-zero if the build or any correctness check failed.
#
# Environment: LADDER_BUILD=0 uses the ./sgemm_ladder already built here (`make`; scripts/gpu_check.sh
# builds it while gpumat builds); LADDER_SANITIZER=0 leaves out the compute-sanitizer runs (the
# slowest part); LADDER_REPS_4096 (default 30) timed repetitions per 4096^3 case.
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT_DIR="${1:-${OUT:-$PWD/sgemm_out}}"
mkdir -p "$OUT_DIR"
OUT_DIR="$(cd "$OUT_DIR" && pwd)"
ARCH="${ARCH:-sm_90}"
cd "$HERE"
status=0

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  # A device machine's copy of the tree may carry a stale .git: the caller's commit comes first.
  if [ -n "${GPUMAT_GIT_COMMIT:-}" ]; then
    echo "commit: $GPUMAT_GIT_COMMIT (GPUMAT_GIT_COMMIT)"
  else
    echo "commit: $(git -C "$HERE" rev-parse HEAD 2>/dev/null || echo unknown)"
    echo "dirty files: $(git -C "$HERE" status --porcelain -- . 2>/dev/null | wc -l)"
  fi
  echo "arch: $ARCH"
  nvidia-smi 2>&1 || true
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv 2>&1 || true
  nvcc --version 2>&1 || true
  make -s print-cublas ARCH="$ARCH" 2>&1 || true
} > "$OUT_DIR/meta.txt"

if [ "${LADDER_BUILD:-1}" = 0 ] && [ -x sgemm_ladder ]; then
  echo "== build: using the sgemm_ladder built before (LADDER_BUILD=0)"
  echo "prebuilt sgemm_ladder (LADDER_BUILD=0)" > "$OUT_DIR/build.log"
else
  echo "== build ($ARCH)"
  t0=$(date +%s)
  if ! make -B ARCH="$ARCH" > "$OUT_DIR/build.log" 2>&1; then
    cat "$OUT_DIR/build.log"
    echo "BUILD FAILED"
    exit 1
  fi
  echo "   built in $(( $(date +%s) - t0 )) s"
fi
cp ptxas.txt resources.txt "$OUT_DIR/" 2>/dev/null
if command -v cuobjdump > /dev/null; then
  cuobjdump -sass sgemm_ladder > "$OUT_DIR/sgemm_ladder.sass" 2>&1 && python3 sass_summary.py "$OUT_DIR/sgemm_ladder.sass" > "$OUT_DIR/sass.txt" 2>&1
  rm -f "$OUT_DIR/sgemm_ladder.sass"
fi

echo "== correctness (edge + MNIST shapes, aligned and misaligned)"
t0=$(date +%s)
timeout 240 ./sgemm_ladder --shapes edge --shapes mnist --check-only --misalign \
  --kernels 0,1,2,3,4,5,6,7,5:2,5:5 > "$OUT_DIR/check.txt" 2>&1
rc=$?
tail -n 1 "$OUT_DIR/check.txt"
echo "   exit $rc in $(( $(date +%s) - t0 )) s"
[ $rc -eq 0 ] || status=1

echo "== MNIST shapes (timing; kernel 5 also at fixed splits 1, 2, 4, 8)"
t0=$(date +%s)
timeout 180 ./sgemm_ladder --shapes mnist --splits 1,2,4,8 --reps 50 --json "$OUT_DIR/mnist.json" \
  > "$OUT_DIR/mnist.txt" 2>&1
rc=$?
echo "   exit $rc in $(( $(date +%s) - t0 )) s"
[ $rc -eq 0 ] || status=1

echo "== 4096^3, four transpose cases (timing)"
t0=$(date +%s)
timeout 240 ./sgemm_ladder --shapes 4096 --reps "${LADDER_REPS_4096:-30}" --json "$OUT_DIR/sq4096.json" > "$OUT_DIR/sq4096.txt" 2>&1
rc=$?
echo "   exit $rc in $(( $(date +%s) - t0 )) s"
[ $rc -eq 0 ] || status=1

echo "== compute-sanitizer (memcheck, racecheck; small shapes; last, as it is the slowest part)"
if [ "${LADDER_SANITIZER:-1}" = 0 ]; then
  echo "   left out (LADDER_SANITIZER=0)" | tee "$OUT_DIR/sanitizer.txt"
elif command -v compute-sanitizer > /dev/null; then
  {
    timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 ./sgemm_ladder --check-only --misalign \
      --shapes '132,260,68;65,63,17;1000,100,10' --kernels 2,3,4,5,6,7,5:3
    echo "memcheck exit $?"
    timeout 90 compute-sanitizer --tool racecheck --error-exitcode 9 ./sgemm_ladder --check-only \
      --shapes '132,260,68;36,20,52' --kernels 2,3,4,5,7,5:3
    echo "racecheck exit $?"
  } > "$OUT_DIR/sanitizer.txt" 2>&1
  grep -E "exit|ERROR SUMMARY|RACECHECK SUMMARY" "$OUT_DIR/sanitizer.txt" | sed 's/^/   /'
  grep -qE "memcheck exit 0" "$OUT_DIR/sanitizer.txt" && grep -qE "racecheck exit 0" "$OUT_DIR/sanitizer.txt" || status=1
else
  echo "   compute-sanitizer not found" | tee "$OUT_DIR/sanitizer.txt"
fi

echo
echo "== resources: tuned kernels (2-7) that spill (full table in resources.txt)"
grep -E "warptile|blocktile" "$OUT_DIR/resources.txt" | awk '$NF != "0/0" {print "   " $0; n++} END {if (!n) print "   none"}'
echo
for f in mnist sq4096; do
  echo "== $f"
  if grep -q '^summary' "$OUT_DIR/$f.txt"; then
    sed -n '/^summary/,$p' "$OUT_DIR/$f.txt"
  else
    tail -n 5 "$OUT_DIR/$f.txt"
  fi
done
echo "status: $status (0 = every check passed)"
exit $status
