// CUDA optimizer kernels; param, grad, m, v are (n,). Host reference: ../host/optim.cpp.
//   adam_update_kernel: one step of Adam (Kingma & Ba, "Adam: A Method for Stochastic
//   Optimization", ICLR 2015, Algorithm 1), with bc1 = 1 - beta1^t, bc2 = 1 - beta2^t:
//     m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//     param -= lr * (m / bc1) / (sqrt(v / bc2) + eps)
// Fused: one read of param, grad, m, v and one write of param, m, v per element (the unfused form
// with elementwise ops would take about eight kernels and three temporaries).
// Grid-stride, one thread per element.
//   sgd_update_multi / momentum_sgd_update_multi / adam_update_multi: the same updates for a list of
//   tensors, one launch per 32 tensors (see the tables below), with torch.optim's options:
//     SGD: g' = g + weight_decay p (coupled L2); v = momentum v + (1 - dampening) g';
//          d = nesterov ? g' + momentum v : v;  p -= lr d
//     Adam: g' = g + weight_decay p (Adam) or p *= 1 - lr weight_decay first (AdamW, decoupled:
//          Loshchilov & Hutter, "Decoupled Weight Decay Regularization", ICLR 2019, Algorithm 2);
//          with a max_v table (AMSGrad: Reddi et al., ICLR 2018) vmax = max(vmax, v) replaces v in
//          the denominator.
//   total_norm_multi: the p-norm of all the elements of a list of tensors (clip_grad_norm_): one
//   launch per 32 tensors writes `parts` partial sums (or maxima) per tensor, a one-block launch
//   reduces them in a fixed order (deterministic).
//   clip_scale_multi: xs[t] *= min(1, max_norm / (total_norm[0] + 1e-6)), the norm read on the
//   device (no copy to the host between the two).
//   adadelta_update_multi: Adadelta (Zeiler, "ADADELTA: An Adaptive Learning Rate Method", 2012,
//   Algorithm 1) with PyTorch's lr factor, for a list of tensors, one launch per 32:
//     sq = rho sq + (1 - rho) g^2;  d = sqrt(acc + eps) / sqrt(sq + eps) * g
//     acc = rho acc + (1 - rho) d^2;  param -= lr d
//   (torch.optim.Adadelta's order of operations, so float32 results agree to rounding.)
#include "common.cuh"
#include "kernels.cuh"

namespace gpumat::GPUMAT_CUDA_NS {

// ---------------------------------------------------------------------------- kernels

namespace {

// NaN-propagating max (a NaN gradient makes the inf-norm NaN, as PyTorch's).
__device__ __forceinline__ float nan_max(float a, float b) { return (a > b || a != a) ? a : b; }

// block_sum's max: the NaN-propagating max over the block, in thread 0 (others get 0).
template <int Threads>
__device__ float block_max(float v) {
  __shared__ float warp_vals[Threads / 32];
  for (int off = 16; off > 0; off >>= 1) v = nan_max(v, __shfl_down_sync(0xffffffffu, v, off));
  if (threadIdx.x % 32 == 0) warp_vals[threadIdx.x / 32] = v;
  __syncthreads();
  float total = 0.0f;
  if (threadIdx.x == 0)
    for (int w = 0; w < Threads / 32; ++w) total = nan_max(total, warp_vals[w]);
  return total;
}

}  // namespace

// param, grad, m, v are (n,)
__global__ void adam_update_kernel(float* __restrict__ param, const float* __restrict__ grad,
                                   float* __restrict__ m, float* __restrict__ v, int64_t n, float lr,
                                   float beta1, float beta2, float eps, float bc1, float bc2) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = grad[i];
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] -= lr * (mi / bc1) / (sqrtf(vi / bc2) + eps);
  }
}

// ---------------------------------------------------------------------------- launchers

void adam_update(int dev, float* param, const float* grad, float* m, float* v, int64_t n, float lr,
                 float beta1, float beta2, float eps, float bc1, float bc2) {
  cudaStream_t stream = activate(dev);
  launch<adam_update_kernel>("adam_update", grid_for(n, kBlockSize), kBlockSize, 0, stream, param, grad, m, v,
                             n, lr, beta1, beta2, eps, bc1, bc2);
}

// ---------------------------------------------------------------------------- multi-tensor updates

// Up to kTableTensors tensors' pointers and sizes travel as one kernel parameter (by value: at most
// 40 B per tensor, 1280 B for Adam's table, well under the 4 KiB parameter limit), so no table has
// to be copied to the device first. blockIdx.y picks the tensor; the blocks along x grid-stride
// over it (after apex's multi_tensor_apply).
constexpr int kTableTensors = 32;
struct SgdTable {
  float* param[kTableTensors];
  const float* grad[kTableTensors];
  int64_t size[kTableTensors];
};
struct MomentumTable {
  float* param[kTableTensors];
  const float* grad[kTableTensors];
  float* velocity[kTableTensors];
  int64_t size[kTableTensors];
};
struct AdamTable {
  float* param[kTableTensors];
  const float* grad[kTableTensors];
  float* m[kTableTensors];
  float* v[kTableTensors];
  float* max_v[kTableTensors];  // null without AMSGrad
  int64_t size[kTableTensors];
};
struct NormTable {
  const float* x[kTableTensors];
  int64_t first[kTableTensors];  // the tensor's index in the whole list (its partials' row)
  int64_t size[kTableTensors];
};
struct ScaleTable {
  float* x[kTableTensors];
  int64_t size[kTableTensors];
};
struct AdadeltaTable {
  float* param[kTableTensors];
  const float* grad[kTableTensors];
  float* square_avg[kTableTensors];
  float* acc_delta[kTableTensors];
  int64_t size[kTableTensors];
};

// param -= lr * (g + weight_decay * param) (weight decay 0: the plain step, bit for bit).
__global__ void sgd_update_multi_kernel(SgdTable table, float lr, float weight_decay) {
  const int t = blockIdx.y;
  float* __restrict__ p = table.param[t];
  const float* __restrict__ g = table.grad[t];
  const int64_t n = table.size[t];
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float gi = weight_decay != 0.0f ? g[i] + weight_decay * p[i] : g[i];
    p[i] -= lr * gi;
  }
}

// g' = g + weight_decay p; v = momentum v + (1 - dampening) g'; param -= lr (nesterov ? g' +
// momentum v : v) (the host's momentum_sgd_update_multi).
__global__ void momentum_sgd_update_multi_kernel(MomentumTable table, float lr, float momentum,
                                                 float dampening, float weight_decay, bool nesterov) {
  const int t = blockIdx.y;
  float* __restrict__ p = table.param[t];
  const float* __restrict__ g = table.grad[t];
  float* __restrict__ v = table.velocity[t];
  const int64_t n = table.size[t];
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float gi = weight_decay != 0.0f ? g[i] + weight_decay * p[i] : g[i];
    const float vi = momentum * v[i] + (1.0f - dampening) * gi;
    v[i] = vi;
    p[i] -= lr * (nesterov ? gi + momentum * vi : vi);
  }
}

// adam_update_kernel's step for the table's tensor blockIdx.y, with weight decay (coupled, or
// decoupled as AdamW) and AMSGrad when the tensor has a max_v.
__global__ void adam_update_multi_kernel(AdamTable table, float lr, float beta1, float beta2, float eps,
                                         float bc1, float bc2, float weight_decay, bool decoupled) {
  const int t = blockIdx.y;
  float* __restrict__ p = table.param[t];
  const float* __restrict__ g = table.grad[t];
  float* __restrict__ m = table.m[t];
  float* __restrict__ v = table.v[t];
  float* __restrict__ vmax = table.max_v[t];
  const int64_t n = table.size[t];
  const float shrink = 1.0f - lr * weight_decay;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float pi = p[i];
    float gi = g[i];
    if (weight_decay != 0.0f) {
      if (decoupled)
        pi *= shrink;
      else
        gi += weight_decay * pi;
    }
    const float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    const float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float vd = vi;
    if (vmax != nullptr) {
      vd = nan_max(vmax[i], vi);
      vmax[i] = vd;
    }
    p[i] = pi - lr * (mi / bc1) / (sqrtf(vd / bc2) + eps);
  }
}

// |x|^p summed (or, for p = inf, the NaN-propagating max of |x|) over the part of the table's tensor
// blockIdx.y that block blockIdx.x strides over; written to partials[first * parts + blockIdx.x].
// gridDim.x == parts.
__global__ void total_norm_partials_kernel(NormTable table, float p, float* partials, int64_t parts) {
  const int t = blockIdx.y;
  const float* __restrict__ x = table.x[t];
  const int64_t n = table.size[t];
  const bool is_max = p == INFINITY;
  float acc = 0.0f;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float a = fabsf(x[i]);
    if (is_max)
      acc = nan_max(acc, a);
    else
      acc += p == 2.0f ? a * a : (p == 1.0f ? a : powf(a, p));
  }
  // Uniform per launch: every thread of the block takes the same branch.
  acc = is_max ? block_max<kBlockSize>(acc) : block_sum<kBlockSize>(acc);
  if (threadIdx.x == 0) partials[table.first[t] * parts + blockIdx.x] = acc;
}

// out[0] = the partials' sum ^ (1 / p) (or their max for p = inf); one block, a fixed order.
__global__ void total_norm_finish_kernel(const float* partials, int64_t total, float p, float* out) {
  const bool is_max = p == INFINITY;
  float acc = 0.0f;
  for (int64_t i = threadIdx.x; i < total; i += blockDim.x)
    acc = is_max ? nan_max(acc, partials[i]) : acc + partials[i];
  acc = is_max ? block_max<kBlockSize>(acc) : block_sum<kBlockSize>(acc);
  if (threadIdx.x == 0)
    out[0] = is_max ? acc : (p == 2.0f ? sqrtf(acc) : (p == 1.0f ? acc : powf(acc, 1.0f / p)));
}

// x *= min(1, max_norm / (norm[0] + 1e-6)) (torch.nn.utils.clip_grad_norm_'s coefficient; a NaN
// norm gives NaN, as there).
__global__ void clip_scale_multi_kernel(ScaleTable table, const float* norm, float max_norm) {
  const int t = blockIdx.y;
  float* __restrict__ x = table.x[t];
  const int64_t n = table.size[t];
  const float c = max_norm / (norm[0] + 1e-6f);
  const float coef = c > 1.0f ? 1.0f : c;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    x[i] *= coef;
}

// The Adadelta step (see the header) for the table's tensor blockIdx.y. Each element is read and
// written by one thread: param, square_avg and acc_delta once each.
__global__ void adadelta_update_multi_kernel(AdadeltaTable table, float lr, float rho, float eps) {
  const int t = blockIdx.y;
  float* __restrict__ p = table.param[t];
  const float* __restrict__ g = table.grad[t];
  float* __restrict__ sq = table.square_avg[t];
  float* __restrict__ acc = table.acc_delta[t];
  const int64_t n = table.size[t];
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float gi = g[i];
    const float s = rho * sq[i] + (1.0f - rho) * gi * gi;
    const float d = sqrtf(acc[i] + eps) / sqrtf(s + eps) * gi;
    sq[i] = s;
    acc[i] = rho * acc[i] + (1.0f - rho) * d * d;
    p[i] -= lr * d;
  }
}

// Calls fill(table, j, t0 + j) for each tensor of every run of up to kTableTensors tensors, then
// launch_table(table, grid) once per run that holds an element; the grid is (blocks per tensor,
// tensors in the run).
template <typename Table, typename Fill, typename Launch>
void for_each_table(int count, const int64_t* sizes, Fill fill, Launch launch_table) {
  for (int t0 = 0; t0 < count; t0 += kTableTensors) {
    const int chunk = count - t0 < kTableTensors ? count - t0 : kTableTensors;
    Table table{};
    int64_t largest = 0;
    for (int j = 0; j < chunk; ++j) {
      fill(table, j, t0 + j);
      table.size[j] = sizes[t0 + j];
      largest = sizes[t0 + j] > largest ? sizes[t0 + j] : largest;
    }
    if (largest == 0) continue;
    // NOTE: capped at 1024 blocks per tensor: enough to fill a GPU with the grid's y extent too.
    const unsigned gx = grid_for(largest, kBlockSize) < 1024 ? grid_for(largest, kBlockSize) : 1024;
    launch_table(table, dim3(gx, static_cast<unsigned>(chunk)));
  }
}

void sgd_update_multi(int dev, float* const* params, const float* const* grads, const int64_t* sizes,
                      int count, float lr, float weight_decay) {
  cudaStream_t stream = activate(dev);
  for_each_table<SgdTable>(
      count, sizes,
      [&](SgdTable& table, int j, int t) {
        table.param[j] = params[t];
        table.grad[j] = grads[t];
      },
      [&](const SgdTable& table, dim3 grid) {
        launch<sgd_update_multi_kernel>("sgd_update", grid, kBlockSize, 0, stream, table, lr, weight_decay);
      });
}

void momentum_sgd_update_multi(int dev, float* const* params, const float* const* grads,
                               float* const* velocities, const int64_t* sizes, int count, float lr,
                               float momentum, float dampening, float weight_decay, bool nesterov) {
  cudaStream_t stream = activate(dev);
  for_each_table<MomentumTable>(
      count, sizes,
      [&](MomentumTable& table, int j, int t) {
        table.param[j] = params[t];
        table.grad[j] = grads[t];
        table.velocity[j] = velocities[t];
      },
      [&](const MomentumTable& table, dim3 grid) {
        launch<momentum_sgd_update_multi_kernel>("momentum_sgd_update", grid, kBlockSize, 0, stream, table,
                                                 lr, momentum, dampening, weight_decay, nesterov);
      });
}

void adam_update_multi(int dev, float* const* params, const float* const* grads, float* const* m,
                       float* const* v, float* const* max_v, const int64_t* sizes, int count, float lr,
                       float beta1, float beta2, float eps, float bc1, float bc2, float weight_decay,
                       bool decoupled) {
  cudaStream_t stream = activate(dev);
  for_each_table<AdamTable>(
      count, sizes,
      [&](AdamTable& table, int j, int t) {
        table.param[j] = params[t];
        table.grad[j] = grads[t];
        table.m[j] = m[t];
        table.v[j] = v[t];
        table.max_v[j] = max_v != nullptr ? max_v[t] : nullptr;
      },
      [&](const AdamTable& table, dim3 grid) {
        launch<adam_update_multi_kernel>("adam_update_multi", grid, kBlockSize, 0, stream, table, lr, beta1,
                                         beta2, eps, bc1, bc2, weight_decay, decoupled);
      });
}

void adadelta_update_multi(int dev, float* const* params, const float* const* grads,
                           float* const* square_avgs, float* const* acc_deltas, const int64_t* sizes,
                           int count, float lr, float rho, float eps) {
  cudaStream_t stream = activate(dev);
  for_each_table<AdadeltaTable>(
      count, sizes,
      [&](AdadeltaTable& table, int j, int t) {
        table.param[j] = params[t];
        table.grad[j] = grads[t];
        table.square_avg[j] = square_avgs[t];
        table.acc_delta[j] = acc_deltas[t];
      },
      [&](const AdadeltaTable& table, dim3 grid) {
        launch<adadelta_update_multi_kernel>("adadelta_update_multi", grid, kBlockSize, 0, stream, table, lr,
                                             rho, eps);
      });
}

void total_norm_multi(int dev, const float* const* xs, const int64_t* sizes, int count, float p,
                      float* partials, int64_t parts, float* out) {
  cudaStream_t stream = activate(dev);
  // Every tensor's row of partials is written (an empty tensor's with zeros), so the finishing
  // launch reads no uninitialised memory.
  for (int t0 = 0; t0 < count; t0 += kTableTensors) {
    const int chunk = count - t0 < kTableTensors ? count - t0 : kTableTensors;
    NormTable table{};
    for (int j = 0; j < chunk; ++j) {
      table.x[j] = xs[t0 + j];
      table.first[j] = t0 + j;
      table.size[j] = sizes[t0 + j];
    }
    launch<total_norm_partials_kernel>("total_norm_multi", dim3(static_cast<unsigned>(parts), chunk),
                                       kBlockSize, 0, stream, table, p, partials, parts);
  }
  launch<total_norm_finish_kernel>("total_norm_multi", 1, kBlockSize, 0, stream, partials,
                                   static_cast<int64_t>(count) * parts, p, out);
}

void clip_scale_multi(int dev, float* const* xs, const int64_t* sizes, int count, const float* total_norm,
                      float max_norm) {
  cudaStream_t stream = activate(dev);
  for_each_table<ScaleTable>(
      count, sizes, [&](ScaleTable& table, int j, int t) { table.x[j] = xs[t]; },
      [&](const ScaleTable& table, dim3 grid) {
        launch<clip_scale_multi_kernel>("clip_scale_multi", grid, kBlockSize, 0, stream, table, total_norm,
                                        max_norm);
      });
}

}  // namespace gpumat::GPUMAT_CUDA_NS
