// Host softmax family, row-wise over (rows, cols):
//   softmax: out[r,c] = exp(x[r,c] - max_r) / sum_c exp(x[r,c] - max_r)
//   softmax_axis over (outer, n, inner), the axis in the middle: softmax or log_softmax along n;
//   softmax_axis_gradient: dx = y * (dy - sum_n y*dy) (softmax), dy - exp(y) * sum_n dy (log_softmax)
// NOTE: subtracting the row max keeps exp() from overflowing (log-sum-exp trick); sums run in
// double. The row statistics and the exponentials are softmax.h's (float vexp, fixed double lanes),
// shared with loss.cpp's cross-entropy; each row's loop is compiled also for AVX2 and AVX-512.
#include <cmath>

#include "kernels.h"
#include "lane_sum.h"
#include "parallel.h"
#include "softmax.h"
#include "vec_math.h"

namespace gpumat::host {

namespace {

// One softmax (or log_softmax) along n of the values x[j * stride], into out at the same places.
// kStride 1 (a row: the loops vectorize) or 0 (any `stride`, scalar).
template <int64_t kStride>
[[gnu::always_inline]] inline void softmax_line_impl(const float* x, float* out, int64_t n, int64_t stride,
                                                     bool log) {
  const int64_t s = kStride == 1 ? 1 : stride;
  float mx;
  double sum;
  row_stats(x, n, s, &mx, &sum);
  if (log) {
    const double log_sum = std::log(sum);
#pragma omp simd
    for (int64_t j = 0; j < n; ++j)
      out[j * s] = static_cast<float>(static_cast<double>(x[j * s]) - mx - log_sum);
    return;
  }
  const float inv = static_cast<float>(1.0 / sum);  // a float loop: it vectorizes
  exp_chunks(
      n, [&](int64_t j) { return x[j * s]; }, mx,
      [&](int64_t j0, int64_t m, const float* e) {
#pragma omp simd
        for (int64_t j = 0; j < m; ++j) out[(j0 + j) * s] = e[j] * inv;
      });
}

GPUMAT_SIMD_CLONES void softmax_line(const float* x, float* out, int64_t n, int64_t stride, bool log) {
  if (stride == 1)
    softmax_line_impl<1>(x, out, n, 1, log);
  else
    softmax_line_impl<0>(x, out, n, stride, log);
}

// dx along n of one line (values at j * stride): y * (dy - sum y dy), or for log_softmax
// dy - exp(y) * sum dy. kStride as softmax_line_impl's.
template <int64_t kStride>
[[gnu::always_inline]] inline void softmax_gradient_line_impl(const float* y, const float* dy, float* dx,
                                                              int64_t n, int64_t stride, bool log) {
  const int64_t s = kStride == 1 ? 1 : stride;
  const double acc = log ? lane_sum(n, [&](int64_t j) { return static_cast<double>(dy[j * s]); })
                         : lane_sum(n, [&](int64_t j) { return static_cast<double>(y[j * s]) * dy[j * s]; });
  if (log) {
    const float a = static_cast<float>(acc);
    exp_chunks(
        n, [&](int64_t j) { return y[j * s]; }, 0.0f,
        [&](int64_t j0, int64_t m, const float* e) {
#pragma omp simd
          for (int64_t j = 0; j < m; ++j) dx[(j0 + j) * s] = dy[(j0 + j) * s] - e[j] * a;
        });
    return;
  }
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) dx[j * s] = static_cast<float>(y[j * s] * (dy[j * s] - acc));
}

GPUMAT_SIMD_CLONES void softmax_gradient_line(const float* y, const float* dy, float* dx, int64_t n,
                                              int64_t stride, bool log) {
  if (stride == 1)
    softmax_gradient_line_impl<1>(y, dy, dx, n, 1, log);
  else
    softmax_gradient_line_impl<0>(y, dy, dx, n, stride, log);
}

}  // namespace

void softmax(int, const float* in, float* out, int64_t rows, int64_t cols) {
  parallel_for(rows, rows * cols,
               [&](int64_t r) { softmax_line(in + r * cols, out + r * cols, cols, 1, false); });
}

void softmax_axis(int, const float* in, float* out, int64_t outer, int64_t n, int64_t inner, bool log) {
  const int64_t cols = outer * inner;
  parallel_for(cols, cols * n, [&](int64_t col) {
    const int64_t base = (col / inner) * n * inner + col % inner;
    softmax_line(in + base, out + base, n, inner, log);
  });
}

void softmax_axis_gradient(int, const float* y, const float* dy, float* dx, int64_t outer, int64_t n,
                           int64_t inner, bool log) {
  const int64_t cols = outer * inner;
  parallel_for(cols, cols * n, [&](int64_t col) {
    const int64_t base = (col / inner) * n * inner + col % inner;
    softmax_gradient_line(y + base, dy + base, dx + base, n, inner, log);
  });
}

}  // namespace gpumat::host
