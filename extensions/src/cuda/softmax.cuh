// The softmax family's row statistics, shared by softmax.cu (softmax and log_softmax of rows) and
// loss.cu (the cross-entropy of a softmax). A row of more than kThreadRowMax values gets a block of
// kRowBlock threads; a shorter one (MNIST's 10 classes) one thread, which a block of 256 would
// leave mostly idle (and the emulator would switch among at every collective):
//   nan_max:           a max that propagates NaN, as the host's
//   block_reduce:      the max or the sum over the block of one value per thread
//   row_stats:         a row's max and log(sum exp(x - max)) (the log-sum-exp trick), by a block
//   strided_row_stats: the same by one thread, over values `stride` apart
//   row_grid:          blocks for `rows` rows (the kernels loop over the rest)
// Internal linkage: each file that includes this compiles its own copy.
#pragma once

#include "common.cuh"

namespace gpumat::GPUMAT_CUDA_NS {

namespace {

constexpr int kRowBlock = 256;         // threads per row
constexpr int64_t kThreadRowMax = 32;  // the longest row that one thread handles
constexpr int kWarps = kRowBlock / 32;

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

// The max and log(sum exp(x - max)) of x[0], x[stride], ..., x[(n - 1) * stride], by one thread.
__device__ void strided_row_stats(const float* x, int64_t n, int64_t stride, float* max_out,
                                  float* log_sum_out) {
  float mx = -INFINITY;
  for (int64_t j = 0; j < n; ++j) mx = nan_max(mx, x[j * stride]);
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) sum += expf(x[j * stride] - mx);
  *max_out = mx;
  *log_sum_out = logf(sum);
}

static unsigned row_grid(int64_t rows) {
  const int64_t kMaxBlocks = stride_blocks(65535LL * 8);
  return static_cast<unsigned>(rows < kMaxBlocks ? rows : kMaxBlocks);
}

}  // namespace

}  // namespace gpumat::GPUMAT_CUDA_NS
