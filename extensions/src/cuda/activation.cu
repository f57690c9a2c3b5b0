// CUDA activation family; every array is (n,) and `out` may alias an input.
// Host reference: ../host/activation.cpp.
//   tanh:             out = tanh(x)
//   sigmoid:          out = 1 / (1 + exp(-x))
//   tanh_gradient:    out = dy * (1 - y^2)        (y = tanh(x), the forward output)
//   sigmoid_gradient: out = dy * y * (1 - y)      (y = sigmoid(x))
//   dropout:          out = u_i < p ? 0 : x * scale, u_i = uniform01(seed, i), scale = 1/(1-p)
// NOTE: sigmoid evaluates exp of a non-positive number only (exp(-|x|)), so it never overflows.
// dropout's mask comes from ../random.h's counter-based uniform01, so it equals the host's (and
// the numpy reference's) mask for the same seed. Grid-stride, one thread per element.
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

}  // namespace gpumat::GPUMAT_CUDA_NS
