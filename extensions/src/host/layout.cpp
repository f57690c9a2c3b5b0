// Host layout kernels (the reference for ../cuda/layout.cu): 2-D transpose, blocked.
#include <algorithm>

#include "kernels.h"
#include "parallel.h"

namespace gpumat::host {

// in is (rows, cols), out is (cols, rows). Blocked so both sides stay in cache.
void transpose(int, const float* in, float* out, int64_t rows, int64_t cols) {
  constexpr int64_t kTile = 32;
#pragma omp parallel for if (rows * cols >= kParallelMin)
  for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
    for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
      int64_t r1 = std::min(rows, r0 + kTile), c1 = std::min(cols, c0 + kTile);
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) out[c * rows + r] = in[r * cols + c];
    }
  }
}

}  // namespace gpumat::host
