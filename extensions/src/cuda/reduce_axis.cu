// CUDA reductions along one axis of an N-d array seen as (outer, n, inner), the axis in the middle
// (any axis, no transposes). Host reference: ../host/reduce_axis.cpp.
//   reduce_axis_kernel<Kind>:    out[o, i] = sum_j / mean_j / max_j in[o, j, i]  (Kind 0, 1, 2)
//   broadcast_axis_kernel:       out[o, j, i] = scale * in[o, i]  (the gradient of sum and mean)
//   reduce_max_gradient_kernel:  dx[o, j, i] = dy[o, i] / t[o, i] where x[o, j, i] == y[o, i], else 0,
//                                t = the number of tied maxima (ties share the gradient equally)
// Tiling: one thread per (outer, inner) output looping over n; consecutive threads read
// consecutive inner elements (coalesced when inner > 1). Each output is summed in a fixed order,
// so results are deterministic. NOTE: a NaN in a slice makes its max NaN (and the NaN elements
// share that slice's gradient). The per-slice loops are ../axis.h's, shared with the host.
#include "../axis.h"
#include "common.cuh"
#include "kernels.cuh"

namespace gpumat::GPUMAT_CUDA_NS {

// ---------------------------------------------------------------------------- kernels

// in is (outer, n, inner), out is (outer, inner)
template <int Kind>
__global__ void reduce_axis_kernel(const float* in, float* out, int64_t outer, int64_t n, int64_t inner) {
  const int64_t cols = outer * inner;
  for (int64_t col = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; col < cols;
       col += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[col] = axis::reduce_slice(in, col, n, inner, Kind);
}

// in is (outer, inner), out is (outer, n, inner)
__global__ void broadcast_axis_kernel(const float* in, float* out, int64_t outer, int64_t n, int64_t inner,
                                      float scale) {
  const int64_t total = outer * n * inner;
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < total;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[k] = scale * in[axis::broadcast_source(k, n, inner)];
}

// x, dx are (outer, n, inner); y, dy are (outer, inner)
__global__ void reduce_max_gradient_kernel(const float* x, const float* y, const float* dy, float* dx,
                                           int64_t outer, int64_t n, int64_t inner) {
  const int64_t cols = outer * inner;
  for (int64_t col = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; col < cols;
       col += static_cast<int64_t>(gridDim.x) * blockDim.x)
    axis::max_gradient_slice(x, y, dy, dx, col, n, inner);
}

// ---------------------------------------------------------------------------- launchers

void reduce_axis(int dev, const float* in, float* out, int64_t outer, int64_t n, int64_t inner, int kind) {
  cudaStream_t stream = activate(dev);
  const unsigned grid = grid_for(outer * inner, kBlockSize);
  if (kind == 0)
    launch<reduce_axis_kernel<0>>("reduce_sum", grid, kBlockSize, 0, stream, in, out, outer, n, inner);
  else if (kind == 1)
    launch<reduce_axis_kernel<1>>("reduce_mean", grid, kBlockSize, 0, stream, in, out, outer, n, inner);
  else
    launch<reduce_axis_kernel<2>>("reduce_max", grid, kBlockSize, 0, stream, in, out, outer, n, inner);
}

void broadcast_axis(int dev, const float* in, float* out, int64_t outer, int64_t n, int64_t inner,
                    float scale) {
  cudaStream_t stream = activate(dev);
  launch<broadcast_axis_kernel>("broadcast_axis", grid_for(outer * n * inner, kBlockSize), kBlockSize, 0,
                                stream, in, out, outer, n, inner, scale);
}

void reduce_max_gradient(int dev, const float* x, const float* y, const float* dy, float* dx, int64_t outer,
                         int64_t n, int64_t inner) {
  cudaStream_t stream = activate(dev);
  launch<reduce_max_gradient_kernel>("reduce_max_gradient", grid_for(outer * inner, kBlockSize), kBlockSize,
                                     0, stream, x, y, dy, dx, outer, n, inner);
}

}  // namespace gpumat::GPUMAT_CUDA_NS
