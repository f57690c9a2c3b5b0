// Host reductions along one axis of an array seen as (outer, n, inner) (the reference for
// ../cuda/reduce_axis.cu): reduce_axis (kind 0 sum, 1 mean, 2 max) into (outer, inner),
// broadcast_axis (out[o, j, i] = scale * in[o, i]) and reduce_max_gradient (dy shared equally
// among the tied maxima of each slice). Sums run in float in index order, as on CUDA.
// NOTE: a NaN makes its slice's max NaN (and the NaN elements share that slice's gradient).
#include <cmath>

#include "kernels.h"
#include "parallel.h"

namespace gpumat::host {

namespace {
inline bool is_max(float v, float m) { return v == m || (v != v && m != m); }
}  // namespace

void reduce_axis(int, const float* in, float* out, int64_t outer, int64_t n, int64_t inner, int kind) {
  const int64_t cols = outer * inner;
#pragma omp parallel for if (cols * n >= kParallelMin)
  for (int64_t col = 0; col < cols; ++col) {
    const int64_t base = (col / inner) * n * inner + col % inner;
    float acc = kind == 2 ? -INFINITY : 0.0f;
    for (int64_t j = 0; j < n; ++j) {
      const float v = in[base + j * inner];
      if (kind == 2)
        acc = (v > acc || v != v) ? v : acc;
      else
        acc += v;
    }
    out[col] = kind == 1 ? acc / static_cast<float>(n) : acc;
  }
}

void broadcast_axis(int, const float* in, float* out, int64_t outer, int64_t n, int64_t inner, float scale) {
  const int64_t total = outer * n * inner;
#pragma omp parallel for if (total >= kParallelMin)
  for (int64_t k = 0; k < total; ++k) out[k] = scale * in[(k / (n * inner)) * inner + k % inner];
}

void reduce_max_gradient(int, const float* x, const float* y, const float* dy, float* dx, int64_t outer,
                         int64_t n, int64_t inner) {
  const int64_t cols = outer * inner;
#pragma omp parallel for if (cols * n >= kParallelMin)
  for (int64_t col = 0; col < cols; ++col) {
    const int64_t base = (col / inner) * n * inner + col % inner;
    const float m = y[col];
    int64_t ties = 0;
    for (int64_t j = 0; j < n; ++j) ties += is_max(x[base + j * inner], m) ? 1 : 0;
    const float share = ties > 0 ? dy[col] / static_cast<float>(ties) : 0.0f;
    for (int64_t j = 0; j < n; ++j) dx[base + j * inner] = is_max(x[base + j * inner], m) ? share : 0.0f;
  }
}

}  // namespace gpumat::host
