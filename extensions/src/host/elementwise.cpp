// Host elementwise kernels (the reference for ../cuda/elementwise.cu): array_set, add, multiply,
// divide, eq, add_const, multiply_const, axpy, copy, exp, log, sqrt, sqrt_gradient = dy / (2 y). All
// arrays are (n,); `out` may alias an input. divide is IEEE division (x / 0 = +-inf, 0 / 0 = NaN); eq is 1
// where a == b, else 0 (IEEE equality: NaN equals nothing). exp is vec_math.h's vexp_full (SIMD; within
// 8.8e-8 relative of e^x, the CUDA kernel's expf to float32 rounding), log the C library's logf (IEEE
// special values: exp overflows to inf and underflows to 0, log(0) = -inf, log(x < 0) = NaN).
// abs, sign (0 for NaN, as PyTorch), sin, cos, erf, log1p (the C library's float functions), rsqrt =
// 1 / sqrt(x) and its gradient -0.5 dy y^3; lt, le, gt, ge, logical_not/and/or (1 or 0); minimum,
// maximum (NaN if either is NaN); where (cond != 0 ? a : b); clamp and clamp_gradient. Each in the
// CUDA kernel's order of arithmetic.
#include <cmath>
#include <cstring>

#include "kernels.h"
#include "parallel.h"
#include "vec_math.h"

namespace gpumat::host {

void array_set(int, float* out, int64_t n, float value) {
  parallel_for(n, n, [&](int64_t i) { out[i] = value; });
}

void add(int, const float* a, const float* b, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) { out[i] = a[i] + b[i]; });
}

void multiply(int, const float* a, const float* b, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) { out[i] = a[i] * b[i]; });
}

void divide(int, const float* a, const float* b, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) { out[i] = a[i] / b[i]; });
}

void eq(int, const float* a, const float* b, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) { out[i] = a[i] == b[i] ? 1.0f : 0.0f; });
}

void add_const(int, const float* in, float value, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) { out[i] = in[i] + value; });
}

void multiply_const(int, const float* in, float value, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) { out[i] = in[i] * value; });
}

void axpy(int, float alpha, const float* x, float* y, int64_t n) {
  parallel_for(n, n, [&](int64_t i) { y[i] += alpha * x[i]; });
}

namespace {
// vec_math.h's vexp_full in a SIMD block (compiled also for AVX2 and AVX-512): libm's expf per
// element, a call no compiler vectorises, took 3.5x PyTorch's time on an AVX2 machine.
GPUMAT_SIMD_CLONES void exp_block(const float* in, float* out, int64_t lo, int64_t hi) {
#pragma omp simd
  for (int64_t i = lo; i < hi; ++i) out[i] = vexp_full(in[i]);
}
}  // namespace

void exp(int, const float* in, float* out, int64_t n) {
  parallel_blocks(n, [&](int64_t lo, int64_t hi) { exp_block(in, out, lo, hi); });
}

void log(int, const float* in, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) { out[i] = std::log(in[i]); });
}

void sqrt(int, const float* in, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) { out[i] = std::sqrt(in[i]); });
}

// The CUDA kernel's arithmetic in its order: 2 y is exact, the division correctly rounded.
void sqrt_gradient(int, const float* y, const float* dy, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) { out[i] = dy[i] / (2.0f * y[i]); });
}

void abs(int, const float* in, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) { out[i] = std::fabs(in[i]); });
}

void sign(int, const float* in, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) { out[i] = static_cast<float>((in[i] > 0.0f) - (in[i] < 0.0f)); });
}

void sin(int, const float* in, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) { out[i] = std::sin(in[i]); });
}

void cos(int, const float* in, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) { out[i] = std::cos(in[i]); });
}

void erf(int, const float* in, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) { out[i] = std::erf(in[i]); });
}

void log1p(int, const float* in, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) { out[i] = std::log1p(in[i]); });
}

void rsqrt(int, const float* in, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) { out[i] = 1.0f / std::sqrt(in[i]); });
}

void rsqrt_gradient(int, const float* y, const float* dy, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) { out[i] = -0.5f * dy[i] * (y[i] * y[i] * y[i]); });
}

void lt(int, const float* a, const float* b, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) { out[i] = a[i] < b[i] ? 1.0f : 0.0f; });
}

void le(int, const float* a, const float* b, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) { out[i] = a[i] <= b[i] ? 1.0f : 0.0f; });
}

void gt(int, const float* a, const float* b, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) { out[i] = a[i] > b[i] ? 1.0f : 0.0f; });
}

void ge(int, const float* a, const float* b, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) { out[i] = a[i] >= b[i] ? 1.0f : 0.0f; });
}

void logical_not(int, const float* in, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) { out[i] = in[i] == 0.0f ? 1.0f : 0.0f; });
}

void logical_and(int, const float* a, const float* b, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) { out[i] = a[i] != 0.0f && b[i] != 0.0f ? 1.0f : 0.0f; });
}

void logical_or(int, const float* a, const float* b, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) { out[i] = a[i] != 0.0f || b[i] != 0.0f ? 1.0f : 0.0f; });
}

void minimum(int, const float* a, const float* b, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) {
    const float x = a[i], y = b[i];
    out[i] = x != x ? x : (y != y ? y : (x < y ? x : y));
  });
}

void maximum(int, const float* a, const float* b, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) {
    const float x = a[i], y = b[i];
    out[i] = x != x ? x : (y != y ? y : (x > y ? x : y));
  });
}

void where(int, const float* cond, const float* a, const float* b, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) { out[i] = cond[i] != 0.0f ? a[i] : b[i]; });
}

void clamp(int, const float* in, float lo, float hi, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) {
    const float x = in[i] < lo ? lo : in[i];
    out[i] = x > hi ? hi : x;
  });
}

void clamp_gradient(int, const float* x, const float* dy, float lo, float hi, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) { out[i] = x[i] >= lo && x[i] <= hi ? dy[i] : 0.0f; });
}

void copy(int, const float* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

// powers: powf (std::pow's float overload, PyTorch's CPU formula); gradients as PyTorch's pow_backward.
void pow_scalar(int, const float* in, float s, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) { out[i] = powf(in[i], s); });
}

void pow_scalar_gradient(int, const float* x, const float* dy, float s, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) { out[i] = s == 0.0f ? 0.0f : dy[i] * (s * powf(x[i], s - 1.0f)); });
}

void scalar_pow(int, const float* in, float s, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) { out[i] = powf(s, in[i]); });
}

void scalar_pow_gradient(int, const float* x, const float* dy, float s, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) {
    out[i] = s == 0.0f && x[i] >= 0.0f ? 0.0f : dy[i] * (powf(s, x[i]) * logf(s));
  });
}

void pow(int, const float* a, const float* b, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) { out[i] = powf(a[i], b[i]); });
}

}  // namespace gpumat::host
