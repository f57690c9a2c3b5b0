// Host reductions along one axis of an array seen as (outer, n, inner) (the reference for
// ../cuda/reduce_axis.cu): reduce_axis (kind 0 sum, 1 mean, 2 max) into (outer, inner),
// broadcast_axis (out[o, j, i] = scale * in[o, i]) and reduce_max_gradient (dy shared equally
// among the tied maxima of each slice). Sums run in float in index order, as on CUDA.
// NOTE: a NaN makes its slice's max NaN (and the NaN elements share that slice's gradient).
// The per-slice loops are ../axis.h's, shared with the CUDA kernels.
#include "../axis.h"
#include "kernels.h"
#include "parallel.h"

namespace gpumat::host {

void reduce_axis(int, const float* in, float* out, int64_t outer, int64_t n, int64_t inner, int kind) {
  const int64_t cols = outer * inner;
#pragma omp parallel for if (cols * n >= kParallelMin)
  for (int64_t col = 0; col < cols; ++col) out[col] = axis::reduce_slice(in, col, n, inner, kind);
}

void broadcast_axis(int, const float* in, float* out, int64_t outer, int64_t n, int64_t inner, float scale) {
  const int64_t total = outer * n * inner;
#pragma omp parallel for if (total >= kParallelMin)
  for (int64_t k = 0; k < total; ++k) out[k] = scale * in[axis::broadcast_source(k, n, inner)];
}

void reduce_max_gradient(int, const float* x, const float* y, const float* dy, float* dx, int64_t outer,
                         int64_t n, int64_t inner) {
  const int64_t cols = outer * inner;
#pragma omp parallel for if (cols * n >= kParallelMin)
  for (int64_t col = 0; col < cols; ++col) axis::max_gradient_slice(x, y, dy, dx, col, n, inner);
}

}  // namespace gpumat::host
