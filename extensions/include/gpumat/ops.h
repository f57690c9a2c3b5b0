// gpumat::ops — one function per kernel, outputs passed in (the seed assignment's style, which lets
// the executor own memory). Every function checks devices, shapes and aliasing here in host C++ and
// throws ShapeError naming the op and the shapes, so no misuse can reach a kernel with bad sizes;
// it then dispatches to the device's Backend (src/backend.h).
//
// All arrays are float32, row-major, contiguous. Elementwise ops allow `out` to be an input
// (in place); the others throw ShapeError when `out` is one of their inputs.
#pragma once

#include <cstdint>

#include "gpumat/gpu_matrix.h"

namespace gpumat::ops {

// arr[...] = value.
void array_set(GpuMatrix& arr, float value);

// out = in repeated over leading axes. in's shape, after dropping leading 1s, must be a suffix of
// out's shape: (200,300)->(130,200,300), (1,10)->(7,10), (10,)->(7,10).
void broadcast_to(const GpuMatrix& in, GpuMatrix& out);

// Sums over leading axes. out's shape must be a suffix of in's shape (leading 1s in out are
// allowed): (500,200,100)->(200,100), (4,5,6)->(6,), (8,10)->(1,10).
void reduce_sum_axis_zero(const GpuMatrix& in, GpuMatrix& out);

// Elementwise, all shapes equal.
void add(const GpuMatrix& a, const GpuMatrix& b, GpuMatrix& out);
void multiply(const GpuMatrix& a, const GpuMatrix& b, GpuMatrix& out);
void add_const(const GpuMatrix& in, float value, GpuMatrix& out);
void multiply_const(const GpuMatrix& in, float value, GpuMatrix& out);

// c (M,N) = op(a) @ op(b), op(x) = x^T when the flag is set; a is (M,K) or (K,M) when trans_a,
// b is (K,N) or (N,K) when trans_b. K = 0 gives zeros.
void matmul(const GpuMatrix& a, bool trans_a, const GpuMatrix& b, bool trans_b, GpuMatrix& c);

// out = max(in, 0); relu_gradient: out = grad where in > 0, else 0 (the subgradient at 0 is 0).
void relu(const GpuMatrix& in, GpuMatrix& out);
void relu_gradient(const GpuMatrix& in, const GpuMatrix& grad, GpuMatrix& out);

// Row-wise softmax of a 2-D (rows, cols) array, max-subtracted for stability.
void softmax(const GpuMatrix& in, GpuMatrix& out);

// out (1,) = mean over rows of -sum_c labels[r,c] * log_softmax(logits)[r,c]; logits and labels
// are (rows, cols) with rows >= 1. log_softmax uses the log-sum-exp trick.
void softmax_cross_entropy(const GpuMatrix& logits, const GpuMatrix& labels, GpuMatrix& out);

// 2-D transpose: in (rows, cols) -> out (cols, rows).
void transpose(const GpuMatrix& in, GpuMatrix& out);

// Counter-based random fills: element i depends only on (seed, i), so host and CUDA give the same
// values for the same seed. uniform in [low, high); normal through Box-Muller.
void random_uniform(GpuMatrix& out, float low, float high, uint64_t seed);
void random_normal(GpuMatrix& out, float mean, float stddev, uint64_t seed);

// y += alpha * x (in place), same shapes.
void axpy(float alpha, const GpuMatrix& x, GpuMatrix& y);

// dst = src, same shape, same device.
void copy(const GpuMatrix& src, GpuMatrix& dst);

}  // namespace gpumat::ops
