// The function table every device implements (host: src/host/*.cpp, CUDA: src/cuda/*.cu), after
// CMU needle's backends: kernels see pointers and sizes only; shapes and checks live in ops.cpp.
// `dev` is the CUDA ordinal (ignored on the host). CUDA entries launch asynchronously on the
// device's stream and check the launch; host entries run synchronously.
#pragma once

#include <cstdint>

#include "gpumat/device.h"

namespace gpumat {

struct Backend {
  // out is (n,)
  void (*array_set)(int dev, float* out, int64_t n, float value);
  // in is (n_in,), out is (n_out,) with n_out a multiple of n_in: out[i] = in[i % n_in]
  void (*broadcast_to)(int dev, const float* in, int64_t n_in, float* out, int64_t n_out);
  // in is (rows, cols), out is (cols,): column sums
  void (*reduce_sum_axis_zero)(int dev, const float* in, int64_t rows, int64_t cols, float* out);
  // a, b, out are (n,)
  void (*add)(int dev, const float* a, const float* b, float* out, int64_t n);
  void (*multiply)(int dev, const float* a, const float* b, float* out, int64_t n);
  void (*add_const)(int dev, const float* in, float value, float* out, int64_t n);
  void (*multiply_const)(int dev, const float* in, float value, float* out, int64_t n);
  // c is (m, n); a is (m, k) or (k, m) when trans_a; b is (k, n) or (n, k) when trans_b
  void (*matmul)(int dev, const float* a, bool trans_a, const float* b, bool trans_b, float* c,
                 int64_t m, int64_t n, int64_t k);
  // in, grad, out are (n,)
  void (*relu)(int dev, const float* in, float* out, int64_t n);
  void (*relu_gradient)(int dev, const float* in, const float* grad, float* out, int64_t n);
  // in, out are (rows, cols)
  void (*softmax)(int dev, const float* in, float* out, int64_t rows, int64_t cols);
  // logits, labels are (rows, cols); out is (1,)
  void (*softmax_cross_entropy)(int dev, const float* logits, const float* labels, float* out,
                                int64_t rows, int64_t cols);
  // in is (rows, cols), out is (cols, rows)
  void (*transpose)(int dev, const float* in, float* out, int64_t rows, int64_t cols);
  // out is (n,)
  void (*random_uniform)(int dev, float* out, int64_t n, float low, float high, uint64_t seed);
  void (*random_normal)(int dev, float* out, int64_t n, float mean, float stddev, uint64_t seed);
  // x, y are (n,): y += alpha * x
  void (*axpy)(int dev, float alpha, const float* x, float* y, int64_t n);
  // src, dst are (n,)
  void (*copy)(int dev, const float* src, float* dst, int64_t n);
};

const Backend& host_backend();
#ifdef GPUMAT_WITH_CUDA
const Backend& cuda_backend();
#endif

// The backend for `device`; throws CudaError for a CUDA device in a build without CUDA.
const Backend& backend_for(const Device& device);

}  // namespace gpumat
