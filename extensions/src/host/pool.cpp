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
#include <cstdint>
#include <cstring>

#include "../backend.h"
#include "../window.h"
#include "kernels.h"
#include "parallel.h"

namespace gpumat::host {

namespace {

// 2x2 windows, stride 2, no padding: nearly every CNN's pooling, here in straight-line code (the
// generic loops cost 4-5x more per window). Every window lies inside the plane, windows do not
// overlap, and the argmax follows window::pool_argmax's rules exactly (row-major order, the first
// maximum wins, a NaN beats numbers and the first NaN wins).
bool is_2x2_stride_2(const PoolShape& s) {
  return s.kh == 2 && s.kw == 2 && s.stride_h == 2 && s.stride_w == 2 && s.pad_h == 0 && s.pad_w == 0;
}

// The index in [0, 4) of the argmax of (v0, v1, v2, v3), a window's elements in row-major order.
inline int argmax4(float v0, float v1, float v2, float v3) {
  float best = v0;
  int at = 0;
  const float v[3] = {v1, v2, v3};
  for (int i = 0; i < 3; ++i) {
    const bool take = v[i] > best || (v[i] != v[i] && best == best);
    best = take ? v[i] : best;
    at = take ? i + 1 : at;
  }
  return at;
}

}  // namespace

void max_pool2d(int, const float* x, float* y, const PoolShape& s) {
  if (is_2x2_stride_2(s)) {
    parallel_for(s.planes, s.planes * s.h * s.w, [&](int64_t p) {
      const float* plane = x + p * s.h * s.w;
      float* out = y + p * s.oh * s.ow;
      for (int64_t oh = 0; oh < s.oh; ++oh) {
        const float* r0 = plane + 2 * oh * s.w;
        const float* r1 = r0 + s.w;
        for (int64_t ow = 0; ow < s.ow; ++ow) {
          const float v[4] = {r0[2 * ow], r0[2 * ow + 1], r1[2 * ow], r1[2 * ow + 1]};
          out[oh * s.ow + ow] = v[argmax4(v[0], v[1], v[2], v[3])];
        }
      }
    });
    return;
  }
  parallel_for(s.planes, s.planes * s.oh * s.ow * s.kh * s.kw, [&](int64_t p) {
    const float* plane = x + p * s.h * s.w;
    float* out = y + p * s.oh * s.ow;
    for (int64_t oh = 0; oh < s.oh; ++oh)
      for (int64_t ow = 0; ow < s.ow; ++ow)
        out[oh * s.ow + ow] = plane[window::pool_argmax(plane, s, oh, ow)];
  });
}

void max_pool2d_gradient(int, const float* x, const float* dy, float* dx, const PoolShape& s) {
  if (is_2x2_stride_2(s)) {
    // Each covered element gets 0 + dy (its window's) or 0, the generic scatter's sums; an odd
    // H or W leaves a last row or column that no window covers, zero.
    parallel_for(s.planes, s.planes * s.h * s.w, [&](int64_t p) {
      const float* plane = x + p * s.h * s.w;
      const float* g = dy + p * s.oh * s.ow;
      float* out = dx + p * s.h * s.w;
      if (s.h % 2 != 0 || s.w % 2 != 0) std::fill(out, out + s.h * s.w, 0.0f);
      for (int64_t oh = 0; oh < s.oh; ++oh) {
        const float* r0 = plane + 2 * oh * s.w;
        const float* r1 = r0 + s.w;
        float* d0 = out + 2 * oh * s.w;
        float* d1 = d0 + s.w;
        // The argmaxes of a block of windows first, then the stores: x and dx are allocated
        // alike, so x's rows and dx's share their addresses modulo 4 KiB, and a load right
        // after a store to such an address stalls (4K aliasing: interleaved, the loop took 5x as
        // long for the MNIST CNN's first pooling).
        constexpr int64_t kBlock = 64;
        int at[kBlock];
        for (int64_t ow0 = 0; ow0 < s.ow; ow0 += kBlock) {
          const int64_t len = std::min(kBlock, s.ow - ow0);
          for (int64_t k = 0; k < len; ++k) {
            const int64_t ow = ow0 + k;
            at[k] = argmax4(r0[2 * ow], r0[2 * ow + 1], r1[2 * ow], r1[2 * ow + 1]);
          }
          // v or +0.0 by masking v's bits: no branch (the argmax of real data is random, and
          // mispredicted selects cost more than the stores); bit-exact for NaN and inf, which a
          // multiply by 0 or 1 would not be.
          for (int64_t k = 0; k < len; ++k) {
            const int64_t ow = ow0 + k;
            const float v = 0.0f + g[oh * s.ow + ow];
            uint32_t bits;
            std::memcpy(&bits, &v, sizeof bits);
            const uint32_t e[4] = {bits & (0u - (at[k] == 0)), bits & (0u - (at[k] == 1)),
                                   bits & (0u - (at[k] == 2)), bits & (0u - (at[k] == 3))};
            std::memcpy(d0 + 2 * ow, e, 2 * sizeof(float));
            std::memcpy(d1 + 2 * ow, e + 2, 2 * sizeof(float));
          }
        }
      }
    });
    return;
  }
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
