// CUDA index kernels (the index family; host reference ../host/index.cpp). Along one dim of an
// array seen as (outer, n, inner), index (len,) holding integers in float32 (../index.h resolves
// them; an index naming no row gives NaN or no write, never an access out of bounds):
//   index_select: out[o, j, i] = in[o, index[j], i]; one thread per output element (launch_map).
//   index_add:    out[o, index[j], i] += alpha * src[o, j, i]; index_copy: = src[o, j, i], the
//                 last j wins. No atomics, so the bits never depend on scheduling: the rows are
//                 split into S buckets (row & (S - 1), S a power of two), and thread (o, b, i) owns
//                 column i of the rows of bucket b: it walks j = 0..len-1 in order and applies the
//                 entries whose row falls in its bucket. Work is outer * S * inner threads scanning
//                 len indices (broadcast reads: a warp shares o and b) plus one read-modify-write per
//                 contribution, instead of a pass over all n rows per entry; S grows until the
//                 threads fill the GPU (embedding gradients: inner 768, len 8k, n 50k -> S 256).
#include <algorithm>

#include "../index.h"
#include "common.cuh"
#include "kernels.cuh"

namespace gpumat::GPUMAT_CUDA_NS {

namespace {
constexpr int64_t kTargetThreads = int64_t{1} << 18;  // enough to fill an H100 several times
constexpr int64_t kMaxBuckets = 1024;

// One thread per (o, b, i) column of a bucket; see the header.
template <bool Add>
__global__ void index_put_kernel(float* out, const float* index, const float* src, float alpha, int64_t outer,
                                 int64_t n, int64_t len, int64_t inner, int64_t buckets) {
  const int64_t total = outer * buckets * inner;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = t % inner, rest = t / inner;
    const int64_t b = rest % buckets, o = rest / buckets;
    float* col = out + o * n * inner + i;
    const float* s = src + o * len * inner + i;
    for (int64_t j = 0; j < len; ++j) {
      const int64_t r = index::row_of(index[j], n);
      if (r < 0 || (r & (buckets - 1)) != b) continue;
      if constexpr (Add)
        col[r * inner] += alpha * s[j * inner];
      else
        col[r * inner] = s[j * inner];
    }
  }
}

// The number of buckets: a power of two, at most the rows (or kMaxBuckets), enough that the
// threads fill the GPU when the columns alone do not.
int64_t bucket_count(int64_t outer, int64_t n, int64_t inner) {
  int64_t s = 1;
  while (s < kMaxBuckets && s * 2 <= n && outer * inner * s < kTargetThreads) s *= 2;
  return s;
}

template <bool Add>
void index_put(const char* op, int dev, float* out, const float* index, const float* src, float alpha,
               int64_t outer, int64_t n, int64_t len, int64_t inner) {
  const int64_t buckets = bucket_count(outer, n, inner);
  cudaStream_t stream = activate(dev);
  launch<index_put_kernel<Add>>(op, grid_for(outer * buckets * inner, kBlockSize), kBlockSize, 0, stream, out,
                                index, src, alpha, outer, n, len, inner, buckets);
}
}  // namespace

void index_select(int dev, const float* in, const float* index, float* out, int64_t outer, int64_t n,
                  int64_t len, int64_t inner) {
  launch_map("index_select", dev, out, outer * len * inner, [=] __device__(int64_t k) {
    const int64_t i = k % inner, rest = k / inner;
    const int64_t j = rest % len, o = rest / len;
    const int64_t r = index::row_of(index[j], n);
    return r < 0 ? __int_as_float(0x7fc00000) : in[(o * n + r) * inner + i];
  });
}

void index_add(int dev, float* out, const float* index, const float* src, float alpha, int64_t outer,
               int64_t n, int64_t len, int64_t inner) {
  index_put<true>("index_add", dev, out, index, src, alpha, outer, n, len, inner);
}

void index_copy(int dev, float* out, const float* index, const float* src, int64_t outer, int64_t n,
                int64_t len, int64_t inner) {
  index_put<false>("index_copy", dev, out, index, src, 1.0f, outer, n, len, inner);
}

}  // namespace gpumat::GPUMAT_CUDA_NS
