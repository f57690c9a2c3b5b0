// Host convolution family (the reference for ../cuda/conv.cu), geometry in ConvShape (../backend.h):
//   conv2d:                 x (N, C, H, W), w (F, C, KH, KW) -> y (N, F, OH, OW)
//   conv2d_gradient_input:  dy (N, F, OH, OW), w -> dx (N, C, H, W)
//   conv2d_gradient_filter: x, dy -> dw (F, C, KH, KW)
//   add_channel_bias:       out (N, C, S) = in + bias[c];  reduce_sum_channels: (N, C, S) -> (C,)
//
// Method: im2col + matmul (BLAS sgemm through host::matmul), over chunks of `chunk` images so the
// scratch stays under the workspace limit. For a chunk of nb images,
//   col  (C*KH*KW, nb*OH*OW): col[(c*KH + i)*KW + j][b*OH*OW + p] = x[b, c, ih, iw] (0 in the padding)
//   y    = w (F, C*KH*KW) @ col             -> (F, nb, OH*OW), then swap axes 0 and 1 -> (nb, F, OH*OW)
//   dcol = w^T @ dy^(F, nb, OH*OW); dx = col2im(dcol), a gather: each dx element sums the column
//          entries that read it (no atomics, fixed order)
//   dw  += dy^(F, nb*OH*OW) @ col^T, over chunks
// With nb = 1 the (F, 1, OH*OW) and (1, F, OH*OW) layouts coincide and the swap is skipped.
// Why im2col rather than direct loops: one large GEMM per chunk runs at BLAS (and, on the GPU, at
// our tiled matmul's) speed for every filter size, and the same three GEMM shapes serve the
// forward pass and both gradients; the price is the (C*KH*KW, nb*OH*OW) scratch, bounded by chunking.
#include <algorithm>

#include "../backend.h"
#include "../window.h"
#include "gpumat/gpu_matrix.h"
#include "kernels.h"
#include "parallel.h"

namespace gpumat::host {

namespace {

// x is one chunk (nb, C, H, W); col is (C*KH*KW, nb*OH*OW).
void im2col(const float* x, const ConvShape& s, int64_t nb, float* col) {
  const int64_t ohw = s.oh * s.ow, cols = nb * ohw, rows = s.c * s.kh * s.kw;
#pragma omp parallel for collapse(2) if (rows * cols >= kParallelMin) num_threads(region_threads())
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t j = r % s.kw, i = (r / s.kw) % s.kh, c = r / (s.kw * s.kh);
      const float* plane = x + (b * s.c + c) * s.h * s.w;
      float* out = col + r * cols + b * ohw;
      // Output columns [ow_lo, ow_hi) read inside the row: 0 <= ow*stride_w - pad_w + j < W.
      const int64_t shift = j - s.pad_w;
      const int64_t ow_lo = std::min(s.ow, shift >= 0 ? 0 : (-shift + s.stride_w - 1) / s.stride_w);
      const int64_t ow_hi = std::max(ow_lo, std::min(s.ow, (s.w - shift + s.stride_w - 1) / s.stride_w));
      for (int64_t oh = 0; oh < s.oh; ++oh) {
        const int64_t ih = oh * s.stride_h - s.pad_h + i;
        float* row = out + oh * s.ow;
        if (ih < 0 || ih >= s.h) {
          std::fill(row, row + s.ow, 0.0f);
          continue;
        }
        std::fill(row, row + ow_lo, 0.0f);
        const float* src = plane + ih * s.w;
        if (s.stride_w == 1) {
          std::copy(src + ow_lo + shift, src + ow_hi + shift, row + ow_lo);
        } else {
          for (int64_t ow = ow_lo; ow < ow_hi; ++ow) row[ow] = src[ow * s.stride_w + shift];
        }
        std::fill(row + ow_hi, row + s.ow, 0.0f);
      }
    }
  }
}

// col is (C*KH*KW, nb*OH*OW); dx is one chunk (nb, C, H, W). Each dx element gathers, in (oh, ow)
// order, the column entries of the windows that cover it: oh ranges over the outputs with
// 0 <= ih + pad_h - oh*stride_h < KH (the same loop as the CUDA kernel, so the sums agree).
void col2im(const float* col, const ConvShape& s, int64_t nb, float* dx) {
  const int64_t ohw = s.oh * s.ow, cols = nb * ohw;
#pragma omp parallel for collapse(2) if (nb * s.c * s.h * s.w >= kParallelMin) num_threads(region_threads())
  for (int64_t b = 0; b < nb; ++b) {
    for (int64_t c = 0; c < s.c; ++c) {
      float* plane = dx + (b * s.c + c) * s.h * s.w;
      for (int64_t ih = 0; ih < s.h; ++ih) {
        const int64_t hp = ih + s.pad_h;
        int64_t oh_lo, oh_hi;
        window::covering_outputs<int64_t>(ih, s.kh, s.stride_h, s.pad_h, s.oh, &oh_lo, &oh_hi);
        for (int64_t iw = 0; iw < s.w; ++iw) {
          const int64_t wp = iw + s.pad_w;
          int64_t ow_lo, ow_hi;
          window::covering_outputs<int64_t>(iw, s.kw, s.stride_w, s.pad_w, s.ow, &ow_lo, &ow_hi);
          float sum = 0.0f;
          for (int64_t oh = oh_lo; oh <= oh_hi; ++oh) {
            const int64_t i = hp - oh * s.stride_h;
            for (int64_t ow = ow_lo; ow <= ow_hi; ++ow) {
              const int64_t j = wp - ow * s.stride_w;
              sum += col[((c * s.kh + i) * s.kw + j) * cols + b * ohw + oh * s.ow + ow];
            }
          }
          plane[ih * s.w + iw] = sum;
        }
      }
    }
  }
}

// in is (d0, d1, inner), out is (d1, d0, inner).
void swap_axes01(const float* in, int64_t d0, int64_t d1, int64_t inner, float* out) {
#pragma omp parallel for collapse(2) if (d0 * d1 * inner >= kParallelMin) num_threads(region_threads())
  for (int64_t b = 0; b < d1; ++b)
    for (int64_t a = 0; a < d0; ++a)
      std::copy_n(in + (a * d1 + b) * inner, inner, out + (b * d0 + a) * inner);
}

}  // namespace

void conv2d(int, const float* x, const float* w, float* y, const ConvShape& s) {
  const int64_t ckk = s.c * s.kh * s.kw, ohw = s.oh * s.ow, chw = s.c * s.h * s.w;
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
#pragma omp parallel for collapse(2) if (outer * channels * inner >= kParallelMin) \
    num_threads(region_threads())
  for (int64_t n = 0; n < outer; ++n) {
    for (int64_t c = 0; c < channels; ++c) {
      const float b = bias[c];
      const float* src = in + (n * channels + c) * inner;
      float* dst = out + (n * channels + c) * inner;
      for (int64_t k = 0; k < inner; ++k) dst[k] = src[k] + b;
    }
  }
}

// in is (outer, channels, inner), out is (channels,); each channel's sum runs in double, in order.
void reduce_sum_channels(int, const float* in, float* out, int64_t outer, int64_t channels, int64_t inner) {
  parallel_for(channels, outer * channels * inner, [&](int64_t c) {
    double acc = 0.0;
    for (int64_t n = 0; n < outer; ++n) {
      const float* src = in + (n * channels + c) * inner;
      for (int64_t k = 0; k < inner; ++k) acc += src[k];
    }
    out[c] = static_cast<float>(acc);
  });
}

}  // namespace gpumat::host
