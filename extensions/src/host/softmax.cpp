// Host softmax family, row-wise over (rows, cols):
//   softmax: out[r,c] = exp(x[r,c] - max_r) / sum_c exp(x[r,c] - max_r)
//   softmax_axis over (outer, n, inner), the axis in the middle: softmax or log_softmax along n;
//   softmax_axis_gradient: dx = y * (dy - sum_n y*dy) (softmax), dy - exp(y) * sum_n dy (log_softmax)
// NOTE: subtracting the row max keeps exp() from overflowing (log-sum-exp trick); sums run in
// double. The row statistics are softmax.h's, shared with loss.cpp's cross-entropy.
#include <cmath>

#include "kernels.h"
#include "parallel.h"
#include "softmax.h"

namespace gpumat::host {

void softmax(int, const float* in, float* out, int64_t rows, int64_t cols) {
  parallel_for(rows, rows * cols, [&](int64_t r) {
    const float* x = in + r * cols;
    float mx;
    double sum;
    row_stats(x, cols, &mx, &sum);
    for (int64_t c = 0; c < cols; ++c)
      out[r * cols + c] = static_cast<float>(std::exp(static_cast<double>(x[c]) - mx) / sum);
  });
}

void softmax_axis(int, const float* in, float* out, int64_t outer, int64_t n, int64_t inner, bool log) {
  const int64_t cols = outer * inner;
  parallel_for(cols, cols * n, [&](int64_t col) {
    const int64_t base = (col / inner) * n * inner + col % inner;
    float mx = in[base];
    for (int64_t j = 1; j < n; ++j) {
      const float v = in[base + j * inner];
      mx = (v > mx || v != v) ? v : mx;  // NaN wins
    }
    double sum = 0.0;
    for (int64_t j = 0; j < n; ++j) sum += std::exp(static_cast<double>(in[base + j * inner]) - mx);
    const double log_sum = std::log(sum);
    for (int64_t j = 0; j < n; ++j) {
      const double z = static_cast<double>(in[base + j * inner]) - mx - log_sum;
      out[base + j * inner] = static_cast<float>(log ? z : std::exp(z));
    }
  });
}

void softmax_axis_gradient(int, const float* y, const float* dy, float* dx, int64_t outer, int64_t n,
                           int64_t inner, bool log) {
  const int64_t cols = outer * inner;
  parallel_for(cols, cols * n, [&](int64_t col) {
    const int64_t base = (col / inner) * n * inner + col % inner;
    double acc = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t k = base + j * inner;
      acc += log ? static_cast<double>(dy[k]) : static_cast<double>(y[k]) * dy[k];
    }
    for (int64_t j = 0; j < n; ++j) {
      const int64_t k = base + j * inner;
      dx[k] =
          static_cast<float>(log ? dy[k] - std::exp(static_cast<double>(y[k])) * acc : y[k] * (dy[k] - acc));
    }
  });
}

}  // namespace gpumat::host
