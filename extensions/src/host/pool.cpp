// Host pooling family (the reference for ../cuda/pool.cu), geometry in PoolShape (../backend.h):
// x, dx are (planes, H, W) and y, dy are (planes, OH, OW), planes = N*C; window (oh, ow) covers
// rows oh*stride_h - pad_h + [0, KH) and columns ow*stride_w - pad_w + [0, KW).
//   max_pool2d:          y = max over the window's elements of x (padding is ignored)
//   max_pool2d_gradient: dx[argmax of window] += dy[window], in row-major window order
//   avg_pool2d:          y = sum of the window's elements of x / (KH*KW) (padding counts as 0)
//   avg_pool2d_gradient: dx = sum over the windows covering the element of dy / (KH*KW)
//   adaptive_avg_pool2d (and its gradient): PyTorch's adaptive windows, rows
//     [floor(oh H / OH), ceil((oh + 1) H / OH)) and columns likewise (window.h), mean over each
// NOTE: the argmax (ties, NaN) and the window spans are ../window.h's, shared with CUDA.
// Parallel over planes; each plane is written by one thread, so the scatter needs no atomics.
#include <algorithm>

#include "../backend.h"
#include "../window.h"
#include "kernels.h"
#include "parallel.h"

namespace gpumat::host {

void max_pool2d(int, const float* x, float* y, const PoolShape& s) {
  parallel_for(s.planes, s.planes * s.oh * s.ow * s.kh * s.kw, [&](int64_t p) {
    const float* plane = x + p * s.h * s.w;
    float* out = y + p * s.oh * s.ow;
    for (int64_t oh = 0; oh < s.oh; ++oh)
      for (int64_t ow = 0; ow < s.ow; ++ow)
        out[oh * s.ow + ow] = plane[window::pool_argmax(plane, s, oh, ow)];
  });
}

void max_pool2d_gradient(int, const float* x, const float* dy, float* dx, const PoolShape& s) {
  parallel_for(s.planes, s.planes * s.oh * s.ow * s.kh * s.kw, [&](int64_t p) {
    const float* plane = x + p * s.h * s.w;
    const float* g = dy + p * s.oh * s.ow;
    float* out = dx + p * s.h * s.w;
    std::fill(out, out + s.h * s.w, 0.0f);
    for (int64_t oh = 0; oh < s.oh; ++oh)
      for (int64_t ow = 0; ow < s.ow; ++ow) out[window::pool_argmax(plane, s, oh, ow)] += g[oh * s.ow + ow];
  });
}

void avg_pool2d(int, const float* x, float* y, const PoolShape& s) {
  const float inv_area = 1.0f / static_cast<float>(s.kh * s.kw);
  parallel_for(s.planes, s.planes * s.oh * s.ow * s.kh * s.kw, [&](int64_t p) {
    const float* plane = x + p * s.h * s.w;
    float* out = y + p * s.oh * s.ow;
    for (int64_t oh = 0; oh < s.oh; ++oh) {
      int64_t h_lo, h_hi;
      window::input_span(oh, s.kh, s.stride_h, s.pad_h, s.h, &h_lo, &h_hi);
      for (int64_t ow = 0; ow < s.ow; ++ow) {
        int64_t w_lo, w_hi;
        window::input_span(ow, s.kw, s.stride_w, s.pad_w, s.w, &w_lo, &w_hi);
        float sum = 0.0f;
        for (int64_t ih = h_lo; ih < h_hi; ++ih)
          for (int64_t iw = w_lo; iw < w_hi; ++iw) sum += plane[ih * s.w + iw];
        out[oh * s.ow + ow] = sum * inv_area;
      }
    }
  });
}

// A gather, like col2im: element (ih, iw) is covered by the windows with
// 0 <= ih + pad_h - oh*stride_h < KH (and likewise for columns).
void avg_pool2d_gradient(int, const float* dy, float* dx, const PoolShape& s) {
  const float inv_area = 1.0f / static_cast<float>(s.kh * s.kw);
  parallel_for(s.planes, s.planes * s.h * s.w, [&](int64_t p) {
    const float* g = dy + p * s.oh * s.ow;
    float* out = dx + p * s.h * s.w;
    for (int64_t ih = 0; ih < s.h; ++ih) {
      int64_t oh_lo, oh_hi;
      window::covering_outputs<int64_t>(ih, s.kh, s.stride_h, s.pad_h, s.oh, &oh_lo, &oh_hi);
      for (int64_t iw = 0; iw < s.w; ++iw) {
        int64_t ow_lo, ow_hi;
        window::covering_outputs<int64_t>(iw, s.kw, s.stride_w, s.pad_w, s.ow, &ow_lo, &ow_hi);
        float sum = 0.0f;
        for (int64_t oh = oh_lo; oh <= oh_hi; ++oh)
          for (int64_t ow = ow_lo; ow <= ow_hi; ++ow) sum += g[oh * s.ow + ow];
        out[ih * s.w + iw] = sum * inv_area;
      }
    }
  });
}

void adaptive_avg_pool2d(int, const float* x, float* y, const PoolShape& s) {
  parallel_for(s.planes, s.planes * s.h * s.w, [&](int64_t p) {
    const float* plane = x + p * s.h * s.w;
    float* out = y + p * s.oh * s.ow;
    for (int64_t oh = 0; oh < s.oh; ++oh) {
      int64_t h_lo, h_hi;
      window::adaptive_span(oh, s.h, s.oh, &h_lo, &h_hi);
      for (int64_t ow = 0; ow < s.ow; ++ow) {
        int64_t w_lo, w_hi;
        window::adaptive_span(ow, s.w, s.ow, &w_lo, &w_hi);
        float sum = 0.0f;
        for (int64_t ih = h_lo; ih < h_hi; ++ih)
          for (int64_t iw = w_lo; iw < w_hi; ++iw) sum += plane[ih * s.w + iw];
        out[oh * s.ow + ow] = sum / static_cast<float>((h_hi - h_lo) * (w_hi - w_lo));
      }
    }
  });
}

// A gather in the CUDA kernel's order: each element sums dy / area of the windows covering it.
void adaptive_avg_pool2d_gradient(int, const float* dy, float* dx, const PoolShape& s) {
  parallel_for(s.planes, s.planes * s.h * s.w, [&](int64_t p) {
    const float* g = dy + p * s.oh * s.ow;
    float* out = dx + p * s.h * s.w;
    for (int64_t ih = 0; ih < s.h; ++ih) {
      int64_t oh_lo, oh_hi;
      window::adaptive_covering(ih, s.h, s.oh, &oh_lo, &oh_hi);
      for (int64_t iw = 0; iw < s.w; ++iw) {
        int64_t ow_lo, ow_hi;
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
        out[ih * s.w + iw] = sum;
      }
    }
  });
}

}  // namespace gpumat::host
