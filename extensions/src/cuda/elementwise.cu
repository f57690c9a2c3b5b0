// CUDA elementwise kernels: array_set, add, multiply, add_const, multiply_const, axpy, copy.
// Every array is (n,); `out` may alias an input. Host reference: ../host/elementwise.cpp.
// Tiling: common.cuh's launch_map, one templated grid-stride kernel that applies a functor per
// element; kBlockSize threads per block, grid from grid_for() (the loop covers any n, so no launch
// is ever too large). copy is a device-to-device cudaMemcpyAsync.
#include "common.cuh"
#include "kernels.cuh"

namespace gpumat::GPUMAT_CUDA_NS {

// ---------------------------------------------------------------------------- launchers

void array_set(int dev, float* out, int64_t n, float value) {
  launch_map("array_set", dev, out, n, [=] __device__(int64_t) { return value; });
}

void add(int dev, const float* a, const float* b, float* out, int64_t n) {
  launch_map("matrix_elementwise_add", dev, out, n, [=] __device__(int64_t i) { return a[i] + b[i]; });
}

void multiply(int dev, const float* a, const float* b, float* out, int64_t n) {
  launch_map("matrix_elementwise_multiply", dev, out, n, [=] __device__(int64_t i) { return a[i] * b[i]; });
}

void add_const(int dev, const float* in, float value, float* out, int64_t n) {
  launch_map("matrix_elementwise_add_by_const", dev, out, n,
             [=] __device__(int64_t i) { return in[i] + value; });
}

void multiply_const(int dev, const float* in, float value, float* out, int64_t n) {
  launch_map("matrix_elementwise_multiply_by_const", dev, out, n,
             [=] __device__(int64_t i) { return in[i] * value; });
}

void axpy(int dev, float alpha, const float* x, float* y, int64_t n) {
  launch_map("axpy", dev, y, n, [=] __device__(int64_t i) { return y[i] + alpha * x[i]; });
}

void copy(int dev, const float* src, float* dst, int64_t n) {
  cudaStream_t stream = activate(dev);
  check(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * sizeof(float), cudaMemcpyDeviceToDevice, stream),
        "copy");
}

}  // namespace gpumat::GPUMAT_CUDA_NS
