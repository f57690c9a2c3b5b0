// CUDA elementwise kernels: array_set, add, multiply, add_const, multiply_const, axpy, copy, and
//   divide: out = a / b     (IEEE division: x / 0 = +-inf, 0 / 0 = NaN; nvcc's default -prec-div=true
//                            rounds it correctly, as the host does)
//   eq:     out = a == b ? 1 : 0  (IEEE equality: NaN == NaN is false, -0 == +0 is true)
//   exp:    out = exp(x)    (IEEE: overflows to inf past ~88.7, underflows to 0 below ~-103.9)
//   log:    out = log(x)    (log(0) = -inf, log(x < 0) = NaN, as numpy)
//   sqrt:   out = sqrt(x)   (correctly rounded: nvcc's default -prec-sqrt=true; sqrt(x < 0) = NaN)
//   sqrt_gradient: out = dy / (2 y), y = sqrt(x) the forward output (dy / 0 at y = 0, as PyTorch)
// Every array is (n,); `out` may alias an input. Host reference: ../host/elementwise.cpp.
// NOTE: expf and logf (within 2 and 1 ulp), not the __expf / __logf intrinsics, whose error grows
// with |x| (__expf: 2 + floor(1.173 |x|) ulp; CUDA C++ Programming Guide, Mathematical Functions):
// the ops are memory-bound, so the accurate forms cost nothing measurable.
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

void divide(int dev, const float* a, const float* b, float* out, int64_t n) {
  launch_map("matrix_elementwise_divide", dev, out, n, [=] __device__(int64_t i) { return a[i] / b[i]; });
}

void eq(int dev, const float* a, const float* b, float* out, int64_t n) {
  launch_map("eq", dev, out, n, [=] __device__(int64_t i) { return a[i] == b[i] ? 1.0f : 0.0f; });
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

void exp(int dev, const float* in, float* out, int64_t n) {
  launch_map("exp", dev, out, n, [=] __device__(int64_t i) { return expf(in[i]); });
}

void log(int dev, const float* in, float* out, int64_t n) {
  launch_map("log", dev, out, n, [=] __device__(int64_t i) { return logf(in[i]); });
}

void sqrt(int dev, const float* in, float* out, int64_t n) {
  launch_map("sqrt", dev, out, n, [=] __device__(int64_t i) { return sqrtf(in[i]); });
}

void sqrt_gradient(int dev, const float* y, const float* dy, float* out, int64_t n) {
  launch_map("sqrt_gradient", dev, out, n, [=] __device__(int64_t i) { return dy[i] / (2.0f * y[i]); });
}

void copy(int dev, const float* src, float* dst, int64_t n) {
  cudaStream_t stream = activate(dev);
  check(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * sizeof(float), cudaMemcpyDeviceToDevice, stream),
        "copy");
}

}  // namespace gpumat::GPUMAT_CUDA_NS
