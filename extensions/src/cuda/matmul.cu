// CUDA matmul: c (m, n) = op(a) @ op(b), op = transpose when the flag is set; a is (m, k) or
// (k, m), b is (k, n) or (n, k), all row-major. Host reference: ../host/matmul.cpp (BLAS sgemm).
// Tiling (a first shared-memory kernel; the tuned SGEMM is a later step): each 16x16 block
// computes a 64x64 tile of c, each thread a 4x4 register tile strided by 16 (so the threads of a
// warp read neighbouring shared-memory words). The k loop stages a 64x16 slice of op(a) and a
// 16x64 slice of op(b) in shared memory; the global loads are ordered along whichever axis is
// contiguous for that transpose case, so they coalesce in all four cases. Out-of-range elements
// load as 0 and out-of-range outputs are not stored, so any m, n, k works.
// Sizes: m, n, k up to 2^31 - 1 (ops/matmul.cpp's limit, BLAS's too). Global indices and the k loop run
// in 64 bits (k0 + 16 wraps a 32-bit counter for k near 2^31); the offsets inside a tile stay 32-bit.
// grid.x covers the ceil(n/64) column tiles (at most 2^25, under grid.x's limit); grid.y is capped at
// the device's limit (65,535) and each block loops over row tiles blockIdx.y + i * gridDim.y, so m
// is not bounded by 65,535 * 64 rows.
// Epilogue: matmul_bias runs the same kernel with Epi = kBias or kBiasRelu, which adds
// bias[col] (and takes max(., 0)) to the accumulator before the store, so a dense layer
// relu(x @ W + b) is one launch instead of three.
// Batched (bmm): bmm_tiled_kernel, the same tiles over a batch of products in one launch. grid.z
// covers the output matrices (capped at 65,535, each block looping over z + i * gridDim.z); each
// operand has its own batch stride, 0 for an operand repeated over the batch. An output of stride
// 0 is the sum of the batch's products (the gradient of a repeated operand): each block then adds
// them in its registers, product after product, so the sum needs no second pass. A kernel of its
// own (not a flag of matmul_tiled_kernel), so the 2-D kernel's code and registers stay as tuned.
#include <algorithm>

#include "common.cuh"
#include "kernels.cuh"

namespace gpumat::GPUMAT_CUDA_NS {

namespace {
constexpr int kBM = 64, kBN = 64, kBK = 16;
constexpr int kPad = 2;                        // words of padding per shared tile row (see the kernel)
constexpr int64_t kSplitTargetBlocks = 256;    // split-K below this many output tiles (2 per H100 SM)
constexpr int64_t kMinSplitK = 256;            // k per split at least (16 tiles of kBK)
constexpr int kThreadsX = 16, kThreadsY = 16;  // 256 threads
constexpr int kTM = kBM / kThreadsY, kTN = kBN / kThreadsX;
constexpr int kThreads = kThreadsX * kThreadsY;
constexpr int64_t kMaxGridZ = 65535;  // grid.z's limit on every CUDA device
enum Epilogue : int { kPlain = 0, kBias = 1, kBiasRelu = 2 };
}  // namespace

// ---------------------------------------------------------------------------- kernels

// a is (m, k) or (k, m) when TransA; b is (k, n) or (n, k) when TransB; c is (m, n).
// Split (Epi kPlain only): grid.z chunks of k, the tile's last block adds them (see the launcher);
// a template flag so that the other instantiations carry none of its registers.
template <bool TransA, bool TransB, int Epi = kPlain, bool Split = false>
__global__ void __launch_bounds__(kThreads)
    matmul_tiled_kernel(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
                        int64_t m, int64_t n, int64_t k, const float* __restrict__ bias, int64_t k_chunk,
                        double* partial, unsigned* tickets) {
  // as[kk][row] = op(a)[row0 + row, k0 + kk], bs[kk][col] = op(b)[k0 + kk, col0 + col]. Rows padded
  // by kPad words: where the global loads run along k (a stored (m, k), b stored (n, k)), a warp
  // stores 16 values of kk for 2 rows, and unpadded rows of 64 words put all 16 in one bank (a
  // 16-way bank conflict, found by gpumat.profile); 2 words of padding spread them over 32 banks.
  __shared__ float as[kBK][kBM + kPad];
  __shared__ float bs[kBK][kBN + kPad];
  __shared__ bool last_block;  // split-K: this block sums the tile's chunks
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * kThreadsX + tx;
  const int64_t col0 = blockIdx.x * static_cast<int64_t>(kBN);
  const int64_t row_tiles = (m + kBM - 1) / kBM;
  // Split: this block sums k in [k_begin, k_end) and writes its tile to partial.
  const int64_t k_begin = blockIdx.z * k_chunk;
  const int64_t k_end = k_begin + k_chunk < k ? k_begin + k_chunk : k;
  // Every thread of the block runs the same iterations, so all reach the barriers together.
  for (int64_t tile = blockIdx.y; tile < row_tiles; tile += gridDim.y) {
    const int64_t row0 = tile * kBM;
    float acc[kTM][kTN] = {};
    for (int64_t k0 = k_begin; k0 < k_end; k0 += kBK) {
#pragma unroll
      for (int l = tid; l < kBM * kBK; l += kThreads) {
        // contiguous axis first: k for a (m, k) a, m for a stored (k, m)
        const int kk = TransA ? l / kBM : l % kBK;
        const int row = TransA ? l % kBM : l / kBK;
        const int64_t gr = row0 + row, gk = k0 + kk;
        float v = 0.0f;
        if (gr < m && gk < k_end) v = TransA ? a[gk * m + gr] : a[gr * k + gk];
        as[kk][row] = v;
      }
#pragma unroll
      for (int l = tid; l < kBN * kBK; l += kThreads) {
        // contiguous axis first: n for a (k, n) b, k for a stored (n, k)
        const int kk = TransB ? l % kBK : l / kBN;
        const int col = TransB ? l / kBK : l % kBN;
        const int64_t gc = col0 + col, gk = k0 + kk;
        float v = 0.0f;
        if (gc < n && gk < k_end) v = TransB ? b[gc * k + gk] : b[gk * n + gc];
        bs[kk][col] = v;
      }
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < kBK; ++kk) {
        float ra[kTM], rb[kTN];
#pragma unroll
        for (int i = 0; i < kTM; ++i) ra[i] = as[kk][ty + i * kThreadsY];
#pragma unroll
        for (int j = 0; j < kTN; ++j) rb[j] = bs[kk][tx + j * kThreadsX];
#pragma unroll
        for (int i = 0; i < kTM; ++i)
#pragma unroll
          for (int j = 0; j < kTN; ++j) acc[i][j] = fmaf(ra[i], rb[j], acc[i][j]);
      }
      __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < kTM; ++i) {
      const int64_t r = row0 + ty + i * kThreadsY;
      if (r >= m) continue;
#pragma unroll
      for (int j = 0; j < kTN; ++j) {
        const int64_t cc = col0 + tx + j * kThreadsX;
        if (cc >= n) continue;
        if (Split) {  // Epi is kPlain: the tile's last block adds the k chunks below
          partial[(blockIdx.z * m + r) * n + cc] = acc[i][j];
          continue;
        }
        float v = acc[i][j];
        if (Epi != kPlain) v += bias[cc];
        if (Epi == kBiasRelu) v = fmaxf(v, 0.0f);
        c[r * n + cc] = v;
      }
    }
    if (!Split) continue;
    // Split-K: the last of the tile's gridDim.z blocks to finish (counted on the tile's ticket
    // after a fence that publishes its partials) sums the chunks in chunk order, in float64, and
    // resets the ticket ("last block" reduction, as loss.cu's; the CUDA samples'
    // threadFenceReduction). No second launch; the order, hence the result, is fixed.
    unsigned* ticket = tickets + tile * gridDim.x + blockIdx.x;
    __threadfence();
    __syncthreads();
    if (tid == 0) last_block = atomicAdd(ticket, 1u) == gridDim.z - 1;
    __syncthreads();
    if (!last_block) continue;
    __threadfence();
    const volatile double* done = partial;  // written by other blocks: read past the cache
#pragma unroll
    for (int i = 0; i < kTM; ++i) {
      const int64_t r = row0 + ty + i * kThreadsY;
      if (r >= m) continue;
#pragma unroll
      for (int j = 0; j < kTN; ++j) {
        const int64_t cc = col0 + tx + j * kThreadsX;
        if (cc >= n) continue;
        double sum = 0.0;
        for (unsigned z = 0; z < gridDim.z; ++z) sum += done[(z * m + r) * n + cc];
        c[r * n + cc] = static_cast<float>(sum);
      }
    }
    if (tid == 0) *ticket = 0u;
  }
}

// c[z] = op(a[z]) @ op(b[z]) for the output matrices z = blockIdx.z + i * gridDim.z < outputs; matrix
// i of a at a + i * stride_a (0: one matrix for all), of b likewise, of c at c + z * stride_c. With
// stride_c 0 there is one output, the sum of all `count` products. The tiles, loads (coalesced in
// all four transpose cases) and padding are matmul_tiled_kernel's (see it); k is not split.
template <bool TransA, bool TransB>
__global__ void __launch_bounds__(kThreads)
    bmm_tiled_kernel(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
                     int64_t m, int64_t n, int64_t k, int64_t count, int64_t stride_a, int64_t stride_b,
                     int64_t stride_c) {
  __shared__ float as[kBK][kBM + kPad];
  __shared__ float bs[kBK][kBN + kPad];
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * kThreadsX + tx;
  const int64_t col0 = blockIdx.x * static_cast<int64_t>(kBN);
  const int64_t row_tiles = (m + kBM - 1) / kBM;
  const int64_t outputs = stride_c != 0 ? count : 1, summed = stride_c != 0 ? 1 : count;
  // Every thread of the block runs the same iterations, so all reach the barriers together.
  for (int64_t z = blockIdx.z; z < outputs; z += gridDim.z) {
    float* __restrict__ cz = c + z * stride_c;
    for (int64_t tile = blockIdx.y; tile < row_tiles; tile += gridDim.y) {
      const int64_t row0 = tile * kBM;
      float acc[kTM][kTN] = {};
      for (int64_t s = 0; s < summed; ++s) {
        const int64_t i = stride_c != 0 ? z : s;  // the product's index in the batch
        const float* __restrict__ ai = a + i * stride_a;
        const float* __restrict__ bi = b + i * stride_b;
        for (int64_t k0 = 0; k0 < k; k0 += kBK) {
#pragma unroll
          for (int l = tid; l < kBM * kBK; l += kThreads) {
            const int kk = TransA ? l / kBM : l % kBK;  // contiguous axis first, as matmul_tiled_kernel
            const int row = TransA ? l % kBM : l / kBK;
            const int64_t gr = row0 + row, gk = k0 + kk;
            float v = 0.0f;
            if (gr < m && gk < k) v = TransA ? ai[gk * m + gr] : ai[gr * k + gk];
            as[kk][row] = v;
          }
#pragma unroll
          for (int l = tid; l < kBN * kBK; l += kThreads) {
            const int kk = TransB ? l % kBK : l / kBN;
            const int col = TransB ? l / kBK : l % kBN;
            const int64_t gc = col0 + col, gk = k0 + kk;
            float v = 0.0f;
            if (gc < n && gk < k) v = TransB ? bi[gc * k + gk] : bi[gk * n + gc];
            bs[kk][col] = v;
          }
          __syncthreads();
#pragma unroll
          for (int kk = 0; kk < kBK; ++kk) {
            float ra[kTM], rb[kTN];
#pragma unroll
            for (int r = 0; r < kTM; ++r) ra[r] = as[kk][ty + r * kThreadsY];
#pragma unroll
            for (int j = 0; j < kTN; ++j) rb[j] = bs[kk][tx + j * kThreadsX];
#pragma unroll
            for (int r = 0; r < kTM; ++r)
#pragma unroll
              for (int j = 0; j < kTN; ++j) acc[r][j] = fmaf(ra[r], rb[j], acc[r][j]);
          }
          __syncthreads();
        }
      }
#pragma unroll
      for (int r = 0; r < kTM; ++r) {
        const int64_t row = row0 + ty + r * kThreadsY;
        if (row >= m) continue;
#pragma unroll
        for (int j = 0; j < kTN; ++j) {
          const int64_t col = col0 + tx + j * kThreadsX;
          if (col < n) cz[row * n + col] = acc[r][j];
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------- launchers

namespace {

// The tiled kernel for the transpose case (a, trans_a, b, trans_b), split or not.
template <bool Split, int Epi>
void launch_variant(const char* op, dim3 grid, cudaStream_t stream, const float* a, bool trans_a,
                    const float* b, bool trans_b, float* c, int64_t m, int64_t n, int64_t k,
                    const float* bias, int64_t k_chunk, double* partial, unsigned* tickets) {
  const dim3 block(kThreadsX, kThreadsY);
  if (!trans_a && !trans_b)
    launch<matmul_tiled_kernel<false, false, Epi, Split>>(op, grid, block, 0, stream, a, b, c, m, n, k, bias,
                                                          k_chunk, partial, tickets);
  else if (!trans_a && trans_b)
    launch<matmul_tiled_kernel<false, true, Epi, Split>>(op, grid, block, 0, stream, a, b, c, m, n, k, bias,
                                                         k_chunk, partial, tickets);
  else if (trans_a && !trans_b)
    launch<matmul_tiled_kernel<true, false, Epi, Split>>(op, grid, block, 0, stream, a, b, c, m, n, k, bias,
                                                         k_chunk, partial, tickets);
  else
    launch<matmul_tiled_kernel<true, true, Epi, Split>>(op, grid, block, 0, stream, a, b, c, m, n, k, bias,
                                                        k_chunk, partial, tickets);
}

// Launches the tiled kernel with epilogue Epi over a grid the device allows (the kernel loops over
// the row tiles past grid.y). bias is null for kPlain.
template <int Epi>
void launch_tiled(const char* op, int dev, const float* a, bool trans_a, const float* b, bool trans_b,
                  const float* bias, float* c, int64_t m, int64_t n, int64_t k) {
  const GridLimits lim = grid_limits(dev);
  const int64_t col_tiles = ceil_div(n, kBN), row_tiles = ceil_div(m, kBM);
  if (col_tiles > lim.x)  // unreachable while ops/matmul.cpp caps n at 2^31 - 1; kept for the cast below
    throw ShapeError(std::string(op) + ": " + std::to_string(n) +
                     " output columns exceed the CUDA grid limit of " + std::to_string(lim.x * kBN));
  // Split-K for a plain product whose output tiles are too few to fill a GPU (a weight gradient:
  // (784, 256) = x^T @ dy over a batch of 1,000 is 52 tiles, 52 of an H100's 132 SMs; found by
  // gpumat.profile): grid.z chunks of k, each block's tile to float64 partials, and each tile's
  // last block adds them in chunk order (deterministic), counting on one of the device's block
  // tickets per tile (fewer than kSplitTargetBlocks <= kBlockTickets tiles). Each chunk keeps at
  // least kMinSplitK of k.
  static_assert(kSplitTargetBlocks <= kBlockTickets, "a ticket per split tile");
  const int64_t tiles = col_tiles * row_tiles;
  int64_t splits = 1;
  if (Epi == kPlain && tiles < kSplitTargetBlocks && row_tiles <= lim.y)
    splits = std::max<int64_t>(1, std::min(ceil_div(kSplitTargetBlocks, tiles), k / kMinSplitK));
  const int64_t k_chunk = splits > 1 ? ceil_div(ceil_div(k, splits), kBK) * kBK : std::max<int64_t>(k, 1);
  splits = splits > 1 ? ceil_div(k, k_chunk) : 1;
  cudaStream_t stream = activate(dev);
  dim3 grid(static_cast<unsigned>(col_tiles), static_cast<unsigned>(std::min(row_tiles, lim.y)),
            static_cast<unsigned>(splits));
  note_flops(2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) +
             (Epi != kPlain ? static_cast<double>(m) * static_cast<double>(n) : 0.0));
  decltype(workspace_lock()) lock;
  double* partial = nullptr;
  unsigned* tickets = nullptr;
  if (splits > 1) {
    lock = workspace_lock();  // the partials live in the device's workspace (common.cuh)
    partial = reduce_partials(dev, splits, m * n);
    tickets = block_ticket(dev);
  }
  if (splits > 1) {
    if constexpr (Epi == kPlain)
      launch_variant<true, kPlain>(op, grid, stream, a, trans_a, b, trans_b, c, m, n, k, bias, k_chunk,
                                   partial, tickets);
  } else {
    launch_variant<false, Epi>(op, grid, stream, a, trans_a, b, trans_b, c, m, n, k, bias, k_chunk, partial,
                               tickets);
  }
}

}  // namespace

void matmul(int dev, const float* a, bool trans_a, const float* b, bool trans_b, float* c, int64_t m,
            int64_t n, int64_t k) {
  launch_tiled<kPlain>("matrix_multiply", dev, a, trans_a, b, trans_b, nullptr, c, m, n, k);
}

void matmul_bias(int dev, const float* a, bool trans_a, const float* b, bool trans_b, const float* bias,
                 float* c, int64_t m, int64_t n, int64_t k, bool relu) {
  if (relu)
    launch_tiled<kBiasRelu>("matmul_bias", dev, a, trans_a, b, trans_b, bias, c, m, n, k);
  else
    launch_tiled<kBias>("matmul_bias", dev, a, trans_a, b, trans_b, bias, c, m, n, k);
}

// c[i] = op(a[i]) @ op(b[i]) for the batch's products (stride 0: the same matrix for every i; c's
// stride 0: c = their sum), one launch of bmm_tiled_kernel: grid.z over c's matrices.
void bmm(int dev, const float* a, bool trans_a, int64_t stride_a, const float* b, bool trans_b,
         int64_t stride_b, float* c, int64_t stride_c, int64_t batch, int64_t m, int64_t n, int64_t k) {
  const char* op = "bmm";
  const GridLimits lim = grid_limits(dev);
  const int64_t col_tiles = ceil_div(n, kBN), row_tiles = ceil_div(m, kBM);
  if (col_tiles > lim.x)  // unreachable while ops/matmul.cpp caps n at 2^31 - 1; kept for the cast below
    throw ShapeError(std::string(op) + ": " + std::to_string(n) +
                     " output columns exceed the CUDA grid limit of " + std::to_string(lim.x * kBN));
  const int64_t outputs = stride_c != 0 ? batch : 1;
  cudaStream_t stream = activate(dev);
  const dim3 grid(static_cast<unsigned>(col_tiles), static_cast<unsigned>(std::min(row_tiles, lim.y)),
                  static_cast<unsigned>(std::min(outputs, kMaxGridZ)));
  const dim3 block(kThreadsX, kThreadsY);
  note_flops(2.0 * static_cast<double>(batch) * static_cast<double>(m) * static_cast<double>(n) *
             static_cast<double>(k));
  if (!trans_a && !trans_b)
    launch<bmm_tiled_kernel<false, false>>(op, grid, block, 0, stream, a, b, c, m, n, k, batch, stride_a,
                                           stride_b, stride_c);
  else if (!trans_a && trans_b)
    launch<bmm_tiled_kernel<false, true>>(op, grid, block, 0, stream, a, b, c, m, n, k, batch, stride_a,
                                          stride_b, stride_c);
  else if (trans_a && !trans_b)
    launch<bmm_tiled_kernel<true, false>>(op, grid, block, 0, stream, a, b, c, m, n, k, batch, stride_a,
                                          stride_b, stride_c);
  else
    launch<bmm_tiled_kernel<true, true>>(op, grid, block, 0, stream, a, b, c, m, n, k, batch, stride_a,
                                         stride_b, stride_c);
}

}  // namespace gpumat::GPUMAT_CUDA_NS
