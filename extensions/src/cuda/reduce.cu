// CUDA reduction: reduce_sum_axis_zero, in (rows, cols) -> out (cols,) column sums.
// Host reference: ../host/reduce.cpp.
// Tiling: a block is 32 columns x kRowThreads row-threads. Each thread sums a strided set of rows
// of one column (consecutive threads read consecutive columns: coalesced); the kRowThreads partial
// sums of a column are then added in shared memory in a fixed order, so results are deterministic.
#include "common.cuh"
#include "kernels.cuh"

namespace gpumat::GPUMAT_CUDA_NS {

namespace {
constexpr int kCols = 32;
constexpr int kRowThreads = 16;
}  // namespace

// ---------------------------------------------------------------------------- kernels

// in is (rows, cols), out is (cols,); grid.x covers ceil(cols / 32) column tiles.
__global__ void reduce_sum_axis_zero_kernel(const float* in, int64_t rows, int64_t cols, float* out) {
  __shared__ float partial[kRowThreads][kCols + 1];
  int64_t c = blockIdx.x * static_cast<int64_t>(kCols) + threadIdx.x;
  float acc = 0.0f;
  if (c < cols)
    for (int64_t r = threadIdx.y; r < rows; r += kRowThreads) acc += in[r * cols + c];
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float sum = 0.0f;
    for (int j = 0; j < kRowThreads; ++j) sum += partial[j][threadIdx.x];
    out[c] = sum;
  }
}

// ---------------------------------------------------------------------------- launchers

void reduce_sum_axis_zero(int dev, const float* in, int64_t rows, int64_t cols, float* out) {
  const int64_t kMaxGridX = 2147483647;
  if (ceil_div(cols, kCols) > kMaxGridX) throw ShapeError("reduce_sum_axis_zero: too many columns");
  cudaStream_t stream = activate(dev);
  launch<reduce_sum_axis_zero_kernel>("reduce_sum_axis_zero", static_cast<unsigned>(ceil_div(cols, kCols)),
                                      dim3(kCols, kRowThreads), 0, stream, in, rows, cols, out);
}

}  // namespace gpumat::GPUMAT_CUDA_NS
