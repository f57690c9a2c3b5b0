// CUDA normalisation kernels (the norm family; host reference ../host/norm.cpp).
// Layer norm (Ba, Kiros & Hinton 2016) and RMS norm (Zhang & Sennrich 2019) over rows of length d
// of x (rows, d), one warp per row (kRowsPerBlock rows per block, grid-stride over rows), sums by
// warp shuffles (every lane gets the total; no shared memory, no block barrier):
//   layer_norm:            out = (x - mean) * rstd * weight + bias, the row statistics computed
//                          in the same kernel (fused: x read once from DRAM, again from cache)
//   layer_norm_stats:      stats (rows, 2) = [mean, rstd], for the backward (graph nodes have one
//                          output, so the gradient recomputes them rather than keep them)
//   layer_norm_gradient:   g = dy * weight, xhat = (x - mean) * rstd,
//                          dx = rstd * (g - mean_d(g) - xhat * mean_d(g * xhat)); RMS: no mean_d(g)
//   layer_norm_weight_gradient: dweight[j] = sum_r dy[r, j] * xhat[r, j]: threads own (column j,
//                          run of rows) and walk the run in order (coalesced across j), partials
//                          per run summed in run order by a second kernel (deterministic)
//   layer_norm_backward:   dx, dweight and dbias (the column sums of dy) in one call: the stats,
//                          gradient and weight gradient kernels and a column sum, in turn
// rstd = 1 / sqrt(var + eps); layer norm: mean, var = the biased variance; RMS: mean = 0,
// var = mean(x^2). Statistics are two-pass (the mean, then the mean of the squared deviations:
// Chan, Golub & LeVeque 1983's recommended algorithm when the data can be read twice; no
// cancellation for rows of large mean, as E[x^2] - mean^2 would have) in float32, each lane's
// partial sums combined in a fixed shuffle tree, so results never depend on scheduling.
// Batch norm (Ioffe & Szegedy 2015) over x (n, c, inner), per channel over (n, inner); one block of
// kChannelBlock threads per channel (grid-stride over channels), block sums by warp shuffles then
// one value per warp in shared memory, summed in a fixed order:
//   batch_norm_stats:      stats (c, 2) = [mean, biased var], two-pass
//   batch_norm:            out = (x - mean) * rsqrt(var + eps) * weight + bias (stats from
//                          batch_norm_stats in training, the running stats in eval), one thread
//                          per element (launch_map)
//   batch_norm_gradient:   training: dx = w rstd (dy - mean(dy) - xhat mean(dy xhat)), the full
//                          gradient through the batch mean and variance; eval: dx = w rstd dy
//   batch_norm_weight_gradient: dweight[c] = sum dy * xhat over (n, inner)
#include <algorithm>

#include "common.cuh"
#include "kernels.cuh"

namespace gpumat::GPUMAT_CUDA_NS {

namespace {

constexpr int kRowsPerBlock = 4;  // warps per block, one row each
constexpr int kChannelBlock = 256;
constexpr int kChannelWarps = kChannelBlock / 32;
constexpr int64_t kTargetBlocks = 1024;  // (column block, row chunk) pairs of a weight gradient
constexpr int64_t kMinChunkRows = 32;

// The sum of v over the warp, in every lane (butterfly: a fixed order).
__device__ __forceinline__ float warp_sum(float v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// The sum of v over a kChannelBlock-thread block, in every thread. Every thread must call it.
__device__ float channel_sum(float v) {
  __shared__ float warp_vals[kChannelWarps];
  __shared__ float total;
  v = warp_sum(v);
  if (threadIdx.x % 32 == 0) warp_vals[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0.0f;
    for (int w = 0; w < kChannelWarps; ++w) t += warp_vals[w];
    total = t;
  }
  __syncthreads();
  const float r = total;
  __syncthreads();  // warp_vals and total are reused by the next call
  return r;
}

// Row r's mean and rstd by one warp (lane = threadIdx.x % 32).
__device__ void row_stats(const float* x, int64_t d, float eps, bool rms, int lane, float* mean,
                          float* rstd) {
  float m = 0.0f;
  if (!rms) {
    float s = 0.0f;
    for (int64_t j = lane; j < d; j += 32) s += x[j];
    m = warp_sum(s) / static_cast<float>(d);
  }
  float q = 0.0f;
  for (int64_t j = lane; j < d; j += 32) {
    const float t = x[j] - m;
    q += t * t;
  }
  *mean = m;
  *rstd = rsqrtf(warp_sum(q) / static_cast<float>(d) + eps);
}

// The warp of this thread and the stride between its rows.
__device__ __forceinline__ int64_t first_row() {
  return static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
}
__device__ __forceinline__ int64_t row_stride() { return static_cast<int64_t>(gridDim.x) * kRowsPerBlock; }

__global__ void layer_norm_kernel(const float* x, const float* weight, const float* bias, float* out,
                                  int64_t rows, int64_t d, float eps, bool rms) {
  const int lane = threadIdx.x % 32;
  for (int64_t r = first_row(); r < rows; r += row_stride()) {
    const float* xr = x + r * d;
    float mean, rstd;
    row_stats(xr, d, eps, rms, lane, &mean, &rstd);
    for (int64_t j = lane; j < d; j += 32) out[r * d + j] = (xr[j] - mean) * rstd * weight[j] + bias[j];
  }
}

__global__ void layer_norm_stats_kernel(const float* x, float* stats, int64_t rows, int64_t d, float eps,
                                        bool rms) {
  const int lane = threadIdx.x % 32;
  for (int64_t r = first_row(); r < rows; r += row_stride()) {
    float mean, rstd;
    row_stats(x + r * d, d, eps, rms, lane, &mean, &rstd);
    if (lane == 0) {
      stats[2 * r] = mean;
      stats[2 * r + 1] = rstd;
    }
  }
}

__global__ void layer_norm_gradient_kernel(const float* x, const float* stats, const float* weight,
                                           const float* dy, float* dx, int64_t rows, int64_t d, bool rms) {
  const int lane = threadIdx.x % 32;
  for (int64_t r = first_row(); r < rows; r += row_stride()) {
    const float mean = stats[2 * r], rstd = stats[2 * r + 1];
    const float* xr = x + r * d;
    const float* gr = dy + r * d;
    float sg = 0.0f, sgx = 0.0f;
    for (int64_t j = lane; j < d; j += 32) {
      const float g = gr[j] * weight[j];
      sg += g;
      sgx += g * (xr[j] - mean) * rstd;
    }
    const float inv_d = 1.0f / static_cast<float>(d);
    const float mg = rms ? 0.0f : warp_sum(sg) * inv_d;
    const float mgx = warp_sum(sgx) * inv_d;
    for (int64_t j = lane; j < d; j += 32) {
      const float g = gr[j] * weight[j];
      dx[r * d + j] = rstd * (g - mg - (xr[j] - mean) * rstd * mgx);
    }
  }
}

// Column sums per run of rows: of dy * xhat (the weight gradient; XHat) or of dy alone (the bias
// gradient of layer_norm_backward; x and stats unread). Rows split into `chunks` runs of
// chunk_rows (blockIdx.y: the run, grid-stride in x over columns): one chunk writes out itself;
// several write partials (chunks, d) that sum_chunks_kernel adds in chunk order. The split depends
// only on the shape, so the result is deterministic.
template <bool XHat>
__global__ void column_sums_kernel(const float* x, const float* stats, const float* dy, float* out,
                                   int64_t rows, int64_t d, int64_t chunk_rows, int64_t chunks) {
  for (int64_t k = blockIdx.y; k < chunks; k += gridDim.y) {
    const int64_t r0 = k * chunk_rows, r1 = r0 + chunk_rows < rows ? r0 + chunk_rows : rows;
    for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < d;
         j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      float s = 0.0f;
      for (int64_t r = r0; r < r1; ++r)
        s += XHat ? dy[r * d + j] * (x[r * d + j] - stats[2 * r]) * stats[2 * r + 1] : dy[r * d + j];
      out[k * d + j] = s;
    }
  }
}

__global__ void sum_chunks_kernel(const float* part, float* out, int64_t chunks, int64_t d) {
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < d;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float s = 0.0f;
    for (int64_t k = 0; k < chunks; ++k) s += part[k * d + j];
    out[j] = s;
  }
}

// The element k of channel ch's (n, inner) values in x (n, c, inner).
__device__ __forceinline__ int64_t channel_at(int64_t k, int64_t ch, int64_t c, int64_t inner) {
  return (k / inner * c + ch) * inner + k % inner;
}

__global__ void batch_norm_stats_kernel(const float* x, float* stats, int64_t n, int64_t c, int64_t inner) {
  const int64_t count = n * inner;
  for (int64_t ch = blockIdx.x; ch < c; ch += gridDim.x) {
    float s = 0.0f;
    for (int64_t k = threadIdx.x; k < count; k += kChannelBlock) s += x[channel_at(k, ch, c, inner)];
    const float mean = channel_sum(s) / static_cast<float>(count);
    float q = 0.0f;
    for (int64_t k = threadIdx.x; k < count; k += kChannelBlock) {
      const float t = x[channel_at(k, ch, c, inner)] - mean;
      q += t * t;
    }
    const float var = channel_sum(q) / static_cast<float>(count);
    if (threadIdx.x == 0) {
      stats[2 * ch] = mean;
      stats[2 * ch + 1] = var;
    }
  }
}

// Training: the two channel sums of the full gradient; eval: none. Weight gradient: sum dy * xhat.
template <bool Training>
__global__ void batch_norm_gradient_kernel(const float* x, const float* stats, const float* weight,
                                           const float* dy, float* dx, int64_t n, int64_t c, int64_t inner,
                                           float eps) {
  const int64_t count = n * inner;
  for (int64_t ch = blockIdx.x; ch < c; ch += gridDim.x) {
    const float mean = stats[2 * ch], rstd = rsqrtf(stats[2 * ch + 1] + eps), w = weight[ch];
    float mg = 0.0f, mgx = 0.0f;
    if (Training) {
      float sg = 0.0f, sgx = 0.0f;
      for (int64_t k = threadIdx.x; k < count; k += kChannelBlock) {
        const int64_t i = channel_at(k, ch, c, inner);
        sg += dy[i];
        sgx += dy[i] * (x[i] - mean) * rstd;
      }
      mg = channel_sum(sg) / static_cast<float>(count);
      mgx = channel_sum(sgx) / static_cast<float>(count);
    }
    for (int64_t k = threadIdx.x; k < count; k += kChannelBlock) {
      const int64_t i = channel_at(k, ch, c, inner);
      dx[i] = w * rstd * (dy[i] - mg - (x[i] - mean) * rstd * mgx);
    }
  }
}

__global__ void batch_norm_weight_gradient_kernel(const float* x, const float* stats, const float* dy,
                                                  float* dweight, int64_t n, int64_t c, int64_t inner,
                                                  float eps) {
  const int64_t count = n * inner;
  for (int64_t ch = blockIdx.x; ch < c; ch += gridDim.x) {
    const float mean = stats[2 * ch], rstd = rsqrtf(stats[2 * ch + 1] + eps);
    float s = 0.0f;
    for (int64_t k = threadIdx.x; k < count; k += kChannelBlock) {
      const int64_t i = channel_at(k, ch, c, inner);
      s += dy[i] * (x[i] - mean) * rstd;
    }
    s = channel_sum(s);
    if (threadIdx.x == 0) dweight[ch] = s;
  }
}

unsigned row_blocks(int64_t rows) { return grid_for(rows, kRowsPerBlock); }

unsigned channel_blocks(int64_t c) {
  const int64_t cap = stride_blocks(65535);
  return static_cast<unsigned>(c < cap ? c : cap);
}

}  // namespace

// ---------------------------------------------------------------------------- launchers

void layer_norm(int dev, const float* x, const float* weight, const float* bias, float* out, int64_t rows,
                int64_t d, float eps, bool rms) {
  cudaStream_t stream = activate(dev);
  launch<layer_norm_kernel>(rms ? "rms_norm" : "layer_norm", row_blocks(rows), 32 * kRowsPerBlock, 0, stream,
                            x, weight, bias, out, rows, d, eps, rms);
}

void layer_norm_stats(int dev, const float* x, float* stats, int64_t rows, int64_t d, float eps, bool rms) {
  cudaStream_t stream = activate(dev);
  launch<layer_norm_stats_kernel>("layer_norm_stats", row_blocks(rows), 32 * kRowsPerBlock, 0, stream, x,
                                  stats, rows, d, eps, rms);
}

void layer_norm_gradient(int dev, const float* x, const float* stats, const float* weight, const float* dy,
                         float* dx, int64_t rows, int64_t d, bool rms) {
  cudaStream_t stream = activate(dev);
  launch<layer_norm_gradient_kernel>("layer_norm_gradient", row_blocks(rows), 32 * kRowsPerBlock, 0, stream,
                                     x, stats, weight, dy, dx, rows, d, rms);
}

namespace {
// column_sums_kernel<XHat> over (rows, d) -> (d,): enough (column block, run) pairs to fill a GPU,
// runs of at least kMinChunkRows rows; several runs' partials live in workspace slot 0.
template <bool XHat>
void column_sums(const char* op, int dev, cudaStream_t stream, const float* x, const float* stats,
                 const float* dy, float* out, int64_t rows, int64_t d) {
  const int64_t col_blocks = grid_for(d, kBlockSize);
  const int64_t want = std::max<int64_t>(1, kTargetBlocks / col_blocks);
  const int64_t chunk_rows = std::max<int64_t>(kMinChunkRows, ceil_div(rows, want));
  const int64_t chunks = std::max<int64_t>(1, ceil_div(rows, chunk_rows));
  const dim3 grid(static_cast<unsigned>(col_blocks), static_cast<unsigned>(std::min<int64_t>(chunks, 65535)));
  if (chunks == 1) {
    launch<column_sums_kernel<XHat>>(op, grid, kBlockSize, 0, stream, x, stats, dy, out, rows, d, chunk_rows,
                                     chunks);
    return;
  }
  auto lock = workspace_lock();  // the partials live in the device's workspace (common.cuh)
  float* part = workspace(dev, 0, chunks * d);
  launch<column_sums_kernel<XHat>>(op, grid, kBlockSize, 0, stream, x, stats, dy, part, rows, d, chunk_rows,
                                   chunks);
  launch<sum_chunks_kernel>(op, grid_for(d, kBlockSize), kBlockSize, 0, stream, part, out, chunks, d);
}
}  // namespace

void layer_norm_weight_gradient(int dev, const float* x, const float* stats, const float* dy, float* dweight,
                                int64_t rows, int64_t d) {
  cudaStream_t stream = activate(dev);
  column_sums<true>("layer_norm_weight_gradient", dev, stream, x, stats, dy, dweight, rows, d);
}

// The three gradients of a layer norm from one call: the row statistics into workspace slot 1, then
// the kernels of layer_norm_gradient, layer_norm_weight_gradient and the column sums of dy (the
// host's version reads x and dy once; here each kernel reads them, as the separate ops would).
void layer_norm_backward(int dev, const float* x, const float* weight, const float* dy, float* dx,
                         float* dweight, float* dbias, int64_t rows, int64_t d, float eps, bool rms) {
  const char* op = "layer_norm_backward";
  cudaStream_t stream = activate(dev);
  auto lock = workspace_lock();
  float* stats = nullptr;
  if (rows > 0) {  // (no rows: dweight and dbias are zeros, from the column sums alone)
    stats = workspace(dev, 1, 2 * rows);
    launch<layer_norm_stats_kernel>(op, row_blocks(rows), 32 * kRowsPerBlock, 0, stream, x, stats, rows, d,
                                    eps, rms);
    launch<layer_norm_gradient_kernel>(op, row_blocks(rows), 32 * kRowsPerBlock, 0, stream, x, stats, weight,
                                       dy, dx, rows, d, rms);
  }
  column_sums<true>(op, dev, stream, x, stats, dy, dweight, rows, d);
  column_sums<false>(op, dev, stream, x, stats, dy, dbias, rows, d);
}

void batch_norm_stats(int dev, const float* x, float* stats, int64_t n, int64_t c, int64_t inner) {
  cudaStream_t stream = activate(dev);
  launch<batch_norm_stats_kernel>("batch_norm_stats", channel_blocks(c), kChannelBlock, 0, stream, x, stats,
                                  n, c, inner);
}

void batch_norm(int dev, const float* x, const float* stats, const float* weight, const float* bias,
                float* out, int64_t n, int64_t c, int64_t inner, float eps) {
  launch_map("batch_norm", dev, out, n * c * inner, [=] __device__(int64_t i) {
    const int64_t ch = i / inner % c;
    return (x[i] - stats[2 * ch]) * rsqrtf(stats[2 * ch + 1] + eps) * weight[ch] + bias[ch];
  });
}

void batch_norm_gradient(int dev, const float* x, const float* stats, const float* weight, const float* dy,
                         float* dx, int64_t n, int64_t c, int64_t inner, float eps, bool training) {
  cudaStream_t stream = activate(dev);
  if (training)
    launch<batch_norm_gradient_kernel<true>>("batch_norm_gradient", channel_blocks(c), kChannelBlock, 0,
                                             stream, x, stats, weight, dy, dx, n, c, inner, eps);
  else
    launch<batch_norm_gradient_kernel<false>>("batch_norm_gradient", channel_blocks(c), kChannelBlock, 0,
                                              stream, x, stats, weight, dy, dx, n, c, inner, eps);
}

void batch_norm_weight_gradient(int dev, const float* x, const float* stats, const float* dy, float* dweight,
                                int64_t n, int64_t c, int64_t inner, float eps) {
  cudaStream_t stream = activate(dev);
  launch<batch_norm_weight_gradient_kernel>("batch_norm_weight_gradient", channel_blocks(c), kChannelBlock, 0,
                                            stream, x, stats, dy, dweight, n, c, inner, eps);
}

}  // namespace gpumat::GPUMAT_CUDA_NS
