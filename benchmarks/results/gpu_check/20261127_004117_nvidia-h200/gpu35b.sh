#!/usr/bin/env bash
# The broadcast add's 32-bit path on a GPU: build, the strided tests' GPU parameters, the timings.
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
GPUMAT_GIT_COMMIT=${1:-unknown} GPU_CHECK_BUDGET_S=150 GPU_CHECK_STEPS=nvidia-smi,openblas,build,import \
  bash "$REPO/scripts/gpu_check.sh" /tmp/gc > "$OUT/check.log" 2>&1
cp /tmp/gc/summary.txt "$OUT/summary.txt" 2>/dev/null
cd /tmp
timeout 60 python3 -m pytest -q -m cuda -p no:cacheprovider "$REPO/tests/kernels/test_strided.py" \
  "$REPO/tests/frontend/test_views.py" > "$OUT/pytest.log" 2>&1
echo "pytest rc=$?" >> "$OUT/pytest.log"
timeout 90 python3 "$REPO/.whl/gpu35_timing.py" > "$OUT/timing.log" 2>&1
echo "timing rc=$?" >> "$OUT/timing.log"
