// Host sort family (the reference for ../cuda/sort.cu), along the middle axis of (outer, n, inner):
//   argsort:         std::stable_sort of each slice's indices by ../sort.h's order (stable, NaN the
//                    largest); the first k written. Slices in parallel (parallel.h), O(n log n) each.
//   gather:          out[o, r, i] = in[o, index[o, r, i], i] (NaN for an invalid index)
//   gather_gradient: dx[o, j, i] = sum over r in order of dy[o, r, i] where index[o, r, i] == j,
//                    one pass over dy per slice (the same sums, in the same order, as CUDA's).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "../axis.h"
#include "../sort.h"
#include "kernels.h"
#include "parallel.h"

namespace gpumat::host {

namespace {
// The slice position an index names, or -1 when it is not an integer in [0, n).
int64_t valid_index(float v, int64_t n) {
  if (!(v >= 0.0f) || v >= static_cast<float>(n) || std::floor(v) != v) return -1;
  return static_cast<int64_t>(v);
}
}  // namespace

void argsort(int, const float* in, float* indices, int64_t outer, int64_t n, int64_t inner, int64_t k,
             bool descending) {
  const int64_t cols = outer * inner;
  parallel_for(cols, cols * n, [&](int64_t col) {
    const float* x = in + axis::slice_base(col, n, inner);
    std::vector<int64_t> idx(static_cast<size_t>(n));
    std::iota(idx.begin(), idx.end(), int64_t{0});
    std::stable_sort(idx.begin(), idx.end(), [&](int64_t p, int64_t q) {
      return order::value_before(x[p * inner], x[q * inner], descending);
    });
    float* o = indices + axis::slice_base(col, k, inner);
    for (int64_t r = 0; r < k; ++r) o[r * inner] = static_cast<float>(idx[static_cast<size_t>(r)]);
  });
}

void gather(int, const float* in, const float* index, float* out, int64_t outer, int64_t n, int64_t inner,
            int64_t k) {
  const int64_t total = outer * k * inner;
  parallel_for(total, total, [&](int64_t e) {
    const int64_t o = e / (k * inner), i = e % inner;
    const int64_t j = valid_index(index[e], n);
    out[e] = j < 0 ? NAN : in[(o * n + j) * inner + i];
  });
}

void gather_gradient(int, const float* index, const float* dy, float* dx, int64_t outer, int64_t n,
                     int64_t inner, int64_t k) {
  const int64_t cols = outer * inner;
  parallel_for(cols, cols * (n + k), [&](int64_t col) {
    const int64_t base = axis::slice_base(col, n, inner), gbase = axis::slice_base(col, k, inner);
    for (int64_t j = 0; j < n; ++j) dx[base + j * inner] = 0.0f;
    for (int64_t r = 0; r < k; ++r) {
      const int64_t j = valid_index(index[gbase + r * inner], n);
      if (j >= 0) dx[base + j * inner] += dy[gbase + r * inner];
    }
  });
}

}  // namespace gpumat::host
