// Host convolution family (the reference for ../cuda/conv.cu), geometry in ConvShape (../backend.h):
//   conv2d:                 x (N, C, H, W), w (F, C, KH, KW) -> y (N, F, OH, OW)
//   conv2d_gradient_input:  dy (N, F, OH, OW), w -> dx (N, C, H, W)
//   conv2d_gradient_filter: x, dy -> dw (F, C, KH, KW)
//   add_channel_bias:       out (N, C, S) = in + bias[c];  reduce_sum_channels: (N, C, S) -> (C,)
//
// Method: im2col + matmul (single-threaded BLAS sgemm calls, blas.h). An image's columns are
//   col  (C*KH*KW, OH*OW): col[(c*KH + i)*KW + j][p] = x[b, c, ih, iw] (0 in the padding)
//   y[b] = w (F, C*KH*KW) @ col
//   dx[b] = col2im(w^T @ dy[b]): each dx element sums the column entries that read it, in the
//           order of the CUDA kernel's gather (col2im_plane)
//   dw   = sum over b of dy[b] (F, OH*OW) @ col^T
// Two schedules, chosen from the shape and the CPUs online alone (so the bits never depend on the
// thread count or the load):
// - image by image, when the batch has at least as many images as the machine has CPUs: each
//   thread of the pool takes whole images, builds their columns in its own slot of scratch (about
//   C*KH*KW*OH*OW floats, 200 KB for the MNIST CNN's second layer, so the columns are still in
//   the core's cache when its sgemm reads them) and writes y[b] or dx[b] in place: no batch-wide
//   column matrix, no (F, N) <-> (N, F) transposes. dw is summed in fixed groups of images, one
//   partial per group, and the partials are added in group order.
// - chunk by chunk otherwise (a batch of one image, a large machine): the columns of `chunk`
//   images (C*KH*KW, nb*OH*OW) and one large product, split across the threads by host::matmul.
// Why im2col rather than direct loops: sgemm runs at BLAS speed for every filter size, and the
// same three product shapes serve the forward pass and both gradients; the schedule above keeps
// its price, the column matrix, in cache. Scratch comes from the caching allocator.
#include <algorithm>
#include <vector>

#include "../backend.h"
#include "blas.h"
#include "gpumat/gpu_matrix.h"
#include "kernels.h"
#include "parallel.h"

namespace gpumat::host {

namespace {

// The outputs ow whose input column ow*stride_w - pad_w + j lies inside [0, W): [*lo, *hi).
// (No division for stride 1: im2col calls this for every row of every image.)
void inside_columns(const ConvShape& s, int64_t j, int64_t* lo, int64_t* hi) {
  const int64_t shift = j - s.pad_w, sw = s.stride_w;
  if (sw == 1) {
    *lo = std::min(s.ow, std::max<int64_t>(0, -shift));
    *hi = std::max(*lo, std::min(s.ow, s.w - shift));
    return;
  }
  *lo = std::min(s.ow, shift >= 0 ? 0 : (-shift + sw - 1) / sw);
  *hi = std::max(*lo, std::min(s.ow, (s.w - shift + sw - 1) / sw));
}

// Row (c, i, j) of an image's columns: out[oh*OW + ow] from the image's plane c (H, W). Plain
// loops over restrict pointers, not std::fill / std::copy: a row is a few to a few hundred
// floats, where a library call costs more than the copy.
void im2col_row(const float* __restrict plane, const ConvShape& s, int64_t i, int64_t j,
                float* __restrict out) {
  const int64_t oh_n = s.oh, ow_n = s.ow, w = s.w, h = s.h, sw = s.stride_w;
  const int64_t shift = j - s.pad_w;
  int64_t ow_lo, ow_hi;
  inside_columns(s, j, &ow_lo, &ow_hi);
  for (int64_t oh = 0; oh < oh_n; ++oh) {
    const int64_t ih = oh * s.stride_h - s.pad_h + i;
    float* __restrict row = out + oh * ow_n;
    if (ih < 0 || ih >= h) {
      for (int64_t ow = 0; ow < ow_n; ++ow) row[ow] = 0.0f;
      continue;
    }
    for (int64_t ow = 0; ow < ow_lo; ++ow) row[ow] = 0.0f;
    const float* __restrict src = plane + ih * w;  // input column ow*stride_w + shift, inside the row
    if (sw == 1) {
      for (int64_t ow = ow_lo; ow < ow_hi; ++ow) row[ow] = src[ow + shift];
    } else {
      for (int64_t ow = ow_lo; ow < ow_hi; ++ow) row[ow] = src[ow * sw + shift];
    }
    for (int64_t ow = ow_hi; ow < ow_n; ++ow) row[ow] = 0.0f;
  }
}

// x is one chunk (nb, C, H, W); col is (C*KH*KW, nb*OH*OW).
void im2col(const float* x, const ConvShape& s, int64_t nb, float* col) {
  const int64_t ohw = s.oh * s.ow, cols = nb * ohw, rows = s.c * s.kh * s.kw;
  parallel_for(rows * nb, rows * cols, [&](int64_t i) {
    const int64_t r = i / nb, b = i % nb;
    im2col_row(x + (b * s.c + r / (s.kw * s.kh)) * s.h * s.w, s, (r / s.kw) % s.kh, r % s.kw,
               col + r * cols + b * ohw);
  });
}

// One image x (C, H, W) into col (C*KH*KW, OH*OW), on the calling thread. Input row by input row:
// the KW column rows (c, i, 0..KW-1) that read input row ih take their segment for output row oh
// one after another, with each j's inside columns worked out once per image. A column row of the
// MNIST CNN's second layer is 8 segments of 8 floats, so im2col_row's bookkeeping per segment, not
// the copying, had been most of the time (about 40 us an image, as long as the image's sgemm). A
// SIMD clone (GPUMAT_SIMD_CLONES): the segments are vector moves; a copy, the same bits anywhere.
GPUMAT_SIMD_CLONES void im2col_image(const float* x, const ConvShape& s, float* col) {
  const int64_t ohw = s.oh * s.ow, ow_n = s.ow, sw = s.stride_w, hw = s.h * s.w;
  if (sw == 1 && s.pad_h == 0 && s.pad_w == 0) {
    // A column stride of 1 and no padding (every convolution of the MNIST networks): each segment
    // is OW floats from input row oh * stride_h + i at column j, no zeros and no bounds.
    for (int64_t c = 0; c < s.c; ++c) {
      for (int64_t i = 0; i < s.kh; ++i) {
        float* rows = col + (c * s.kh + i) * s.kw * ohw;
        for (int64_t oh = 0; oh < s.oh; ++oh) {
          const float* src = x + c * hw + (oh * s.stride_h + i) * s.w;
          for (int64_t j = 0; j < s.kw; ++j) {
            float* __restrict seg = rows + j * ohw + oh * ow_n;
            const float* __restrict in = src + j;
            for (int64_t ow = 0; ow < ow_n; ++ow) seg[ow] = in[ow];
          }
        }
      }
    }
    return;
  }
  std::vector<int64_t> lo(static_cast<size_t>(s.kw)), hi(static_cast<size_t>(s.kw));
  for (int64_t j = 0; j < s.kw; ++j) inside_columns(s, j, &lo[j], &hi[j]);
  for (int64_t c = 0; c < s.c; ++c) {
    const float* plane = x + c * hw;
    for (int64_t i = 0; i < s.kh; ++i) {
      float* rows = col + (c * s.kh + i) * s.kw * ohw;  // column rows (c, i, j), j = 0..KW-1
      for (int64_t oh = 0; oh < s.oh; ++oh) {
        const int64_t ih = oh * s.stride_h - s.pad_h + i;
        if (ih < 0 || ih >= s.h) {
          for (int64_t j = 0; j < s.kw; ++j) {
            float* __restrict seg = rows + j * ohw + oh * ow_n;
            for (int64_t ow = 0; ow < ow_n; ++ow) seg[ow] = 0.0f;
          }
          continue;
        }
        const float* src = plane + ih * s.w - s.pad_w;
        for (int64_t j = 0; j < s.kw; ++j) {
          float* __restrict seg = rows + j * ohw + oh * ow_n;
          const float* __restrict in = src + j;  // input column ow*sw + j - pad_w
          for (int64_t ow = 0; ow < lo[j]; ++ow) seg[ow] = 0.0f;
          if (sw == 1) {
            for (int64_t ow = lo[j]; ow < hi[j]; ++ow) seg[ow] = in[ow];
          } else {
            for (int64_t ow = lo[j]; ow < hi[j]; ++ow) seg[ow] = in[ow * sw];
          }
          for (int64_t ow = hi[j]; ow < ow_n; ++ow) seg[ow] = 0.0f;
        }
      }
    }
  }
}

// Plane c of image b of dx from col (C*KH*KW, cols), image b's entries from column b*OH*OW: each
// column row (c, i, j) is added into the plane at its window offset, row by row (a scatter along
// contiguous runs, which vectorises; a gather per dx element does not). The rows go in descending
// (i, j), so each dx element receives its terms in ascending (oh, ow) order, from 0: the order
// of the CUDA kernel's gather, so the sums agree to the bit.
// Stride 1 without padding (the MNIST networks' convolutions) takes the same loops without the
// bounds. (Looping j inside oh instead re-read each row just stored, one float further on: a
// failed store-to-load forwarding per vector, three times slower.) A SIMD clone: the adds along ow
// are independent, each element's in the same order on every version.
GPUMAT_SIMD_CLONES void col2im_plane(const float* col, const ConvShape& s, int64_t cols, int64_t b, int64_t c,
                                     float* plane) {
  const int64_t ohw = s.oh * s.ow;
  for (int64_t e = 0; e < s.h * s.w; ++e) plane[e] = 0.0f;
  if (s.stride_h == 1 && s.stride_w == 1 && s.pad_h == 0 && s.pad_w == 0) {
    for (int64_t i = s.kh - 1; i >= 0; --i) {
      for (int64_t j = s.kw - 1; j >= 0; --j) {
        const float* src = col + ((c * s.kh + i) * s.kw + j) * cols + b * ohw;
        for (int64_t oh = 0; oh < s.oh; ++oh) {
          float* __restrict out = plane + (oh + i) * s.w + j;
          const float* __restrict in = src + oh * s.ow;
          for (int64_t ow = 0; ow < s.ow; ++ow) out[ow] += in[ow];
        }
      }
    }
    return;
  }
  for (int64_t i = s.kh - 1; i >= 0; --i) {
    for (int64_t j = s.kw - 1; j >= 0; --j) {
      const float* src = col + ((c * s.kh + i) * s.kw + j) * cols + b * ohw;
      const int64_t shift = j - s.pad_w;
      int64_t ow_lo, ow_hi;
      inside_columns(s, j, &ow_lo, &ow_hi);
      for (int64_t oh = 0; oh < s.oh; ++oh) {
        const int64_t ih = oh * s.stride_h - s.pad_h + i;
        if (ih < 0 || ih >= s.h) continue;
        float* dst = plane + ih * s.w;
        const float* in = src + oh * s.ow;
        if (s.stride_w == 1) {
          for (int64_t ow = ow_lo; ow < ow_hi; ++ow) dst[ow + shift] += in[ow];
        } else {
          for (int64_t ow = ow_lo; ow < ow_hi; ++ow) dst[ow * s.stride_w + shift] += in[ow];
        }
      }
    }
  }
}

// col is (C*KH*KW, nb*OH*OW); dx is one chunk (nb, C, H, W).
void col2im(const float* col, const ConvShape& s, int64_t nb, float* dx) {
  const int64_t cols = nb * s.oh * s.ow;
  parallel_for(nb * s.c, nb * s.c * s.h * s.w, [&](int64_t i) {
    const int64_t b = i / s.c, c = i % s.c;
    col2im_plane(col, s, cols, b, c, dx + (b * s.c + c) * s.h * s.w);
  });
}

// in is (d0, d1, inner), out is (d1, d0, inner).
void swap_axes01(const float* in, int64_t d0, int64_t d1, int64_t inner, float* out) {
  parallel_for(d1 * d0, d0 * d1 * inner, [&](int64_t i) {
    const int64_t b = i / d0, a = i % d0;
    std::copy_n(in + (a * d1 + b) * inner, inner, out + (b * d0 + a) * inner);
  });
}

// The image-by-image schedule (see the top of the file) applies: at least as many images as CPUs
// online, and one column slot per CPU within the workspace limit that chose `chunk` (a chunk of at
// least that many images fits it).
bool image_by_image(const ConvShape& s) {
  return s.n >= 2 && s.n >= cpus_online() && s.chunk >= cpus_online();
}

// dw's groups of images in the image-by-image schedule: four per CPU online (at most one per
// image), each summed in image order into its own partial.
int64_t filter_groups(const ConvShape& s) { return std::min<int64_t>(s.n, 4 * cpus_online()); }

}  // namespace

void conv2d(int, const float* x, const float* w, float* y, const ConvShape& s) {
  const int64_t ckk = s.c * s.kh * s.kw, ohw = s.oh * s.ow, chw = s.c * s.h * s.w;
  if (image_by_image(s)) {
    const int threads = task_threads(s.n);
    GpuMatrix col({threads * ckk * ohw}, Device::host());
    run_slotted(s.n, threads, [&](int64_t b, int slot) {
      float* cb = col.data() + slot * ckk * ohw;
      im2col_image(x + b * chw, s, cb);
      sgemm(w, false, ckk, cb, false, ohw, y + b * s.f * ohw, ohw, s.f, ohw, ckk, 0.0f);
    });
    return;
  }
  GpuMatrix col({ckk, s.chunk * ohw}, Device::host());
  GpuMatrix tmp({s.chunk > 1 ? s.f * s.chunk * ohw : 0}, Device::host());
  for (int64_t n0 = 0; n0 < s.n; n0 += s.chunk) {
    const int64_t nb = std::min(s.chunk, s.n - n0);
    im2col(x + n0 * chw, s, nb, col.data());
    float* yb = y + n0 * s.f * ohw;
    if (nb == 1) {
      matmul(0, w, false, col.data(), false, yb, s.f, ohw, ckk);
    } else {
      matmul(0, w, false, col.data(), false, tmp.data(), s.f, nb * ohw, ckk);
      swap_axes01(tmp.data(), s.f, nb, ohw, yb);
    }
  }
}

void conv2d_gradient_input(int, const float* dy, const float* w, float* dx, const ConvShape& s) {
  const int64_t ckk = s.c * s.kh * s.kw, ohw = s.oh * s.ow, chw = s.c * s.h * s.w;
  if (image_by_image(s)) {
    const int threads = task_threads(s.n);
    GpuMatrix dcol({threads * ckk * ohw}, Device::host());
    run_slotted(s.n, threads, [&](int64_t b, int slot) {
      float* cb = dcol.data() + slot * ckk * ohw;
      sgemm(w, true, ckk, dy + b * s.f * ohw, false, ohw, cb, ohw, ckk, ohw, s.f, 0.0f);
      for (int64_t c = 0; c < s.c; ++c) col2im_plane(cb, s, ohw, 0, c, dx + b * chw + c * s.h * s.w);
    });
    return;
  }
  GpuMatrix dcol({ckk, s.chunk * ohw}, Device::host());
  GpuMatrix dyt({s.chunk > 1 ? s.f * s.chunk * ohw : 0}, Device::host());
  for (int64_t n0 = 0; n0 < s.n; n0 += s.chunk) {
    const int64_t nb = std::min(s.chunk, s.n - n0);
    const float* dyb = dy + n0 * s.f * ohw;
    if (nb > 1) {
      swap_axes01(dyb, nb, s.f, ohw, dyt.data());
      dyb = dyt.data();
    }
    matmul(0, w, true, dyb, false, dcol.data(), ckk, nb * ohw, s.f);
    col2im(dcol.data(), s, nb, dx + n0 * chw);
  }
}

void conv2d_gradient_filter(int, const float* x, const float* dy, float* dw, const ConvShape& s) {
  const int64_t ckk = s.c * s.kh * s.kw, ohw = s.oh * s.ow, chw = s.c * s.h * s.w;
  if (image_by_image(s)) {
    // Group g sums images [g*size, (g+1)*size) into its partial (group 0's is dw itself); the
    // partials are then added to dw in group order, element by element.
    const int64_t groups = filter_groups(s), size = (s.n + groups - 1) / groups;
    const int64_t used = (s.n + size - 1) / size, fckk = s.f * ckk;
    const int threads = task_threads(used);
    GpuMatrix col({threads * ckk * ohw}, Device::host());
    GpuMatrix parts({(used - 1) * fckk}, Device::host());
    run_slotted(used, threads, [&](int64_t g, int slot) {
      float* cb = col.data() + slot * ckk * ohw;
      float* part = g == 0 ? dw : parts.data() + (g - 1) * fckk;
      for (int64_t b = g * size; b < std::min(s.n, (g + 1) * size); ++b) {
        im2col_image(x + b * chw, s, cb);
        sgemm(dy + b * s.f * ohw, false, ohw, cb, true, ohw, part, ckk, s.f, ckk, ohw,
              b > g * size ? 1.0f : 0.0f);
      }
    });
    parallel_for(fckk, fckk * used, [&](int64_t e) {
      float sum = dw[e];
      for (int64_t g = 1; g < used; ++g) sum += parts.data()[(g - 1) * fckk + e];
      dw[e] = sum;
    });
    return;
  }
  const bool chunked = s.chunk < s.n;
  GpuMatrix col({ckk, s.chunk * ohw}, Device::host());
  GpuMatrix dyt({s.chunk > 1 ? s.f * s.chunk * ohw : 0}, Device::host());
  GpuMatrix part({chunked ? s.f * ckk : 0}, Device::host());
  for (int64_t n0 = 0; n0 < s.n; n0 += s.chunk) {
    const int64_t nb = std::min(s.chunk, s.n - n0);
    im2col(x + n0 * chw, s, nb, col.data());
    const float* dyb = dy + n0 * s.f * ohw;
    if (nb > 1) {
      swap_axes01(dyb, nb, s.f, ohw, dyt.data());
      dyb = dyt.data();
    }
    // The first chunk writes dw; later ones are added to it.
    float* target = n0 == 0 ? dw : part.data();
    matmul(0, dyb, false, col.data(), true, target, s.f, ckk, nb * ohw);
    if (n0 > 0) add(0, dw, part.data(), dw, s.f * ckk);
  }
}

// in, out are (outer, channels, inner); bias is (channels,).
void add_channel_bias(int, const float* in, const float* bias, float* out, int64_t outer, int64_t channels,
                      int64_t inner) {
  parallel_for(outer * channels, outer * channels * inner, [&](int64_t i) {
    const float b = bias[i % channels];
    const float* src = in + i * inner;
    float* dst = out + i * inner;
    for (int64_t k = 0; k < inner; ++k) dst[k] = src[k] + b;
  });
}

namespace {
// Channel c's sum of in (outer, channels, inner) in double: eight partial sums, element k of each
// row going to partial k % 8 in order, then added pairwise in a fixed order. The order depends on
// the shape alone (the same bits on any thread count and CPU), and the eight partials are SIMD
// lanes (GPUMAT_SIMD_CLONES), where one running sum would wait on each add in turn.
GPUMAT_SIMD_CLONES double channel_sum(const float* in, int64_t outer, int64_t channels, int64_t inner,
                                      int64_t c) {
  double lane[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
  for (int64_t n = 0; n < outer; ++n) {
    const float* src = in + (n * channels + c) * inner;
    int64_t k = 0;
    for (; k + 8 <= inner; k += 8)
      for (int j = 0; j < 8; ++j) lane[j] += src[k + j];
    for (int j = 0; k < inner; ++k, ++j) lane[j] += src[k];
  }
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}
}  // namespace

// in is (outer, channels, inner), out is (channels,): channel_sum, one channel per task.
void reduce_sum_channels(int, const float* in, float* out, int64_t outer, int64_t channels, int64_t inner) {
  parallel_for(channels, outer * channels * inner,
               [&](int64_t c) { out[c] = static_cast<float>(channel_sum(in, outer, channels, inner, c)); });
}

}  // namespace gpumat::host
