// Host elementwise kernels (the reference for ../cuda/elementwise.cu): array_set, add, multiply,
// divide, eq, add_const, multiply_const, axpy, copy, exp, log, sqrt, sqrt_gradient = dy / (2 y). All
// arrays are (n,); `out` may alias an input. divide is IEEE division (x / 0 = +-inf, 0 / 0 = NaN); eq is 1
// where a == b, else 0 (IEEE equality: NaN equals nothing). exp and log are the C library's float functions
// (IEEE special values: exp overflows to inf and underflows to 0, log(0) = -inf, log(x < 0) = NaN).
#include <cmath>
#include <cstring>

#include "kernels.h"
#include "parallel.h"

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

void exp(int, const float* in, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) { out[i] = std::exp(in[i]); });
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

void copy(int, const float* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

}  // namespace gpumat::host
