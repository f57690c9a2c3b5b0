// CUDA random fills: random_uniform in [low, high), random_normal (Box-Muller) and random_integers
// (integers in [low, high)), out is (n,).
// Element i depends only on (seed, i) (../random.h), so the host fills (../host/random.cpp) give
// identical arrays. Grid-stride, one thread per element.
#include "../random.h"
#include "common.cuh"
#include "kernels.cuh"

namespace gpumat::GPUMAT_CUDA_NS {

// ---------------------------------------------------------------------------- kernels

// out is (n,)
__global__ void random_uniform_kernel(float* out, int64_t n, float low, float high, uint64_t seed) {
  const float scale = high - low;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float v = low + scale * rng::uniform01(seed, static_cast<uint64_t>(i));
    out[i] = v < high ? v : low;  // NOTE: rounding can land on `high`; keep the interval half-open
  }
}

// out is (n,)
__global__ void random_normal_kernel(float* out, int64_t n, float mean, float stddev, uint64_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = mean + stddev * rng::standard_normal(seed, static_cast<uint64_t>(i));
}

// out is (n,)
__global__ void random_integers_kernel(float* out, int64_t n, int64_t low, int64_t high, uint64_t seed) {
  const uint64_t range = static_cast<uint64_t>(high - low);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = static_cast<float>(low + rng::below(seed, static_cast<uint64_t>(i), range));
}

// ---------------------------------------------------------------------------- launchers

void random_uniform(int dev, float* out, int64_t n, float low, float high, uint64_t seed) {
  cudaStream_t stream = activate(dev);
  launch<random_uniform_kernel>("random_uniform", grid_for(n, kBlockSize), kBlockSize, 0, stream, out, n, low,
                                high, seed);
}

void random_normal(int dev, float* out, int64_t n, float mean, float stddev, uint64_t seed) {
  cudaStream_t stream = activate(dev);
  launch<random_normal_kernel>("random_normal", grid_for(n, kBlockSize), kBlockSize, 0, stream, out, n, mean,
                               stddev, seed);
}

void random_integers(int dev, float* out, int64_t n, int64_t low, int64_t high, uint64_t seed) {
  cudaStream_t stream = activate(dev);
  launch<random_integers_kernel>("random_integers", grid_for(n, kBlockSize), kBlockSize, 0, stream, out, n,
                                 low, high, seed);
}

}  // namespace gpumat::GPUMAT_CUDA_NS
