// Sliding-window index arithmetic shared by the host and CUDA convolution and pooling kernels
// (geometry in ConvShape / PoolShape, backend.h). Along one axis, output o's window covers the
// input positions o*stride - pad + [0, k).
// NOTE: one definition for both devices matters most for the max-pool argmax, whose tie and NaN
// rules decide which element receives each gradient.
#pragma once

#include <cstdint>

#include "backend.h"
#include "host_device.h"

namespace gpumat::window {

// The input positions [*lo, *hi) that output o's window covers, clipped to [0, size).
GPUMAT_HD void input_span(int64_t o, int64_t k, int64_t stride, int64_t pad, int64_t size, int64_t* lo,
                          int64_t* hi) {
  const int64_t start = o * stride - pad;
  *lo = start > 0 ? start : 0;
  *hi = start + k < size ? start + k : size;
}

// The outputs [*lo, *hi] (inclusive) whose windows cover input position i: those with
// 0 <= i + pad - o*stride < k and 0 <= o < out. Empty when *lo > *hi.
template <typename Index>
GPUMAT_HD void covering_outputs(Index i, Index k, Index stride, Index pad, Index out, Index* lo, Index* hi) {
  const Index ip = i + pad;
  *lo = ip < k ? 0 : (ip - k) / stride + 1;
  *hi = ip / stride < out - 1 ? ip / stride : out - 1;
}

// Adaptive pooling (PyTorch's AdaptiveAveragePooling windows): output o of `out` over `in` inputs
// covers [floor(o in / out), ceil((o + 1) in / out)), never empty for out >= 1 and in >= 1.
GPUMAT_HD void adaptive_span(int64_t o, int64_t in, int64_t out, int64_t* lo, int64_t* hi) {
  *lo = (o * in) / out;
  *hi = ((o + 1) * in + out - 1) / out;
}

// The outputs [*lo, *hi] (inclusive) whose adaptive windows may cover input i: a superset (within
// [floor(i out / in), ceil((i + 1) out / in) - 1]), so callers test adaptive_span's bounds.
GPUMAT_HD void adaptive_covering(int64_t i, int64_t in, int64_t out, int64_t* lo, int64_t* hi) {
  *lo = (i * out) / in;
  const int64_t h = ((i + 1) * out + in - 1) / in - 1;
  *hi = h < out - 1 ? h : out - 1;
}

// Index (ih * W + iw) in `plane` (H, W) of the argmax of pooling window (oh, ow): the first maximum
// in row-major window order (ties: the first wins, so a gradient reaches exactly one element); a
// NaN beats numbers and the first NaN beats later ones, so NaN propagates as in PyTorch. The window
// holds at least one element (ops/pool.cpp guarantees pad <= kernel / 2).
GPUMAT_HD int64_t pool_argmax(const float* plane, const PoolShape& s, int64_t oh, int64_t ow) {
  int64_t h_lo, h_hi, w_lo, w_hi;
  input_span(oh, s.kh, s.stride_h, s.pad_h, s.h, &h_lo, &h_hi);
  input_span(ow, s.kw, s.stride_w, s.pad_w, s.w, &w_lo, &w_hi);
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

}  // namespace gpumat::window
