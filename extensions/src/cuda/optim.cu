// CUDA optimizer kernels; param, grad, m, v are (n,). Host reference: ../host/optim.cpp.
//   adam_update_kernel: one step of Adam (Kingma & Ba, "Adam: A Method for Stochastic
//   Optimization", ICLR 2015, Algorithm 1), with bc1 = 1 - beta1^t, bc2 = 1 - beta2^t:
//     m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//     param -= lr * (m / bc1) / (sqrt(v / bc2) + eps)
// Fused: one read of param, grad, m, v and one write of param, m, v per element (the unfused form
// with elementwise ops would take about eight kernels and three temporaries).
// Grid-stride, one thread per element.
#include "common.cuh"
#include "kernels.cuh"

namespace gpumat::GPUMAT_CUDA_NS {

// ---------------------------------------------------------------------------- kernels

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

// ---------------------------------------------------------------------------- multi-tensor SGD (issue 16)

// Up to kSgdTensors (param, grad, size) triples travel as one kernel parameter (by value, 24 B per
// tensor, well under the 4 KiB parameter limit), so no table has to be copied to the device first.
// blockIdx.y picks the tensor; the blocks along x grid-stride over it (after apex's multi_tensor_apply).
constexpr int kSgdTensors = 32;
struct SgdTable {
  float* param[kSgdTensors];
  const float* grad[kSgdTensors];
  int64_t size[kSgdTensors];
};

__global__ void sgd_update_multi_kernel(SgdTable table, float lr) {
  const int t = blockIdx.y;
  float* __restrict__ p = table.param[t];
  const float* __restrict__ g = table.grad[t];
  const int64_t n = table.size[t];
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    p[i] -= lr * g[i];
}

void sgd_update_multi(int dev, float* const* params, const float* const* grads, const int64_t* sizes,
                      int count, float lr) {
  cudaStream_t stream = activate(dev);
  for (int t0 = 0; t0 < count; t0 += kSgdTensors) {
    const int chunk = count - t0 < kSgdTensors ? count - t0 : kSgdTensors;
    SgdTable table{};
    int64_t largest = 0;
    for (int j = 0; j < chunk; ++j) {
      table.param[j] = params[t0 + j];
      table.grad[j] = grads[t0 + j];
      table.size[j] = sizes[t0 + j];
      largest = sizes[t0 + j] > largest ? sizes[t0 + j] : largest;
    }
    if (largest == 0) continue;
    // NOTE: capped at 1024 blocks per tensor: enough to fill a GPU with the grid's y extent too.
    const unsigned gx = grid_for(largest, kBlockSize) < 1024 ? grid_for(largest, kBlockSize) : 1024;
    launch<sgd_update_multi_kernel>("sgd_update", dim3(gx, static_cast<unsigned>(chunk)), kBlockSize, 0,
                                    stream, table, lr);
  }
}

}  // namespace gpumat::GPUMAT_CUDA_NS
