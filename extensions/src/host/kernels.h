// Host (CPU) kernels: one function per Backend entry, same signatures (see ../backend.h).
#pragma once

#include <cstdint>

#include "../backend.h"  // ConvShape, PoolShape

namespace gpumat::host {

// elementwise.cpp
void array_set(int dev, float* out, int64_t n, float value);
void add(int dev, const float* a, const float* b, float* out, int64_t n);
void multiply(int dev, const float* a, const float* b, float* out, int64_t n);
void add_const(int dev, const float* in, float value, float* out, int64_t n);
void multiply_const(int dev, const float* in, float value, float* out, int64_t n);
void relu(int dev, const float* in, float* out, int64_t n);
void relu_gradient(int dev, const float* in, const float* grad, float* out, int64_t n);
void axpy(int dev, float alpha, const float* x, float* y, int64_t n);
void copy(int dev, const float* src, float* dst, int64_t n);
// layout.cpp
void broadcast_to(int dev, const float* in, int64_t n_in, float* out, int64_t n_out);
void transpose(int dev, const float* in, float* out, int64_t rows, int64_t cols);
// reduce.cpp
void reduce_sum_axis_zero(int dev, const float* in, int64_t rows, int64_t cols, float* out);
// matmul.cpp
void matmul(int dev, const float* a, bool trans_a, const float* b, bool trans_b, float* c, int64_t m,
            int64_t n, int64_t k);
// softmax.cpp
void softmax(int dev, const float* in, float* out, int64_t rows, int64_t cols);
void softmax_cross_entropy(int dev, const float* logits, const float* labels, float* out, int64_t rows,
                           int64_t cols);
// random.cpp
void random_uniform(int dev, float* out, int64_t n, float low, float high, uint64_t seed);
void random_normal(int dev, float* out, int64_t n, float mean, float stddev, uint64_t seed);
// conv.cpp
void conv2d(int dev, const float* x, const float* w, float* y, const ConvShape& s);
void conv2d_gradient_input(int dev, const float* dy, const float* w, float* dx, const ConvShape& s);
void conv2d_gradient_filter(int dev, const float* x, const float* dy, float* dw, const ConvShape& s);
void add_channel_bias(int dev, const float* in, const float* bias, float* out, int64_t outer,
                      int64_t channels, int64_t inner);
void reduce_sum_channels(int dev, const float* in, float* out, int64_t outer, int64_t channels,
                         int64_t inner);
// pool.cpp
void max_pool2d(int dev, const float* x, float* y, const PoolShape& s);
void max_pool2d_gradient(int dev, const float* x, const float* dy, float* dx, const PoolShape& s);
void avg_pool2d(int dev, const float* x, float* y, const PoolShape& s);
void avg_pool2d_gradient(int dev, const float* dy, float* dx, const PoolShape& s);
// loss.cpp
void mse_loss(int dev, const float* pred, const float* target, float* loss, int64_t n);
void mae_loss(int dev, const float* pred, const float* target, float* loss, int64_t n);
void mse_loss_gradient(int dev, const float* pred, const float* target, const float* dloss, float* out_grad,
                       int64_t n);
void mae_loss_gradient(int dev, const float* pred, const float* target, const float* dloss, float* out_grad,
                       int64_t n);
// optim.cpp
void adam_update(int dev, float* param, const float* grad, float* m, float* v, int64_t n, float lr,
                 float beta1, float beta2, float eps, float bc1, float bc2);

// softmax.cpp / softmax.cu (any axis)
void softmax_axis(int dev, const float* in, float* out, int64_t outer, int64_t n, int64_t inner, bool log);
void softmax_axis_gradient(int dev, const float* y, const float* dy, float* dx, int64_t outer, int64_t n,
                           int64_t inner, bool log);
// loss: nll
void nll_loss(int dev, const float* log_probs, const float* target, float* loss, int64_t rows, int64_t cols);
void nll_loss_gradient(int dev, const float* target, const float* dloss, float* out_grad, int64_t rows,
                       int64_t cols);
// activation
void tanh(int dev, const float* in, float* out, int64_t n);
void sigmoid(int dev, const float* in, float* out, int64_t n);
void tanh_gradient(int dev, const float* y, const float* dy, float* out, int64_t n);
void sigmoid_gradient(int dev, const float* y, const float* dy, float* out, int64_t n);
void dropout(int dev, const float* in, float* out, int64_t n, float p, float scale, uint64_t seed);
// reduce_axis
void reduce_axis(int dev, const float* in, float* out, int64_t outer, int64_t n, int64_t inner, int kind);
void broadcast_axis(int dev, const float* in, float* out, int64_t outer, int64_t n, int64_t inner,
                    float scale);
void reduce_max_gradient(int dev, const float* x, const float* y, const float* dy, float* dx, int64_t outer,
                         int64_t n, int64_t inner);

// fused (issue 16)
void matmul_bias(int dev, const float* a, bool trans_a, const float* b, bool trans_b, const float* bias,
                 float* c, int64_t m, int64_t n, int64_t k, bool relu);
void relu_bias_gradient(int dev, const float* y, const float* dy, float* dz, float* dbias, int64_t rows,
                        int64_t cols);
void softmax_cross_entropy_with_gradient(int dev, const float* logits, const float* labels, float* loss,
                                         float* grad, int64_t rows, int64_t cols);
void sgd_update_multi(int dev, float* const* params, const float* const* grads, const int64_t* sizes,
                      int count, float lr);
void momentum_sgd_update_multi(int dev, float* const* params, const float* const* grads,
                               float* const* velocities, const int64_t* sizes, int count, float lr,
                               float momentum);
void adam_update_multi(int dev, float* const* params, const float* const* grads, float* const* m,
                       float* const* v, const int64_t* sizes, int count, float lr, float beta1, float beta2,
                       float eps, float bc1, float bc2);

}  // namespace gpumat::host
