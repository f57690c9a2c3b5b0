// CUDA activation family. Host reference: ../host/activation.cpp.
// Pointwise, every array (n,), `out` may alias an input:
//   relu:             out = x < 0 ? 0 : x             (NaN passes through)
//   relu_gradient:    out = x > 0 ? dy : 0            (the subgradient at 0 is 0; a NaN x gives NaN)
//   tanh:             out = tanh(x)
//   sigmoid:          out = 1 / (1 + exp(-x))
//   tanh_gradient:    out = dy * (1 - y^2)        (y = tanh(x), the forward output)
//   sigmoid_gradient: out = dy * y * (1 - y)      (y = sigmoid(x))
//   dropout:          out = u_i < p ? 0 : x * scale, u_i = uniform01(seed, i), scale = 1/(1-p)
// NOTE: sigmoid evaluates exp of a non-positive number only (exp(-|x|)), so it never overflows.
// dropout's mask comes from ../random.h's counter-based uniform01, so it equals the host's (and
// the numpy reference's) mask for the same seed. Grid-stride, one thread per element (relu and
// relu_gradient through common.cuh's launch_map).
// relu_bias_gradient: y, dy, dz (rows, cols), dbias (cols,): dz = dy * (y > 0) and dbias = the
// column sums of dz, in one kernel (a 32-column block per tile, partial sums in shared memory).
#include "../random.h"
#include "common.cuh"
#include "kernels.cuh"

namespace gpumat::GPUMAT_CUDA_NS {

// ---------------------------------------------------------------------------- kernels

__device__ __forceinline__ float stable_sigmoid(float x) {
  if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
  const float e = expf(x);
  return e / (1.0f + e);
}

// in, out are (n,); Kind 0 is tanh, 1 is sigmoid
template <int Kind>
__global__ void activation_kernel(const float* in, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = Kind == 0 ? tanhf(in[i]) : stable_sigmoid(in[i]);
}

// y, dy, out are (n,)
template <int Kind>
__global__ void activation_gradient_kernel(const float* y, const float* dy, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = y[i];
    out[i] = Kind == 0 ? dy[i] * (1.0f - v * v) : dy[i] * v * (1.0f - v);
  }
}

// in, out are (n,)
__global__ void dropout_kernel(const float* in, float* out, int64_t n, float p, float scale, uint64_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = rng::uniform01(seed, static_cast<uint64_t>(i)) < p ? 0.0f : in[i] * scale;
}

// ---------------------------------------------------------------------------- launchers

// NOTE: a comparison, not fmaxf, so NaN passes through as on the host.
void relu(int dev, const float* in, float* out, int64_t n) {
  launch_map("relu", dev, out, n, [=] __device__(int64_t i) {
    float x = in[i];
    return x < 0.0f ? 0.0f : x;
  });
}

// NOTE: the subgradient at exactly 0 is 0; a NaN input gives NaN.
void relu_gradient(int dev, const float* in, const float* grad, float* out, int64_t n) {
  launch_map("relu_gradient", dev, out, n, [=] __device__(int64_t i) {
    float x = in[i];
    return x > 0.0f ? grad[i] : (x != x ? x : 0.0f);
  });
}

void tanh(int dev, const float* in, float* out, int64_t n) {
  cudaStream_t stream = activate(dev);
  launch<activation_kernel<0>>("tanh", grid_for(n, kBlockSize), kBlockSize, 0, stream, in, out, n);
}

void sigmoid(int dev, const float* in, float* out, int64_t n) {
  cudaStream_t stream = activate(dev);
  launch<activation_kernel<1>>("sigmoid", grid_for(n, kBlockSize), kBlockSize, 0, stream, in, out, n);
}

void tanh_gradient(int dev, const float* y, const float* dy, float* out, int64_t n) {
  cudaStream_t stream = activate(dev);
  launch<activation_gradient_kernel<0>>("tanh_gradient", grid_for(n, kBlockSize), kBlockSize, 0, stream, y,
                                        dy, out, n);
}

void sigmoid_gradient(int dev, const float* y, const float* dy, float* out, int64_t n) {
  cudaStream_t stream = activate(dev);
  launch<activation_gradient_kernel<1>>("sigmoid_gradient", grid_for(n, kBlockSize), kBlockSize, 0, stream, y,
                                        dy, out, n);
}

void dropout(int dev, const float* in, float* out, int64_t n, float p, float scale, uint64_t seed) {
  cudaStream_t stream = activate(dev);
  launch<dropout_kernel>("dropout", grid_for(n, kBlockSize), kBlockSize, 0, stream, in, out, n, p, scale,
                         seed);
}

// ---------------------------------------------------------------------------- relu_bias_gradient

namespace {
constexpr int kRbgCols = 32;       // columns per block (one warp wide: coalesced rows)
constexpr int kRbgRowThreads = 8;  // threads down the rows of each column
}  // namespace

// y, dy, dz are (rows, cols), dbias is (cols,): dz = dy * (y > 0) and dbias = column sums of dz, in
// one kernel. Each thread walks a strided set of rows of one column; the kRbgRowThreads partial
// sums of a column are added in shared memory in a fixed order, so dbias is deterministic (the
// scheme of reduce.cu's reduce_sum_axis_zero). dz may alias dy (each element is read, then written,
// by the same thread).
__global__ void relu_bias_gradient_kernel(const float* y, const float* dy, float* dz, float* dbias,
                                          int64_t rows, int64_t cols) {
  __shared__ float partial[kRbgRowThreads][kRbgCols + 1];
  const int64_t c = blockIdx.x * static_cast<int64_t>(kRbgCols) + threadIdx.x;
  float acc = 0.0f;
  if (c < cols)
    for (int64_t r = threadIdx.y; r < rows; r += kRbgRowThreads) {
      const int64_t i = r * cols + c;
      const float g = y[i] > 0.0f ? dy[i] : 0.0f;
      dz[i] = g;
      acc += g;
    }
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float sum = 0.0f;
    for (int j = 0; j < kRbgRowThreads; ++j) sum += partial[j][threadIdx.x];
    dbias[c] = sum;
  }
}

void relu_bias_gradient(int dev, const float* y, const float* dy, float* dz, float* dbias, int64_t rows,
                        int64_t cols) {
  const int64_t kMaxGridX = 2147483647;
  if (ceil_div(cols, kRbgCols) > kMaxGridX) throw ShapeError("relu_bias_gradient: too many columns");
  cudaStream_t stream = activate(dev);
  launch<relu_bias_gradient_kernel>("relu_bias_gradient", static_cast<unsigned>(ceil_div(cols, kRbgCols)),
                                    dim3(kRbgCols, kRbgRowThreads), 0, stream, y, dy, dz, dbias, rows, cols);
}

}  // namespace gpumat::GPUMAT_CUDA_NS
