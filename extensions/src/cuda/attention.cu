// CUDA attention family: fused scaled dot-product attention in the FlashAttention-2 manner (Dao,
// "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning", 2023).
// q (batch, l, e), k (batch, s, e), v (batch, s, ev); out (batch, l, ev + 1): per query row the
// ev outputs O = softmax(scale q k^T [+ causal mask]) v and, in the last column, the row's
// logsumexp L = m + log(sum exp(scale q.k - m)) that the gradient reads. The (l, s) matrix is
// never stored: a block holds 64-row tiles of Q, K and V in shared memory, and each of its four
// warps owns 16 rows of the block's tile, whose scores stay in the warp's registers.
//   attention_forward_kernel: a block per (batch, 64 query rows); over 64-key tiles it keeps the
//     running max m and sum, rescaling the accumulated O by exp(m_old - m_new) (online softmax).
//   attention_delta_kernel: D = rowsum(dO * O) - dL per query row, once, into the device's
//     workspace (dL: dout's last column, the gradient of the logsumexp output, which adds P dL to
//     dS); FlashAttention-2's preprocessing step.
//   attention_dkdv_kernel: a block per (batch, 64 key rows); over query tiles it recomputes
//     P = exp(scale q.k - L) and dS = P (dO.v - D), and accumulates dV = P^T dO and
//     dK = scale dS^T Q in registers.
//   attention_dq_kernel: a block per (batch, 64 query rows); over key tiles dQ = scale dS K.
// Two passes instead of float atomics: each output element has one writer, so the gradient is
// deterministic. Causal (key index > query index masked, top-left aligned as PyTorch's is_causal)
// skips the key tiles wholly above the diagonal, and the forward and dQ grids start with the
// longest rows. A row with no key (s == 0) gives O = 0, L = -inf.
//
// Products on tensor cores in 3xTF32 (Ootomo and Yokota, "Recovering single precision accuracy
// from Tensor Cores while surpassing the FP32 theoretical peak performance", 2022; CUTLASS's
// OpMultiplyAddFastF32, which PyTorch's float32 memory-efficient attention uses): each operand x is
// split into big = tf32(x) and small = tf32(x - big), and a b ~ a_big b_big + a_big b_small +
// a_small b_big, three mma.sync.m16n8k8 (float32 accumulation; the dropped a_small b_small is about
// 2^-22 relative), so results keep float32 accuracy. Scores come out in the mma's accumulator
// layout and go straight back in as the A operand of the next product (P V, dS K, P^T dO, dS^T Q):
// the accumulator holds columns 2t and 2t + 1 of each 8-column step where A wants t and t + 4, so
// the product pairs its k index t with key 2t and t + 4 with key 2t + 1 and reads the other
// operand's rows in that order (a sum over keys does not depend on their order). Tiles are
// row-major with rows HD + 4 floats apart (4 mod 32), so every fragment load of a warp touches 32
// distinct banks. The head dim is a template bucket HD (16, 32, 64, 128 >= e, ev; tiles are
// zero-padded past e and ev); the tiles take dynamic shared memory (up to 132 KiB for HD = 128,
// raised per kernel with cudaFuncSetAttribute). The emulated device and GPUs before sm_80 run the
// same mma through shared memory (mma_tf32). Host reference: ../host/attention.cpp.
#include <cmath>
#include <cstdint>

#include "common.cuh"
#include "kernels.cuh"

namespace gpumat::GPUMAT_CUDA_NS {

namespace {

constexpr int kTile = 64;                // query rows and key rows per tile
constexpr int kWarps = 4;                // each owns kRows rows of a tile
constexpr int kRows = kTile / kWarps;    // 16: an mma's M
constexpr int kThreads = 32 * kWarps;    // 128
constexpr int kSteps = kTile / 8;        // 8-column mma steps across a 64-wide score tile
constexpr float kNegInf = -INFINITY;

// The head dim's layout in shared memory and registers.
template <int HD>
struct Head {
  static constexpr int kStride = HD + 4;               // row stride: 4 mod 32 banks
  static constexpr int kSteps = HD / 8;                // 8-column mma steps across the head dim
  static constexpr int kTileFloats = kTile * kStride;  // one 64-row tile
};

// ---------------------------------------------------------------------------- 3xTF32 mma

// x rounded to TF32 (10 mantissa bits; round to nearest, ties away from zero, as cvt.rna.tf32),
// as the bits of a float whose low 13 bits are zero. Inf and NaN pass unchanged.
__device__ __forceinline__ uint32_t to_tf32(float x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
#else
  uint32_t u = __float_as_uint(x);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
  return u;
#endif
}

// x = big + small to about 2^-22 relative, both TF32.
__device__ __forceinline__ void split(float x, uint32_t& big, uint32_t& small) {
  big = to_tf32(x);
  small = to_tf32(x - __uint_as_float(big));
}

#if !(defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800)
// mma_tf32's product before sm_80 and on the emulated device, through shared memory: each lane
// posts its fragments, then reads the row of A and the columns of B its four outputs need
// (products of TF32 values are exact in float32; sums in k order). Not inlined: a GPU kernel calls
// it hundreds of times, and inlined copies would make ptxas take minutes.
__device__ __noinline__ void mma_tf32_shared(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  __shared__ uint32_t posted[kWarps][32][6];
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  uint32_t* mine = posted[w][lane];
  for (int i = 0; i < 4; ++i) mine[i] = a[i];
  mine[4] = b[0];
  mine[5] = b[1];
  __syncwarp();
  for (int k = 0; k < 8; ++k) {
    const int hi = k < 4 ? 0 : 1;
    const uint32_t* pa = posted[w][g * 4 + k % 4];  // holds A[g][k] and A[g + 8][k]
    const float a0 = __uint_as_float(pa[2 * hi]), a1 = __uint_as_float(pa[2 * hi + 1]);
    const float b0 = __uint_as_float(posted[w][2 * t * 4 + k % 4][4 + hi]);  // B[k][2t]
    const float b1 = __uint_as_float(posted[w][(2 * t + 1) * 4 + k % 4][4 + hi]);
    d[0] = fmaf(a0, b0, d[0]);
    d[1] = fmaf(a0, b1, d[1]);
    d[2] = fmaf(a1, b0, d[2]);
    d[3] = fmaf(a1, b1, d[3]);
  }
  __syncwarp();
}
#endif

// d (16 x 8, float32) += a (16 x 8, TF32) b (8 x 8, TF32): mma.sync.aligned.m16n8k8 with the PTX
// fragment layouts (g = lane / 4, t = lane % 4): a = A[g][t], A[g + 8][t], A[g][t + 4],
// A[g + 8][t + 4]; b = B[t][g], B[t + 4][g]; d = D[g][2t], D[g][2t + 1], D[g + 8][2t],
// D[g + 8][2t + 1].
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  mma_tf32_shared(d, a, b);
#endif
}

// d += a b in 3xTF32 (the small terms first).
__device__ __forceinline__ void mma3(float (&d)[4], const uint32_t (&a_big)[4], const uint32_t (&a_small)[4],
                                     const uint32_t (&b_big)[2], const uint32_t (&b_small)[2]) {
  mma_tf32(d, a_small, b_big);
  mma_tf32(d, a_big, b_small);
  mma_tf32(d, a_big, b_big);
}

// s (16 x 64 scores, accumulator layout; s[n] holds columns 8n..8n+7) = the warp's 16 rows of a
// times the 64 rows of b, transposed, over the padded head dim (a and b row-major tiles).
template <int HD>
__device__ void tile_scores(const float* a, const float* b, float (&s)[kSteps][4], int g, int t) {
  constexpr int S = Head<HD>::kStride;
#pragma unroll
  for (int n = 0; n < kSteps; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
  for (int d = 0; d < HD; d += 8) {
    uint32_t ab[4], as[4];
    split(a[g * S + d + t], ab[0], as[0]);
    split(a[(g + 8) * S + d + t], ab[1], as[1]);
    split(a[g * S + d + t + 4], ab[2], as[2]);
    split(a[(g + 8) * S + d + t + 4], ab[3], as[3]);
#pragma unroll
    for (int n = 0; n < kSteps; ++n) {
      const float* br = b + (8 * n + g) * S + d;
      uint32_t bb[2], bs[2];
      split(br[t], bb[0], bs[0]);
      split(br[t + 4], bb[1], bs[1]);
      mma3(s[n], ab, as, bb, bs);
    }
  }
}

// acc (16 x HD, accumulator layout; acc[j] holds head columns 8j..8j+7) += p (16 x 64, accumulator
// layout) times the 64 rows of m (a row-major tile): p's registers are the A operand, k index t
// paired with key 8n + 2t and t + 4 with key 8n + 2t + 1, and m's rows read in that order.
template <int HD>
__device__ void scores_times_tile(const float (&p)[kSteps][4], const float* m, float (&acc)[Head<HD>::kSteps][4],
                                  int g, int t) {
  constexpr int S = Head<HD>::kStride;
#pragma unroll
  for (int n = 0; n < kSteps; ++n) {
    uint32_t ab[4], as[4];
    split(p[n][0], ab[0], as[0]);  // row g, key 8n + 2t
    split(p[n][2], ab[1], as[1]);  // row g + 8, key 8n + 2t
    split(p[n][1], ab[2], as[2]);  // row g, key 8n + 2t + 1
    split(p[n][3], ab[3], as[3]);  // row g + 8, key 8n + 2t + 1
    const float* m0 = m + (8 * n + 2 * t) * S;
#pragma unroll
    for (int j = 0; j < Head<HD>::kSteps; ++j) {
      uint32_t bb[2], bs[2];
      split(m0[8 * j + g], bb[0], bs[0]);
      split(m0[S + 8 * j + g], bb[1], bs[1]);
      mma3(acc[j], ab, as, bb, bs);
    }
  }
}

// ---------------------------------------------------------------------------- tiles and rows

// Loads rows [r0, r0 + kTile) of a (rows, width) matrix (row stride `stride`) into a tile; zeros
// past `rows` and past `width` (to HD), so that products over the padded head dim are exact.
template <int HD>
__device__ void load_tile(float* tile, const float* m, int64_t r0, int64_t rows, int64_t width,
                          int64_t stride) {
  for (int i = threadIdx.x; i < kTile * HD; i += kThreads) {
    const int rr = i / HD, x = i % HD;
    tile[rr * Head<HD>::kStride + x] = r0 + rr < rows && x < width ? m[(r0 + rr) * stride + x] : 0.0f;
  }
}

// Stores a warp's accumulator (16 rows x HD) times mul as rows [0, rows) x columns [0, width) of m
// (row stride `stride`, m at the warp's first row).
template <int HD>
__device__ void store_rows(const float (&acc)[Head<HD>::kSteps][4], float mul, float* m, int64_t rows,
                           int64_t width, int64_t stride, int g, int t) {
#pragma unroll
  for (int j = 0; j < Head<HD>::kSteps; ++j)
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int r = g + 8 * (c / 2), x = 8 * j + 2 * t + c % 2;
      if (r < rows && x < width) m[r * stride + x] = acc[j][c] * mul;
    }
}

// The max and the sum over a row's four lanes (a quad: the lanes of one g).
__device__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

__device__ bool masked(int64_t row, int64_t col, int64_t s, bool causal) {
  return col >= s || (causal && col > row);
}

// Per query row q0 + r of a tile (r < kTile): L (out's last column) and D (delta), both 0 past l.
__device__ void load_row_stats(float* lse, float* dsum, const float* out, const float* delta, int64_t q0,
                               int64_t l, int64_t ev) {
  for (int r = threadIdx.x; r < kTile; r += kThreads) {
    const int64_t row = q0 + r;
    lse[r] = row < l ? out[row * (ev + 1) + ev] : 0.0f;
    dsum[r] = row < l ? delta[row] : 0.0f;
  }
}

// ---------------------------------------------------------------------------- kernels

// q (batch, l, e), k (batch, s, e), v (batch, s, ev), out (batch, l, ev + 1)
template <int HD>
__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(const float* q, const float* k, const float* v, float* out, int64_t batch,
                             int64_t l, int64_t s, int64_t e, int64_t ev, float scale, bool causal) {
  using H = Head<HD>;
  float* qs = dynamic_smem<float>();
  float* ks = qs + H::kTileFloats;
  float* vs = ks + H::kTileFloats;
  const int w = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
  const int64_t qblocks = (l + kTile - 1) / kTile;
  for (int64_t tile = blockIdx.x; tile < batch * qblocks; tile += gridDim.x) {
    const int64_t b = tile / qblocks, q0 = (qblocks - 1 - tile % qblocks) * kTile;  // long causal rows first
    const int64_t r0 = q0 + kRows * w;                                                // the warp's first row
    const float* kb = k + b * s * e;
    const float* vb = v + b * s * ev;
    load_tile<HD>(qs, q + b * l * e, q0, l, e, e);
    float m[2] = {kNegInf, kNegInf}, sum[2] = {0.0f, 0.0f}, acc[H::kSteps][4];
#pragma unroll
    for (int j = 0; j < H::kSteps; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    const int64_t kend = causal ? (s < q0 + kTile ? s : q0 + kTile) : s;
    for (int64_t k0 = 0; k0 < kend; k0 += kTile) {
      __syncthreads();  // qs loaded; the last tile's readers are done with ks, vs
      load_tile<HD>(ks, kb, k0, s, e, e);
      load_tile<HD>(vs, vb, k0, s, ev, ev);
      __syncthreads();
      float sc[kSteps][4];
      tile_scores<HD>(qs + kRows * w * H::kStride, ks, sc, g, t);
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // rows g and g + 8
        const int64_t row = r0 + g + 8 * h;
        float mx = m[h];
#pragma unroll
        for (int n = 0; n < kSteps; ++n)
#pragma unroll
          for (int c = 2 * h; c < 2 * h + 2; ++c) {
            const float x = masked(row, k0 + 8 * n + 2 * t + c % 2, s, causal) ? kNegInf : sc[n][c] * scale;
            sc[n][c] = x;
            mx = fmaxf(mx, x);
          }
        mx = quad_max(mx);
        // mx == -inf: every key so far masked; nothing accumulates (exp(-inf - -inf) would be NaN)
        const float alpha = mx == kNegInf ? 1.0f : expf(m[h] - mx);
        float rs = 0.0f;
#pragma unroll
        for (int n = 0; n < kSteps; ++n)
#pragma unroll
          for (int c = 2 * h; c < 2 * h + 2; ++c) {
            const float p = mx == kNegInf ? 0.0f : expf(sc[n][c] - mx);
            sc[n][c] = p;
            rs += p;
          }
        sum[h] = sum[h] * alpha + rs;  // this lane's columns; the quad's sum at the end
        m[h] = mx;
#pragma unroll
        for (int j = 0; j < H::kSteps; ++j) acc[j][2 * h] *= alpha, acc[j][2 * h + 1] *= alpha;
      }
      scores_times_tile<HD>(sc, vs, acc, g, t);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = r0 + g + 8 * h;
      const float total = quad_sum(sum[h]);
      const float inv = total > 0.0f ? 1.0f / total : 0.0f;
#pragma unroll
      for (int j = 0; j < H::kSteps; ++j) acc[j][2 * h] *= inv, acc[j][2 * h + 1] *= inv;
      if (row < l && t == 0) out[(b * l + row) * (ev + 1) + ev] = total > 0.0f ? m[h] + logf(total) : kNegInf;
    }
    store_rows<HD>(acc, 1.0f, out + (b * l + r0) * (ev + 1), l - r0, ev, ev + 1, g, t);
    __syncthreads();  // qs is reloaded for the next tile
  }
}

// delta (batch * l): D = rowsum(dO * O) - dL of each query row, a warp per row; out and dout
// (batch * l, ev + 1).
__global__ void __launch_bounds__(kThreads)
    attention_delta_kernel(const float* out, const float* dout, float* delta, int64_t rows, int64_t ev) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarps;
  for (int64_t row = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / 32; row < rows;
       row += warps) {
    const float* o = out + row * (ev + 1);
    const float* go = dout + row * (ev + 1);
    float d = 0.0f;
    for (int64_t x = lane; x < ev; x += 32) d += go[x] * o[x];
#pragma unroll
    for (int off = 16; off > 0; off /= 2) d += __shfl_xor_sync(0xffffffffu, d, off);
    if (lane == 0) delta[row] = d - go[ev];  // dL/ds = P dlse
  }
}

// dk (batch, s, e), dv (batch, s, ev); dout and out (batch, l, ev + 1); delta (batch, l). A warp's
// rows are keys, its score columns queries.
template <int HD>
__global__ void __launch_bounds__(kThreads)
    attention_dkdv_kernel(const float* q, const float* k, const float* v, const float* out, const float* dout,
                          const float* delta, float* dk, float* dv, int64_t batch, int64_t l, int64_t s,
                          int64_t e, int64_t ev, float scale, bool causal) {
  using H = Head<HD>;
  float* ks = dynamic_smem<float>();
  float* vs = ks + H::kTileFloats;
  float* qs = vs + H::kTileFloats;
  float* dos = qs + H::kTileFloats;
  float* lse = dos + H::kTileFloats;  // kTile query rows
  float* dsum = lse + kTile;
  const int w = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
  const int64_t kblocks = (s + kTile - 1) / kTile;
  for (int64_t tile = blockIdx.x; tile < batch * kblocks; tile += gridDim.x) {
    const int64_t b = tile / kblocks, k0 = (tile % kblocks) * kTile;  // causal: the first keys see most rows
    const int64_t r0 = k0 + kRows * w;                                // the warp's first key
    const float* ob = out + b * l * (ev + 1);
    const float* gb = dout + b * l * (ev + 1);
    load_tile<HD>(ks, k + b * s * e, k0, s, e, e);
    load_tile<HD>(vs, v + b * s * ev, k0, s, ev, ev);
    float dka[H::kSteps][4], dva[H::kSteps][4];
#pragma unroll
    for (int j = 0; j < H::kSteps; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) dka[j][c] = dva[j][c] = 0.0f;
    // causal: query rows before k0 see none of these keys
    for (int64_t q0 = causal ? k0 : 0; q0 < l; q0 += kTile) {
      __syncthreads();  // ks, vs loaded; the last tile's readers are done with qs, dos, lse, dsum
      load_tile<HD>(qs, q + b * l * e, q0, l, e, e);
      load_tile<HD>(dos, gb, q0, l, ev, ev + 1);
      load_row_stats(lse, dsum, ob, delta + b * l, q0, l, ev);
      __syncthreads();
      float pt[kSteps][4], dst[kSteps][4];
      tile_scores<HD>(ks + kRows * w * H::kStride, qs, pt, g, t);
      tile_scores<HD>(vs + kRows * w * H::kStride, dos, dst, g, t);
#pragma unroll
      for (int n = 0; n < kSteps; ++n)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int col = 8 * n + 2 * t + c % 2;  // the query row in the tile
          const int64_t row = q0 + col;
          const bool off = row >= l || masked(row, r0 + g + 8 * (c / 2), s, causal);
          const float p = off ? 0.0f : expf(pt[n][c] * scale - lse[col]);
          pt[n][c] = p;
          dst[n][c] = off ? 0.0f : p * (dst[n][c] - dsum[col]);
        }
      scores_times_tile<HD>(pt, dos, dva, g, t);
      scores_times_tile<HD>(dst, qs, dka, g, t);
    }
    store_rows<HD>(dka, scale, dk + (b * s + r0) * e, s - r0, e, e, g, t);
    store_rows<HD>(dva, 1.0f, dv + (b * s + r0) * ev, s - r0, ev, ev, g, t);
    __syncthreads();  // ks, vs are reloaded for the next tile
  }
}

// dq (batch, l, e)
template <int HD>
__global__ void __launch_bounds__(kThreads)
    attention_dq_kernel(const float* q, const float* k, const float* v, const float* out, const float* dout,
                        const float* delta, float* dq, int64_t batch, int64_t l, int64_t s, int64_t e,
                        int64_t ev, float scale, bool causal) {
  using H = Head<HD>;
  float* qs = dynamic_smem<float>();
  float* dos = qs + H::kTileFloats;
  float* ks = dos + H::kTileFloats;
  float* vs = ks + H::kTileFloats;
  float* lse = vs + H::kTileFloats;
  float* dsum = lse + kTile;
  const int w = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
  const int64_t qblocks = (l + kTile - 1) / kTile;
  for (int64_t tile = blockIdx.x; tile < batch * qblocks; tile += gridDim.x) {
    const int64_t b = tile / qblocks, q0 = (qblocks - 1 - tile % qblocks) * kTile;  // long causal rows first
    const int64_t r0 = q0 + kRows * w;
    const float* kb = k + b * s * e;
    const float* vb = v + b * s * ev;
    load_tile<HD>(qs, q + b * l * e, q0, l, e, e);
    load_tile<HD>(dos, dout + b * l * (ev + 1), q0, l, ev, ev + 1);
    load_row_stats(lse, dsum, out + b * l * (ev + 1), delta + b * l, q0, l, ev);
    float acc[H::kSteps][4];
#pragma unroll
    for (int j = 0; j < H::kSteps; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    const int64_t kend = causal ? (s < q0 + kTile ? s : q0 + kTile) : s;
    for (int64_t k0 = 0; k0 < kend; k0 += kTile) {
      __syncthreads();  // qs, dos, lse loaded; the last tile's readers are done with ks, vs
      load_tile<HD>(ks, kb, k0, s, e, e);
      load_tile<HD>(vs, vb, k0, s, ev, ev);
      __syncthreads();
      float ds[kSteps][4], dp[kSteps][4];
      tile_scores<HD>(qs + kRows * w * H::kStride, ks, ds, g, t);
      tile_scores<HD>(dos + kRows * w * H::kStride, vs, dp, g, t);
#pragma unroll
      for (int n = 0; n < kSteps; ++n)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int r = kRows * w + g + 8 * (c / 2);  // the query row in the tile
          const int64_t row = q0 + r;
          const bool off = row >= l || masked(row, k0 + 8 * n + 2 * t + c % 2, s, causal);
          const float p = off ? 0.0f : expf(ds[n][c] * scale - lse[r]);
          ds[n][c] = off ? 0.0f : p * (dp[n][c] - dsum[r]);
        }
      scores_times_tile<HD>(ds, ks, acc, g, t);
    }
    store_rows<HD>(acc, scale, dq + (b * l + r0) * e, l - r0, e, e, g, t);
    __syncthreads();  // qs, dos, lse are reloaded for the next tile
  }
}

unsigned tile_grid(int64_t tiles) {
  const int64_t cap = stride_blocks(65535LL * 16);
  return static_cast<unsigned>(tiles < cap ? tiles : cap);
}

// Multiply-adds of the score matrix's entries that are computed (causal: about half).
double pairs(int64_t batch, int64_t l, int64_t s, bool causal) {
  const double all = static_cast<double>(batch) * static_cast<double>(l) * static_cast<double>(s);
  return causal ? all / 2 : all;
}

// Dynamic shared memory of each kernel, in bytes.
template <int HD>
constexpr size_t forward_smem() {
  return sizeof(float) * 3 * Head<HD>::kTileFloats;
}
template <int HD>
constexpr size_t gradient_smem() {  // either pass: four tiles and two per-row arrays
  return sizeof(float) * (4 * Head<HD>::kTileFloats + 2 * kTile);
}
static_assert(gradient_smem<128>() <= 227 * 1024, "the largest tiles fit a block's shared memory");

// Launches Kernel with `smem` bytes of dynamic shared memory, first raising its limit past the
// default 48 KiB (a per-function attribute, set on each launch: cheap, and right on every device).
template <auto Kernel, typename... Args>
void launch_tiles(const char* op, unsigned grid, size_t smem, cudaStream_t stream, Args... args) {
  if (smem > 48 * 1024)
    check(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
          op);
  launch<Kernel>(op, grid, kThreads, smem, stream, args...);
}

template <int HD>
void forward(cudaStream_t stream, const float* q, const float* k, const float* v, float* out, int64_t batch,
             int64_t l, int64_t s, int64_t e, int64_t ev, float scale, bool causal) {
  launch_tiles<attention_forward_kernel<HD>>("attention", tile_grid(batch * ceil_div(l, kTile)),
                                             forward_smem<HD>(), stream, q, k, v, out, batch, l, s, e, ev,
                                             scale, causal);
}

// delta: the device's workspace, batch * l floats (held under workspace_lock() by the caller).
template <int HD>
void gradient(cudaStream_t stream, const float* q, const float* k, const float* v, const float* out,
              const float* dout, float* delta, float* dq, float* dk, float* dv, int64_t batch, int64_t l,
              int64_t s, int64_t e, int64_t ev, float scale, bool causal) {
  if (batch * l > 0) {
    note_flops(2.0 * static_cast<double>(batch) * static_cast<double>(l) * static_cast<double>(ev));
    launch<attention_delta_kernel>("attention_gradient", grid_for(batch * l * 32, kThreads), kThreads, 0,
                                   stream, out, dout, delta, batch * l, ev);
  }
  if (s > 0) {
    note_flops(2.0 * pairs(batch, l, s, causal) * static_cast<double>(2 * e + 2 * ev));
    launch_tiles<attention_dkdv_kernel<HD>>("attention_gradient", tile_grid(batch * ceil_div(s, kTile)),
                                            gradient_smem<HD>(), stream, q, k, v, out, dout, delta, dk, dv,
                                            batch, l, s, e, ev, scale, causal);
  }
  if (l > 0) {
    note_flops(2.0 * pairs(batch, l, s, causal) * static_cast<double>(2 * e + ev));
    launch_tiles<attention_dq_kernel<HD>>("attention_gradient", tile_grid(batch * ceil_div(l, kTile)),
                                          gradient_smem<HD>(), stream, q, k, v, out, dout, delta, dq, batch,
                                          l, s, e, ev, scale, causal);
  }
}

// The head-dim bucket: the smallest of 16, 32, 64, 128 that holds e and ev (checked <= 128 by
// ../ops/attention.cpp).
int head_bucket(int64_t e, int64_t ev) {
  const int64_t d = e > ev ? e : ev;
  return d <= 16 ? 16 : d <= 32 ? 32 : d <= 64 ? 64 : 128;
}

}  // namespace

// ---------------------------------------------------------------------------- launchers

void attention(int dev, const float* q, const float* k, const float* v, float* out, int64_t batch, int64_t l,
               int64_t s, int64_t e, int64_t ev, float scale, bool causal) {
  cudaStream_t stream = activate(dev);
  note_flops(2.0 * pairs(batch, l, s, causal) * static_cast<double>(e + ev));
  switch (head_bucket(e, ev)) {
    case 16:
      return forward<16>(stream, q, k, v, out, batch, l, s, e, ev, scale, causal);
    case 32:
      return forward<32>(stream, q, k, v, out, batch, l, s, e, ev, scale, causal);
    case 64:
      return forward<64>(stream, q, k, v, out, batch, l, s, e, ev, scale, causal);
    default:
      return forward<128>(stream, q, k, v, out, batch, l, s, e, ev, scale, causal);
  }
}

void attention_gradient(int dev, const float* q, const float* k, const float* v, const float* out,
                        const float* dout, float* dq, float* dk, float* dv, int64_t batch, int64_t l,
                        int64_t s, int64_t e, int64_t ev, float scale, bool causal) {
  cudaStream_t stream = activate(dev);
  auto lock = workspace_lock();  // delta lives in the device's workspace (common.cuh)
  float* delta = workspace(dev, 0, batch * l);
  switch (head_bucket(e, ev)) {
    case 16:
      return gradient<16>(stream, q, k, v, out, dout, delta, dq, dk, dv, batch, l, s, e, ev, scale, causal);
    case 32:
      return gradient<32>(stream, q, k, v, out, dout, delta, dq, dk, dv, batch, l, s, e, ev, scale, causal);
    case 64:
      return gradient<64>(stream, q, k, v, out, dout, delta, dq, dk, dv, batch, l, s, e, ev, scale, causal);
    default:
      return gradient<128>(stream, q, k, v, out, dout, delta, dq, dk, dv, batch, l, s, e, ev, scale, causal);
  }
}

}  // namespace gpumat::GPUMAT_CUDA_NS
