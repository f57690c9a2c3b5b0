// CUDA elementwise kernels: array_set, add, multiply, add_const, multiply_const, axpy, copy, and
//   divide: out = a / b     (IEEE division: x / 0 = +-inf, 0 / 0 = NaN; nvcc's default -prec-div=true
//                            rounds it correctly, as the host does)
//   eq:     out = a == b ? 1 : 0  (IEEE equality: NaN == NaN is false, -0 == +0 is true)
//   exp:    out = exp(x)    (IEEE: overflows to inf past ~88.7, underflows to 0 below ~-103.9)
//   log:    out = log(x)    (log(0) = -inf, log(x < 0) = NaN, as numpy)
//   sqrt:   out = sqrt(x)   (correctly rounded: nvcc's default -prec-sqrt=true; sqrt(x < 0) = NaN)
//   sqrt_gradient: out = dy / (2 y), y = sqrt(x) the forward output (dy / 0 at y = 0, as PyTorch)
//   abs, sign (1, -1 or 0; 0 for NaN, as PyTorch), sin, cos, erf, log1p (CUDA's single-precision
//     functions: within 1 (log1pf) or 2 ulp), rsqrt = 1 / sqrtf(x) (both steps correctly rounded),
//     rsqrt_gradient: out = -0.5 dy y^3 from the forward output y
//   lt, le, gt, ge: out = a OP b ? 1 : 0 (a NaN compares false); logical_not, logical_and,
//     logical_or: 1 or 0, a value true where it is not 0 (NaN too)
//   minimum, maximum: the smaller / larger, NaN if either is NaN (as PyTorch; not fminf / fmaxf)
//   where:  out = cond != 0 ? a : b
//   clamp:  out = min(max(x, lo), hi) (NaN stays NaN; hi where lo > hi); clamp_gradient: out = dy
//     where lo <= x <= hi, else 0
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

void abs(int dev, const float* in, float* out, int64_t n) {
  launch_map("abs", dev, out, n, [=] __device__(int64_t i) { return fabsf(in[i]); });
}

void sign(int dev, const float* in, float* out, int64_t n) {
  launch_map("sign", dev, out, n, [=] __device__(int64_t i) {
    const float x = in[i];
    return static_cast<float>((x > 0.0f) - (x < 0.0f));
  });
}

void sin(int dev, const float* in, float* out, int64_t n) {
  launch_map("sin", dev, out, n, [=] __device__(int64_t i) { return sinf(in[i]); });
}

void cos(int dev, const float* in, float* out, int64_t n) {
  launch_map("cos", dev, out, n, [=] __device__(int64_t i) { return cosf(in[i]); });
}

void erf(int dev, const float* in, float* out, int64_t n) {
  launch_map("erf", dev, out, n, [=] __device__(int64_t i) { return erff(in[i]); });
}

void log1p(int dev, const float* in, float* out, int64_t n) {
  launch_map("log1p", dev, out, n, [=] __device__(int64_t i) { return log1pf(in[i]); });
}

void rsqrt(int dev, const float* in, float* out, int64_t n) {
  launch_map("rsqrt", dev, out, n, [=] __device__(int64_t i) { return 1.0f / sqrtf(in[i]); });
}

void rsqrt_gradient(int dev, const float* y, const float* dy, float* out, int64_t n) {
  launch_map("rsqrt_gradient", dev, out, n,
             [=] __device__(int64_t i) { return -0.5f * dy[i] * (y[i] * y[i] * y[i]); });
}

void lt(int dev, const float* a, const float* b, float* out, int64_t n) {
  launch_map("lt", dev, out, n, [=] __device__(int64_t i) { return a[i] < b[i] ? 1.0f : 0.0f; });
}

void le(int dev, const float* a, const float* b, float* out, int64_t n) {
  launch_map("le", dev, out, n, [=] __device__(int64_t i) { return a[i] <= b[i] ? 1.0f : 0.0f; });
}

void gt(int dev, const float* a, const float* b, float* out, int64_t n) {
  launch_map("gt", dev, out, n, [=] __device__(int64_t i) { return a[i] > b[i] ? 1.0f : 0.0f; });
}

void ge(int dev, const float* a, const float* b, float* out, int64_t n) {
  launch_map("ge", dev, out, n, [=] __device__(int64_t i) { return a[i] >= b[i] ? 1.0f : 0.0f; });
}

void logical_not(int dev, const float* in, float* out, int64_t n) {
  launch_map("logical_not", dev, out, n, [=] __device__(int64_t i) { return in[i] == 0.0f ? 1.0f : 0.0f; });
}

void logical_and(int dev, const float* a, const float* b, float* out, int64_t n) {
  launch_map("logical_and", dev, out, n,
             [=] __device__(int64_t i) { return a[i] != 0.0f && b[i] != 0.0f ? 1.0f : 0.0f; });
}

void logical_or(int dev, const float* a, const float* b, float* out, int64_t n) {
  launch_map("logical_or", dev, out, n,
             [=] __device__(int64_t i) { return a[i] != 0.0f || b[i] != 0.0f ? 1.0f : 0.0f; });
}

// x != x: NaN. The NaN is the operand itself, so its payload passes as PyTorch's does.
void minimum(int dev, const float* a, const float* b, float* out, int64_t n) {
  launch_map("minimum", dev, out, n, [=] __device__(int64_t i) {
    const float x = a[i], y = b[i];
    return x != x ? x : (y != y ? y : (x < y ? x : y));
  });
}

void maximum(int dev, const float* a, const float* b, float* out, int64_t n) {
  launch_map("maximum", dev, out, n, [=] __device__(int64_t i) {
    const float x = a[i], y = b[i];
    return x != x ? x : (y != y ? y : (x > y ? x : y));
  });
}

void where(int dev, const float* cond, const float* a, const float* b, float* out, int64_t n) {
  launch_map("where", dev, out, n, [=] __device__(int64_t i) { return cond[i] != 0.0f ? a[i] : b[i]; });
}

void clamp(int dev, const float* in, float lo, float hi, float* out, int64_t n) {
  launch_map("clamp", dev, out, n, [=] __device__(int64_t i) {
    const float x = in[i] < lo ? lo : in[i];
    return x > hi ? hi : x;
  });
}

void clamp_gradient(int dev, const float* x, const float* dy, float lo, float hi, float* out, int64_t n) {
  launch_map("clamp_gradient", dev, out, n,
             [=] __device__(int64_t i) { return x[i] >= lo && x[i] <= hi ? dy[i] : 0.0f; });
}

void copy(int dev, const float* src, float* dst, int64_t n) {
  cudaStream_t stream = activate(dev);
  check(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * sizeof(float), cudaMemcpyDeviceToDevice, stream),
        "copy");
}

// powers: powf (within 4 ulp on a GPU); gradients as PyTorch's pow_backward.
void pow_scalar(int dev, const float* in, float s, float* out, int64_t n) {
  launch_map("pow_scalar", dev, out, n, [=] __device__(int64_t i) { return powf(in[i], s); });
}

void pow_scalar_gradient(int dev, const float* x, const float* dy, float s, float* out, int64_t n) {
  launch_map("pow_scalar_gradient", dev, out, n,
             [=] __device__(int64_t i) { return s == 0.0f ? 0.0f : dy[i] * (s * powf(x[i], s - 1.0f)); });
}

void scalar_pow(int dev, const float* in, float s, float* out, int64_t n) {
  launch_map("scalar_pow", dev, out, n, [=] __device__(int64_t i) { return powf(s, in[i]); });
}

void scalar_pow_gradient(int dev, const float* x, const float* dy, float s, float* out, int64_t n) {
  launch_map("scalar_pow_gradient", dev, out, n, [=] __device__(int64_t i) {
    return s == 0.0f && x[i] >= 0.0f ? 0.0f : dy[i] * (powf(s, x[i]) * logf(s));
  });
}

void pow(int dev, const float* a, const float* b, float* out, int64_t n) {
  launch_map("pow", dev, out, n, [=] __device__(int64_t i) { return powf(a[i], b[i]); });
}

}  // namespace gpumat::GPUMAT_CUDA_NS
