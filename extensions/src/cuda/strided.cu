// CUDA strided kernels: copies, elementwise maps and sums over N-d operands walked by a
// strided::Iter (../strided.h), so broadcast, permuted, sliced or flipped operands are read where
// they lie, never copied first. Host reference: ../host/strided.cpp.
//   copy_strided: out[off0] = in[off1]: a permute's, slice's or expand's copy, or a write into a
//                 region of a larger array (index assignment, cat).
//   map_strided:  out[off0] = apply(op, a[off1], b[off2], c[off3]): broadcast binary ops and where.
//   sum_strided:  out[outer off0] = the sum of in over the inner space (the gradient of a broadcast:
//                 the repeated dims summed back).
// Tiling: copy_strided and map_strided give one thread to each output element in a grid-stride
// loop (common.cuh's grid_for), its offsets from its index by a division per dim: for a narrow
// Iter (every array under 2**31 elements) a 32-bit multiplication by each size's magic number
// (strided::offsets_narrow), else a 64-bit division, which costs many times more.
// The ops merge dims that are contiguous for every operand, so a same-shape call walks one dim,
// and consecutive threads then touch consecutive elements of every operand whose innermost stride
// is 1 (coalesced); a stride 0 operand is read by a warp from one address (a broadcast).
// sum_strided picks one of two mappings, both deterministic (a fixed split, summed in a fixed
// order): where the summed elements of an output are contiguous (a row sum), a block of 256 per
// output reads the row coalesced and reduces with block_sum; otherwise (a column sum: a bias
// gradient) a 32x32 block owns 32 outputs, each of its 32 rows of threads sums every 32nd inner
// element for all 32 outputs (coalesced along the outputs), and one row adds the 32 partial sums
// in order from shared memory.
#include <algorithm>

#include "../strided.h"
#include "common.cuh"
#include "kernels.cuh"

namespace gpumat::GPUMAT_CUDA_NS {

namespace {
constexpr int kSumThreads = 256;  // threads per output of the row mapping
constexpr int kSumTile = 32;      // outputs per block (and inner splits) of the column mapping

// Element i's offsets: by multiplications (the divisors' magic numbers) in 32 bits for a narrow
// Iter (I = int32_t), by 64-bit division otherwise.
template <int Count, typename I>
__device__ __forceinline__ void element_offsets(const strided::Iter& it, int64_t i, I* off) {
  if constexpr (sizeof(I) == 4)
    strided::offsets_narrow<Count>(it, static_cast<uint32_t>(i), off);
  else
    strided::offsets<Count, I>(it, i, off);
}
// Whether a launch may take the 32-bit path: the Iter is narrow, and on the emulated device
// GPUMAT_EMU_WIDE_INDEX does not ask for the 64-bit one.
bool use_narrow(const strided::Iter& it) {
#ifdef GPUMAT_EMULATED
  if (emulator::wide_index()) return false;
#endif
  return it.narrow;
}
}  // namespace

// ---------------------------------------------------------------------------- kernels

template <typename I>
__global__ void copy_strided_kernel(const float* in, float* out, strided::Iter it, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    I off[2];
    element_offsets<2, I>(it, i, off);
    out[off[0]] = in[off[1]];
  }
}

// c is null unless op is kWhere (the kernel never reads it then).
template <typename I>
__global__ void map_strided_kernel(int op, const float* a, const float* b, const float* c, float* out,
                                   strided::Iter it, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    I off[4];
    element_offsets<4, I>(it, i, off);
    const float cv = c != nullptr ? c[off[3]] : 0.0f;
    out[off[0]] = strided::apply(op, a[off[1]], b[off[2]], cv);
  }
}

// Row mapping: block per output o (grid-stride over outputs), its inner elements split across
// the block's threads in order, then block_sum.
template <typename I>
__global__ void sum_rows_kernel(const float* in, float* out, strided::Iter outer, strided::Iter inner,
                                int64_t n_out, int64_t n_inner) {
  for (int64_t o = blockIdx.x; o < n_out; o += gridDim.x) {
    I oo[2];
    element_offsets<2, I>(outer, o, oo);
    const float* base = in + oo[1];
    float acc = 0.0f;
    for (int64_t r = threadIdx.x; r < n_inner; r += kSumThreads) {
      I ri[2];
      element_offsets<2, I>(inner, r, ri);
      acc += base[ri[1]];
    }
    acc = block_sum<kSumThreads>(acc);
    if (threadIdx.x == 0) out[oo[0]] = acc;
    __syncthreads();  // block_sum's shared memory is reused by the next output
  }
}

// Column mapping: block (32, 32) per tile of 32 outputs (grid-stride over tiles); thread (x, y)
// sums inner elements y, y + 32, ... of output tile * 32 + x.
template <typename I>
__global__ void sum_columns_kernel(const float* in, float* out, strided::Iter outer, strided::Iter inner,
                                   int64_t n_out, int64_t n_inner) {
  __shared__ float partial[kSumTile][kSumTile + 1];
  const int64_t tiles = (n_out + kSumTile - 1) / kSumTile;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t o = tile * kSumTile + threadIdx.x;
    float acc = 0.0f;
    I oo[2] = {0, 0};
    if (o < n_out) {
      element_offsets<2, I>(outer, o, oo);
      const float* base = in + oo[1];
      for (int64_t r = threadIdx.y; r < n_inner; r += kSumTile) {
        I ri[2];
        element_offsets<2, I>(inner, r, ri);
        acc += base[ri[1]];
      }
    }
    partial[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && o < n_out) {
      float total = 0.0f;
      for (int y = 0; y < kSumTile; ++y) total += partial[y][threadIdx.x];
      out[oo[0]] = total;
    }
    __syncthreads();  // the next tile rewrites partial
  }
}

// ---------------------------------------------------------------------------- launchers

void copy_strided(int dev, const float* in, float* out, const strided::Iter& it, int64_t n) {
  cudaStream_t stream = activate(dev);
  const dim3 grid = grid_for(n, kBlockSize);
  if (use_narrow(it))
    launch<copy_strided_kernel<int32_t>>("copy_strided", grid, kBlockSize, 0, stream, in, out, it, n);
  else
    launch<copy_strided_kernel<int64_t>>("copy_strided", grid, kBlockSize, 0, stream, in, out, it, n);
}

void map_strided(int dev, int op, const float* a, const float* b, const float* c, float* out,
                 const strided::Iter& it, int64_t n) {
  cudaStream_t stream = activate(dev);
  const dim3 grid = grid_for(n, kBlockSize);
  if (use_narrow(it))
    launch<map_strided_kernel<int32_t>>("map_strided", grid, kBlockSize, 0, stream, op, a, b, c, out, it, n);
  else
    launch<map_strided_kernel<int64_t>>("map_strided", grid, kBlockSize, 0, stream, op, a, b, c, out, it, n);
}

void sum_strided(int dev, const float* in, float* out, const strided::Iter& outer, const strided::Iter& inner,
                 int64_t n_out, int64_t n_inner) {
  cudaStream_t stream = activate(dev);
  const bool rows = inner.ndim > 0 && inner.stride[1][inner.ndim - 1] == 1;
  if (rows) {
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(n_out, stride_blocks(65535LL * 16)));
    if (use_narrow(outer))
      launch<sum_rows_kernel<int32_t>>("sum_strided", blocks, kSumThreads, 0, stream, in, out, outer, inner,
                                       n_out, n_inner);
    else
      launch<sum_rows_kernel<int64_t>>("sum_strided", blocks, kSumThreads, 0, stream, in, out, outer, inner,
                                       n_out, n_inner);
    return;
  }
  const int64_t tiles = (n_out + kSumTile - 1) / kSumTile;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(tiles, stride_blocks(65535LL * 16)));
  const dim3 block(kSumTile, kSumTile);
  if (use_narrow(outer))
    launch<sum_columns_kernel<int32_t>>("sum_strided", blocks, block, 0, stream, in, out, outer, inner, n_out,
                                        n_inner);
  else
    launch<sum_columns_kernel<int64_t>>("sum_strided", blocks, block, 0, stream, in, out, outer, inner, n_out,
                                        n_inner);
}

}  // namespace gpumat::GPUMAT_CUDA_NS
