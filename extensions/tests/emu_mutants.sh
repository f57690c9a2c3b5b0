#!/usr/bin/env bash
# Proof that the emulated device checks the CUDA sources themselves: each mutant below breaks one
# CUDA kernel (not its host twin); the emulated test program (test_emu) must then fail. Each mutant
# is built in a copy of extensions/ that reuses the current build, so only the mutated file compiles.
#   BUILD_DIR=build CUDA=0 bash tests/emu_mutants.sh      (make emu-mutants; CUDA as that build's)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="$(cd "${BUILD_DIR:-build}" && pwd)"
PYTHON="${PYTHON:-python3}"
CUDA="${CUDA:-0}"  # the copied build's setting: another one would rebuild (and relink) everything
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# file | sed expression | what it breaks
mutants=(
  'src/cuda/elementwise.cu|s/return a\[i\] + b\[i\];/return a[i] - b[i];/|the CUDA add kernel subtracts'
  'src/cuda/matmul.cu|0,/__syncthreads();/{/__syncthreads();/d}|the first __syncthreads() of the tiled matmul is gone'
  'src/cuda/matmul.cu|s/tile += gridDim.y/tile += row_tiles/|matmul skips the row tiles past grid.y'
  'src/cuda/layout.cu|s/ty += gridDim.y/ty += row_tiles/|transpose skips the row tiles past grid.y'
  'src/cuda/reduce.cu|s/sum += partial\[j \* cols + c\];/sum = partial[j * cols + c];/|sum_partials keeps only the last chunk'
)
status=0
for m in "${mutants[@]}"; do
  IFS='|' read -r file expr what <<< "$m"
  dir="$work/m"
  rm -rf "$dir" && mkdir -p "$dir"
  cp -rp include src tests Makefile "$dir/"
  cp -rp "$BUILD_DIR" "$dir/build"
  sed -i "$expr" "$dir/$file"
  if cmp -s "$file" "$dir/$file"; then echo "mutant not applied ($what): $file unchanged"; exit 2; fi
  make -s -C "$dir" CUDA="$CUDA" BUILD_DIR=build PYTHON="$PYTHON" build/test_emu > "$dir/build.log" 2>&1 \
    || { cat "$dir/build.log"; echo "mutant did not build: $what"; exit 2; }
  if "$dir/build/test_emu" > "$dir/run.log" 2>&1; then
    echo "NOT CAUGHT: $what"
    status=1
  else
    echo "caught: $what ($(grep -m1 FAIL "$dir/run.log"))"
  fi
done
exit $status
