#!/usr/bin/env bash
# The whole suite's GPU parameters at the commit with test_fusion.py's fix. Build, then pytest -m cuda -n 8.
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
COMMIT=${1:-unknown}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/logs
T0=$(date +%s)
at() { echo "$1 rc=$2 at $(($(date +%s) - T0)) s"; }
GPUMAT_GIT_COMMIT=$COMMIT GPU_CHECK_BUDGET_S=120 GPU_CHECK_STEPS=openblas,safetensors,setuptools,data,build,import \
  bash "$REPO/scripts/gpu_check.sh" /tmp/gc >/tmp/logs/check.log 2>&1
rc=$?
at check $rc
cp /tmp/gc/logs/*.log /tmp/logs/ 2>/dev/null
[ "$rc" -eq 0 ] || { tail -n 30 /tmp/logs/build.log /tmp/logs/import.log; exit 1; }
export PYTHONUNBUFFERED=1 GPUMAT_DATA_DIR=$REPO/.whl
cd /tmp
timeout 115 python3 -m pytest -q -m cuda -n 8 -p no:cacheprovider --timeout=60 "$REPO/tests" >/tmp/logs/pytest_all.log 2>&1
at pytest_all $? | tee -a /tmp/logs/pytest_all.log
tar -czf "$OUT/logs.tar.gz" -C /tmp logs
grep -h "FAILED\|passed\|failed" /tmp/logs/pytest_all.log | tail -n 8
at total 0
