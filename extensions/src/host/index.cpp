// Host index kernels (the index family; CUDA twins in ../cuda/index.cu). Along one dim of an array
// seen as (outer, n, inner), index (len,) holding integers in float32 (../index.h resolves them):
//   index_select: out[o, j, i] = in[o, index[j], i] (NaN for an index naming no row);
//   index_add:    out[o, index[j], i] += alpha * src[o, j, i], in increasing j for every element;
//   index_copy:   out[o, index[j], i] = src[o, j, i], the last j naming a row wins.
// index_add and index_copy split the work over (o, block of inner columns): each thread owns its
// columns of every row and walks j in order, so the result is the same on any thread count.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "../index.h"
#include "kernels.h"
#include "parallel.h"

namespace gpumat::host {

namespace {
constexpr int64_t kColumnBlock = 256;  // inner columns per task: one contiguous run of a row

template <bool Add>
void index_put(float* out, const float* index, const float* src, float alpha, int64_t outer, int64_t n,
               int64_t len, int64_t inner) {
  const int64_t blocks = (inner + kColumnBlock - 1) / kColumnBlock;
  parallel_for(outer * blocks, outer * len * inner, [&](int64_t t) {
    const int64_t o = t / blocks, i0 = (t % blocks) * kColumnBlock, i1 = std::min(inner, i0 + kColumnBlock);
    for (int64_t j = 0; j < len; ++j) {
      const int64_t r = index::row_of(index[j], n);
      if (r < 0) continue;
      float* dst = out + (o * n + r) * inner;
      const float* s = src + (o * len + j) * inner;
      for (int64_t i = i0; i < i1; ++i) {
        if constexpr (Add)
          dst[i] += alpha * s[i];
        else
          dst[i] = s[i];
      }
    }
  });
}
}  // namespace

void index_select(int, const float* in, const float* index, float* out, int64_t outer, int64_t n, int64_t len,
                  int64_t inner) {
  parallel_for(outer * len, outer * len * inner, [&](int64_t t) {
    const int64_t o = t / len, j = t % len;
    const int64_t r = index::row_of(index[j], n);
    float* dst = out + t * inner;
    if (r < 0) {
      std::fill(dst, dst + inner, std::numeric_limits<float>::quiet_NaN());
    } else {
      std::memcpy(dst, in + (o * n + r) * inner, static_cast<size_t>(inner) * sizeof(float));
    }
  });
}

void index_add(int, float* out, const float* index, const float* src, float alpha, int64_t outer, int64_t n,
               int64_t len, int64_t inner) {
  index_put<true>(out, index, src, alpha, outer, n, len, inner);
}

void index_copy(int, float* out, const float* index, const float* src, int64_t outer, int64_t n, int64_t len,
                int64_t inner) {
  index_put<false>(out, index, src, 1.0f, outer, n, len, inner);
}

}  // namespace gpumat::host
