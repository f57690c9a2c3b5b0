// Host softmax family, row-wise over (rows, cols):
//   softmax: out[r,c] = exp(x[r,c] - max_r) / sum_c exp(x[r,c] - max_r)
//   softmax_cross_entropy: out[0] = mean_r -sum_c y[r,c] * (x[r,c] - max_r - log sum_c exp(x - max_r))
//   softmax_axis over (outer, n, inner), the axis in the middle: softmax or log_softmax along n;
//   softmax_axis_gradient: dx = y * (dy - sum_n y*dy) (softmax), dy - exp(y) * sum_n dy (log_softmax)
// NOTE: subtracting the row max keeps exp() from overflowing (log-sum-exp trick); sums run in
// double.
#include <cmath>

#include "kernels.h"
#include "parallel.h"

namespace gpumat::host {

namespace {
// Returns the row max and sum_c exp(x - max) of one row.
inline void row_stats(const float* x, int64_t cols, float* max_out, double* sum_out) {
  float mx = x[0];
  for (int64_t c = 1; c < cols; ++c) mx = (x[c] > mx || x[c] != x[c]) ? x[c] : mx;  // NaN wins
  double sum = 0.0;
  for (int64_t c = 0; c < cols; ++c) sum += std::exp(static_cast<double>(x[c]) - mx);
  *max_out = mx;
  *sum_out = sum;
}
}  // namespace

void softmax(int, const float* in, float* out, int64_t rows, int64_t cols) {
#pragma omp parallel for if (rows * cols >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = in + r * cols;
    float mx;
    double sum;
    row_stats(x, cols, &mx, &sum);
    for (int64_t c = 0; c < cols; ++c)
      out[r * cols + c] = static_cast<float>(std::exp(static_cast<double>(x[c]) - mx) / sum);
  }
}

void softmax_cross_entropy(int, const float* logits, const float* labels, float* out, int64_t rows,
                           int64_t cols) {
  double total = 0.0;
#pragma omp parallel for reduction(+ : total) if (rows * cols >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits + r * cols;
    const float* y = labels + r * cols;
    float mx;
    double sum;
    row_stats(x, cols, &mx, &sum);
    double log_sum = std::log(sum);
    double loss = 0.0;
    for (int64_t c = 0; c < cols; ++c)
      loss -= static_cast<double>(y[c]) * (static_cast<double>(x[c]) - mx - log_sum);
    total += loss;
  }
  out[0] = static_cast<float>(total / static_cast<double>(rows));
}

// loss (1,) = mean_r -sum_c y log softmax(x); grad (rows, cols) = (softmax(x) - y) / rows (issue 16:
// the loss and its gradient, of the mean loss, in one pass over the logits).
void softmax_cross_entropy_with_gradient(int, const float* logits, const float* labels, float* loss,
                                         float* grad, int64_t rows, int64_t cols) {
  double total = 0.0;
  const double inv_rows = 1.0 / static_cast<double>(rows);
#pragma omp parallel for reduction(+ : total) if (rows * cols >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits + r * cols;
    const float* y = labels + r * cols;
    float* g = grad + r * cols;
    float mx;
    double sum;
    row_stats(x, cols, &mx, &sum);
    const double log_sum = std::log(sum);
    double row_loss = 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      const double z = static_cast<double>(x[c]) - mx - log_sum;
      row_loss -= static_cast<double>(y[c]) * z;
      g[c] = static_cast<float>((std::exp(z) - static_cast<double>(y[c])) * inv_rows);
    }
    total += row_loss;
  }
  loss[0] = static_cast<float>(total * inv_rows);
}

void softmax_axis(int, const float* in, float* out, int64_t outer, int64_t n, int64_t inner, bool log) {
  const int64_t cols = outer * inner;
#pragma omp parallel for if (cols * n >= kParallelMin)
  for (int64_t col = 0; col < cols; ++col) {
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
  }
}

void softmax_axis_gradient(int, const float* y, const float* dy, float* dx, int64_t outer, int64_t n,
                           int64_t inner, bool log) {
  const int64_t cols = outer * inner;
#pragma omp parallel for if (cols * n >= kParallelMin)
  for (int64_t col = 0; col < cols; ++col) {
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
  }
}

}  // namespace gpumat::host
