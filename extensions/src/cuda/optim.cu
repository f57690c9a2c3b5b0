// CUDA optimizer kernels; param, grad, m, v are (n,). Host reference: ../host/optim.cpp.
//   adam_update_kernel: one step of Adam (Kingma & Ba, "Adam: A Method for Stochastic
//   Optimization", ICLR 2015, Algorithm 1), with bc1 = 1 - beta1^t, bc2 = 1 - beta2^t:
//     m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//     param -= lr * (m / bc1) / (sqrt(v / bc2) + eps)
// Fused: one read of param, grad, m, v and one write of param, m, v per element (the unfused form
// with elementwise ops would take about eight kernels and three temporaries).
// Grid-stride, one thread per element.
//   sgd_update_multi / momentum_sgd_update_multi / adam_update_multi: the same updates for a list of
//   tensors, one launch per 32 tensors (see the tables below).
//   adadelta_update_multi: Adadelta (Zeiler, "ADADELTA: An Adaptive Learning Rate Method", 2012,
//   Algorithm 1) with PyTorch's lr factor, for a list of tensors, one launch per 32:
//     sq = rho sq + (1 - rho) g^2;  d = sqrt(acc + eps) / sqrt(sq + eps) * g
//     acc = rho acc + (1 - rho) d^2;  param -= lr d
//   (torch.optim.Adadelta's order of operations, so float32 results agree to rounding.)
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
  int64_t size[kTableTensors];
};
struct AdadeltaTable {
  float* param[kTableTensors];
  const float* grad[kTableTensors];
  float* square_avg[kTableTensors];
  float* acc_delta[kTableTensors];
  int64_t size[kTableTensors];
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

// v = momentum * v + g; param -= lr * v (the host's momentum_sgd_update_multi).
__global__ void momentum_sgd_update_multi_kernel(MomentumTable table, float lr, float momentum) {
  const int t = blockIdx.y;
  float* __restrict__ p = table.param[t];
  const float* __restrict__ g = table.grad[t];
  float* __restrict__ v = table.velocity[t];
  const int64_t n = table.size[t];
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float vi = momentum * v[i] + g[i];
    v[i] = vi;
    p[i] -= lr * vi;
  }
}

// adam_update_kernel's step for the table's tensor blockIdx.y.
__global__ void adam_update_multi_kernel(AdamTable table, float lr, float beta1, float beta2, float eps,
                                         float bc1, float bc2) {
  const int t = blockIdx.y;
  float* __restrict__ p = table.param[t];
  const float* __restrict__ g = table.grad[t];
  float* __restrict__ m = table.m[t];
  float* __restrict__ v = table.v[t];
  const int64_t n = table.size[t];
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float gi = g[i];
    const float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    const float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] -= lr * (mi / bc1) / (sqrtf(vi / bc2) + eps);
  }
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
                      int count, float lr) {
  cudaStream_t stream = activate(dev);
  for_each_table<SgdTable>(
      count, sizes,
      [&](SgdTable& table, int j, int t) {
        table.param[j] = params[t];
        table.grad[j] = grads[t];
      },
      [&](const SgdTable& table, dim3 grid) {
        launch<sgd_update_multi_kernel>("sgd_update", grid, kBlockSize, 0, stream, table, lr);
      });
}

void momentum_sgd_update_multi(int dev, float* const* params, const float* const* grads,
                               float* const* velocities, const int64_t* sizes, int count, float lr,
                               float momentum) {
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
                                                 lr, momentum);
      });
}

void adam_update_multi(int dev, float* const* params, const float* const* grads, float* const* m,
                       float* const* v, const int64_t* sizes, int count, float lr, float beta1, float beta2,
                       float eps, float bc1, float bc2) {
  cudaStream_t stream = activate(dev);
  for_each_table<AdamTable>(
      count, sizes,
      [&](AdamTable& table, int j, int t) {
        table.param[j] = params[t];
        table.grad[j] = grads[t];
        table.m[j] = m[t];
        table.v[j] = v[t];
      },
      [&](const AdamTable& table, dim3 grid) {
        launch<adam_update_multi_kernel>("adam_update_multi", grid, kBlockSize, 0, stream, table, lr, beta1,
                                         beta2, eps, bc1, bc2);
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

}  // namespace gpumat::GPUMAT_CUDA_NS
