// CUDA softmax family over (rows, cols), one block per row (grid-stride over rows):
//   softmax_kernel:           out[r,c] = exp(x[r,c] - max_r) / sum_c exp(x[r,c] - max_r)
// Softmax over any axis of an N-d array, seen as (outer, n, inner) with the axis in the middle
// (no transposes): y = softmax or log_softmax along n; the gradients from y and dy are
//   softmax:     dx = y * (dy - sum_n y*dy)       log_softmax: dx = dy - exp(y) * sum_n dy
//   softmax_rows_kernel / softmax_rows_gradient_kernel: inner == 1, one block per row (as above);
//   softmax_cols_kernel / softmax_cols_gradient_kernel: inner > 1, one thread per (outer, inner)
//     column looping over n (consecutive threads read consecutive inner elements: coalesced).
// Host reference: ../host/softmax.cpp.
// NOTE: subtracting the row max keeps exp() from overflowing (the log-sum-exp trick).
// Block reductions (softmax.cuh, shared with loss.cu's cross-entropy): warp shuffles, then one
// value per warp through shared memory (llm.c style).
#include "common.cuh"
#include "kernels.cuh"
#include "softmax.cuh"

namespace gpumat::GPUMAT_CUDA_NS {

// ---------------------------------------------------------------------------- kernels

// in, out are (rows, cols)
__global__ void softmax_kernel(const float* in, float* out, int64_t rows, int64_t cols) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* x = in + r * cols;
    float mx, log_sum;
    row_stats(x, cols, &mx, &log_sum);
    for (int64_t c = threadIdx.x; c < cols; c += kRowBlock) out[r * cols + c] = expf(x[c] - mx - log_sum);
  }
}

// in, out are (outer, n) rows; Log selects log_softmax
template <bool Log>
__global__ void softmax_rows_kernel(const float* in, float* out, int64_t rows, int64_t n) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* x = in + r * n;
    float mx, log_sum;
    row_stats(x, n, &mx, &log_sum);
    for (int64_t c = threadIdx.x; c < n; c += kRowBlock) {
      const float z = x[c] - mx - log_sum;
      out[r * n + c] = Log ? z : expf(z);
    }
  }
}

// y, dy, dx are (outer, n) rows
template <bool Log>
__global__ void softmax_rows_gradient_kernel(const float* y, const float* dy, float* dx, int64_t rows,
                                             int64_t n) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* yr = y + r * n;
    const float* gr = dy + r * n;
    float acc = 0.0f;
    for (int64_t c = threadIdx.x; c < n; c += kRowBlock) acc += Log ? gr[c] : yr[c] * gr[c];
    acc = block_reduce<false>(acc);
    for (int64_t c = threadIdx.x; c < n; c += kRowBlock)
      dx[r * n + c] = Log ? gr[c] - expf(yr[c]) * acc : yr[c] * (gr[c] - acc);
  }
}

// in, out are (outer, n, inner); one thread per (outer, inner) column (inner == 1: per row of at
// most kThreadRowMax)
template <bool Log>
__global__ void softmax_cols_kernel(const float* in, float* out, int64_t outer, int64_t n, int64_t inner) {
  const int64_t cols = outer * inner;
  for (int64_t col = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; col < cols;
       col += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t base = (col / inner) * n * inner + col % inner;
    float mx, log_sum;
    strided_row_stats(in + base, n, inner, &mx, &log_sum);
    for (int64_t j = 0; j < n; ++j) {
      const float z = in[base + j * inner] - mx - log_sum;
      out[base + j * inner] = Log ? z : expf(z);
    }
  }
}

// y, dy, dx are (outer, n, inner)
template <bool Log>
__global__ void softmax_cols_gradient_kernel(const float* y, const float* dy, float* dx, int64_t outer,
                                             int64_t n, int64_t inner) {
  const int64_t cols = outer * inner;
  for (int64_t col = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; col < cols;
       col += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t base = (col / inner) * n * inner + col % inner;
    float acc = 0.0f;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t k = base + j * inner;
      acc += Log ? dy[k] : y[k] * dy[k];
    }
    for (int64_t j = 0; j < n; ++j) {
      const int64_t k = base + j * inner;
      dx[k] = Log ? dy[k] - expf(y[k]) * acc : y[k] * (dy[k] - acc);
    }
  }
}

// ---------------------------------------------------------------------------- launchers

void softmax(int dev, const float* in, float* out, int64_t rows, int64_t cols) {
  cudaStream_t stream = activate(dev);
  if (cols <= kThreadRowMax) {  // a thread per row
    launch<softmax_cols_kernel<false>>("softmax", grid_for(rows, kBlockSize), kBlockSize, 0, stream, in, out,
                                       rows, cols, int64_t{1});
    return;
  }
  launch<softmax_kernel>("softmax", row_grid(rows), kRowBlock, 0, stream, in, out, rows, cols);
}

void softmax_axis(int dev, const float* in, float* out, int64_t outer, int64_t n, int64_t inner, bool log) {
  cudaStream_t stream = activate(dev);
  const char* op = log ? "log_softmax" : "softmax";
  if (inner == 1 && n > kThreadRowMax) {  // a block per row; else a thread per row or column
    if (log)
      launch<softmax_rows_kernel<true>>(op, row_grid(outer), kRowBlock, 0, stream, in, out, outer, n);
    else
      launch<softmax_rows_kernel<false>>(op, row_grid(outer), kRowBlock, 0, stream, in, out, outer, n);
    return;
  }
  const unsigned grid = grid_for(outer * inner, kBlockSize);
  if (log)
    launch<softmax_cols_kernel<true>>(op, grid, kBlockSize, 0, stream, in, out, outer, n, inner);
  else
    launch<softmax_cols_kernel<false>>(op, grid, kBlockSize, 0, stream, in, out, outer, n, inner);
}

void softmax_axis_gradient(int dev, const float* y, const float* dy, float* dx, int64_t outer, int64_t n,
                           int64_t inner, bool log) {
  cudaStream_t stream = activate(dev);
  const char* op = log ? "log_softmax_gradient" : "softmax_gradient";
  if (inner == 1 && n > kThreadRowMax) {  // a block per row; else a thread per row or column
    if (log)
      launch<softmax_rows_gradient_kernel<true>>(op, row_grid(outer), kRowBlock, 0, stream, y, dy, dx, outer,
                                                 n);
    else
      launch<softmax_rows_gradient_kernel<false>>(op, row_grid(outer), kRowBlock, 0, stream, y, dy, dx, outer,
                                                  n);
    return;
  }
  const unsigned grid = grid_for(outer * inner, kBlockSize);
  if (log)
    launch<softmax_cols_gradient_kernel<true>>(op, grid, kBlockSize, 0, stream, y, dy, dx, outer, n, inner);
  else
    launch<softmax_cols_gradient_kernel<false>>(op, grid, kBlockSize, 0, stream, y, dy, dx, outer, n, inner);
}

}  // namespace gpumat::GPUMAT_CUDA_NS
