// CUDA softmax family over (rows, cols), one block per row (grid-stride over rows):
//   softmax_kernel:           out[r,c] = exp(x[r,c] - max_r) / sum_c exp(x[r,c] - max_r)
//   cross_entropy_rows_kernel: loss[r] = -sum_c y[r,c] * (x[r,c] - max_r - log sum_c exp(x - max_r))
//   mean_kernel:              out[0] = mean_r loss[r] (one block, fixed order: deterministic)
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

// logits, labels are (rows, cols); loss is (rows,)
__global__ void cross_entropy_rows_kernel(const float* logits, const float* labels, float* loss, int64_t rows,
                                          int64_t cols) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* x = logits + r * cols;
    const float* y = labels + r * cols;
    float mx, log_sum;
    row_stats(x, cols, &mx, &log_sum);
    float acc = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += kRowBlock) acc -= y[c] * (x[c] - mx - log_sum);
    acc = block_reduce<false>(acc);
    if (threadIdx.x == 0) loss[r] = acc;
  }
}

// loss is (rows,), out is (1,); launched with one block
__global__ void mean_kernel(const float* loss, int64_t rows, float* out) {
  float acc = 0.0f;
  for (int64_t r = threadIdx.x; r < rows; r += kRowBlock) acc += loss[r];
  acc = block_reduce<false>(acc);
  if (threadIdx.x == 0) out[0] = acc / static_cast<float>(rows);
}

// ---------------------------------------------------------------------------- launchers

static unsigned row_grid(int64_t rows) {
  const int64_t kMaxBlocks = 65535LL * 8;
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
  launch<cross_entropy_rows_kernel>("softmax_cross_entropy", row_grid(rows), kRowBlock, 0, stream, logits,
                                    labels, loss, rows, cols);
  launch<mean_kernel>("softmax_cross_entropy (mean)", 1, kRowBlock, 0, stream, loss, rows, out);
}

}  // namespace gpumat::GPUMAT_CUDA_NS
