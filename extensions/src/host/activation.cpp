// Host activation family (the reference for ../cuda/activation.cu); every array is (n,) and `out`
// may alias an input:
//   tanh, sigmoid (through exp(-|x|), so it never overflows), tanh_gradient = dy * (1 - y^2),
//   sigmoid_gradient = dy * y * (1 - y) with y the forward output, and
//   dropout: out = u_i < p ? 0 : x * scale, u_i = uniform01(seed, i) (../random.h), scale = 1/(1-p).
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

}  // namespace gpumat::host
