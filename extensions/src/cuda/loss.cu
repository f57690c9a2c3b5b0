// CUDA loss family. Host reference: ../host/loss.cpp.
// Regression losses and nll_loss: pred, target, out_grad are (n,), loss and dloss (1,).
//   loss_partial_kernel<Abs>: partial[b] = sum over block b's grid-stride share of (p - t)^2 or |p - t|
//   loss_mean_kernel:         loss[0] = sum_b partial[b] / n (one block, fixed order)
//   mse/mae gradient:         out_grad[i] = dloss[0] * 2/n * (p - t)  or  dloss[0] / n * sign(p - t)
//   nll_loss: loss[0] = -sum_i target[i] * log_probs[i] / rows (the same partial sums and mean
//             kernel); nll_loss_gradient: out_grad[i] = -dloss[0] / rows * target[i]
// The grid of the partial sums depends only on n, and every sum runs in a fixed order, so results
// are deterministic. NOTE: NaN propagates into the loss and the gradient; sign(0) = 0.
// softmax_cross_entropy of logits and labels (rows, cols), one block per row with softmax.cuh's row
// statistics:
//   cross_entropy_rows_kernel: loss[r] = -sum_c y[r,c] * (x[r,c] - max_r - log sum_c exp(x - max_r)),
//                             then out[0] = mean_r loss[r], taken by the last block to finish (it
//                             sums in a fixed order, so the result is deterministic): one launch
//                             for the loss (and, fused, its gradient (softmax(x) - y) / rows)
#include <algorithm>

#include "common.cuh"
#include "kernels.cuh"
#include "softmax.cuh"

namespace gpumat::GPUMAT_CUDA_NS {

namespace {
constexpr int kLossThreads = 256;
constexpr int64_t kLossMaxBlocks = 1024;  // partial sums per loss
}  // namespace

// ---------------------------------------------------------------------------- kernels

// pred, target are (n,); partial is (gridDim.x,)
template <bool Abs>
__global__ void loss_partial_kernel(const float* __restrict__ pred, const float* __restrict__ target,
                                    int64_t n, float* __restrict__ partial) {
  float acc = 0.0f;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kLossThreads) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * kLossThreads) {
    const float d = pred[i] - target[i];
    acc += Abs ? fabsf(d) : d * d;
  }
  acc = block_sum<kLossThreads>(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// log_probs, target are (n,); partial is (gridDim.x,): -sum of target * log_probs
__global__ void nll_partial_kernel(const float* __restrict__ log_probs, const float* __restrict__ target,
                                   int64_t n, float* __restrict__ partial) {
  float acc = 0.0f;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kLossThreads) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * kLossThreads)
    acc -= target[i] * log_probs[i];
  acc = block_sum<kLossThreads>(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// target, out_grad are (n,); dloss is (1,)
__global__ void nll_gradient_kernel(const float* __restrict__ target, const float* __restrict__ dloss,
                                    float inv_rows, float* __restrict__ out_grad, int64_t n) {
  const float g = -dloss[0] * inv_rows;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out_grad[i] = g * target[i];
}

// partial is (blocks,), loss is (1,); launched with one block
__global__ void loss_mean_kernel(const float* __restrict__ partial, int64_t blocks, int64_t n,
                                 float* __restrict__ loss) {
  float acc = 0.0f;
  for (int64_t b = threadIdx.x; b < blocks; b += kLossThreads) acc += partial[b];
  acc = block_sum<kLossThreads>(acc);
  if (threadIdx.x == 0) loss[0] = static_cast<float>(static_cast<double>(acc) / static_cast<double>(n));
}

// pred, target, out_grad are (n,); dloss is (1,); scale is 2/n (mse) or 1/n (mae)
template <bool Abs>
__global__ void loss_gradient_kernel(const float* __restrict__ pred, const float* __restrict__ target,
                                     const float* __restrict__ dloss, float scale,
                                     float* __restrict__ out_grad, int64_t n) {
  const float g = dloss[0] * scale;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float d = pred[i] - target[i];
    out_grad[i] = Abs ? g * (d > 0.0f ? 1.0f : (d < 0.0f ? -1.0f : d)) : g * d;
  }
}

// One value's share of a row's loss, -y * log softmax(x), with the row's max and log-sum-exp;
// with WithGradient also its gradient (softmax(x) - y) * inv_rows into *grad.
template <bool WithGradient>
__device__ __forceinline__ float cross_entropy_term(float x, float y, float mx, float log_sum, float inv_rows,
                                                    float* grad) {
  const float z = x - mx - log_sum;
  if (WithGradient) *grad = (expf(z) - y) * inv_rows;
  return -y * z;
}

// logits, labels are (rows, cols); loss is (rows,), scratch; out is (1,): the mean loss. With
// WithGradient, also grad (rows, cols) = (softmax(x) - y) * inv_rows from the same row statistics
// (the loss and its gradient from one read of the logits); grad is unused otherwise. A row is
// handled by a block, or with ThreadPerRow (cols <= kThreadRowMax) by one thread.
// The mean: each block counts itself done on `ticket` (zero before the launch) after a fence that
// publishes its rows' losses; the last one sums them all, in row order, and resets the ticket
// ("last block" reduction, as in the CUDA samples' threadFenceReduction).
template <bool WithGradient, bool ThreadPerRow>
__global__ void cross_entropy_rows_kernel(const float* logits, const float* labels, float* loss, float* grad,
                                          int64_t rows, int64_t cols, float inv_rows, unsigned* ticket,
                                          float* out) {
  static_assert(kBlockSize == kRowBlock, "the last block sums with block_reduce");
  if constexpr (ThreadPerRow) {
    for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < rows;
         r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const float* x = logits + r * cols;
      const float* y = labels + r * cols;
      float mx, log_sum;
      strided_row_stats(x, cols, 1, &mx, &log_sum);
      float acc = 0.0f;
      for (int64_t c = 0; c < cols; ++c)
        acc += cross_entropy_term<WithGradient>(x[c], y[c], mx, log_sum, inv_rows,
                                                WithGradient ? grad + r * cols + c : nullptr);
      loss[r] = acc;
    }
  } else {
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
      const float* x = logits + r * cols;
      const float* y = labels + r * cols;
      float mx, log_sum;
      row_stats(x, cols, &mx, &log_sum);
      float acc = 0.0f;
      for (int64_t c = threadIdx.x; c < cols; c += kRowBlock)
        acc += cross_entropy_term<WithGradient>(x[c], y[c], mx, log_sum, inv_rows,
                                                WithGradient ? grad + r * cols + c : nullptr);
      acc = block_reduce<false>(acc);
      if (threadIdx.x == 0) loss[r] = acc;
    }
  }
  __shared__ bool last;
  __threadfence();
  // Every thread's rows are written (ThreadPerRow: each thread writes its own) before thread 0
  // counts the block done.
  __syncthreads();
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

// ---------------------------------------------------------------------------- launchers

template <bool Abs>
static void launch_loss(const char* op, int dev, const float* pred, const float* target, float* loss,
                        int64_t n) {
  const int64_t blocks = std::min<int64_t>(ceil_div(n, kLossThreads), stride_blocks(kLossMaxBlocks));
  // The partial sums live in the device's workspace (see common.cuh).
  cudaStream_t stream = activate(dev);
  auto lock = workspace_lock();
  float* partial = workspace(dev, 0, blocks);
  launch<loss_partial_kernel<Abs>>(op, static_cast<unsigned>(blocks), kLossThreads, 0, stream, pred, target,
                                   n, partial);
  launch<loss_mean_kernel>(op, 1, kLossThreads, 0, stream, partial, blocks, n, loss);
}

void mse_loss(int dev, const float* pred, const float* target, float* loss, int64_t n) {
  launch_loss<false>("mse_loss", dev, pred, target, loss, n);
}

void mae_loss(int dev, const float* pred, const float* target, float* loss, int64_t n) {
  launch_loss<true>("mae_loss", dev, pred, target, loss, n);
}

void mse_loss_gradient(int dev, const float* pred, const float* target, const float* dloss, float* out_grad,
                       int64_t n) {
  cudaStream_t stream = activate(dev);
  launch<loss_gradient_kernel<false>>("mse_loss_gradient", grid_for(n, kBlockSize), kBlockSize, 0, stream,
                                      pred, target, dloss, 2.0f / static_cast<float>(n), out_grad, n);
}

void mae_loss_gradient(int dev, const float* pred, const float* target, const float* dloss, float* out_grad,
                       int64_t n) {
  cudaStream_t stream = activate(dev);
  launch<loss_gradient_kernel<true>>("mae_loss_gradient", grid_for(n, kBlockSize), kBlockSize, 0, stream,
                                     pred, target, dloss, 1.0f / static_cast<float>(n), out_grad, n);
}

void nll_loss(int dev, const float* log_probs, const float* target, float* loss, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  const int64_t blocks = std::min<int64_t>(ceil_div(n, kLossThreads), stride_blocks(kLossMaxBlocks));
  cudaStream_t stream = activate(dev);
  auto lock = workspace_lock();
  float* partial = workspace(dev, 0, blocks);
  launch<nll_partial_kernel>("nll_loss", static_cast<unsigned>(blocks), kLossThreads, 0, stream, log_probs,
                             target, n, partial);
  launch<loss_mean_kernel>("nll_loss", 1, kLossThreads, 0, stream, partial, blocks, rows, loss);
}

void nll_loss_gradient(int dev, const float* target, const float* dloss, float* out_grad, int64_t rows,
                       int64_t cols) {
  const int64_t n = rows * cols;
  cudaStream_t stream = activate(dev);
  launch<nll_gradient_kernel>("nll_loss_gradient", grid_for(n, kBlockSize), kBlockSize, 0, stream, target,
                              dloss, 1.0f / static_cast<float>(rows), out_grad, n);
}

// cross_entropy_rows_kernel with a thread per row for rows of at most kThreadRowMax values, else
// a block per row.
template <bool WithGradient>
static void launch_cross_entropy(const char* op, cudaStream_t stream, const float* logits,
                                 const float* labels, float* loss, float* grad, int64_t rows, int64_t cols,
                                 float inv_rows, unsigned* ticket, float* out) {
  if (cols <= kThreadRowMax)
    launch<cross_entropy_rows_kernel<WithGradient, true>>(op, grid_for(rows, kBlockSize), kBlockSize, 0,
                                                          stream, logits, labels, loss, grad, rows, cols,
                                                          inv_rows, ticket, out);
  else
    launch<cross_entropy_rows_kernel<WithGradient, false>>(op, row_grid(rows), kRowBlock, 0, stream, logits,
                                                           labels, loss, grad, rows, cols, inv_rows, ticket,
                                                           out);
}

void softmax_cross_entropy(int dev, const float* logits, const float* labels, float* out, int64_t rows,
                           int64_t cols) {
  // Per-row losses go to the device's workspace (see common.cuh).
  cudaStream_t stream = activate(dev);
  auto lock = workspace_lock();
  float* loss = workspace(dev, 0, rows);
  launch_cross_entropy<false>("softmax_cross_entropy", stream, logits, labels, loss, nullptr, rows, cols,
                              0.0f, block_ticket(dev), out);
}

// One launch writes the gradient, the per-row losses and their mean (the unfused graph takes five).
void softmax_cross_entropy_with_gradient(int dev, const float* logits, const float* labels, float* out,
                                         float* grad, int64_t rows, int64_t cols) {
  cudaStream_t stream = activate(dev);
  auto lock = workspace_lock();
  float* loss = workspace(dev, 0, rows);
  const float inv_rows = static_cast<float>(1.0 / static_cast<double>(rows));
  launch_cross_entropy<true>("softmax_cross_entropy_with_gradient", stream, logits, labels, loss, grad, rows,
                             cols, inv_rows, block_ticket(dev), out);
}

}  // namespace gpumat::GPUMAT_CUDA_NS
