// Index arithmetic and per-slice loops of the reductions along one axis (argmax's too) and of
// broadcast_axis, shared by the host and CUDA kernels (host/reduce.cpp, cuda/reduce.cu), so both
// devices compute them from one definition, in the same order. The array is seen as (outer, n,
// inner), the axis in the middle; output column col = o * inner + i names the slice in[o, :, i].
// NOTE: a NaN in a slice makes its max NaN, and the NaN elements share that slice's gradient; the
// slice's argmax is then its first NaN.
#pragma once

#include <cmath>
#include <cstdint>

#include "host_device.h"

namespace gpumat::axis {

// Offset of in[o, 0, i] for col = o * inner + i; the slice's elements are inner apart.
GPUMAT_HD int64_t slice_base(int64_t col, int64_t n, int64_t inner) {
  return (col / inner) * n * inner + col % inner;
}

// The element of the (outer, inner) input that output k of (outer, n, inner) broadcasts.
GPUMAT_HD int64_t broadcast_source(int64_t k, int64_t n, int64_t inner) {
  return (k / (n * inner)) * inner + k % inner;
}

// True when v is the slice's maximum m (NaN counts as equal to a NaN maximum).
GPUMAT_HD bool is_max(float v, float m) { return v == m || (v != v && m != m); }

// Sum (kind 0), mean (1), max (2) or product (3) of slice col, in index order.
GPUMAT_HD float reduce_slice(const float* in, int64_t col, int64_t n, int64_t inner, int kind) {
  const int64_t base = slice_base(col, n, inner);
  float acc = kind == 2 ? -INFINITY : (kind == 3 ? 1.0f : 0.0f);
  for (int64_t j = 0; j < n; ++j) {
    const float v = in[base + j * inner];
    if (kind == 2)
      acc = (v > acc || v != v) ? v : acc;
    else if (kind == 3)
      acc *= v;
    else
      acc += v;
  }
  return kind == 1 ? acc / static_cast<float>(n) : acc;
}

// The index j of slice col's first maximum (n >= 1): ties go to the lowest j, and a NaN counts as
// the maximum, so the first NaN wins (PyTorch's and numpy's argmax rule). The scan stops there.
GPUMAT_HD int64_t argmax_slice(const float* in, int64_t col, int64_t n, int64_t inner) {
  const int64_t base = slice_base(col, n, inner);
  float best = in[base];
  int64_t arg = 0;
  for (int64_t j = 1; j < n && best == best; ++j) {
    const float v = in[base + j * inner];
    if (v > best || v != v) {
      best = v;
      arg = j;
    }
  }
  return arg;
}

// dx of slice col for a max reduction: dy[col] shared equally among the elements equal to y[col].
GPUMAT_HD void max_gradient_slice(const float* x, const float* y, const float* dy, float* dx, int64_t col,
                                  int64_t n, int64_t inner) {
  const int64_t base = slice_base(col, n, inner);
  const float m = y[col];
  int64_t ties = 0;
  for (int64_t j = 0; j < n; ++j) ties += is_max(x[base + j * inner], m) ? 1 : 0;
  const float share = ties > 0 ? dy[col] / static_cast<float>(ties) : 0.0f;
  for (int64_t j = 0; j < n; ++j) dx[base + j * inner] = is_max(x[base + j * inner], m) ? share : 0.0f;
}

// dx of slice col for a product: dy[col] times the product of the other elements, as the prefix
// product before j times the suffix product after j (no division: exact at zeros, PyTorch's
// values). dx is first the prefixes, then scaled from the end.
GPUMAT_HD void prod_gradient_slice(const float* x, const float* dy, float* dx, int64_t col, int64_t n,
                                   int64_t inner) {
  const int64_t base = slice_base(col, n, inner);
  float acc = 1.0f;
  for (int64_t j = 0; j < n; ++j) {
    dx[base + j * inner] = acc;
    acc *= x[base + j * inner];
  }
  acc = 1.0f;
  const float g = dy[col];
  for (int64_t j = n - 1; j >= 0; --j) {
    dx[base + j * inner] = g * (dx[base + j * inner] * acc);
    acc *= x[base + j * inner];
  }
}

// Running sums of slice col into out (may be in: each element is read before it is written),
// accumulated in double from j = 0 (or from j = n - 1 when reverse).
GPUMAT_HD void cumsum_slice(const float* in, float* out, int64_t col, int64_t n, int64_t inner,
                            bool reverse) {
  const int64_t base = slice_base(col, n, inner);
  double acc = 0.0;
  for (int64_t k = 0; k < n; ++k) {
    const int64_t j = reverse ? n - 1 - k : k;
    acc += in[base + j * inner];
    out[base + j * inner] = static_cast<float>(acc);
  }
}

}  // namespace gpumat::axis
