// Host layout kernels (the reference for ../cuda/layout.cu): 2-D transpose, blocked, triangle
// (tril / triu: out = in on one side of a diagonal, 0 elsewhere) and one_hot
// (out[r, c] = indices[r] == c ? 1 : 0; a NaN, a non-integer or an index outside [0, classes)
// gives a row of zeros, as the CUDA kernel's float comparison does).
#include <algorithm>
#include <cmath>

#include "kernels.h"
#include "parallel.h"

namespace gpumat::host {

// in is (rows, cols), out is (cols, rows). Blocked so both sides stay in cache.
void transpose(int, const float* in, float* out, int64_t rows, int64_t cols) {
  constexpr int64_t kTile = 32;
  parallel_for((rows + kTile - 1) / kTile, rows * cols, [&](int64_t tile) {
    const int64_t r0 = tile * kTile;
    for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
      int64_t r1 = std::min(rows, r0 + kTile), c1 = std::min(cols, c0 + kTile);
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) out[c * rows + r] = in[r * cols + c];
    }
  });
}

// indices is (rows,), out is (rows, classes).
void one_hot(int, const float* indices, float* out, int64_t rows, int64_t classes) {
  parallel_for(rows, rows * classes, [&](int64_t r) {
    float* row = out + r * classes;
    std::fill(row, row + classes, 0.0f);
    const float v = indices[r];
    // false for NaN; -0.0 passes as class 0, as -0.0 == 0.0f does on CUDA
    if (v >= 0.0f && v < static_cast<float>(classes) && v == std::floor(v))
      row[static_cast<int64_t>(v)] = 1.0f;
  });
}

// in, out are (batch, rows, cols); out may be in.
void triangle(int, const float* in, float* out, int64_t batch, int64_t rows, int64_t cols, int64_t diagonal,
              bool upper) {
  const int64_t total = batch * rows * cols;
  parallel_for(total, total, [&](int64_t k) {
    const int64_t j = k % cols, i = (k / cols) % rows;
    const bool keep = upper ? j - i >= diagonal : j - i <= diagonal;
    out[k] = keep ? in[k] : 0.0f;
  });
}

}  // namespace gpumat::host
