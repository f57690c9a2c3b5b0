#!/usr/bin/env bash
# Proof that the emulated device checks the CUDA sources themselves: each mutant below breaks one
# CUDA kernel (not its host twin); the emulated test program (test_emu) must then fail, by a wrong
# value or by one of the emulator's checks (memcheck, racecheck, initcheck: each has a mutant only
# it catches, the values staying right on a CPU). Each mutant is built in a copy of extensions/ that
# reuses the current build, so only the mutated file compiles.
#   BUILD_DIR=build CUDA=0 bash tests/emu_mutants.sh      (make emu-mutants; CUDA as that build's)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="$(cd "${BUILD_DIR:-build}" && pwd)"
PYTHON="${PYTHON:-python3}"
CUDA="${CUDA:-0}"  # the copied build's setting: another one would rebuild (and relink) everything
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# file | sed expression | what it breaks [| the report that must catch it (grep -E), for the checks]
mutants=(
  'src/cuda/elementwise.cu|s/return a\[i\] + b\[i\];/return a[i] - b[i];/|the CUDA add kernel subtracts'
  'src/cuda/matmul.cu|0,/__syncthreads();/{/__syncthreads();/d}|the first __syncthreads() of the tiled matmul is gone'
  'src/cuda/matmul.cu|s/tile += gridDim.y/tile += row_tiles/|matmul skips the row tiles past grid.y'
  'src/cuda/layout.cu|s/ty += gridDim.y/ty += row_tiles/|transpose skips the row tiles past grid.y'
  'src/cuda/reduce.cu|s/sum += partial\[j \* cols + c\];/sum = partial[j * cols + c];/|sum_partials keeps only the last chunk'
  'src/cuda/activation.cu|0,/threadIdx.x; i < n;/s//threadIdx.x; i <= n;/|tanh and sigmoid write one element past their output|memcheck:'
  'src/cuda/reduce.cu|/__syncthreads();/d|reduce_sum_axis_zero sums its lanes without the barrier after they are written|racecheck:|initcheck:'
  'src/cuda/loss.cu|s/last = atomicAdd(ticket, 1u) == gridDim.x - 1;/last = (*ticket)++ == gridDim.x - 1;/|the cross-entropy blocks count themselves with a plain increment (lost updates on a GPU)|racecheck: plain writes'
  'src/cuda/runtime.cu|/cudaMemsetAsync(fresh->data(), 0/d|the last-block ticket is never zeroed|initcheck:'
  'src/cuda/matmul.cu|s/^        as\[kk\]\[row\] = v;/        if (gr < m \&\& gk < k) as[kk][row] = v;/|the matmul tile is not zero-filled past the matrix edge (stale shared memory)|initcheck:.*shared memory'
  'src/cuda/activation.cu|0,/i += static_cast<int64_t>(gridDim.x) \* blockDim.x)/s//i += blockDim.x)/|tanh and sigmoid stride by a block, not by the grid (only GPUMAT_EMU_MAX_BLOCKS makes a thread stride)|racecheck: plain writes'
  'src/cuda/optim.cu|/momentum_sgd_update_multi_kernel(/,/^}/s/(gridDim.x) \* blockDim.x/(gridDim.y) * blockDim.x/|the multi-tensor momentum SGD strides by the table (grid.y), not by grid.x (only GPUMAT_EMU_MAX_BLOCKS and a tensor past two blocks show it)'
)
status=0
for m in "${mutants[@]}"; do
  IFS='|' read -r file expr what expect <<< "$m"
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
  elif [ -n "$expect" ] && ! grep -qE "$expect" "$dir/run.log"; then
    echo "CAUGHT, BUT NOT BY '$expect': $what ($(grep -m1 FAIL "$dir/run.log"))"
    status=1
  else
    echo "caught: $what ($(grep -m1 FAIL "$dir/run.log" | cut -c1-400))"
  fi
done
exit $status
