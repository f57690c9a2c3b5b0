// CUDA reduce family: reductions and broadcasts, each the other's gradient. Host reference:
// ../host/reduce.cpp.
//   broadcast_to:   in (n_in,) -> out (n_out,), out[i] = in[i % n_in]
//   broadcast_axis: in (outer, inner) -> out (outer, n, inner), out[o, j, i] = scale * in[o, i],
//                   the index arithmetic ../axis.h's (shared with the host)
// Both grid-stride, one thread per output element.
//
// reduce_sum_axis_zero, in (rows, cols) -> out (cols,) column sums; and sum_partials, the second
// pass that reduce_sum_channels (conv.cu) shares.
// Two levels, deterministic (no atomics):
//   1. reduce_sum_axis_zero_kernel: grid (column tiles, row chunks). A block of 256 threads covers
//      `tw` columns (tw = 32, or cols when narrower) x 256/tw row lanes of one chunk of rows; each
//      thread sums a strided set of that chunk's rows of one column, the lanes of a column are then
//      added in shared memory in a fixed order. One chunk: the block writes out[] directly. Several:
//      each writes its chunk's column sums to a workspace of partials.
//   2. sum_partials_kernel: out[c] = the sum of the chunks' partials of column c, in chunk order.
// The chunk count depends only on the shape and the device's grid limit, so results repeat bit
// for bit. Narrow inputs (cols < 32) put the consecutive columns of several rows in one warp, so a
// one-column sum reads contiguous memory with all 256 threads of each of ~1,024 blocks.
// Accumulation is in float64 (per thread, across lanes, across chunks), as the host's is: the error
// is then the final rounding to float plus ~N * 2^-53, which does not grow with N for any size a
// GPU holds, and CUDA and host agree to that rounding. Why float64 rather than a float tree: the
// sum is memory-bound (one add per 4 bytes read), so even a GPU with 1/64-rate FP64 adds
// (consumer parts: > 1e12 adds/s against < 3e11 floats/s of bandwidth) is not slowed by it.
//
// Reductions along one axis of an N-d array seen as (outer, n, inner), the axis in the middle (any
// axis, no transposes):
//   reduce_axis_kernel<Kind>:    out[o, i] = sum_j / mean_j / max_j / prod_j in[o, j, i]  (Kind 0..3)
//   argmax_kernel:               out[o, i] = the first j of max_j in[o, j, i] (a NaN is the max),
//                                as a float (exact: the op refuses axes longer than 2^24)
//   reduce_max_gradient_kernel:  dx[o, j, i] = dy[o, i] / t[o, i] where x[o, j, i] == y[o, i], else 0,
//                                t = the number of tied maxima (ties share the gradient equally)
// Tiling: one thread per (outer, inner) output looping over n; consecutive threads read
// consecutive inner elements (coalesced when inner > 1). Each output is summed in a fixed order,
// so results are deterministic. NOTE: a NaN in a slice makes its max NaN (and the NaN elements
// share that slice's gradient). The per-slice loops are ../axis.h's, shared with the host.
#include <algorithm>

#include "../axis.h"
#include "common.cuh"
#include "kernels.cuh"

namespace gpumat::GPUMAT_CUDA_NS {

namespace {
constexpr int kThreads = 256;
constexpr int kWideCols = 32;            // columns per block when cols >= 32
constexpr int64_t kTargetBlocks = 1024;  // enough resident blocks to fill any GPU (132 SMs x 8)
constexpr int64_t kMinPerThread = 8;     // a chunk gives each thread at least this many elements
}  // namespace

// ---------------------------------------------------------------------------- kernels

// in is (rows, cols); out is (cols,); partial is (gridDim.y, cols) when gridDim.y > 1. Block
// (x, y) sums rows [y * chunk_rows, (y + 1) * chunk_rows) of columns [x * tw, (x + 1) * tw).
__global__ void reduce_sum_axis_zero_kernel(const float* __restrict__ in, int64_t rows, int64_t cols, int tw,
                                            int64_t chunk_rows, float* __restrict__ out,
                                            double* __restrict__ partial) {
  __shared__ double lane_sums[kThreads];
  const int t = threadIdx.x, lanes = kThreads / tw;
  const int64_t c = blockIdx.x * static_cast<int64_t>(tw) + t % tw;
  const int64_t r_begin = blockIdx.y * chunk_rows;
  const int64_t r_end = r_begin + chunk_rows < rows ? r_begin + chunk_rows : rows;
  double acc = 0.0;
  if (t < tw * lanes && c < cols)
    for (int64_t r = r_begin + t / tw; r < r_end; r += lanes) acc += in[r * cols + c];
  lane_sums[t] = acc;
  __syncthreads();
  if (t < tw && c < cols) {
    double sum = 0.0;
    for (int j = 0; j < lanes; ++j) sum += lane_sums[j * tw + t];
    if (gridDim.y == 1)
      out[c] = static_cast<float>(sum);
    else
      partial[blockIdx.y * cols + c] = sum;
  }
}

// partial is (chunks, cols), out is (cols,): out[c] = sum over j of partial[j, c], j in order.
__global__ void sum_partials_kernel(const double* __restrict__ partial, int64_t chunks, int64_t cols,
                                    float* __restrict__ out) {
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < cols;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double sum = 0.0;
    for (int64_t j = 0; j < chunks; ++j) sum += partial[j * cols + c];
    out[c] = static_cast<float>(sum);
  }
}

// in is (outer, n, inner), out is (outer, inner)
template <int Kind>
__global__ void reduce_axis_kernel(const float* in, float* out, int64_t outer, int64_t n, int64_t inner) {
  const int64_t cols = outer * inner;
  for (int64_t col = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; col < cols;
       col += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[col] = axis::reduce_slice(in, col, n, inner, Kind);
}

// in is (outer, n, inner), out is (outer, inner)
__global__ void argmax_kernel(const float* in, float* out, int64_t outer, int64_t n, int64_t inner) {
  const int64_t cols = outer * inner;
  for (int64_t col = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; col < cols;
       col += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[col] = static_cast<float>(axis::argmax_slice(in, col, n, inner));
}

// x, dx are (outer, n, inner); y, dy are (outer, inner)
__global__ void reduce_max_gradient_kernel(const float* x, const float* y, const float* dy, float* dx,
                                           int64_t outer, int64_t n, int64_t inner) {
  const int64_t cols = outer * inner;
  for (int64_t col = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; col < cols;
       col += static_cast<int64_t>(gridDim.x) * blockDim.x)
    axis::max_gradient_slice(x, y, dy, dx, col, n, inner);
}

// in is (n_in,), out is (n_out,)
__global__ void broadcast_to_kernel(const float* in, int64_t n_in, float* out, int64_t n_out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n_out;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = in[i % n_in];
}

// in is (outer, inner), out is (outer, n, inner)
__global__ void broadcast_axis_kernel(const float* in, float* out, int64_t outer, int64_t n, int64_t inner,
                                      float scale) {
  const int64_t total = outer * n * inner;
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < total;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[k] = scale * in[axis::broadcast_source(k, n, inner)];
}

// x, dx are (outer, n, inner); dy is (outer, inner)
__global__ void prod_gradient_kernel(const float* x, const float* dy, float* dx, int64_t outer, int64_t n,
                                     int64_t inner) {
  const int64_t cols = outer * inner;
  for (int64_t col = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; col < cols;
       col += static_cast<int64_t>(gridDim.x) * blockDim.x)
    axis::prod_gradient_slice(x, dy, dx, col, n, inner);
}

// in, out are (outer, n, inner); one thread per slice, a sequential double running sum
__global__ void cumsum_kernel(const float* in, float* out, int64_t outer, int64_t n, int64_t inner,
                              bool reverse) {
  const int64_t cols = outer * inner;
  for (int64_t col = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; col < cols;
       col += static_cast<int64_t>(gridDim.x) * blockDim.x)
    axis::cumsum_slice(in, out, col, n, inner, reverse);
}

// ---------------------------------------------------------------------------- launchers

int64_t reduce_chunks(int64_t blocks_per_chunk, int64_t elements, int64_t max_chunks) {
  int64_t chunks = ceil_div(kTargetBlocks, blocks_per_chunk);
  chunks = std::min(chunks, ceil_div(elements, kThreads * kMinPerThread));
  return std::max<int64_t>(1, std::min(chunks, max_chunks));
}

double* reduce_partials(int dev, int64_t chunks, int64_t cols) {
  // Two floats per double; the workspace is allocator-aligned (256 bytes).
  return reinterpret_cast<double*>(workspace(dev, 0, 2 * chunks * cols));
}

void sum_partials(int dev, const double* partial, int64_t chunks, int64_t cols, float* out, const char* op) {
  cudaStream_t stream = activate(dev);
  launch<sum_partials_kernel>(op, grid_for(cols, kThreads), kThreads, 0, stream, partial, chunks, cols, out);
}

void reduce_sum_axis_zero(int dev, const float* in, int64_t rows, int64_t cols, float* out) {
  const char* op = "reduce_sum_axis_zero";
  const GridLimits lim = grid_limits(dev);
  const int tw = static_cast<int>(std::min<int64_t>(cols, kWideCols));
  const int64_t col_tiles = ceil_div(cols, tw);
  if (col_tiles > lim.x)  // 6.9e10 columns: more memory than any GPU has
    throw ShapeError(std::string(op) + ": " + std::to_string(cols) +
                     " columns exceed the CUDA grid limit of " + std::to_string(lim.x * tw));
  int64_t chunks = reduce_chunks(col_tiles, rows * tw, lim.y);
  // rows may be 0 (a (0, cols) input sums to zeros): one chunk of no rows then.
  const int64_t chunk_rows = std::max<int64_t>(1, ceil_div(rows, chunks));
  chunks = std::max<int64_t>(1, ceil_div(rows, chunk_rows));  // no empty chunk
  cudaStream_t stream = activate(dev);
  const dim3 grid(static_cast<unsigned>(col_tiles), static_cast<unsigned>(chunks));
  if (chunks == 1) {
    launch<reduce_sum_axis_zero_kernel>(op, grid, kThreads, 0, stream, in, rows, cols, tw, chunk_rows, out,
                                        static_cast<double*>(nullptr));
    return;
  }
  // The partials live in the device's workspace (see common.cuh).
  auto lock = workspace_lock();
  double* partial = reduce_partials(dev, chunks, cols);
  launch<reduce_sum_axis_zero_kernel>(op, grid, kThreads, 0, stream, in, rows, cols, tw, chunk_rows, out,
                                      partial);
  sum_partials(dev, partial, chunks, cols, out, op);
}

void reduce_axis(int dev, const float* in, float* out, int64_t outer, int64_t n, int64_t inner, int kind) {
  cudaStream_t stream = activate(dev);
  const unsigned grid = grid_for(outer * inner, kBlockSize);
  if (kind == 0)
    launch<reduce_axis_kernel<0>>("reduce_sum", grid, kBlockSize, 0, stream, in, out, outer, n, inner);
  else if (kind == 1)
    launch<reduce_axis_kernel<1>>("reduce_mean", grid, kBlockSize, 0, stream, in, out, outer, n, inner);
  else if (kind == 2)
    launch<reduce_axis_kernel<2>>("reduce_max", grid, kBlockSize, 0, stream, in, out, outer, n, inner);
  else
    launch<reduce_axis_kernel<3>>("reduce_prod", grid, kBlockSize, 0, stream, in, out, outer, n, inner);
}

void argmax(int dev, const float* in, float* out, int64_t outer, int64_t n, int64_t inner) {
  cudaStream_t stream = activate(dev);
  launch<argmax_kernel>("argmax", grid_for(outer * inner, kBlockSize), kBlockSize, 0, stream, in, out, outer,
                        n, inner);
}

void reduce_max_gradient(int dev, const float* x, const float* y, const float* dy, float* dx, int64_t outer,
                         int64_t n, int64_t inner) {
  cudaStream_t stream = activate(dev);
  launch<reduce_max_gradient_kernel>("reduce_max_gradient", grid_for(outer * inner, kBlockSize), kBlockSize,
                                     0, stream, x, y, dy, dx, outer, n, inner);
}

void broadcast_to(int dev, const float* in, int64_t n_in, float* out, int64_t n_out) {
  cudaStream_t stream = activate(dev);
  launch<broadcast_to_kernel>("broadcast_to", grid_for(n_out, kBlockSize), kBlockSize, 0, stream, in, n_in,
                              out, n_out);
}

void broadcast_axis(int dev, const float* in, float* out, int64_t outer, int64_t n, int64_t inner,
                    float scale) {
  cudaStream_t stream = activate(dev);
  launch<broadcast_axis_kernel>("broadcast_axis", grid_for(outer * n * inner, kBlockSize), kBlockSize, 0,
                                stream, in, out, outer, n, inner, scale);
}

void prod_gradient(int dev, const float* x, const float* dy, float* dx, int64_t outer, int64_t n,
                   int64_t inner) {
  cudaStream_t stream = activate(dev);
  launch<prod_gradient_kernel>("prod_gradient", grid_for(outer * inner, kBlockSize), kBlockSize, 0, stream, x,
                               dy, dx, outer, n, inner);
}

void cumsum(int dev, const float* in, float* out, int64_t outer, int64_t n, int64_t inner, bool reverse) {
  cudaStream_t stream = activate(dev);
  launch<cumsum_kernel>("cumsum", grid_for(outer * inner, kBlockSize), kBlockSize, 0, stream, in, out, outer,
                        n, inner, reverse);
}

}  // namespace gpumat::GPUMAT_CUDA_NS
