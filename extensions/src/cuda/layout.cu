// CUDA layout kernels: 2-D transpose, one_hot and triangle (tril / triu: one thread per element,
// launch_map) (reshape is a copy, elementwise.cu's). Host reference: ../host/layout.cpp.
//   transpose: in (rows, cols) -> out (cols, rows); 32x32 tiles staged through shared memory (padded
//              to 33 columns so the column reads hit 32 different banks) so that both the global
//              reads and the global writes are coalesced.
//   one_hot:   indices (rows,) -> out (rows, classes), out[r, c] = indices[r] == c ? 1 : 0; one
//              thread per output element (common.cuh's launch_map: grid-stride, coalesced writes;
//              the threads of a row read the same index, served by one cache line).
#include <algorithm>

#include "common.cuh"
#include "kernels.cuh"

namespace gpumat::GPUMAT_CUDA_NS {

namespace {
constexpr int kTile = 32;
constexpr int kTileRows = 8;  // a 32x8 block moves a 32x32 tile in 4 steps
}  // namespace

// ---------------------------------------------------------------------------- kernels

// in is (rows, cols), out is (cols, rows); grid.x covers the ceil(cols/32) column tiles, and the
// ceil(rows/32) row tiles are blockIdx.y, blockIdx.y + gridDim.y, ... (grid.y is capped at the
// device's limit, so any number of rows works).
__global__ void transpose_kernel(const float* in, float* out, int64_t rows, int64_t cols) {
  __shared__ float tile[kTile][kTile + 1];
  const int64_t row_tiles = (rows + kTile - 1) / kTile;
  const int64_t c = blockIdx.x * static_cast<int64_t>(kTile) + threadIdx.x;
  const int64_t or0 = blockIdx.x * static_cast<int64_t>(kTile);
  // The bound is the same for every thread of the block, so all reach the barriers together.
  for (int64_t ty = blockIdx.y; ty < row_tiles; ty += gridDim.y) {
    const int64_t r0 = ty * kTile;
    for (int j = threadIdx.y; j < kTile; j += kTileRows) {
      const int64_t r = r0 + j;
      if (r < rows && c < cols) tile[j][threadIdx.x] = in[r * cols + c];
    }
    __syncthreads();
    // out row = input column, out column = input row
    const int64_t oc = r0 + threadIdx.x;
    for (int j = threadIdx.y; j < kTile; j += kTileRows) {
      const int64_t orow = or0 + j;
      if (orow < cols && oc < rows) out[orow * rows + oc] = tile[threadIdx.x][j];
    }
    __syncthreads();  // the next tile overwrites `tile`
  }
}

// ---------------------------------------------------------------------------- launchers

// NOTE: the index is compared as a float with the column number, exact because classes <= 2^24 (the
// op checks): a NaN, a non-integer or an index outside [0, classes) matches no column.
void one_hot(int dev, const float* indices, float* out, int64_t rows, int64_t classes) {
  launch_map("one_hot", dev, out, rows * classes, [=] __device__(int64_t k) {
    const int64_t r = k / classes;
    return indices[r] == static_cast<float>(k - r * classes) ? 1.0f : 0.0f;
  });
}

void transpose(int dev, const float* in, float* out, int64_t rows, int64_t cols) {
  const GridLimits lim = grid_limits(dev);
  const int64_t col_tiles = ceil_div(cols, kTile), row_tiles = ceil_div(rows, kTile);
  // 2^31 - 1 column tiles are 6.9e10 columns: more memory than any GPU has.
  if (col_tiles > lim.x)
    throw ShapeError("transpose: " + std::to_string(cols) + " columns exceed the CUDA grid limit of " +
                     std::to_string(lim.x * kTile));
  cudaStream_t stream = activate(dev);
  dim3 grid(static_cast<unsigned>(col_tiles), static_cast<unsigned>(std::min(row_tiles, lim.y)));
  launch<transpose_kernel>("transpose", grid, dim3(kTile, kTileRows), 0, stream, in, out, rows, cols);
}

// in, out are (batch, rows, cols); out may be in (each thread reads then writes its own element).
void triangle(int dev, const float* in, float* out, int64_t batch, int64_t rows, int64_t cols,
              int64_t diagonal, bool upper) {
  launch_map("triangle", dev, out, batch * rows * cols, [=] __device__(int64_t k) {
    const int64_t j = k % cols, i = (k / cols) % rows;
    const bool keep = upper ? j - i >= diagonal : j - i <= diagonal;
    return keep ? in[k] : 0.0f;
  });
}

}  // namespace gpumat::GPUMAT_CUDA_NS
