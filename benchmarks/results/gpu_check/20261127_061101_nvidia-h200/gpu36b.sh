#!/usr/bin/env bash
# The register-tiled attention kernels on a lent GPU: build; bench_attention.py alone on the GPU;
# ncu's counters for one launch of each kernel; then side by side the whole suite's GPU parameters
# (pytest -m cuda, 8 workers) and compute-sanitizer memcheck, racecheck and synccheck over the
# attention tests. Usage: bash .whl/gpu36b.sh COMMIT
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
COMMIT=${1:-unknown}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/logs /tmp/res
T0=$(date +%s)
at() { echo "$1 rc=$2 at $(( $(date +%s) - T0 )) s"; }
GPUMAT_GIT_COMMIT=$COMMIT GPU_CHECK_BUDGET_S=150 \
  GPU_CHECK_STEPS=nvidia-smi,openblas,safetensors,setuptools,data,build,import \
  bash "$REPO/scripts/gpu_check.sh" /tmp/gc > /tmp/logs/check.log 2>&1
at check $? | tee -a /tmp/logs/check.log
cp /tmp/gc/summary.txt "$OUT/summary.txt" 2>/dev/null
cp /tmp/gc/logs/*.log /tmp/logs/ 2>/dev/null
grep -h "attention" /tmp/gc/logs/build.log | grep -i "regist\|spill" | head -20 > /tmp/logs/ptxas_attention.log
export GPUMAT_GIT_COMMIT=$COMMIT PYTHONUNBUFFERED=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -f "$REPO/.whl/mnist.pkl.gz" ] && export GPUMAT_DATA_DIR="$REPO/.whl"
cd /tmp
timeout 110 python3 "$REPO/benchmarks/bench_attention.py" --ctx gpu --out /tmp/res/ > /tmp/logs/bench_attention.log 2>&1
at bench_attention $? | tee -a /tmp/logs/bench_attention.log
M=gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread
M=$M,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__inst_executed_op_shared_ld.sum
M=$M,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum
M=$M,smsp__sass_thread_inst_executed_op_ffma_pred_on.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum
M=$M,smsp__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,launch__occupancy_limit_shared_mem
timeout 60 ncu --clock-control none -k regex:attention --metrics $M python3 "$REPO/.whl/attn_ncu.py" > /tmp/logs/ncu.log 2>&1
at ncu $? | tee -a /tmp/logs/ncu.log
TO=""; python3 -c "import pytest_timeout" 2>/dev/null && TO="--timeout=120"
( timeout 170 python3 -m pytest -q -m cuda -n 8 $TO -p no:cacheprovider "$REPO/tests" > /tmp/logs/pytest.log 2>&1
  at pytest $? >> /tmp/logs/pytest.log ) &
K="$REPO/tests/kernels"
( timeout 150 compute-sanitizer --tool memcheck --target-processes application-only --error-exitcode 86 \
    python3 -m pytest -v -m cuda -p no:cacheprovider "$K/test_attention.py" "$REPO/tests/frontend/test_attention_modules.py" \
    -k "not profile" > /tmp/logs/memcheck.log 2>&1
  at memcheck $? >> /tmp/logs/memcheck.log ) &
( timeout 150 sh -c 'for tool in racecheck synccheck; do echo "== $tool"; compute-sanitizer --tool $tool \
    --target-processes application-only --error-exitcode 86 python3 -m pytest -v -m cuda -p no:cacheprovider \
    "$0/test_attention.py" -k "kernel and not errors and not profile" || exit $?; done' "$K" \
    > /tmp/logs/racecheck.log 2>&1
  at racecheck $? >> /tmp/logs/racecheck.log ) &
wait
for f in pytest memcheck racecheck; do tail -n 3 /tmp/logs/$f.log; grep -h "ERROR SUMMARY\|RACECHECK SUMMARY\|not supported" /tmp/logs/$f.log | sort | uniq -c | head -3; done
cp /tmp/res/*.json /tmp/res/*.md "$OUT/" 2>/dev/null
tar -czf "$OUT/logs.tar.gz" -C /tmp logs
grep -A14 "attention_.*kernel" /tmp/logs/ncu.log | grep -v "^\s*-" | head -60
cat /tmp/logs/ptxas_attention.log
tail -n 16 /tmp/logs/bench_attention.log
grep -h "rc=" /tmp/logs/*.log
at total 0
