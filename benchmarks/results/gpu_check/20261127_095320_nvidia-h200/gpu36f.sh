#!/usr/bin/env bash
# The 3xTF32 tensor-core attention kernels on a lent GPU (the last call of the session): build;
# the attention tests' GPU parameters; bench_attention.py alone on the GPU; compute-sanitizer
# memcheck, racecheck and synccheck over the attention tests; ncu sections if time is left.
# Usage: bash .whl/gpu36f.sh COMMIT
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
COMMIT=${1:-unknown}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/logs /tmp/res
T0=$(date +%s)
at() { echo "$1 rc=$2 at $(( $(date +%s) - T0 )) s"; }
save() { cp /tmp/res/*.json /tmp/res/*.md "$OUT/" 2>/dev/null; tar -czf "$OUT/logs.tar.gz" -C /tmp logs; }
GPUMAT_GIT_COMMIT=$COMMIT GPU_CHECK_BUDGET_S=170 GPU_CHECK_STEPS=nvidia-smi,openblas,safetensors,setuptools,build,import \
  bash "$REPO/scripts/gpu_check.sh" /tmp/gc > /tmp/logs/check.log 2>&1
at check $? | tee -a /tmp/logs/check.log
cp /tmp/gc/summary.txt "$OUT/summary.txt" 2>/dev/null
cp /tmp/gc/logs/*.log /tmp/logs/ 2>/dev/null
export GPUMAT_GIT_COMMIT=$COMMIT PYTHONUNBUFFERED=1
cd /tmp
K="$REPO/tests/kernels"
timeout 40 python3 -m pytest -q -m cuda -p no:cacheprovider "$K/test_attention.py" \
  "$REPO/tests/frontend/test_attention_modules.py" > /tmp/logs/pytest.log 2>&1
at pytest $? | tee -a /tmp/logs/pytest.log
timeout 75 python3 "$REPO/benchmarks/bench_attention.py" --ctx gpu --out /tmp/res/ > /tmp/logs/bench_attention.log 2>&1
at bench_attention $? | tee -a /tmp/logs/bench_attention.log
save
( timeout 50 compute-sanitizer --tool memcheck --target-processes application-only --error-exitcode 86 \
    python3 -m pytest -q -m cuda -p no:cacheprovider "$K/test_attention.py" -k "kernel and not errors and not profile" > /tmp/logs/memcheck.log 2>&1
  at memcheck $? >> /tmp/logs/memcheck.log ) &
( timeout 50 sh -c 'for tool in racecheck synccheck; do echo "== $tool"; compute-sanitizer --tool $tool \
    --target-processes application-only --error-exitcode 86 python3 -m pytest -q -m cuda -p no:cacheprovider \
    "$0/test_attention.py" -k "kernel and not errors and not profile" || exit $?; done' "$K" \
    > /tmp/logs/racecheck.log 2>&1
  at racecheck $? >> /tmp/logs/racecheck.log ) &
wait
save
timeout 40 ncu --clock-control none -k regex:attention --section SpeedOfLight --section Occupancy \
  --section LaunchStats --section ComputeWorkloadAnalysis python3 "$REPO/.whl/attn_ncu.py" > /tmp/logs/ncu.log 2>&1
at ncu $? | tee -a /tmp/logs/ncu.log
save
tail -n 3 /tmp/logs/pytest.log
for f in memcheck racecheck; do tail -n 2 /tmp/logs/$f.log; grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" /tmp/logs/$f.log | sort | uniq -c | head -3; done
grep "^|" /tmp/logs/bench_attention.log | tail -n 14
grep -E "attention_|Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit|Compute \(SM\) Thr|Memory Thr|Issue Slots Busy" /tmp/logs/ncu.log | head -50
grep -h "rc=" /tmp/logs/*.log
at total 0
