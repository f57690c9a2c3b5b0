// The function table every device implements (host: src/host/*.cpp, CUDA: src/cuda/*.cu), after
// CMU needle's backends: kernels see pointers and sizes only; shapes and checks live in ops.cpp.
// `dev` is the CUDA ordinal (ignored on the host). CUDA entries launch asynchronously on the
// device's stream and check the launch; host entries run synchronously.
#pragma once

#include <cstdint>

#include "gpumat/device.h"

namespace gpumat {

// Geometry of a 2-D convolution (cross-correlation, zero padding): x is (n, c, h, w), the filter w
// is (f, c, kh, kw), y is (n, f, oh, ow) with oh = (h + 2*pad_h - kh) / stride_h + 1 (likewise ow).
// conv1d is the case h = kh = 1, stride_h = 1, pad_h = 0. `chunk` is the number of images whose
// im2col columns are built at once (1 <= chunk <= n), chosen by ops.cpp so the scratch buffers
// stay under the workspace limit (set_conv_workspace_limit).
struct ConvShape {
  int64_t n, c, h, w;
  int64_t f, kh, kw;
  int64_t stride_h, stride_w, pad_h, pad_w;
  int64_t oh, ow;
  int64_t chunk;
};

// Geometry of 2-D pooling over `planes` = N*C independent (h, w) planes: x is (planes, h, w), y is
// (planes, oh, ow) with oh = (h + 2*pad_h - kh) / stride_h + 1 (likewise ow). ops.cpp guarantees
// pad <= kernel / 2, so every window holds at least one element of x.
struct PoolShape {
  int64_t planes, h, w;
  int64_t kh, kw, stride_h, stride_w, pad_h, pad_w;
  int64_t oh, ow;
};

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
  void (*matmul)(int dev, const float* a, bool trans_a, const float* b, bool trans_b, float* c, int64_t m,
                 int64_t n, int64_t k);
  // in, grad, out are (n,)
  void (*relu)(int dev, const float* in, float* out, int64_t n);
  void (*relu_gradient)(int dev, const float* in, const float* grad, float* out, int64_t n);
  // in, out are (rows, cols)
  void (*softmax)(int dev, const float* in, float* out, int64_t rows, int64_t cols);
  // logits, labels are (rows, cols); out is (1,)
  void (*softmax_cross_entropy)(int dev, const float* logits, const float* labels, float* out, int64_t rows,
                                int64_t cols);
  // in is (rows, cols), out is (cols, rows)
  void (*transpose)(int dev, const float* in, float* out, int64_t rows, int64_t cols);
  // out is (n,)
  void (*random_uniform)(int dev, float* out, int64_t n, float low, float high, uint64_t seed);
  void (*random_normal)(int dev, float* out, int64_t n, float mean, float stddev, uint64_t seed);
  // x, y are (n,): y += alpha * x
  void (*axpy)(int dev, float alpha, const float* x, float* y, int64_t n);
  // src, dst are (n,)
  void (*copy)(int dev, const float* src, float* dst, int64_t n);

  // --- conv (src/*/conv.*): x (n, c, h, w), w (f, c, kh, kw), y (n, f, oh, ow); see ConvShape.
  // y = conv(x, w); dx = dL/dx from dy and w; dw = dL/dw from x and dy. Every output is fully
  // written (no accumulation into the caller's buffer).
  void (*conv2d)(int dev, const float* x, const float* w, float* y, const ConvShape& s);
  void (*conv2d_gradient_input)(int dev, const float* dy, const float* w, float* dx, const ConvShape& s);
  void (*conv2d_gradient_filter)(int dev, const float* x, const float* dy, float* dw, const ConvShape& s);
  // in, out are (outer, channels, inner), bias is (channels,): out = in + bias[channel]
  void (*add_channel_bias)(int dev, const float* in, const float* bias, float* out, int64_t outer,
                           int64_t channels, int64_t inner);
  // in is (outer, channels, inner), out is (channels,): sums over outer and inner
  void (*reduce_sum_channels)(int dev, const float* in, float* out, int64_t outer, int64_t channels,
                              int64_t inner);

  // --- pool (src/*/pool.*): x, dx are (planes, h, w); y, dy are (planes, oh, ow); see PoolShape.
  void (*max_pool2d)(int dev, const float* x, float* y, const PoolShape& s);
  void (*max_pool2d_gradient)(int dev, const float* x, const float* dy, float* dx, const PoolShape& s);
  void (*avg_pool2d)(int dev, const float* x, float* y, const PoolShape& s);
  void (*avg_pool2d_gradient)(int dev, const float* dy, float* dx, const PoolShape& s);

  // --- loss (src/*/loss.*): pred, target, out_grad are (n,) with n >= 1; loss and dloss are (1,).
  // loss = mean (pred - target)^2 or mean |pred - target|; the gradients with respect to pred
  // are dloss[0] * 2 (pred - target) / n and dloss[0] * sign(pred - target) / n.
  void (*mse_loss)(int dev, const float* pred, const float* target, float* loss, int64_t n);
  void (*mae_loss)(int dev, const float* pred, const float* target, float* loss, int64_t n);
  void (*mse_loss_gradient)(int dev, const float* pred, const float* target, const float* dloss,
                            float* out_grad, int64_t n);
  void (*mae_loss_gradient)(int dev, const float* pred, const float* target, const float* dloss,
                            float* out_grad, int64_t n);

  // --- optim (src/*/optim.*): param, grad, m, v are (n,). One Adam step (Kingma & Ba 2015,
  // Algorithm 1) with the bias corrections bc1 = 1 - beta1^t, bc2 = 1 - beta2^t precomputed.
  void (*adam_update)(int dev, float* param, const float* grad, float* m, float* v, int64_t n, float lr,
                      float beta1, float beta2, float eps, float bc1, float bc2);

  // --- layers (issue 11). Axis ops see the array as (outer, n, inner), the axis of length n in
  // the middle. softmax (src/*/softmax.*): in, out, y, dy, dx are (outer, n, inner); log selects
  // log_softmax. dx = y (dy - sum_n y dy) (softmax) or dy - exp(y) sum_n dy (log_softmax).
  void (*softmax_axis)(int dev, const float* in, float* out, int64_t outer, int64_t n, int64_t inner,
                       bool log);
  void (*softmax_axis_gradient)(int dev, const float* y, const float* dy, float* dx, int64_t outer, int64_t n,
                                int64_t inner, bool log);
  // loss (src/*/loss.*): log_probs, target, out_grad are (rows, cols), loss and dloss (1,):
  // loss = -sum target * log_probs / rows; out_grad = -dloss[0] / rows * target.
  void (*nll_loss)(int dev, const float* log_probs, const float* target, float* loss, int64_t rows,
                   int64_t cols);
  void (*nll_loss_gradient)(int dev, const float* target, const float* dloss, float* out_grad, int64_t rows,
                            int64_t cols);
  // activation (src/*/activation.*): every array is (n,); y is the forward output.
  void (*tanh)(int dev, const float* in, float* out, int64_t n);
  void (*sigmoid)(int dev, const float* in, float* out, int64_t n);
  void (*tanh_gradient)(int dev, const float* y, const float* dy, float* out, int64_t n);
  void (*sigmoid_gradient)(int dev, const float* y, const float* dy, float* out, int64_t n);
  // out = uniform01(seed, i) < p ? 0 : in * scale (../random.h), in and out (n,)
  void (*dropout)(int dev, const float* in, float* out, int64_t n, float p, float scale, uint64_t seed);
  // reduce_axis (src/*/reduce_axis.*): in (outer, n, inner) -> out (outer, inner); kind 0 sum,
  // 1 mean, 2 max. broadcast_axis: out (outer, n, inner) = scale * in (outer, inner).
  // reduce_max_gradient: x, dx (outer, n, inner), y = max, dy (outer, inner); ties share dy equally.
  void (*reduce_axis)(int dev, const float* in, float* out, int64_t outer, int64_t n, int64_t inner,
                      int kind);
  void (*broadcast_axis)(int dev, const float* in, float* out, int64_t outer, int64_t n, int64_t inner,
                         float scale);
  void (*reduce_max_gradient)(int dev, const float* x, const float* y, const float* dy, float* dx,
                              int64_t outer, int64_t n, int64_t inner);

  // --- fused kernels (issue 16), each equal to a sequence of the entries above.
  // c (m, n) = op(a) @ op(b) + bias (n,), then max(., 0) when relu (shapes as matmul).
  void (*matmul_bias)(int dev, const float* a, bool trans_a, const float* b, bool trans_b, const float* bias,
                      float* c, int64_t m, int64_t n, int64_t k, bool relu);
  // y, dy, dz are (rows, cols), dbias (cols,): dz = dy * (y > 0); dbias = column sums of dz
  // (deterministic). dz may alias dy.
  void (*relu_bias_gradient)(int dev, const float* y, const float* dy, float* dz, float* dbias, int64_t rows,
                             int64_t cols);
  // logits, labels, grad are (rows, cols), loss (1,): loss = softmax_cross_entropy; grad =
  // (softmax(logits) - labels) / rows.
  void (*softmax_cross_entropy_with_gradient)(int dev, const float* logits, const float* labels, float* loss,
                                              float* grad, int64_t rows, int64_t cols);
  // params[t] -= lr * grads[t], each (sizes[t],), for t < count: one launch per 32 tensors on CUDA.
  void (*sgd_update_multi)(int dev, float* const* params, const float* const* grads, const int64_t* sizes,
                           int count, float lr);
  // Momentum SGD (PyTorch's SGD(momentum) form): velocities[t] = momentum * velocities[t] + grads[t];
  // params[t] -= lr * velocities[t], each (sizes[t],), for t < count: one launch per 32 tensors on CUDA.
  void (*momentum_sgd_update_multi)(int dev, float* const* params, const float* const* grads,
                                    float* const* velocities, const int64_t* sizes, int count, float lr,
                                    float momentum);
  // adam_update above for every tensor t < count (params, grads, m, v (sizes[t],)), one launch per 32
  // tensors on CUDA.
  void (*adam_update_multi)(int dev, float* const* params, const float* const* grads, float* const* m,
                            float* const* v, const int64_t* sizes, int count, float lr, float beta1,
                            float beta2, float eps, float bc1, float bc2);
};

const Backend& host_backend();
#ifdef GPUMAT_WITH_CUDA
namespace cuda {
const Backend& backend();  // src/cuda/*.cu built by nvcc
}
#endif
namespace emu {
const Backend& backend();  // src/cuda/*.cu built by the host compiler against src/emu/
}

// The backend for `device`; throws CudaError for a CUDA device in a build without CUDA.
const Backend& backend_for(const Device& device);

}  // namespace gpumat
