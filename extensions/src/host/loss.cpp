// Host loss family (the reference for ../cuda/loss.cu). Regression losses and nll_loss; pred,
// target, out_grad are (n,):
//   mse_loss:          loss[0] = sum (pred - target)^2 / n
//   mae_loss:          loss[0] = sum |pred - target| / n
//   mse_loss_gradient: out_grad = (dloss[0] * 2/n) * (pred - target)
//   mae_loss_gradient: out_grad = (dloss[0] / n) * sign(pred - target), sign(0) = 0
//   nll_loss:          loss[0] = -sum target * log_probs / rows; nll_loss_gradient: -dloss[0]/rows * target
// Sums run in double over fixed chunks (chunk partials added in order), so the result does not
// depend on the thread count. NOTE: NaN propagates: a NaN difference gives a NaN loss and gradient.
// softmax_cross_entropy: out[0] = mean_r -sum_c y[r,c] * (x[r,c] - max_r - log sum_c exp(x - max_r)),
// with softmax.h's row statistics (float exponentials, double lanes); softmax_cross_entropy_with_gradient
// adds its gradient.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels.h"
#include "lane_sum.h"
#include "parallel.h"
#include "softmax.h"
#include "vec_math.h"

namespace gpumat::host {

namespace {

// sum over i < n of term(i), in double over fixed chunks whose partials are added in order.
template <typename Term>
double chunked_sum(int64_t n, Term term) {
  constexpr int64_t kChunk = 1 << 14;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(chunks), 0.0);
  parallel_for(chunks, n, [&](int64_t ch) {
    const int64_t i1 = std::min(n, (ch + 1) * kChunk);
    double acc = 0.0;
    for (int64_t i = ch * kChunk; i < i1; ++i) acc += term(i);
    partial[static_cast<size_t>(ch)] = acc;
  });
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

// Row x's -sum_c y[c] * log softmax(x)[c] (its max and sum from softmax.h); with g, also
// g[c] = (softmax(x)[c] - y[c]) * inv_rows. Compiled also for AVX2 and AVX-512 (softmax.h).
GPUMAT_SIMD_CLONES double cross_entropy_row(const float* x, const float* y, float* g, int64_t cols,
                                            double inv_rows) {
  float mx;
  double sum;
  row_stats(x, cols, 1, &mx, &sum);
  const double log_sum = std::log(sum);
  const double loss = -lane_sum(cols, [&](int64_t c) {
    return static_cast<double>(y[c]) * (static_cast<double>(x[c]) - mx - log_sum);
  });
  if (g != nullptr) {
    // float loops: they vectorize
    const float inv = static_cast<float>(1.0 / sum), scale = static_cast<float>(inv_rows);
    exp_chunks(
        cols, [&](int64_t c) { return x[c]; }, mx,
        [&](int64_t c0, int64_t m, const float* e) {
#pragma omp simd
          for (int64_t c = 0; c < m; ++c) g[c0 + c] = (e[c] * inv - y[c0 + c]) * scale;
        });
  }
  return loss;
}

template <typename F>
float mean_of(const float* pred, const float* target, int64_t n, F f) {
  const double total = chunked_sum(n, [&](int64_t i) { return f(static_cast<double>(pred[i]) - target[i]); });
  return static_cast<float>(total / static_cast<double>(n));
}

}  // namespace

void mse_loss(int, const float* pred, const float* target, float* loss, int64_t n) {
  loss[0] = mean_of(pred, target, n, [](double d) { return d * d; });
}

void mae_loss(int, const float* pred, const float* target, float* loss, int64_t n) {
  loss[0] = mean_of(pred, target, n, [](double d) { return std::fabs(d); });
}

void mse_loss_gradient(int, const float* pred, const float* target, const float* dloss, float* out_grad,
                       int64_t n) {
  const float scale = dloss[0] * (2.0f / static_cast<float>(n));
  parallel_for(n, n, [&](int64_t i) { out_grad[i] = scale * (pred[i] - target[i]); });
}

void mae_loss_gradient(int, const float* pred, const float* target, const float* dloss, float* out_grad,
                       int64_t n) {
  const float scale = dloss[0] * (1.0f / static_cast<float>(n));
  parallel_for(n, n, [&](int64_t i) {
    const float d = pred[i] - target[i];
    const float sign = d > 0.0f ? 1.0f : (d < 0.0f ? -1.0f : d);  // 0 -> 0, NaN -> NaN
    out_grad[i] = scale * sign;
  });
}

void nll_loss(int, const float* log_probs, const float* target, float* loss, int64_t rows, int64_t cols) {
  // The sum of -t * logp over all elements, averaged over rows (not elements).
  const double total =
      chunked_sum(rows * cols, [&](int64_t i) { return -(static_cast<double>(target[i]) * log_probs[i]); });
  loss[0] = static_cast<float>(total / static_cast<double>(rows));
}

void nll_loss_gradient(int, const float* target, const float* dloss, float* out_grad, int64_t rows,
                       int64_t cols) {
  const int64_t n = rows * cols;
  const float g = -dloss[0] * (1.0f / static_cast<float>(rows));
  parallel_for(n, n, [&](int64_t i) { out_grad[i] = g * target[i]; });
}

void softmax_cross_entropy(int, const float* logits, const float* labels, float* out, int64_t rows,
                           int64_t cols) {
  const double total = parallel_sum(rows, rows * cols, [&](int64_t r) {
    return cross_entropy_row(logits + r * cols, labels + r * cols, nullptr, cols, 0.0);
  });
  out[0] = static_cast<float>(total / static_cast<double>(rows));
}

// loss (1,) = mean_r -sum_c y log softmax(x); grad (rows, cols) = (softmax(x) - y) / rows (the loss
// and its gradient, of the mean loss, in one pass over the logits).
void softmax_cross_entropy_with_gradient(int, const float* logits, const float* labels, float* loss,
                                         float* grad, int64_t rows, int64_t cols) {
  const double inv_rows = 1.0 / static_cast<double>(rows);
  const double total = parallel_sum(rows, rows * cols, [&](int64_t r) {
    return cross_entropy_row(logits + r * cols, labels + r * cols, grad + r * cols, cols, inv_rows);
  });
  loss[0] = static_cast<float>(total * inv_rows);
}

}  // namespace gpumat::host
