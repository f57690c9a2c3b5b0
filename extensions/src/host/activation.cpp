// Host activation family (the reference for ../cuda/activation.cu); every array is (n,) and `out`
// may alias an input:
//   tanh, sigmoid (through exp(-|x|), so it never overflows), tanh_gradient = dy * (1 - y^2),
//   sigmoid_gradient = dy * y * (1 - y) with y the forward output, and
//   dropout: out = u_i < p ? 0 : x * scale, u_i = uniform01(seed, i) (../random.h), scale = 1/(1-p).
#include <algorithm>
#include <cmath>

#include "../random.h"
#include "kernels.h"
#include "parallel.h"

namespace gpumat::host {

namespace {
inline float stable_sigmoid(float x) {
  if (x >= 0.0f) return 1.0f / (1.0f + std::exp(-x));
  const float e = std::exp(x);
  return e / (1.0f + e);
}
}  // namespace

void tanh(int, const float* in, float* out, int64_t n) {
#pragma omp parallel for if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = std::tanh(in[i]);
}

void sigmoid(int, const float* in, float* out, int64_t n) {
#pragma omp parallel for if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = stable_sigmoid(in[i]);
}

void tanh_gradient(int, const float* y, const float* dy, float* out, int64_t n) {
#pragma omp parallel for if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float v = y[i];
    out[i] = dy[i] * (1.0f - v * v);
  }
}

void sigmoid_gradient(int, const float* y, const float* dy, float* out, int64_t n) {
#pragma omp parallel for if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float v = y[i];
    out[i] = dy[i] * v * (1.0f - v);
  }
}

void dropout(int, const float* in, float* out, int64_t n, float p, float scale, uint64_t seed) {
#pragma omp parallel for if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i)
    out[i] = rng::uniform01(seed, static_cast<uint64_t>(i)) < p ? 0.0f : in[i] * scale;
}

// y, dy, dz are (rows, cols), dbias (cols,): dz = dy * (y > 0), dbias = column sums of dz (issue
// 16: the ReLU gradient and the bias gradient of a dense layer in one pass). y is the forward output
// or the pre-activation (y > 0 is the same mask). dz may alias dy. Threads own column ranges and
// walk every row, so each column is summed in row order whatever the thread count: deterministic.
void relu_bias_gradient(int, const float* y, const float* dy, float* dz, float* dbias, int64_t rows,
                        int64_t cols) {
  constexpr int64_t kColBlock = 16;
  const int64_t blocks = (cols + kColBlock - 1) / kColBlock;
#pragma omp parallel for if (rows * cols >= kParallelMin)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * kColBlock, c1 = std::min(cols, c0 + kColBlock);
    double acc[kColBlock] = {};
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t base = r * cols;
      for (int64_t c = c0; c < c1; ++c) {
        const float g = y[base + c] > 0.0f ? dy[base + c] : 0.0f;
        dz[base + c] = g;
        acc[c - c0] += g;
      }
    }
    for (int64_t c = c0; c < c1; ++c) dbias[c] = static_cast<float>(acc[c - c0]);
  }
}

}  // namespace gpumat::host
