// Shared by every .cu file: error checks, the per-device stream, and launch helpers.
// After llm.c's cudaCheck / ceil_div, but a library throws instead of exit(): the sticky error is
// cleared and a CudaError naming the op is raised (as CuPy's check_status does).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "gpumat/error.h"

namespace gpumat::cuda {

// Throws CudaError "<what>: <cudaErrorName>: <message>" if err != cudaSuccess.
void check(cudaError_t err, const char* what);

// Makes `dev` current on this thread and returns its stream (one non-blocking stream per device,
// created on first use).
cudaStream_t activate(int dev);

// Checks the launch just made (bad configuration, missing kernel image for this GPU).
inline void check_launch(const char* op) { check(cudaGetLastError(), op); }

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Grid for a 1-D grid-stride loop over n elements: enough blocks to fill the GPU, never more
// than the hardware allows (the kernels loop over the rest).
inline unsigned int grid_for(int64_t n, int block) {
  int64_t blocks = ceil_div(n, block);
  const int64_t kMaxBlocks = 65535LL * 16;  // plenty to fill any GPU; the loop covers the rest
  return static_cast<unsigned int>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

constexpr int kBlockSize = 256;  // threads per block for elementwise and 1-D kernels

}  // namespace gpumat::cuda
