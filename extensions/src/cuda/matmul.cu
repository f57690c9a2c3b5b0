// CUDA matmul: c (m, n) = op(a) @ op(b), op = transpose when the flag is set; a is (m, k) or
// (k, m), b is (k, n) or (n, k), all row-major. Host reference: ../host/matmul.cpp (BLAS sgemm).
// Tiling (a first shared-memory kernel; the tuned SGEMM is a later step): each 16x16 block
// computes a 64x64 tile of c, each thread a 4x4 register tile strided by 16 (so the threads of a
// warp read neighbouring shared-memory words). The k loop stages a 64x16 slice of op(a) and a
// 16x64 slice of op(b) in shared memory; the global loads are ordered along whichever axis is
// contiguous for that transpose case, so they coalesce in all four cases. Out-of-range elements
// load as 0 and out-of-range outputs are not stored, so any m, n, k works.
// Epilogue (issue 16): matmul_bias runs the same kernel with Epi = kBias or kBiasRelu, which adds
// bias[col] (and takes max(., 0)) to the accumulator before the store, so a dense layer
// relu(x @ W + b) is one launch instead of three.
#include "common.cuh"
#include "kernels.cuh"

namespace gpumat::GPUMAT_CUDA_NS {

namespace {
constexpr int kBM = 64, kBN = 64, kBK = 16;
constexpr int kThreadsX = 16, kThreadsY = 16;  // 256 threads
constexpr int kTM = kBM / kThreadsY, kTN = kBN / kThreadsX;
constexpr int kThreads = kThreadsX * kThreadsY;
enum Epilogue : int { kPlain = 0, kBias = 1, kBiasRelu = 2 };
}  // namespace

// ---------------------------------------------------------------------------- kernels

// a is (m, k) or (k, m) when TransA; b is (k, n) or (n, k) when TransB; c is (m, n); bias is
// (n,) (read only when Epi != kPlain).
template <bool TransA, bool TransB, int Epi = kPlain>
__global__ void __launch_bounds__(kThreads)
    matmul_tiled_kernel(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
                        int m, int n, int k, const float* __restrict__ bias) {
  __shared__ float as[kBK][kBM];  // as[kk][row] = op(a)[row0 + row, k0 + kk]
  __shared__ float bs[kBK][kBN];  // bs[kk][col] = op(b)[k0 + kk, col0 + col]
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * kThreadsX + tx;
  const int row0 = blockIdx.y * kBM, col0 = blockIdx.x * kBN;
  float acc[kTM][kTN] = {};

  for (int k0 = 0; k0 < k; k0 += kBK) {
#pragma unroll
    for (int l = tid; l < kBM * kBK; l += kThreads) {
      // contiguous axis first: k for a (m, k) a, m for a stored (k, m)
      int kk = TransA ? l / kBM : l % kBK;
      int row = TransA ? l % kBM : l / kBK;
      int gr = row0 + row, gk = k0 + kk;
      float v = 0.0f;
      if (gr < m && gk < k)
        v = TransA ? a[static_cast<int64_t>(gk) * m + gr] : a[static_cast<int64_t>(gr) * k + gk];
      as[kk][row] = v;
    }
#pragma unroll
    for (int l = tid; l < kBN * kBK; l += kThreads) {
      // contiguous axis first: n for a (k, n) b, k for a stored (n, k)
      int kk = TransB ? l % kBK : l / kBN;
      int col = TransB ? l / kBK : l % kBN;
      int gc = col0 + col, gk = k0 + kk;
      float v = 0.0f;
      if (gc < n && gk < k)
        v = TransB ? b[static_cast<int64_t>(gc) * k + gk] : b[static_cast<int64_t>(gk) * n + gc];
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
    int r = row0 + ty + i * kThreadsY;
    if (r >= m) continue;
#pragma unroll
    for (int j = 0; j < kTN; ++j) {
      int cc = col0 + tx + j * kThreadsX;
      if (cc >= n) continue;
      float v = acc[i][j];
      if (Epi != kPlain) v += bias[cc];
      if (Epi == kBiasRelu) v = fmaxf(v, 0.0f);
      c[static_cast<int64_t>(r) * n + cc] = v;
    }
  }
}

// ---------------------------------------------------------------------------- launchers

void matmul(int dev, const float* a, bool trans_a, const float* b, bool trans_b, float* c, int64_t m,
            int64_t n, int64_t k) {
  const int64_t kMaxGridY = 65535;
  if (ceil_div(m, kBM) > kMaxGridY)
    throw ShapeError("matrix_multiply: " + std::to_string(m) + " output rows exceed the CUDA grid limit of " +
                     std::to_string(kMaxGridY * kBM));
  cudaStream_t stream = activate(dev);
  dim3 grid(static_cast<unsigned>(ceil_div(n, kBN)), static_cast<unsigned>(ceil_div(m, kBM)));
  dim3 block(kThreadsX, kThreadsY);
  int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k);
  const char* op = "matrix_multiply";
  if (!trans_a && !trans_b)
    launch<matmul_tiled_kernel<false, false>>(op, grid, block, 0, stream, a, b, c, mi, ni, ki, nullptr);
  else if (!trans_a && trans_b)
    launch<matmul_tiled_kernel<false, true>>(op, grid, block, 0, stream, a, b, c, mi, ni, ki, nullptr);
  else if (trans_a && !trans_b)
    launch<matmul_tiled_kernel<true, false>>(op, grid, block, 0, stream, a, b, c, mi, ni, ki, nullptr);
  else
    launch<matmul_tiled_kernel<true, true>>(op, grid, block, 0, stream, a, b, c, mi, ni, ki, nullptr);
}

template <int Epi>
void launch_matmul_bias(const char* op, dim3 grid, dim3 block, cudaStream_t stream, const float* a,
                        bool trans_a, const float* b, bool trans_b, float* c, int m, int n, int k,
                        const float* bias) {
  if (!trans_a && !trans_b)
    launch<matmul_tiled_kernel<false, false, Epi>>(op, grid, block, 0, stream, a, b, c, m, n, k, bias);
  else if (!trans_a && trans_b)
    launch<matmul_tiled_kernel<false, true, Epi>>(op, grid, block, 0, stream, a, b, c, m, n, k, bias);
  else if (trans_a && !trans_b)
    launch<matmul_tiled_kernel<true, false, Epi>>(op, grid, block, 0, stream, a, b, c, m, n, k, bias);
  else
    launch<matmul_tiled_kernel<true, true, Epi>>(op, grid, block, 0, stream, a, b, c, m, n, k, bias);
}

void matmul_bias(int dev, const float* a, bool trans_a, const float* b, bool trans_b, const float* bias,
                 float* c, int64_t m, int64_t n, int64_t k, bool relu) {
  const int64_t kMaxGridY = 65535;
  if (ceil_div(m, kBM) > kMaxGridY)
    throw ShapeError("matmul_bias: " + std::to_string(m) + " output rows exceed the CUDA grid limit of " +
                     std::to_string(kMaxGridY * kBM));
  cudaStream_t stream = activate(dev);
  dim3 grid(static_cast<unsigned>(ceil_div(n, kBN)), static_cast<unsigned>(ceil_div(m, kBM)));
  dim3 block(kThreadsX, kThreadsY);
  int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k);
  if (relu)
    launch_matmul_bias<kBiasRelu>("matmul_bias", grid, block, stream, a, trans_a, b, trans_b, c, mi, ni, ki,
                                  bias);
  else
    launch_matmul_bias<kBias>("matmul_bias", grid, block, stream, a, trans_a, b, trans_b, c, mi, ni, ki,
                              bias);
}

}  // namespace gpumat::GPUMAT_CUDA_NS
