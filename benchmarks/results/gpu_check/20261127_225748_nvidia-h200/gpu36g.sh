#!/usr/bin/env bash
# Issue 36's attention on a lent GPU: the merged FlashAttention-2 backward (dq by float atomics)
# beside the deterministic two-kernel path, the forward's vectorised tile loads, and head dim 128's
# forward in two blocks per multiprocessor. Build; the attention tests' GPU parameters;
# bench_attention.py alone on the GPU; compute-sanitizer over the attention kernels' tests; ncu;
# then, with time left, the whole suite's GPU parameters and the GPT step.
# Usage: bash .whl/gpu36g.sh COMMIT
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
COMMIT=${1:-unknown}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/logs /tmp/res
T0=$(date +%s)
at() { echo "$1 rc=$2 at $(( $(date +%s) - T0 )) s"; }
left() { echo $(( ${BUDGET:-470} - ($(date +%s) - T0) )); }
save() { cp /tmp/res/*.json /tmp/res/*.md "$OUT/" 2>/dev/null; cp "$0" /tmp/logs/; tar -czf "$OUT/logs.tar.gz" -C /tmp logs; }
GPUMAT_GIT_COMMIT=$COMMIT GPU_CHECK_BUDGET_S=200 GPU_CHECK_STEPS=nvidia-smi,facts,openblas,safetensors,setuptools,data,build,import \
  bash "$REPO/scripts/gpu_check.sh" /tmp/gc > /tmp/logs/check.log 2>&1
at check $? | tee -a /tmp/logs/check.log
cp /tmp/gc/summary.txt "$OUT/summary.txt" 2>/dev/null
cp /tmp/gc/logs/*.log /tmp/logs/ 2>/dev/null
export GPUMAT_GIT_COMMIT=$COMMIT PYTHONUNBUFFERED=1 GPUMAT_DATA_DIR=$REPO/.whl
cd /tmp
K="$REPO/tests/kernels"
timeout 60 python3 -m pytest -q -m cuda -p no:cacheprovider "$K/test_attention.py" \
  "$REPO/tests/frontend/test_attention_modules.py" > /tmp/logs/pytest.log 2>&1
at pytest $? | tee -a /tmp/logs/pytest.log
timeout 130 python3 "$REPO/benchmarks/bench_attention.py" --ctx gpu --out /tmp/res/ > /tmp/logs/bench_attention.log 2>&1
at bench_attention $? | tee -a /tmp/logs/bench_attention.log
save
SEL="(kernel or deterministic) and not errors and not profile and not switch"
( timeout 60 compute-sanitizer --tool memcheck --target-processes application-only --error-exitcode 86 \
    python3 -m pytest -q -m cuda -p no:cacheprovider "$K/test_attention.py" -k "$SEL" > /tmp/logs/memcheck.log 2>&1
  at memcheck $? >> /tmp/logs/memcheck.log ) &
( timeout 60 sh -c 'for tool in racecheck synccheck; do echo "== $tool"; compute-sanitizer --tool $tool \
    --target-processes application-only --error-exitcode 86 python3 -m pytest -q -m cuda -p no:cacheprovider \
    "$0/test_attention.py" -k "$1" || exit $?; done' "$K" "$SEL" > /tmp/logs/racecheck.log 2>&1
  at racecheck $? >> /tmp/logs/racecheck.log ) &
wait
save
timeout 60 ncu --clock-control none -k regex:attention --section SpeedOfLight --section Occupancy \
  --section LaunchStats --section ComputeWorkloadAnalysis python3 "$REPO/.whl/attn_ncu.py" > /tmp/logs/ncu.log 2>&1
at ncu $? | tee -a /tmp/logs/ncu.log
save
if [ "$(left)" -gt 100 ]; then
  timeout 95 python3 -m pytest -q -m cuda -n 8 -p no:cacheprovider --timeout=60 "$REPO/tests" > /tmp/logs/pytest_all.log 2>&1
  at pytest_all $? | tee -a /tmp/logs/pytest_all.log
  save
fi
if [ "$(left)" -gt 60 ]; then
  timeout $(( $(left) - 10 )) python3 "$REPO/benchmarks/bench_frontend.py" --ctx gpu --cases gpt --out /tmp/res/ > /tmp/logs/bench_frontend.log 2>&1
  at bench_frontend $? | tee -a /tmp/logs/bench_frontend.log
  save
fi
tail -n 3 /tmp/logs/pytest.log
for f in memcheck racecheck; do tail -n 2 /tmp/logs/$f.log; grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" /tmp/logs/$f.log | sort | uniq -c | head -3; done
tail -n 2 /tmp/logs/pytest_all.log 2>/dev/null
grep "^|" /tmp/logs/bench_attention.log | tail -n 14
grep "^|" /tmp/logs/bench_frontend.log 2>/dev/null | tail -n 6
grep -E "  attention_|Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit (Reg|Shared)|Compute \(SM\) Thr|Issue Slots Busy" /tmp/logs/ncu.log | head -80
grep -h "rc=" /tmp/logs/*.log
at total 0
