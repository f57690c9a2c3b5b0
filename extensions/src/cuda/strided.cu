// CUDA strided kernels: copies, elementwise maps and sums over N-d operands walked by a
// strided::Iter (../strided.h), so broadcast, permuted, sliced or flipped operands are read where
// they lie, never copied first. Host reference: ../host/strided.cpp.
//   copy_strided: out[off0] = in[off1]: a permute's, slice's or expand's copy, or a write into a
//                 region of a larger array (index assignment, cat).
//   map_strided:  out[off0] = apply(op, a[off1], b[off2], c[off3]): broadcast binary ops and where.
//   sum_strided:  out[outer off0] = the sum of in over the inner space (the gradient of a broadcast:
//                 the repeated dims summed back), each output element's sum in index order.
// Tiling: one thread per output element in a grid-stride loop (common.cuh's grid_for), its offsets
// from its index by a division per dim. The ops merge dims that are contiguous for every operand,
// so a same-shape call walks one dim, and consecutive threads then touch consecutive elements of
// every operand whose innermost stride is 1 (coalesced); a stride 0 operand is read by a warp from
// one address (a broadcast). sum_strided's threads each own an output element, so the sum is
// deterministic; consecutive outputs are adjacent in the input when the reduced dims lead (a bias
// gradient summing rows), so the reads coalesce there.
#include "../strided.h"
#include "common.cuh"
#include "kernels.cuh"

namespace gpumat::GPUMAT_CUDA_NS {

// ---------------------------------------------------------------------------- kernels

__global__ void copy_strided_kernel(const float* in, float* out, strided::Iter it, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t off[2];
    strided::offsets<2>(it, i, off);
    out[off[0]] = in[off[1]];
  }
}

// c is null unless op is kWhere (the kernel never reads it then).
__global__ void map_strided_kernel(int op, const float* a, const float* b, const float* c, float* out,
                                   strided::Iter it, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t off[4];
    strided::offsets<4>(it, i, off);
    const float cv = c != nullptr ? c[off[3]] : 0.0f;
    out[off[0]] = strided::apply(op, a[off[1]], b[off[2]], cv);
  }
}

__global__ void sum_strided_kernel(const float* in, float* out, strided::Iter outer, strided::Iter inner,
                                   int64_t n_out, int64_t n_inner) {
  for (int64_t o = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; o < n_out;
       o += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t oo[2];
    strided::offsets<2>(outer, o, oo);
    const float* base = in + oo[1];
    float acc = 0.0f;
    for (int64_t r = 0; r < n_inner; ++r) {
      int64_t ri[2];
      strided::offsets<2>(inner, r, ri);
      acc += base[ri[1]];
    }
    out[oo[0]] = acc;
  }
}

// ---------------------------------------------------------------------------- launchers

void copy_strided(int dev, const float* in, float* out, const strided::Iter& it, int64_t n) {
  cudaStream_t stream = activate(dev);
  launch<copy_strided_kernel>("copy_strided", grid_for(n, kBlockSize), kBlockSize, 0, stream, in, out, it, n);
}

void map_strided(int dev, int op, const float* a, const float* b, const float* c, float* out,
                 const strided::Iter& it, int64_t n) {
  cudaStream_t stream = activate(dev);
  launch<map_strided_kernel>("map_strided", grid_for(n, kBlockSize), kBlockSize, 0, stream, op, a, b, c, out,
                             it, n);
}

void sum_strided(int dev, const float* in, float* out, const strided::Iter& outer, const strided::Iter& inner,
                 int64_t n_out, int64_t n_inner) {
  cudaStream_t stream = activate(dev);
  launch<sum_strided_kernel>("sum_strided", grid_for(n_out, kBlockSize), kBlockSize, 0, stream, in, out,
                             outer, inner, n_out, n_inner);
}

}  // namespace gpumat::GPUMAT_CUDA_NS
