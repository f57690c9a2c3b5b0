#!/usr/bin/env bash
# The attention kernels with 8 rows per thread: build, bench_attention.py alone on the GPU, ncu's
# counters, then the attention tests' GPU parameters, memcheck, racecheck and synccheck over them.
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
COMMIT=${1:-unknown}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/logs /tmp/res
T0=$(date +%s)
at() { echo "$1 rc=$2 at $(( $(date +%s) - T0 )) s"; }
GPUMAT_GIT_COMMIT=$COMMIT GPU_CHECK_BUDGET_S=150 GPU_CHECK_STEPS=nvidia-smi,openblas,safetensors,setuptools,build,import \
  bash "$REPO/scripts/gpu_check.sh" /tmp/gc > /tmp/logs/check.log 2>&1
at check $? | tee -a /tmp/logs/check.log
cp /tmp/gc/summary.txt "$OUT/summary.txt" 2>/dev/null
cp /tmp/gc/logs/*.log /tmp/logs/ 2>/dev/null
export GPUMAT_GIT_COMMIT=$COMMIT PYTHONUNBUFFERED=1
cd /tmp
timeout 100 python3 "$REPO/benchmarks/bench_attention.py" --ctx gpu --out /tmp/res/ > /tmp/logs/bench_attention.log 2>&1
at bench_attention $? | tee -a /tmp/logs/bench_attention.log
M=gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread
M=$M,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active
M=$M,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,smsp__inst_executed_op_shared_ld.sum
timeout 45 ncu --clock-control none -k regex:attention --metrics $M python3 "$REPO/.whl/attn_ncu.py" > /tmp/logs/ncu.log 2>&1
at ncu $? | tee -a /tmp/logs/ncu.log
K="$REPO/tests/kernels"
( timeout 80 python3 -m pytest -q -m cuda -p no:cacheprovider "$K/test_attention.py" "$REPO/tests/frontend/test_attention_modules.py" \
    "$REPO/tests/train/test_gpt.py" > /tmp/logs/pytest.log 2>&1
  at pytest $? >> /tmp/logs/pytest.log ) &
( timeout 80 compute-sanitizer --tool memcheck --target-processes application-only --error-exitcode 86 \
    python3 -m pytest -v -m cuda -p no:cacheprovider "$K/test_attention.py" -k "not profile" > /tmp/logs/memcheck.log 2>&1
  at memcheck $? >> /tmp/logs/memcheck.log ) &
( timeout 80 sh -c 'for tool in racecheck synccheck; do echo "== $tool"; compute-sanitizer --tool $tool \
    --target-processes application-only --error-exitcode 86 python3 -m pytest -v -m cuda -p no:cacheprovider \
    "$0/test_attention.py" -k "kernel and not errors and not profile" || exit $?; done' "$K" \
    > /tmp/logs/racecheck.log 2>&1
  at racecheck $? >> /tmp/logs/racecheck.log ) &
wait
for f in pytest memcheck racecheck; do tail -n 2 /tmp/logs/$f.log; grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" /tmp/logs/$f.log | sort | uniq -c | head -3; done
cp /tmp/res/*.json /tmp/res/*.md "$OUT/" 2>/dev/null
tar -czf "$OUT/logs.tar.gz" -C /tmp logs
grep -A12 "attention_.*kernel" /tmp/logs/ncu.log | grep -v "^\s*-\|Warning\|Section\|Metric Name" | head -40
tail -n 16 /tmp/logs/bench_attention.log
grep -h "rc=" /tmp/logs/*.log
at total 0
