#!/usr/bin/env bash
# Issue 36, second call: head dim 128's forward in unpadded, swizzled tiles (two blocks per
# multiprocessor with K and V loaded together). Build; the attention tests' GPU parameters;
# bench_attention.py (the other rows repeat the first call's code: a second timing of it);
# racecheck and synccheck over the attention kernels' tests; ncu of the forward kernels.
# Usage: bash .whl/gpu36h.sh COMMIT
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
COMMIT=${1:-unknown}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/logs /tmp/res
T0=$(date +%s)
at() { echo "$1 rc=$2 at $(( $(date +%s) - T0 )) s"; }
save() { cp /tmp/res/*.json /tmp/res/*.md "$OUT/" 2>/dev/null; tar -czf "$OUT/logs.tar.gz" -C /tmp logs; }
cp "$0" /tmp/logs/
GPUMAT_GIT_COMMIT=$COMMIT GPU_CHECK_BUDGET_S=200 GPU_CHECK_STEPS=nvidia-smi,openblas,safetensors,setuptools,build,import \
  bash "$REPO/scripts/gpu_check.sh" /tmp/gc > /tmp/logs/check.log 2>&1
at check $? | tee -a /tmp/logs/check.log
cp /tmp/gc/summary.txt "$OUT/summary.txt" 2>/dev/null
cp /tmp/gc/logs/*.log /tmp/logs/ 2>/dev/null
export GPUMAT_GIT_COMMIT=$COMMIT PYTHONUNBUFFERED=1
cd /tmp
K="$REPO/tests/kernels"
timeout 60 python3 -m pytest -q -m cuda -p no:cacheprovider "$K/test_attention.py" \
  "$REPO/tests/frontend/test_attention_modules.py" > /tmp/logs/pytest.log 2>&1
at pytest $? | tee -a /tmp/logs/pytest.log
timeout 100 python3 "$REPO/benchmarks/bench_attention.py" --ctx gpu --no-memory --out /tmp/res/ > /tmp/logs/bench_attention.log 2>&1
at bench_attention $? | tee -a /tmp/logs/bench_attention.log
save
SEL="(kernel or deterministic) and not errors and not profile and not switch"
timeout 70 sh -c 'for tool in racecheck synccheck; do echo "== $tool"; compute-sanitizer --tool $tool \
    --target-processes application-only --error-exitcode 86 python3 -m pytest -q -m cuda -p no:cacheprovider \
    "$0/test_attention.py" -k "$1" || exit $?; done' "$K" "$SEL" > /tmp/logs/racecheck.log 2>&1
at racecheck $? | tee -a /tmp/logs/racecheck.log
save
timeout 40 ncu --clock-control none -k regex:attention_forward --section SpeedOfLight --section Occupancy \
  --section LaunchStats python3 "$REPO/.whl/attn_ncu.py" > /tmp/logs/ncu.log 2>&1
at ncu $? | tee -a /tmp/logs/ncu.log
save
tail -n 2 /tmp/logs/pytest.log
grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" /tmp/logs/racecheck.log | sort | uniq -c | head -3
grep "^|" /tmp/logs/bench_attention.log | tail -n 8
grep -E "  attention_|Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit (Reg|Shared)|Dynamic Shared|Compute \(SM\) Thr" /tmp/logs/ncu.log | head -30
grep -h "rc=" /tmp/logs/*.log
at total 0
