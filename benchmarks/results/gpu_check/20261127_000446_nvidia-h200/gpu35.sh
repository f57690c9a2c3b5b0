#!/usr/bin/env bash
# Issue 35's kernels on a lent GPU: build, then the new tests' gpu parameters, a memcheck of the
# new kernel families, and their timings against torch. Usage: bash .whl/gpu35.sh COMMIT
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
COMMIT=${1:-unknown}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
T0=$(date +%s)
GPUMAT_GIT_COMMIT=$COMMIT GPU_CHECK_BUDGET_S=170 \
  GPU_CHECK_STEPS=nvidia-smi,openblas,safetensors,setuptools,build,import \
  bash "$REPO/scripts/gpu_check.sh" /tmp/gc > "$OUT/check.log" 2>&1
cp /tmp/gc/summary.txt "$OUT/summary.txt" 2>/dev/null
echo "check done at $(( $(date +%s) - T0 )) s" >> "$OUT/check.log"
cd /tmp
TO=""; python3 -c "import pytest_timeout" 2>/dev/null && TO="--timeout=60"
TESTS="$REPO/tests/kernels/test_strided.py $REPO/tests/kernels/test_index.py $REPO/tests/kernels/test_sort.py $REPO/tests/frontend/test_views.py $REPO/tests/frontend/test_sort_creation.py"
TESTS="$TESTS $REPO/tests/kernels/test_prod_cumsum_pow_tril.py $REPO/tests/frontend/test_reductions_pow.py"
timeout 170 python3 -m pytest -q -m cuda $TO -p no:cacheprovider $TESTS > "$OUT/pytest.log" 2>&1
echo "pytest rc=$? at $(( $(date +%s) - T0 )) s" >> "$OUT/pytest.log"
timeout 120 python3 "$REPO/.whl/gpu35_timing.py" > "$OUT/timing.log" 2>&1
echo "timing rc=$? at $(( $(date +%s) - T0 )) s" >> "$OUT/timing.log"
timeout 90 compute-sanitizer --tool memcheck --target-processes application-only \
  python3 -m pytest -q -m cuda -p no:cacheprovider \
  "$REPO/tests/kernels/test_strided.py" "$REPO/tests/kernels/test_index.py" "$REPO/tests/kernels/test_sort.py" \
  "$REPO/tests/kernels/test_prod_cumsum_pow_tril.py" \
  -k "not graph_gradients" > "$OUT/memcheck.log" 2>&1
echo "memcheck rc=$? at $(( $(date +%s) - T0 )) s" >> "$OUT/memcheck.log"
tail -c 3000 "$OUT/memcheck.log" > "$OUT/memcheck_tail.log"
rm -f "$OUT/memcheck.log"
# the shared-memory kernels new here: the sums' tiles and the bitonic sort
timeout 90 compute-sanitizer --tool racecheck --target-processes application-only \
  python3 -m pytest -q -m cuda -p no:cacheprovider "$REPO/tests/kernels/test_strided.py" \
  "$REPO/tests/kernels/test_sort.py" -k "sum_to or argsort" > "$OUT/racecheck.log" 2>&1
echo "racecheck rc=$? at $(( $(date +%s) - T0 )) s" >> "$OUT/racecheck.log"
tail -c 2000 "$OUT/racecheck.log" > "$OUT/racecheck_tail.log"
rm -f "$OUT/racecheck.log"
