// CUDA reductions along one axis of an N-d array seen as (outer, n, inner), the axis in the middle
// (any axis, no transposes). Host reference: ../host/reduce_axis.cpp.
//   reduce_axis_kernel<Kind>:    out[o, i] = sum_j / mean_j / max_j in[o, j, i]  (Kind 0, 1, 2)
//   broadcast_axis_kernel:       out[o, j, i] = scale * in[o, i]  (the gradient of sum and mean)
//   reduce_max_gradient_kernel:  dx[o, j, i] = dy[o, i] / t[o, i] where x[o, j, i] == y[o, i], else 0,
//                                t = the number of tied maxima (ties share the gradient equally)
// Tiling: one thread per (outer, inner) output looping over n; consecutive threads read
// consecutive inner elements (coalesced when inner > 1). Each output is summed in a fixed order,
// so results are deterministic. NOTE: a NaN in a slice makes its max NaN (and the NaN elements
// share that slice's gradient).
#include "common.cuh"
#include "kernels.cuh"

namespace gpumat::GPUMAT_CUDA_NS {

// ---------------------------------------------------------------------------- kernels

// in is (outer, n, inner), out is (outer, inner)
template <int Kind>
__global__ void reduce_axis_kernel(const float* in, float* out, int64_t outer, int64_t n, int64_t inner) {
  const int64_t cols = outer * inner;
  for (int64_t col = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; col < cols;
       col += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t base = (col / inner) * n * inner + col % inner;
    float acc = Kind == 2 ? -INFINITY : 0.0f;
    for (int64_t j = 0; j < n; ++j) {
      const float v = in[base + j * inner];
      if (Kind == 2)
        acc = (v > acc || v != v) ? v : acc;
      else
        acc += v;
    }
    out[col] = Kind == 1 ? acc / static_cast<float>(n) : acc;
  }
}

// in is (outer, inner), out is (outer, n, inner)
__global__ void broadcast_axis_kernel(const float* in, float* out, int64_t outer, int64_t n, int64_t inner,
                                      float scale) {
  const int64_t total = outer * n * inner;
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < total;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[k] = scale * in[(k / (n * inner)) * inner + k % inner];
}

__device__ __forceinline__ bool is_max(float v, float m) { return v == m || (v != v && m != m); }

// x, dx are (outer, n, inner); y, dy are (outer, inner)
__global__ void reduce_max_gradient_kernel(const float* x, const float* y, const float* dy, float* dx,
                                           int64_t outer, int64_t n, int64_t inner) {
  const int64_t cols = outer * inner;
  for (int64_t col = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; col < cols;
       col += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t base = (col / inner) * n * inner + col % inner;
    const float m = y[col];
    int64_t ties = 0;
    for (int64_t j = 0; j < n; ++j) ties += is_max(x[base + j * inner], m) ? 1 : 0;
    const float share = ties > 0 ? dy[col] / static_cast<float>(ties) : 0.0f;
    for (int64_t j = 0; j < n; ++j) dx[base + j * inner] = is_max(x[base + j * inner], m) ? share : 0.0f;
  }
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
