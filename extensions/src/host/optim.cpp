// Host optimizer kernels (the reference for ../cuda/optim.cu); param, grad, m, v are (n,):
//   adam_update: one step of Adam (Kingma & Ba, "Adam: A Method for Stochastic Optimization",
//   ICLR 2015, Algorithm 1) with bias corrections bc1 = 1 - beta1^t, bc2 = 1 - beta2^t:
//     m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//     param -= lr * (m / bc1) / (sqrt(v / bc2) + eps)
//   sgd_update_multi, momentum_sgd_update_multi, adam_update_multi: the same updates for a list of
//   tensors in one call (one launch per 32 tensors on CUDA), with weight decay, dampening,
//   Nesterov, decoupled weight decay (AdamW) and AMSGrad in the CUDA kernels' order.
//   total_norm_multi, clip_scale_multi: clip_grad_norm_'s norm of all tensors and its scale.
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

namespace {
// Elements [lo, hi) of one tensor's plain and momentum SGD updates, as SIMD loops compiled also for
// AVX-512 and AVX2 (GPUMAT_SIMD_CLONES). The weight decay is tested once, outside the loop: inside
// it, the select between g and g + wd p (a load of p in one branch) left the loop scalar
// ("control flow in loop"), 4-5x slower.
GPUMAT_SIMD_CLONES void sgd_block(float* p, const float* g, int64_t lo, int64_t hi, float lr,
                                  float weight_decay) {
  if (weight_decay != 0.0f) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) p[i] -= lr * (g[i] + weight_decay * p[i]);
  } else {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) p[i] -= lr * g[i];
  }
}

struct MomentumArgs {
  float lr, momentum, dampening, weight_decay;
  bool nesterov;
};

GPUMAT_SIMD_CLONES void momentum_sgd_block(float* p, const float* g, float* v, int64_t lo, int64_t hi,
                                           const MomentumArgs& a) {
  const MomentumArgs k = a;
#pragma omp simd
  for (int64_t i = lo; i < hi; ++i) {
    const float gi = k.weight_decay != 0.0f ? g[i] + k.weight_decay * p[i] : g[i];
    const float vi = k.momentum * v[i] + (1.0f - k.dampening) * gi;
    v[i] = vi;
    p[i] -= k.lr * (k.nesterov ? gi + k.momentum * vi : vi);
  }
}
}  // namespace

// Multi-tensor SGD: params[t][i] -= lr * (grads[t][i] + weight_decay params[t][i]) for every tensor
// t of `count`, in one call and one parallel loop (one launch on CUDA instead of one axpy per
// parameter).
void sgd_update_multi(int, float* const* params, const float* const* grads, const int64_t* sizes, int count,
                      float lr, float weight_decay) {
  parallel_blocks_multi(sizes, count, [&](int t, int64_t lo, int64_t hi) {
    sgd_block(params[t], grads[t], lo, hi, lr, weight_decay);
  });
}

// Multi-tensor momentum SGD, torch.optim.SGD's form: g' = g + weight_decay p; v = momentum v +
// (1 - dampening) g'; param -= lr (nesterov ? g' + momentum v : v), for every tensor of `count`.
void momentum_sgd_update_multi(int, float* const* params, const float* const* grads, float* const* velocities,
                               const int64_t* sizes, int count, float lr, float momentum, float dampening,
                               float weight_decay, bool nesterov) {
  const MomentumArgs args{lr, momentum, dampening, weight_decay, nesterov};
  parallel_blocks_multi(sizes, count, [&](int t, int64_t lo, int64_t hi) {
    momentum_sgd_block(params[t], grads[t], velocities[t], lo, hi, args);
  });
}

namespace {
// Elements [lo, hi) of one tensor's Adam and Adadelta updates, as SIMD loops (`omp simd`: the
// arrays are distinct, which the compiler cannot prove) compiled also for AVX-512 and AVX2
// (GPUMAT_SIMD_CLONES): sqrt and division are single IEEE instructions on every version, so the
// bits do not depend on the CPU.
struct AdamArgs {
  float lr, beta1, beta2, eps, bc1, bc2, weight_decay, shrink;
  bool decoupled;
};

GPUMAT_SIMD_CLONES void adam_block(float* p, const float* g, float* mt, float* vt, float* vmax, int64_t lo,
                                   int64_t hi, const AdamArgs& a) {
  const AdamArgs k = a;
#pragma omp simd
  for (int64_t i = lo; i < hi; ++i) {
    float pi = p[i];
    float gi = g[i];
    if (k.weight_decay != 0.0f) {
      if (k.decoupled)
        pi *= k.shrink;
      else
        gi += k.weight_decay * pi;
    }
    const float mi = k.beta1 * mt[i] + (1.0f - k.beta1) * gi;
    const float vi = k.beta2 * vt[i] + (1.0f - k.beta2) * gi * gi;
    mt[i] = mi;
    vt[i] = vi;
    float vd = vi;
    if (vmax != nullptr) {
      vd = (vmax[i] > vi || vmax[i] != vmax[i]) ? vmax[i] : vi;  // NaN-propagating, as CUDA's
      vmax[i] = vd;
    }
    p[i] = pi - k.lr * (mi / k.bc1) / (std::sqrt(vd / k.bc2) + k.eps);
  }
}

GPUMAT_SIMD_CLONES void adadelta_block(float* p, const float* g, float* sq, float* acc, int64_t lo,
                                       int64_t hi, float lr, float rho, float eps) {
#pragma omp simd
  for (int64_t i = lo; i < hi; ++i) {
    const float gi = g[i];
    const float s = rho * sq[i] + (1.0f - rho) * gi * gi;
    const float d = std::sqrt(acc[i] + eps) / std::sqrt(s + eps) * gi;
    sq[i] = s;
    acc[i] = rho * acc[i] + (1.0f - rho) * d * d;
    p[i] -= lr * d;
  }
}
}  // namespace

// Multi-tensor Adam for every tensor of `count`, in one call: adam_update above with weight decay
// (coupled, or decoupled as AdamW) and AMSGrad where max_v is given, in the CUDA kernel's order.
void adam_update_multi(int, float* const* params, const float* const* grads, float* const* m, float* const* v,
                       float* const* max_v, const int64_t* sizes, int count, float lr, float beta1,
                       float beta2, float eps, float bc1, float bc2, float weight_decay, bool decoupled) {
  const AdamArgs args{lr, beta1, beta2, eps, bc1, bc2, weight_decay, 1.0f - lr * weight_decay, decoupled};
  parallel_blocks_multi(sizes, count, [&](int t, int64_t lo, int64_t hi) {
    adam_block(params[t], grads[t], m[t], v[t], max_v != nullptr ? max_v[t] : nullptr, lo, hi, args);
  });
}

// Multi-tensor Adadelta: every tensor of `count`, in one call.
void adadelta_update_multi(int, float* const* params, const float* const* grads, float* const* square_avgs,
                           float* const* acc_deltas, const int64_t* sizes, int count, float lr, float rho,
                           float eps) {
  parallel_blocks_multi(sizes, count, [&](int t, int64_t lo, int64_t hi) {
    adadelta_block(params[t], grads[t], square_avgs[t], acc_deltas[t], lo, hi, lr, rho, eps);
  });
}

// The p-norm of all tensors together: per tensor a double sum (parallel_sum: fixed blocks added in
// order, the same bits on any thread count) or a max in index order, then over tensors in order.
// partials is unused on the host.
void total_norm_multi(int, const float* const* xs, const int64_t* sizes, int count, float p, float*, int64_t,
                      float* out) {
  const bool is_max = p == INFINITY;
  const double pd = static_cast<double>(p);
  double acc = 0.0;
  for (int t = 0; t < count; ++t) {
    const float* x = xs[t];
    const int64_t n = sizes[t];
    if (is_max) {
      for (int64_t i = 0; i < n; ++i) {
        const double a = std::fabs(static_cast<double>(x[i]));
        acc = (a > acc || a != a) ? a : acc;
      }
    } else {
      acc += parallel_sum(n, n, [x, p, pd](int64_t i) {
        const double a = std::fabs(static_cast<double>(x[i]));
        return p == 2.0f ? a * a : (p == 1.0f ? a : std::pow(a, pd));
      });
    }
  }
  if (!is_max) acc = p == 1.0f ? acc : std::pow(acc, 1.0 / pd);
  out[0] = static_cast<float>(acc);
}

namespace {
GPUMAT_SIMD_CLONES void scale_block(float* x, int64_t lo, int64_t hi, float coef) {
#pragma omp simd
  for (int64_t i = lo; i < hi; ++i) x[i] *= coef;
}
}  // namespace

// x *= min(max_norm / (total_norm + 1e-6), 1) for every tensor, in one parallel loop.
void clip_scale_multi(int, float* const* xs, const int64_t* sizes, int count, const float* total_norm,
                      float max_norm) {
  const float c = max_norm / (total_norm[0] + 1e-6f);
  const float coef = c > 1.0f ? 1.0f : c;  // NaN stays NaN, as torch's clamp
  parallel_blocks_multi(sizes, count,
                        [&](int t, int64_t lo, int64_t hi) { scale_block(xs[t], lo, hi, coef); });
}

}  // namespace gpumat::host
