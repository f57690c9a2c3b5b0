// CUDA pooling family, geometry in PoolShape (../backend.h). Host reference: ../host/pool.cpp.
// x, dx are (planes, H, W) and y, dy are (planes, OH, OW), planes = N*C.
//   max_pool2d_kernel:          one thread per output: max over its window (padding ignored)
//   max_pool2d_gradient_kernel: one thread per dx element: sums, in (oh, ow) order, dy of the
//                               windows covering it whose argmax it is (recomputed from x)
//   avg_pool2d_kernel:          one thread per output: window sum / (KH*KW) (padding counts as 0)
//   avg_pool2d_gradient_kernel: one thread per dx element: sum of dy over the covering windows
//                               / (KH*KW)
//   adaptive_avg_pool2d_kernel:          one thread per output: the mean of its adaptive window
//   adaptive_avg_pool2d_gradient_kernel: one thread per dx element: sum of dy / area over the
//                                        adaptive windows covering it
// The gradients are gathers, not scatters: no atomics, deterministic, and summed in the same
// order as the host's loops, so both devices agree. Recomputing the argmax (rather than storing
// indices in the forward pass) keeps max_pool2d a one-output op; it costs one window scan per
// covering window, ceil(K/S)^2 windows (one for the usual K = S = 2).
// NOTE: the argmax (ties, NaN) and the window spans are ../window.h's, shared with the host.
// Grid-stride loops, kBlockSize threads, grid from grid_for().
#include "../window.h"
#include "common.cuh"
#include "kernels.cuh"

namespace gpumat::GPUMAT_CUDA_NS {

// ---------------------------------------------------------------------------- kernels

// x is (planes, H, W), y is (planes, OH, OW)
__global__ void max_pool2d_kernel(const float* __restrict__ x, float* __restrict__ y, PoolShape s) {
  const int64_t total = s.planes * s.oh * s.ow;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t ow = idx % s.ow, t = idx / s.ow, oh = t % s.oh, p = t / s.oh;
    const float* plane = x + p * s.h * s.w;
    y[idx] = plane[window::pool_argmax(plane, s, oh, ow)];
  }
}

// x, dx are (planes, H, W), dy is (planes, OH, OW)
__global__ void max_pool2d_gradient_kernel(const float* __restrict__ x, const float* __restrict__ dy,
                                           float* __restrict__ dx, PoolShape s) {
  const int64_t total = s.planes * s.h * s.w;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t iw = idx % s.w, t = idx / s.w, ih = t % s.h, p = t / s.h;
    const float* plane = x + p * s.h * s.w;
    const float* g = dy + p * s.oh * s.ow;
    const int64_t self = ih * s.w + iw;
    int64_t oh_lo, oh_hi, ow_lo, ow_hi;
    window::covering_outputs<int64_t>(ih, s.kh, s.stride_h, s.pad_h, s.oh, &oh_lo, &oh_hi);
    window::covering_outputs<int64_t>(iw, s.kw, s.stride_w, s.pad_w, s.ow, &ow_lo, &ow_hi);
    float sum = 0.0f;
    for (int64_t oh = oh_lo; oh <= oh_hi; ++oh)
      for (int64_t ow = ow_lo; ow <= ow_hi; ++ow)
        if (window::pool_argmax(plane, s, oh, ow) == self) sum += g[oh * s.ow + ow];
    dx[idx] = sum;
  }
}

// x is (planes, H, W), y is (planes, OH, OW)
__global__ void avg_pool2d_kernel(const float* __restrict__ x, float* __restrict__ y, PoolShape s,
                                  float inv_area) {
  const int64_t total = s.planes * s.oh * s.ow;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t ow = idx % s.ow, t = idx / s.ow, oh = t % s.oh, p = t / s.oh;
    const float* plane = x + p * s.h * s.w;
    int64_t h_lo, h_hi, w_lo, w_hi;
    window::input_span(oh, s.kh, s.stride_h, s.pad_h, s.h, &h_lo, &h_hi);
    window::input_span(ow, s.kw, s.stride_w, s.pad_w, s.w, &w_lo, &w_hi);
    float sum = 0.0f;
    for (int64_t ih = h_lo; ih < h_hi; ++ih)
      for (int64_t iw = w_lo; iw < w_hi; ++iw) sum += plane[ih * s.w + iw];
    y[idx] = sum * inv_area;
  }
}

// dy is (planes, OH, OW), dx is (planes, H, W)
__global__ void avg_pool2d_gradient_kernel(const float* __restrict__ dy, float* __restrict__ dx, PoolShape s,
                                           float inv_area) {
  const int64_t total = s.planes * s.h * s.w;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t iw = idx % s.w, t = idx / s.w, ih = t % s.h, p = t / s.h;
    const float* g = dy + p * s.oh * s.ow;
    int64_t oh_lo, oh_hi, ow_lo, ow_hi;
    window::covering_outputs<int64_t>(ih, s.kh, s.stride_h, s.pad_h, s.oh, &oh_lo, &oh_hi);
    window::covering_outputs<int64_t>(iw, s.kw, s.stride_w, s.pad_w, s.ow, &ow_lo, &ow_hi);
    float sum = 0.0f;
    for (int64_t oh = oh_lo; oh <= oh_hi; ++oh)
      for (int64_t ow = ow_lo; ow <= ow_hi; ++ow) sum += g[oh * s.ow + ow];
    dx[idx] = sum * inv_area;
  }
}

// x is (planes, H, W), y is (planes, OH, OW); the windows are window.h's adaptive spans
__global__ void adaptive_avg_pool2d_kernel(const float* __restrict__ x, float* __restrict__ y, PoolShape s) {
  const int64_t total = s.planes * s.oh * s.ow;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t ow = idx % s.ow, t = idx / s.ow, oh = t % s.oh, p = t / s.oh;
    const float* plane = x + p * s.h * s.w;
    int64_t h_lo, h_hi, w_lo, w_hi;
    window::adaptive_span(oh, s.h, s.oh, &h_lo, &h_hi);
    window::adaptive_span(ow, s.w, s.ow, &w_lo, &w_hi);
    float sum = 0.0f;
    for (int64_t ih = h_lo; ih < h_hi; ++ih)
      for (int64_t iw = w_lo; iw < w_hi; ++iw) sum += plane[ih * s.w + iw];
    y[idx] = sum / static_cast<float>((h_hi - h_lo) * (w_hi - w_lo));
  }
}

// dy is (planes, OH, OW), dx is (planes, H, W)
__global__ void adaptive_avg_pool2d_gradient_kernel(const float* __restrict__ dy, float* __restrict__ dx,
                                                    PoolShape s) {
  const int64_t total = s.planes * s.h * s.w;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t iw = idx % s.w, t = idx / s.w, ih = t % s.h, p = t / s.h;
    const float* g = dy + p * s.oh * s.ow;
    int64_t oh_lo, oh_hi, ow_lo, ow_hi;
    window::adaptive_covering(ih, s.h, s.oh, &oh_lo, &oh_hi);
    window::adaptive_covering(iw, s.w, s.ow, &ow_lo, &ow_hi);
    float sum = 0.0f;
    for (int64_t oh = oh_lo; oh <= oh_hi; ++oh) {
      int64_t h_lo, h_hi;
      window::adaptive_span(oh, s.h, s.oh, &h_lo, &h_hi);
      if (ih < h_lo || ih >= h_hi) continue;
      for (int64_t ow = ow_lo; ow <= ow_hi; ++ow) {
        int64_t w_lo, w_hi;
        window::adaptive_span(ow, s.w, s.ow, &w_lo, &w_hi);
        if (iw < w_lo || iw >= w_hi) continue;
        sum += g[oh * s.ow + ow] / static_cast<float>((h_hi - h_lo) * (w_hi - w_lo));
      }
    }
    dx[idx] = sum;
  }
}

// ---------------------------------------------------------------------------- launchers

void max_pool2d(int dev, const float* x, float* y, const PoolShape& s) {
  cudaStream_t stream = activate(dev);
  launch<max_pool2d_kernel>("max_pool2d", grid_for(s.planes * s.oh * s.ow, kBlockSize), kBlockSize, 0, stream,
                            x, y, s);
}

void max_pool2d_gradient(int dev, const float* x, const float* dy, float* dx, const PoolShape& s) {
  cudaStream_t stream = activate(dev);
  launch<max_pool2d_gradient_kernel>("max_pool2d_gradient", grid_for(s.planes * s.h * s.w, kBlockSize),
                                     kBlockSize, 0, stream, x, dy, dx, s);
}

void avg_pool2d(int dev, const float* x, float* y, const PoolShape& s) {
  cudaStream_t stream = activate(dev);
  const float inv_area = 1.0f / static_cast<float>(s.kh * s.kw);
  launch<avg_pool2d_kernel>("avg_pool2d", grid_for(s.planes * s.oh * s.ow, kBlockSize), kBlockSize, 0, stream,
                            x, y, s, inv_area);
}

void avg_pool2d_gradient(int dev, const float* dy, float* dx, const PoolShape& s) {
  cudaStream_t stream = activate(dev);
  const float inv_area = 1.0f / static_cast<float>(s.kh * s.kw);
  launch<avg_pool2d_gradient_kernel>("avg_pool2d_gradient", grid_for(s.planes * s.h * s.w, kBlockSize),
                                     kBlockSize, 0, stream, dy, dx, s, inv_area);
}

void adaptive_avg_pool2d(int dev, const float* x, float* y, const PoolShape& s) {
  cudaStream_t stream = activate(dev);
  launch<adaptive_avg_pool2d_kernel>("adaptive_avg_pool2d", grid_for(s.planes * s.oh * s.ow, kBlockSize),
                                     kBlockSize, 0, stream, x, y, s);
}

void adaptive_avg_pool2d_gradient(int dev, const float* dy, float* dx, const PoolShape& s) {
  cudaStream_t stream = activate(dev);
  launch<adaptive_avg_pool2d_gradient_kernel>("adaptive_avg_pool2d_gradient",
                                              grid_for(s.planes * s.h * s.w, kBlockSize), kBlockSize, 0,
                                              stream, dy, dx, s);
}

}  // namespace gpumat::GPUMAT_CUDA_NS
