// Host optimizer kernels (the reference for ../cuda/optim.cu); param, grad, m, v are (n,):
//   adam_update: one step of Adam (Kingma & Ba, "Adam: A Method for Stochastic Optimization",
//   ICLR 2015, Algorithm 1) with bias corrections bc1 = 1 - beta1^t, bc2 = 1 - beta2^t:
//     m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//     param -= lr * (m / bc1) / (sqrt(v / bc2) + eps)
//   sgd_update_multi, momentum_sgd_update_multi, adam_update_multi: the same updates for a list of
//   tensors in one call (one launch per 32 tensors on CUDA).
//   adadelta_update_multi: Adadelta (Zeiler 2012, Algorithm 1, with PyTorch's lr factor), in the
//   CUDA kernel's order: sq = rho sq + (1 - rho) g^2; d = sqrt(acc + eps) / sqrt(sq + eps) * g;
//   acc = rho acc + (1 - rho) d^2; param -= lr d.
#include <cmath>

#include "kernels.h"
#include "parallel.h"

namespace gpumat::host {

void adam_update(int, float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1,
                 float beta2, float eps, float bc1, float bc2) {
  parallel_for(n, n, [&](int64_t i) {
    const float g = grad[i];
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] -= lr * (mi / bc1) / (std::sqrt(vi / bc2) + eps);
  });
}

// Multi-tensor SGD: params[t][i] -= lr * grads[t][i] for every tensor t of `count`, in
// one call (one launch on CUDA instead of one axpy per parameter).
void sgd_update_multi(int, float* const* params, const float* const* grads, const int64_t* sizes, int count,
                      float lr) {
  for (int t = 0; t < count; ++t) {
    float* p = params[t];
    const float* g = grads[t];
    const int64_t n = sizes[t];
    parallel_for(n, n, [&](int64_t i) { p[i] -= lr * g[i]; });
  }
}

// Multi-tensor momentum SGD, PyTorch's SGD(momentum) form (see
// gpumat.optim.MomentumSGD): v = momentum * v + g; param -= lr * v, for every tensor of `count`.
void momentum_sgd_update_multi(int, float* const* params, const float* const* grads, float* const* velocities,
                               const int64_t* sizes, int count, float lr, float momentum) {
  for (int t = 0; t < count; ++t) {
    float* p = params[t];
    const float* g = grads[t];
    float* v = velocities[t];
    const int64_t n = sizes[t];
    parallel_for(n, n, [&](int64_t i) {
      const float vi = momentum * v[i] + g[i];
      v[i] = vi;
      p[i] -= lr * vi;
    });
  }
}

// Multi-tensor Adam: adam_update above for every tensor of `count`, in one call.
void adam_update_multi(int dev, float* const* params, const float* const* grads, float* const* m,
                       float* const* v, const int64_t* sizes, int count, float lr, float beta1, float beta2,
                       float eps, float bc1, float bc2) {
  for (int t = 0; t < count; ++t)
    adam_update(dev, params[t], grads[t], m[t], v[t], sizes[t], lr, beta1, beta2, eps, bc1, bc2);
}

// Multi-tensor Adadelta: every tensor of `count`, in one call.
void adadelta_update_multi(int, float* const* params, const float* const* grads, float* const* square_avgs,
                           float* const* acc_deltas, const int64_t* sizes, int count, float lr, float rho,
                           float eps) {
  for (int t = 0; t < count; ++t) {
    float* p = params[t];
    const float* g = grads[t];
    float* sq = square_avgs[t];
    float* acc = acc_deltas[t];
    const int64_t n = sizes[t];
    parallel_for(n, n, [&](int64_t i) {
      const float gi = g[i];
      const float s = rho * sq[i] + (1.0f - rho) * gi * gi;
      const float d = std::sqrt(acc[i] + eps) / std::sqrt(s + eps) * gi;
      sq[i] = s;
      acc[i] = rho * acc[i] + (1.0f - rho) * d * d;
      p[i] -= lr * d;
    });
  }
}

}  // namespace gpumat::host
