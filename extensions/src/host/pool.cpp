// Host pooling family (the reference for ../cuda/pool.cu), geometry in PoolShape (../backend.h):
// x, dx are (planes, H, W) and y, dy are (planes, OH, OW), planes = N*C; window (oh, ow) covers
// rows oh*stride_h - pad_h + [0, KH) and columns ow*stride_w - pad_w + [0, KW).
//   max_pool2d:          y = max over the window's elements of x (padding is ignored)
//   max_pool2d_gradient: dx[argmax of window] += dy[window], in row-major window order
//   avg_pool2d:          y = sum of the window's elements of x / (KH*KW) (padding counts as 0)
//   avg_pool2d_gradient: dx = sum over the windows covering the element of dy / (KH*KW)
// NOTE: the argmax is the first maximum in row-major window order (ties: the first wins, so the
// gradient goes to exactly one element); a NaN wins over numbers and the first NaN over later
// ones, so NaN propagates as in PyTorch. Windows always hold an element of x (pad <= kernel / 2).
// Parallel over planes; each plane is written by one thread, so the scatter needs no atomics.
#include <algorithm>

#include "../backend.h"
#include "kernels.h"
#include "parallel.h"

namespace gpumat::host {

namespace {

// Index (ih * W + iw) in the plane of the argmax of window (oh, ow).
inline int64_t window_argmax(const float* plane, const PoolShape& s, int64_t oh, int64_t ow) {
  const int64_t h0 = oh * s.stride_h - s.pad_h, w0 = ow * s.stride_w - s.pad_w;
  const int64_t h_lo = std::max<int64_t>(h0, 0), h_hi = std::min(h0 + s.kh, s.h);
  const int64_t w_lo = std::max<int64_t>(w0, 0), w_hi = std::min(w0 + s.kw, s.w);
  int64_t best_i = h_lo * s.w + w_lo;
  float best = plane[best_i];
  for (int64_t ih = h_lo; ih < h_hi; ++ih) {
    for (int64_t iw = w_lo; iw < w_hi; ++iw) {
      const float v = plane[ih * s.w + iw];
      if (v > best || (v != v && best == best)) {
        best = v;
        best_i = ih * s.w + iw;
      }
    }
  }
  return best_i;
}

}  // namespace

void max_pool2d(int, const float* x, float* y, const PoolShape& s) {
#pragma omp parallel for if (s.planes * s.oh * s.ow * s.kh * s.kw >= kParallelMin)
  for (int64_t p = 0; p < s.planes; ++p) {
    const float* plane = x + p * s.h * s.w;
    float* out = y + p * s.oh * s.ow;
    for (int64_t oh = 0; oh < s.oh; ++oh)
      for (int64_t ow = 0; ow < s.ow; ++ow) out[oh * s.ow + ow] = plane[window_argmax(plane, s, oh, ow)];
  }
}

void max_pool2d_gradient(int, const float* x, const float* dy, float* dx, const PoolShape& s) {
#pragma omp parallel for if (s.planes * s.oh * s.ow * s.kh * s.kw >= kParallelMin)
  for (int64_t p = 0; p < s.planes; ++p) {
    const float* plane = x + p * s.h * s.w;
    const float* g = dy + p * s.oh * s.ow;
    float* out = dx + p * s.h * s.w;
    std::fill(out, out + s.h * s.w, 0.0f);
    for (int64_t oh = 0; oh < s.oh; ++oh)
      for (int64_t ow = 0; ow < s.ow; ++ow) out[window_argmax(plane, s, oh, ow)] += g[oh * s.ow + ow];
  }
}

void avg_pool2d(int, const float* x, float* y, const PoolShape& s) {
  const float inv_area = 1.0f / static_cast<float>(s.kh * s.kw);
#pragma omp parallel for if (s.planes * s.oh * s.ow * s.kh * s.kw >= kParallelMin)
  for (int64_t p = 0; p < s.planes; ++p) {
    const float* plane = x + p * s.h * s.w;
    float* out = y + p * s.oh * s.ow;
    for (int64_t oh = 0; oh < s.oh; ++oh) {
      const int64_t h0 = oh * s.stride_h - s.pad_h;
      const int64_t h_lo = std::max<int64_t>(h0, 0), h_hi = std::min(h0 + s.kh, s.h);
      for (int64_t ow = 0; ow < s.ow; ++ow) {
        const int64_t w0 = ow * s.stride_w - s.pad_w;
        const int64_t w_lo = std::max<int64_t>(w0, 0), w_hi = std::min(w0 + s.kw, s.w);
        float sum = 0.0f;
        for (int64_t ih = h_lo; ih < h_hi; ++ih)
          for (int64_t iw = w_lo; iw < w_hi; ++iw) sum += plane[ih * s.w + iw];
        out[oh * s.ow + ow] = sum * inv_area;
      }
    }
  }
}

// A gather, like col2im: element (ih, iw) is covered by the windows with
// 0 <= ih + pad_h - oh*stride_h < KH (and likewise for columns).
void avg_pool2d_gradient(int, const float* dy, float* dx, const PoolShape& s) {
  const float inv_area = 1.0f / static_cast<float>(s.kh * s.kw);
#pragma omp parallel for if (s.planes * s.h * s.w >= kParallelMin)
  for (int64_t p = 0; p < s.planes; ++p) {
    const float* g = dy + p * s.oh * s.ow;
    float* out = dx + p * s.h * s.w;
    for (int64_t ih = 0; ih < s.h; ++ih) {
      const int64_t hp = ih + s.pad_h;
      const int64_t oh_lo = hp < s.kh ? 0 : (hp - s.kh) / s.stride_h + 1;
      const int64_t oh_hi = std::min(hp / s.stride_h, s.oh - 1);
      for (int64_t iw = 0; iw < s.w; ++iw) {
        const int64_t wp = iw + s.pad_w;
        const int64_t ow_lo = wp < s.kw ? 0 : (wp - s.kw) / s.stride_w + 1;
        const int64_t ow_hi = std::min(wp / s.stride_w, s.ow - 1);
        float sum = 0.0f;
        for (int64_t oh = oh_lo; oh <= oh_hi; ++oh)
          for (int64_t ow = ow_lo; ow <= ow_hi; ++ow) sum += g[oh * s.ow + ow];
        out[ih * s.w + iw] = sum * inv_area;
      }
    }
  }
}

}  // namespace gpumat::host
