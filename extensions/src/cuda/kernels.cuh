// CUDA launchers: one function per line of ../kernels.def, defined in <family>.cu. Each makes its
// device current, launches on the device's stream, and checks the launch.
#pragma once

#include <cstdint>

#include "../backend.h"  // ConvShape, PoolShape
#include "common.cuh"

namespace gpumat::GPUMAT_CUDA_NS {

#define GPUMAT_KERNEL(name, params) void name params;
#include "../kernels.def"

// Helpers of the two-level reductions (reduce.cu, conv.cu's reduce_sum_channels): how many chunks
// to split each output's `elements` inputs into when `blocks_per_chunk` blocks cover one chunk of
// all outputs (at most max_chunks, the grid.y limit); the (chunks, cols) float64 partials in
// workspace slot 0 (hold workspace_lock()); and out[c] = sum of partial[:, c] in chunk order.
int64_t reduce_chunks(int64_t blocks_per_chunk, int64_t elements, int64_t max_chunks);
double* reduce_partials(int dev, int64_t chunks, int64_t cols);
void sum_partials(int dev, const double* partial, int64_t chunks, int64_t cols, float* out, const char* op);

}  // namespace gpumat::GPUMAT_CUDA_NS
