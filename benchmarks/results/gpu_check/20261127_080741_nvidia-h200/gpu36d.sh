#!/usr/bin/env bash
# c3a35dc's attention stores on a GPU: build, the attention tests' GPU parameters, racecheck over
# the kernels' tests, then bench_attention.py.
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
COMMIT=${1:-unknown}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/logs /tmp/res
T0=$(date +%s)
at() { echo "$1 rc=$2 at $(( $(date +%s) - T0 )) s"; }
GPUMAT_GIT_COMMIT=$COMMIT GPU_CHECK_BUDGET_S=110 GPU_CHECK_STEPS=nvidia-smi,openblas,safetensors,setuptools,build,import \
  bash "$REPO/scripts/gpu_check.sh" /tmp/gc > /tmp/logs/check.log 2>&1
at check $? | tee -a /tmp/logs/check.log
cp /tmp/gc/summary.txt "$OUT/summary.txt" 2>/dev/null
export GPUMAT_GIT_COMMIT=$COMMIT PYTHONUNBUFFERED=1
cd /tmp
K="$REPO/tests/kernels"
timeout 40 python3 -m pytest -q -m cuda -p no:cacheprovider "$K/test_attention.py" "$REPO/tests/frontend/test_attention_modules.py" > /tmp/logs/pytest.log 2>&1
at pytest $? >> /tmp/logs/pytest.log
timeout 30 compute-sanitizer --tool racecheck --target-processes application-only --error-exitcode 86 python3 -m pytest -q \
  -m cuda -p no:cacheprovider "$K/test_attention.py" -k "kernel and not errors and not profile" > /tmp/logs/racecheck.log 2>&1
at racecheck $? >> /tmp/logs/racecheck.log
timeout 45 python3 "$REPO/benchmarks/bench_attention.py" --ctx gpu --no-memory --out /tmp/res/ > /tmp/logs/bench_attention.log 2>&1
at bench_attention $? >> /tmp/logs/bench_attention.log
cp /tmp/res/*.json /tmp/res/*.md "$OUT/" 2>/dev/null
tar -czf "$OUT/logs.tar.gz" -C /tmp logs
tail -n 2 /tmp/logs/pytest.log; grep -h "RACECHECK SUMMARY" /tmp/logs/racecheck.log; tail -n 3 /tmp/logs/racecheck.log
grep "^|" /tmp/logs/bench_attention.log | tail -n 8
grep -h "rc=" /tmp/logs/*.log
