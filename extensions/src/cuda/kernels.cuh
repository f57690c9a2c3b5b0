// CUDA launchers: one function per Backend entry, same signatures (see ../backend.h). Each makes
// its device current, launches on the device's stream, and checks the launch.
#pragma once

#include <cstdint>

namespace gpumat::cuda {

// elementwise.cu
void array_set(int dev, float* out, int64_t n, float value);
void add(int dev, const float* a, const float* b, float* out, int64_t n);
void multiply(int dev, const float* a, const float* b, float* out, int64_t n);
void add_const(int dev, const float* in, float value, float* out, int64_t n);
void multiply_const(int dev, const float* in, float value, float* out, int64_t n);
void relu(int dev, const float* in, float* out, int64_t n);
void relu_gradient(int dev, const float* in, const float* grad, float* out, int64_t n);
void axpy(int dev, float alpha, const float* x, float* y, int64_t n);
void copy(int dev, const float* src, float* dst, int64_t n);
// layout.cu
void broadcast_to(int dev, const float* in, int64_t n_in, float* out, int64_t n_out);
void transpose(int dev, const float* in, float* out, int64_t rows, int64_t cols);
// reduce.cu
void reduce_sum_axis_zero(int dev, const float* in, int64_t rows, int64_t cols, float* out);
// matmul.cu
void matmul(int dev, const float* a, bool trans_a, const float* b, bool trans_b, float* c, int64_t m,
            int64_t n, int64_t k);
// softmax.cu
void softmax(int dev, const float* in, float* out, int64_t rows, int64_t cols);
void softmax_cross_entropy(int dev, const float* logits, const float* labels, float* out, int64_t rows,
                           int64_t cols);
// random.cu
void random_uniform(int dev, float* out, int64_t n, float low, float high, uint64_t seed);
void random_normal(int dev, float* out, int64_t n, float mean, float stddev, uint64_t seed);

}  // namespace gpumat::cuda
