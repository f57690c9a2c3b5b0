// Host reduction: reduce_sum_axis_zero, column sums of a (rows, cols) array into (cols,).
// Columns are split into chunks across threads; each chunk walks the rows in order (contiguous
// reads) and accumulates in double, so the result does not depend on the thread count.
#include <algorithm>
#include <vector>

#include "kernels.h"
#include "parallel.h"

namespace gpumat::host {

void reduce_sum_axis_zero(int, const float* in, int64_t rows, int64_t cols, float* out) {
  constexpr int64_t kChunk = 512;
  int64_t chunks = (cols + kChunk - 1) / kChunk;
#pragma omp parallel for if (rows * cols >= kParallelMin)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    int64_t c0 = ch * kChunk, c1 = std::min(cols, c0 + kChunk);
    double acc[kChunk] = {0.0};
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = in + r * cols;
      for (int64_t c = c0; c < c1; ++c) acc[c - c0] += row[c];
    }
    for (int64_t c = c0; c < c1; ++c) out[c] = static_cast<float>(acc[c - c0]);
  }
}

}  // namespace gpumat::host
