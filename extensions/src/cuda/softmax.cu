// CUDA softmax family over (rows, cols), one block per row (grid-stride over rows):
//   softmax_kernel:           out[r,c] = exp(x[r,c] - max_r) / sum_c exp(x[r,c] - max_r)
//   cross_entropy_rows_kernel: loss[r] = -sum_c y[r,c] * (x[r,c] - max_r - log sum_c exp(x - max_r)),
//                             then out[0] = mean_r loss[r], taken by the last block to finish (it
//                             sums in a fixed order, so the result is deterministic): one launch
//                             for the loss (and, fused, its gradient)
// Softmax over any axis of an N-d array, seen as (outer, n, inner) with the axis in the middle
// (no transposes): y = softmax or log_softmax along n; the gradients from y and dy are
//   softmax:     dx = y * (dy - sum_n y*dy)       log_softmax: dx = dy - exp(y) * sum_n dy
//   softmax_rows_kernel / softmax_rows_gradient_kernel: inner == 1, one block per row (as above);
//   softmax_cols_kernel / softmax_cols_gradient_kernel: inner > 1, one thread per (outer, inner)
//     column looping over n (consecutive threads read consecutive inner elements: coalesced).
// Host reference: ../host/softmax.cpp.
// NOTE: subtracting the row max keeps exp() from overflowing (the log-sum-exp trick).
// Block reductions: warp shuffles, then one value per warp through shared memory (llm.c style).
#include "common.cuh"
#include "kernels.cuh"

namespace gpumat::GPUMAT_CUDA_NS {

namespace {
constexpr int kRowBlock = 256;  // threads per row
constexpr int kWarps = kRowBlock / 32;
}  // namespace

// ---------------------------------------------------------------------------- kernels

// NaN-propagating max: a NaN anywhere in the row makes the row's max NaN, as on the host.
__device__ __forceinline__ float nan_max(float a, float b) { return (a > b || a != a) ? a : b; }

template <bool IsMax>
__device__ float block_reduce(float v) {
  __shared__ float warp_vals[kWarps];
  __shared__ float result;
  for (int off = 16; off > 0; off >>= 1) {
    float o = __shfl_down_sync(0xffffffffu, v, off);
    v = IsMax ? nan_max(v, o) : v + o;
  }
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_vals[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float r = warp_vals[0];
    for (int w = 1; w < kWarps; ++w) r = IsMax ? nan_max(r, warp_vals[w]) : r + warp_vals[w];
    result = r;
  }
  __syncthreads();
  float r = result;
  __syncthreads();  // result and warp_vals are reused by the next call
  return r;
}

// Row max and log(sum exp(x - max)) of row x (cols,), computed by the whole block.
__device__ void row_stats(const float* x, int64_t cols, float* max_out, float* log_sum_out) {
  float mx = -INFINITY;
  for (int64_t c = threadIdx.x; c < cols; c += kRowBlock) mx = nan_max(mx, x[c]);
  mx = block_reduce<true>(mx);
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += kRowBlock) sum += expf(x[c] - mx);
  sum = block_reduce<false>(sum);
  *max_out = mx;
  *log_sum_out = logf(sum);
}

// in, out are (rows, cols)
__global__ void softmax_kernel(const float* in, float* out, int64_t rows, int64_t cols) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* x = in + r * cols;
    float mx, log_sum;
    row_stats(x, cols, &mx, &log_sum);
    for (int64_t c = threadIdx.x; c < cols; c += kRowBlock) out[r * cols + c] = expf(x[c] - mx - log_sum);
  }
}

// logits, labels are (rows, cols); loss is (rows,), scratch; out is (1,): the mean loss. With
// WithGradient, also grad (rows, cols) = (softmax(x) - y) * inv_rows from the same row statistics
// (issue 16: the loss and its gradient from one read of the logits); grad is unused otherwise.
// The mean: each block counts itself done on `ticket` (zero before the launch) after a fence that
// publishes its rows' losses; the last one sums them all, in row order, and resets the ticket
// ("last block" reduction, as in the CUDA samples' threadFenceReduction).
template <bool WithGradient>
__global__ void cross_entropy_rows_kernel(const float* logits, const float* labels, float* loss, float* grad,
                                          int64_t rows, int64_t cols, float inv_rows, unsigned* ticket,
                                          float* out) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* x = logits + r * cols;
    const float* y = labels + r * cols;
    float mx, log_sum;
    row_stats(x, cols, &mx, &log_sum);
    float acc = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += kRowBlock) {
      const float z = x[c] - mx - log_sum;
      acc -= y[c] * z;
      if (WithGradient) grad[r * cols + c] = (expf(z) - y[c]) * inv_rows;
    }
    acc = block_reduce<false>(acc);
    if (threadIdx.x == 0) loss[r] = acc;
  }
  __shared__ bool last;
  __threadfence();
  if (threadIdx.x == 0) last = atomicAdd(ticket, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  const volatile float* done = loss;  // written by other blocks: read past the cache
  float sum = 0.0f;
  for (int64_t r = threadIdx.x; r < rows; r += kRowBlock) sum += done[r];
  sum = block_reduce<false>(sum);
  if (threadIdx.x == 0) {
    out[0] = sum / static_cast<float>(rows);
    *ticket = 0u;
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

// in, out are (outer, n, inner); one thread per (outer, inner) column
template <bool Log>
__global__ void softmax_cols_kernel(const float* in, float* out, int64_t outer, int64_t n, int64_t inner) {
  const int64_t cols = outer * inner;
  for (int64_t col = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; col < cols;
       col += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t base = (col / inner) * n * inner + col % inner;
    float mx = -INFINITY;
    for (int64_t j = 0; j < n; ++j) mx = nan_max(mx, in[base + j * inner]);
    float sum = 0.0f;
    for (int64_t j = 0; j < n; ++j) sum += expf(in[base + j * inner] - mx);
    const float log_sum = logf(sum);
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

static unsigned row_grid(int64_t rows) {
  const int64_t kMaxBlocks = stride_blocks(65535LL * 8);
  return static_cast<unsigned>(rows < kMaxBlocks ? rows : kMaxBlocks);
}

void softmax(int dev, const float* in, float* out, int64_t rows, int64_t cols) {
  cudaStream_t stream = activate(dev);
  launch<softmax_kernel>("softmax", row_grid(rows), kRowBlock, 0, stream, in, out, rows, cols);
}

void softmax_cross_entropy(int dev, const float* logits, const float* labels, float* out, int64_t rows,
                           int64_t cols) {
  // Per-row losses go to the device's workspace (see common.cuh).
  cudaStream_t stream = activate(dev);
  auto lock = workspace_lock();
  float* loss = workspace(dev, 0, rows);
  launch<cross_entropy_rows_kernel<false>>("softmax_cross_entropy", row_grid(rows), kRowBlock, 0, stream,
                                           logits, labels, loss, nullptr, rows, cols, 0.0f, block_ticket(dev),
                                           out);
}

// One launch writes the gradient, the per-row losses and their mean (the unfused graph takes five).
void softmax_cross_entropy_with_gradient(int dev, const float* logits, const float* labels, float* out,
                                         float* grad, int64_t rows, int64_t cols) {
  cudaStream_t stream = activate(dev);
  auto lock = workspace_lock();
  float* loss = workspace(dev, 0, rows);
  const float inv_rows = static_cast<float>(1.0 / static_cast<double>(rows));
  launch<cross_entropy_rows_kernel<true>>("softmax_cross_entropy_with_gradient", row_grid(rows), kRowBlock, 0,
                                          stream, logits, labels, loss, grad, rows, cols, inv_rows,
                                          block_ticket(dev), out);
}

void softmax_axis(int dev, const float* in, float* out, int64_t outer, int64_t n, int64_t inner, bool log) {
  cudaStream_t stream = activate(dev);
  const char* op = log ? "log_softmax" : "softmax";
  if (inner == 1) {
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
  if (inner == 1) {
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
