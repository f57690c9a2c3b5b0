#!/usr/bin/env bash
# The CUDA changes since the last GPU run (c3a35dc..HEAD: the attention's NaN rows, GELU's erfc
# tail, layer_norm_backward's kernels and the shared column-sums kernel) on a lent GPU, then the
# whole suite's GPU parameters and the timings at HEAD. Build; the changed families' tests;
# bench_attention.py alone on the GPU; compute-sanitizer memcheck, racecheck and synccheck over the
# changed kernels' tests; pytest -m cuda -n 8 over the suite; bench_frontend.py's GPT step, then
# the other step cases with the time left.
# Usage: BUDGET=seconds bash .whl/gpu36i.sh COMMIT
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
COMMIT=${1:-unknown}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/logs /tmp/res
T0=$(date +%s)
at() { echo "$1 rc=$2 at $(($(date +%s) - T0)) s"; }
left() { echo $((${BUDGET:-500} - ($(date +%s) - T0))); }
save() {
  cp /tmp/res/*.json /tmp/res/*.md "$OUT/" 2>/dev/null
  cp "$0" /tmp/logs/
  tar -czf "$OUT/logs.tar.gz" -C /tmp logs
}
GPUMAT_GIT_COMMIT=$COMMIT GPU_CHECK_BUDGET_S=200 GPU_CHECK_STEPS=nvidia-smi,facts,openblas,safetensors,setuptools,data,build,import \
  bash "$REPO/scripts/gpu_check.sh" /tmp/gc >/tmp/logs/check.log 2>&1
rc=$?
at check $rc | tee -a /tmp/logs/check.log
cp /tmp/gc/summary.txt "$OUT/summary.txt" 2>/dev/null
cp /tmp/gc/logs/*.log /tmp/logs/ 2>/dev/null
if [ "$rc" -ne 0 ]; then
  save
  cat /tmp/gc/summary.txt
  tail -n 30 /tmp/logs/build.log /tmp/logs/import.log 2>/dev/null
  exit 1
fi
export GPUMAT_GIT_COMMIT=$COMMIT PYTHONUNBUFFERED=1 GPUMAT_DATA_DIR=$REPO/.whl
cd /tmp
K="$REPO/tests/kernels"
CHANGED=("$K/test_norm.py" "$K/test_modern_activations.py" "$K/test_attention.py"
  "$REPO/tests/runtime/test_fusion.py" "$REPO/tests/frontend/test_attention_modules.py")
timeout 100 python3 -m pytest -q -m cuda -p no:cacheprovider --timeout=60 "${CHANGED[@]}" >/tmp/logs/pytest.log 2>&1
at pytest $? | tee -a /tmp/logs/pytest.log
timeout 120 python3 "$REPO/benchmarks/bench_attention.py" --ctx gpu --out /tmp/res/ >/tmp/logs/bench_attention.log 2>&1
at bench_attention $? | tee -a /tmp/logs/bench_attention.log
save
SAN=("$K/test_norm.py" "$K/test_modern_activations.py" "$K/test_attention.py")
SEL="kernels_match_float64 or kernel_matches_float64 or deterministic or lower_tail or special_values \
or large_mean or transposed_view or nan_scores or empty_sizes"
(
  timeout 110 compute-sanitizer --tool memcheck --target-processes application-only --error-exitcode 86 \
    python3 -m pytest -q -m cuda -p no:cacheprovider "${SAN[@]}" -k "$SEL" >/tmp/logs/memcheck.log 2>&1
  at memcheck $? >>/tmp/logs/memcheck.log
) &
(
  timeout 110 sh -c 'sel=$1; shift; for tool in racecheck synccheck; do echo "== $tool"; compute-sanitizer --tool $tool \
    --target-processes application-only --error-exitcode 86 python3 -m pytest -q -m cuda -p no:cacheprovider \
    "$@" -k "$sel" || exit $?; done' sh "$SEL" "$K/test_norm.py" "$K/test_attention.py" >/tmp/logs/racecheck.log 2>&1
  at racecheck $? >>/tmp/logs/racecheck.log
) &
wait
save
if [ "$(left)" -gt 100 ]; then
  timeout 110 python3 -m pytest -q -m cuda -n 8 -p no:cacheprovider --timeout=60 "$REPO/tests" >/tmp/logs/pytest_all.log 2>&1
  at pytest_all $? | tee -a /tmp/logs/pytest_all.log
  save
fi
if [ "$(left)" -gt 50 ]; then
  timeout $(($(left) - 10 < 90 ? $(left) - 10 : 90)) python3 "$REPO/benchmarks/bench_frontend.py" --ctx gpu --cases gpt \
    --out /tmp/res/ >/tmp/logs/bench_frontend_gpt.log 2>&1
  at bench_frontend_gpt $? | tee -a /tmp/logs/bench_frontend_gpt.log
  save
fi
if [ "$(left)" -gt 40 ]; then
  timeout $(($(left) - 10)) python3 "$REPO/benchmarks/bench_frontend.py" --ctx gpu --no-torch-compile \
    --cases tiny-mlp,mlp,mlp-64,cnn,cnn-64 --out /tmp/res/ >/tmp/logs/bench_frontend.log 2>&1
  at bench_frontend $? | tee -a /tmp/logs/bench_frontend.log
  save
fi
tail -n 3 /tmp/logs/pytest.log
for f in memcheck racecheck; do
  tail -n 2 /tmp/logs/$f.log
  grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" /tmp/logs/$f.log | sort | uniq -c | head -3
done
tail -n 2 /tmp/logs/pytest_all.log 2>/dev/null
grep "^|" /tmp/logs/bench_attention.log | tail -n 14
grep "^|" /tmp/logs/bench_frontend_gpt.log 2>/dev/null | tail -n 6
grep "^|" /tmp/logs/bench_frontend.log 2>/dev/null | tail -n 20
grep -h "rc=" /tmp/logs/*.log
at total 0
