// CUDA sort family, along the middle axis of (outer, n, inner). Host reference: ../host/sort.cpp.
//   argsort_kernel:          one thread per element j of a slice: its rank r = the number of the
//                            slice's elements that sort before it (../sort.h: by value, NaN the
//                            largest, ties by index), then indices[o, r, i] = j when r < k. The
//                            ranks of a slice are a permutation, so every output is written once,
//                            with no atomics and no ordering between threads: the result is the
//                            stable order, the same as the host's std::stable_sort.
//   gather_kernel:           out[o, r, i] = in[o, index[o, r, i], i] (NaN for an invalid index)
//   gather_gradient_kernel:  one thread per dx element (o, j, i): the sum over r, in order, of
//                            dy[o, r, i] where index[o, r, i] == j, as the host adds them.
//   argsort_bitonic_kernel:  contiguous slices (inner = 1) of up to 4096 elements: a block per
//                            slice sorts (value, index) pairs in shared memory with a bitonic
//                            network (log2(m) (log2(m) + 1) / 2 stages over m = n rounded up to a
//                            power of two, padding sorting last), compared by the same total order
//                            (value, then index), so the result is the same stable order.
// Cost: argsort_kernel does n comparisons per element, n^2 per slice: a 50,000-long vocabulary
// row is 2.5e9 comparisons (on an H200 a top-50 of 64 such rows took 174 ms); the bitonic kernel
// does m/2 log2(m)^2 / 2 in shared memory (a 4096 row: 160k). Longer or strided slices take the
// counting kernel; a radix or merge sort across blocks would serve them (not written yet).
// gather_gradient is n * k per slice.
#include <algorithm>

#include "../axis.h"
#include "../sort.h"
#include "common.cuh"
#include "kernels.cuh"

namespace gpumat::GPUMAT_CUDA_NS {

namespace {
constexpr int kBitonicMax = 4096;     // the longest slice the shared-memory sort takes
constexpr int kBitonicThreads = 512;  // threads per slice

// The slice position an index names, or -1 when it is not an integer in [0, n).
__device__ int64_t valid_index(float v, int64_t n) {
  if (!(v >= 0.0f) || v >= static_cast<float>(n) || floorf(v) != v) return -1;
  return static_cast<int64_t>(v);
}
}  // namespace

// ---------------------------------------------------------------------------- kernels

// in is (outer, n, inner), indices (outer, k, inner)
__global__ void argsort_kernel(const float* in, float* indices, int64_t outer, int64_t n, int64_t inner,
                               int64_t k, bool descending) {
  const int64_t total = outer * n * inner;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t o = e / (n * inner), j = (e / inner) % n, i = e % inner;
    const float* x = in + o * n * inner + i;
    const float v = x[j * inner];
    int64_t rank = 0;
    for (int64_t p = 0; p < n; ++p) rank += order::before(x[p * inner], p, v, j, descending) ? 1 : 0;
    if (rank < k) indices[(o * k + rank) * inner + i] = static_cast<float>(j);
  }
}

// in is (outer, n) (contiguous slices), indices (outer, k); m is n rounded up to a power of two,
// at most kBitonicMax. Padding entries (index -1) sort after every element.
__global__ void argsort_bitonic_kernel(const float* in, float* indices, int64_t outer, int n, int m,
                                       int64_t k, bool descending) {
  __shared__ float key[kBitonicMax];
  __shared__ int pos[kBitonicMax];
  // Whether entry p sorts before entry q.
  auto before = [&](int p, int q) {
    if (pos[p] < 0) return false;
    if (pos[q] < 0) return true;
    return order::before(key[p], pos[p], key[q], pos[q], descending);
  };
  for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {
    const float* x = in + o * n;
    for (int j = threadIdx.x; j < m; j += blockDim.x) {
      key[j] = j < n ? x[j] : 0.0f;
      pos[j] = j < n ? j : -1;
    }
    __syncthreads();
    for (int size = 2; size <= m; size <<= 1) {
      for (int stride = size / 2; stride > 0; stride >>= 1) {
        for (int t = threadIdx.x; t < m / 2; t += blockDim.x) {
          const int a = 2 * stride * (t / stride) + t % stride, b = a + stride;
          const bool up = (a & size) == 0;  // this pair's half of the bitonic sequence ascends
          if (up ? before(b, a) : before(a, b)) {
            const float kv = key[a];
            key[a] = key[b];
            key[b] = kv;
            const int pv = pos[a];
            pos[a] = pos[b];
            pos[b] = pv;
          }
        }
        __syncthreads();
      }
    }
    for (int64_t r = threadIdx.x; r < k; r += blockDim.x) indices[o * k + r] = static_cast<float>(pos[r]);
    __syncthreads();  // the next slice rewrites key and pos
  }
}

// in is (outer, n, inner), index and out (outer, k, inner)
__global__ void gather_kernel(const float* in, const float* index, float* out, int64_t outer, int64_t n,
                              int64_t inner, int64_t k) {
  const int64_t total = outer * k * inner;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t o = e / (k * inner), i = e % inner;
    const int64_t j = valid_index(index[e], n);
    out[e] = j < 0 ? NAN : in[(o * n + j) * inner + i];
  }
}

// index and dy are (outer, k, inner), dx (outer, n, inner)
__global__ void gather_gradient_kernel(const float* index, const float* dy, float* dx, int64_t outer,
                                       int64_t n, int64_t inner, int64_t k) {
  const int64_t total = outer * n * inner;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t o = e / (n * inner), j = (e / inner) % n, i = e % inner;
    const int64_t g = o * k * inner + i;
    float acc = 0.0f;
    for (int64_t r = 0; r < k; ++r)
      if (valid_index(index[g + r * inner], n) == j) acc += dy[g + r * inner];
    dx[e] = acc;
  }
}

// ---------------------------------------------------------------------------- launchers

void argsort(int dev, const float* in, float* indices, int64_t outer, int64_t n, int64_t inner, int64_t k,
             bool descending) {
  cudaStream_t stream = activate(dev);
  if (inner == 1 && n <= kBitonicMax) {
    int m = 1;
    while (m < n) m <<= 1;
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(outer, stride_blocks(65535LL * 16)));
    launch<argsort_bitonic_kernel>("argsort", blocks, kBitonicThreads, 0, stream, in, indices, outer,
                                   static_cast<int>(n), m, k, descending);
    return;
  }
  launch<argsort_kernel>("argsort", grid_for(outer * n * inner, kBlockSize), kBlockSize, 0, stream, in,
                         indices, outer, n, inner, k, descending);
}

void gather(int dev, const float* in, const float* index, float* out, int64_t outer, int64_t n, int64_t inner,
            int64_t k) {
  cudaStream_t stream = activate(dev);
  launch<gather_kernel>("gather", grid_for(outer * k * inner, kBlockSize), kBlockSize, 0, stream, in, index,
                        out, outer, n, inner, k);
}

void gather_gradient(int dev, const float* index, const float* dy, float* dx, int64_t outer, int64_t n,
                     int64_t inner, int64_t k) {
  cudaStream_t stream = activate(dev);
  launch<gather_gradient_kernel>("gather_gradient", grid_for(outer * n * inner, kBlockSize), kBlockSize, 0,
                                 stream, index, dy, dx, outer, n, inner, k);
}

}  // namespace gpumat::GPUMAT_CUDA_NS
