// Host reduce family (the reference for ../cuda/reduce.cu): reductions and broadcasts, each the
// other's gradient.
// broadcast_to (in (n_in,) repeated over leading axes into (n_out,)) and broadcast_axis
// (out[o, j, i] = scale * in[o, i], ../axis.h's index arithmetic).
// reduce_sum_axis_zero, column sums of a (rows, cols) array into (cols,): columns are split into
// chunks across threads; each chunk walks the rows in order (contiguous reads) and accumulates in
// double, so the result does not depend on the thread count.
// Along one axis of an array seen as (outer, n, inner): reduce_axis (kind 0 sum, 1 mean, 2 max)
// into (outer, inner), argmax (the first maximum's index, a NaN counting as the maximum) and
// reduce_max_gradient (dy shared equally among the tied maxima of each slice), kind 3 prod,
// prod_gradient (prefix times suffix products) and cumsum (double running sums). Sums run in float in index
// order, as on CUDA. NOTE: a NaN makes its slice's max NaN (and the NaN elements share that slice's
// gradient). The per-slice loops are ../axis.h's, shared with the CUDA kernels.
#include <algorithm>
#include <cstring>
#include <vector>

#include "../axis.h"
#include "kernels.h"
#include "parallel.h"

namespace gpumat::host {

void reduce_sum_axis_zero(int, const float* in, int64_t rows, int64_t cols, float* out) {
  constexpr int64_t kChunk = 512;
  int64_t chunks = (cols + kChunk - 1) / kChunk;
  parallel_for(chunks, rows * cols, [&](int64_t ch) {
    int64_t c0 = ch * kChunk, c1 = std::min(cols, c0 + kChunk);
    double acc[kChunk] = {0.0};
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = in + r * cols;
      for (int64_t c = c0; c < c1; ++c) acc[c - c0] += row[c];
    }
    for (int64_t c = c0; c < c1; ++c) out[c] = static_cast<float>(acc[c - c0]);
  });
}

void reduce_axis(int, const float* in, float* out, int64_t outer, int64_t n, int64_t inner, int kind) {
  const int64_t cols = outer * inner;
  parallel_for(cols, cols * n, [&](int64_t col) { out[col] = axis::reduce_slice(in, col, n, inner, kind); });
}

void argmax(int, const float* in, float* out, int64_t outer, int64_t n, int64_t inner) {
  const int64_t cols = outer * inner;
  parallel_for(cols, cols * n,
               [&](int64_t col) { out[col] = static_cast<float>(axis::argmax_slice(in, col, n, inner)); });
}

void reduce_max_gradient(int, const float* x, const float* y, const float* dy, float* dx, int64_t outer,
                         int64_t n, int64_t inner) {
  const int64_t cols = outer * inner;
  parallel_for(cols, cols * n, [&](int64_t col) { axis::max_gradient_slice(x, y, dy, dx, col, n, inner); });
}

// in is (n_in,), out is (n_out / n_in, n_in): every row of out is a copy of in.
void broadcast_to(int, const float* in, int64_t n_in, float* out, int64_t n_out) {
  int64_t reps = n_out / n_in;
  parallel_for(reps, n_out, [&](int64_t r) {
    std::memcpy(out + r * n_in, in, static_cast<size_t>(n_in) * sizeof(float));
  });
}

void broadcast_axis(int, const float* in, float* out, int64_t outer, int64_t n, int64_t inner, float scale) {
  const int64_t total = outer * n * inner;
  parallel_for(total, total, [&](int64_t k) { out[k] = scale * in[axis::broadcast_source(k, n, inner)]; });
}

void prod_gradient(int, const float* x, const float* dy, float* dx, int64_t outer, int64_t n, int64_t inner) {
  const int64_t cols = outer * inner;
  parallel_for(cols, cols * n, [&](int64_t col) { axis::prod_gradient_slice(x, dy, dx, col, n, inner); });
}

void cumsum(int, const float* in, float* out, int64_t outer, int64_t n, int64_t inner, bool reverse) {
  const int64_t cols = outer * inner;
  parallel_for(cols, cols * n, [&](int64_t col) { axis::cumsum_slice(in, out, col, n, inner, reverse); });
}

}  // namespace gpumat::host
