// CUDA attention family: fused scaled dot-product attention in the FlashAttention-2 manner (Dao,
// "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning", 2023).
// q (batch, l, e), k (batch, s, e), v (batch, s, ev), each where its HeadLayout (../backend.h) puts
// its head-batches and rows (contiguous, or heads read in place from a fused projection; the
// gradients dq, dk, dv laid out as their operands); out (batch, l, ev + 1): per query row the
// ev outputs O = softmax(scale q k^T [+ causal mask]) v and, in the last column, the row's
// logsumexp L = m + log(sum exp(scale q.k - m)) that the gradient reads. The (l, s) matrix is
// never stored: a block holds 64-row tiles of Q, K and V in shared memory.
//   attention_forward_kernel: a block per (batch, 64 query rows); over 64-key tiles it keeps the
//     running max m and sum, rescaling the accumulated O by exp(m_old - m_new) (online softmax).
//   attention_dkdv_kernel: a block per (batch, 64 key rows); over query tiles it recomputes
//     P = exp(scale q.k - L) and dS = P (dO.v - D), D = rowsum(dO * O) - dL (dL: dout's last
//     column, the gradient of the logsumexp output, which adds P dL to dS), and accumulates
//     dV = P^T dO and dK = scale dS^T Q in registers. By default (FlashAttention-2's backward) it
//     also adds each query tile's scale dS K into dq with float atomics, so the scores are computed
//     once for all three gradients; the order of those adds varies between runs.
//   attention_dq_kernel: with deterministic (gpumat::ops::use_deterministic_algorithms), dq comes
//     from this second pass instead, a block per (batch, 64 query rows) over key tiles computing
//     dQ = scale dS K: each output element has one writer, the same bits every run, for two more
//     tile products per tile pair (about 20% more time forward and backward on an H200).
// Causal (key index > query index masked, top-left aligned as PyTorch's is_causal) skips the key
// tiles wholly above the diagonal, and the forward and dQ grids start with the longest rows. A row
// with no key (s == 0) gives O = 0, L = -inf.
//
// Work split (256 threads: tx = threadIdx.x % 16, ty = threadIdx.x / 16), after the register
// tiling of fast SGEMM kernels: a thread computes a 4 x 4 block of each 64 x 64 score tile (rows
// ty + 16i, columns tx + 16j), each entry a dot product over the head dim read as float4 from
// row-major tiles; rows of a tile lie HD + 4 floats apart (an odd count of float4s), so the eight
// rows a quarter warp reads fall in distinct banks. The products with a score tile (P V, dS K,
// P^T dO, dS^T Q) give a thread 4 rows x HD / 16 head columns, tx's float4 (or narrower) slices,
// read as rows of the other operand. A row's 16 threads are 16 lanes of one warp: its max and sum
// are warp shuffles. The head dim is a template bucket HD (16, 32, 64, 128 >= e, ev; the tiles are
// zero-padded past e and ev); the tiles take dynamic shared memory (up to 173 KiB for HD = 128,
// raised per kernel with cudaFuncSetAttribute). Host reference: ../host/attention.cpp.
#include <cmath>

#include "common.cuh"
#include "kernels.cuh"

namespace gpumat::GPUMAT_CUDA_NS {

namespace {

constexpr int kTile = 64;                 // query rows and key rows per tile
constexpr int kSide = 16;                 // threads along each side of a tile
constexpr int kThreads = kSide * kSide;   // 256
constexpr int kPer = kTile / kSide;       // rows (and score columns) a thread owns: 4
constexpr int kScoreStride = kTile + 16;  // a score tile's row stride: float4-aligned, and the two
                                          // rows a warp stores fall in the other half of the banks
constexpr float kNegInf = -INFINITY;

// The head dim's layout in shared memory and registers.
template <int HD>
struct Head {
  static constexpr int kStride = HD + 4;               // row stride: an odd number of float4s
  static constexpr int kCols = HD / kSide;             // head columns a thread owns
  static constexpr int kVec = kCols < 4 ? kCols : 4;   // contiguous columns per slice
  static constexpr int kTileFloats = kTile * kStride;  // one 64-row tile
  // Thread tx's head column number c (0 <= c < kCols).
  __device__ static int col(int tx, int c) { return (c / kVec) * kSide * kVec + tx * kVec + c % kVec; }
};

// Loads rows [r0, r0 + kTile) of a (rows, width) matrix (row stride `stride`) into a tile; zeros
// past `rows` and past `width` (to HD), so that products over the padded head dim are exact. Rows
// that start on 16 bytes with a width of whole float4s (the usual q, k, v) move as float4s: a
// quarter of the loads and index arithmetic of the float path.
template <int HD>
__device__ void load_tile(float* tile, const float* m, int64_t r0, int64_t rows, int64_t width,
                          int64_t stride) {
  constexpr int S = Head<HD>::kStride;
  if (HD % 4 == 0 && width % 4 == 0 && stride % 4 == 0 && reinterpret_cast<uintptr_t>(m) % 16 == 0) {
    constexpr int kQuads = HD / 4;
    for (int i = threadIdx.x; i < kTile * kQuads; i += kThreads) {
      const int rr = i / kQuads, x = (i % kQuads) * 4;
      float4 t = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (r0 + rr < rows && x < width) t = *reinterpret_cast<const float4*>(m + (r0 + rr) * stride + x);
      *reinterpret_cast<float4*>(tile + rr * S + x) = t;
    }
    return;
  }
  for (int i = threadIdx.x; i < kTile * HD; i += kThreads) {
    const int rr = i / HD, x = i % HD;
    tile[rr * S + x] = r0 + rr < rows && x < width ? m[(r0 + rr) * stride + x] : 0.0f;
  }
}

// Stores a thread's 4 x kCols block (rows ty + 16i, head columns col(tx, c)) times mul as rows
// [0, rows) x columns [0, width) of m (row stride `stride`): through `tile` (a free 64-row tile),
// so that consecutive threads write consecutive columns (coalesced). Starts with a barrier (the
// tile's last readers are done); the caller's next barrier must come before the tile is reused.
template <int HD>
__device__ void store_tile(float* tile, const float (&acc)[kPer][Head<HD>::kCols], float mul, float* m,
                           int64_t rows, int64_t width, int64_t stride, int tx, int ty) {
  using H = Head<HD>;
  __syncthreads();
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    float* dst = tile + (ty + kSide * i) * H::kStride;
#pragma unroll
    for (int c = 0; c < H::kCols; c += H::kVec) {
      if constexpr (H::kVec == 4) {
        *reinterpret_cast<float4*>(dst + H::col(tx, c)) =
            make_float4(acc[i][c] * mul, acc[i][c + 1] * mul, acc[i][c + 2] * mul, acc[i][c + 3] * mul);
      } else if constexpr (H::kVec == 2) {
        *reinterpret_cast<float2*>(dst + H::col(tx, c)) = make_float2(acc[i][c] * mul, acc[i][c + 1] * mul);
      } else {
        dst[H::col(tx, c)] = acc[i][c] * mul;
      }
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kTile * HD; i += kThreads) {
    const int rr = i / HD, x = i % HD;
    if (rr < rows && x < width) m[rr * stride + x] = tile[rr * H::kStride + x];
  }
}

// acc[i][j] = a row (ty + 16i) . b row (tx + 16j) over the padded head dim.
template <int HD>
__device__ void tile_dots(const float* a, const float* b, int tx, int ty, float (&acc)[kPer][kPer]) {
  constexpr int S = Head<HD>::kStride;
#pragma unroll
  for (int i = 0; i < kPer; ++i)
#pragma unroll
    for (int j = 0; j < kPer; ++j) acc[i][j] = 0.0f;
#pragma unroll 4
  for (int d = 0; d < HD; d += 4) {
    float4 x[kPer], y[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) x[i] = *reinterpret_cast<const float4*>(a + (ty + kSide * i) * S + d);
#pragma unroll
    for (int j = 0; j < kPer; ++j) y[j] = *reinterpret_cast<const float4*>(b + (tx + kSide * j) * S + d);
#pragma unroll
    for (int i = 0; i < kPer; ++i)
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        float t = acc[i][j];
        t = fmaf(x[i].x, y[j].x, t);
        t = fmaf(x[i].y, y[j].y, t);
        t = fmaf(x[i].z, y[j].z, t);
        t = fmaf(x[i].w, y[j].w, t);
        acc[i][j] = t;
      }
  }
}

// acc[i][c] += sum over r < kTile of w[(ty + 16i) * kScoreStride + r] * m[r * stride + col(tx, c)]:
// a 64 x 64 score tile w (row-major) times a 64-row head tile m, into the thread's 4 x kCols block.
template <int HD>
__device__ void tile_product(const float* w, const float* m, int tx, int ty,
                             float (&acc)[kPer][Head<HD>::kCols]) {
  using H = Head<HD>;
#pragma unroll 2
  for (int r = 0; r < kTile; r += 4) {
    float4 p[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i)
      p[i] = *reinterpret_cast<const float4*>(w + (ty + kSide * i) * kScoreStride + r);
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      float mv[H::kCols];
#pragma unroll
      for (int c = 0; c < H::kCols; c += H::kVec) {
        const float* src = m + (r + u) * H::kStride + H::col(tx, c);
        if constexpr (H::kVec == 4) {
          const float4 t = *reinterpret_cast<const float4*>(src);
          mv[c] = t.x, mv[c + 1] = t.y, mv[c + 2] = t.z, mv[c + 3] = t.w;
        } else if constexpr (H::kVec == 2) {
          const float2 t = *reinterpret_cast<const float2*>(src);
          mv[c] = t.x, mv[c + 1] = t.y;
        } else {
          mv[c] = *src;
        }
      }
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const float pu = u == 0 ? p[i].x : u == 1 ? p[i].y : u == 2 ? p[i].z : p[i].w;
#pragma unroll
        for (int c = 0; c < H::kCols; ++c) acc[i][c] = fmaf(pu, mv[c], acc[i][c]);
      }
    }
  }
}

// Whether the forward kernel loads V into K's buffer once the scores are done: for the largest head
// dim, three 64-row tiles and the score tile take 121 KiB, one block per multiprocessor; two tiles
// and the scores (88 KiB) let two blocks share one, for one more barrier and V's load after K's.
template <int HD>
constexpr bool kShareKV = HD > 64;

// Blocks per multiprocessor the gradient kernels are built for: two for head dims up to 64 (their
// tiles fit twice in a multiprocessor's 228 KiB, and 128 registers a thread fill its 64 K
// registers), one above (the forward kernel's tiles fit twice for every head dim).
template <int HD>
constexpr int kBlocksPerSM = HD <= 64 ? 2 : 1;

// The max and the sum over a row's 16 threads (16 lanes of one warp).
__device__ float row_max(float x) {
#pragma unroll
  for (int o = kSide / 2; o > 0; o /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o, kSide));
  return x;
}
__device__ float row_sum(float x) {
#pragma unroll
  for (int o = kSide / 2; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o, kSide);
  return x;
}

__device__ bool masked(int64_t row, int64_t col, int64_t s, bool causal) {
  return col >= s || (causal && col > row);
}

// Per query row q0 + r of a tile (r < kTile): L (out's last column) and D = rowsum(dO * O) - dL,
// both 0 past l. All threads take part (a row's 16 threads sum its columns).
template <int HD>
__device__ void load_row_stats(float* lse, float* dsum, const float* out, const float* dout, int64_t q0,
                               int64_t l, int64_t ev, int tx, int ty) {
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int r = ty + kSide * i;
    const int64_t row = q0 + r;
    float d = 0.0f;
    if (row < l)
      for (int64_t x = tx; x < ev; x += kSide) d += dout[row * (ev + 1) + x] * out[row * (ev + 1) + x];
    d = row_sum(d);
    if (tx == 0) {
      dsum[r] = row < l ? d - dout[row * (ev + 1) + ev] : 0.0f;  // dL/ds = P dlse
      lse[r] = row < l ? out[row * (ev + 1) + ev] : 0.0f;
    }
  }
}

// q (batch, l, e), k (batch, s, e), v (batch, s, ev) where lq, lk, lv say; out (batch, l, ev + 1)
template <int HD>
__global__ void __launch_bounds__(kThreads, 2)
    attention_forward_kernel(const float* q, const float* k, const float* v, float* out, int64_t batch,
                             int64_t l, int64_t s, int64_t e, int64_t ev, HeadLayout lq, HeadLayout lk,
                             HeadLayout lv, float scale, bool causal) {
  using H = Head<HD>;
  float* qs = dynamic_smem<float>();
  float* ks = qs + H::kTileFloats;
  float* vs = kShareKV<HD> ? ks : ks + H::kTileFloats;
  float* ps = vs + H::kTileFloats;  // kTile x kScoreStride
  const int tx = threadIdx.x % kSide, ty = threadIdx.x / kSide;
  const int64_t qblocks = (l + kTile - 1) / kTile;
  for (int64_t t = blockIdx.x; t < batch * qblocks; t += gridDim.x) {
    const int64_t b = t / qblocks, q0 = (qblocks - 1 - t % qblocks) * kTile;  // long causal rows first
    const float* kb = k + lk.start(b);
    const float* vb = v + lv.start(b);
    load_tile<HD>(qs, q + lq.start(b), q0, l, e, lq.row_stride);
    float m[kPer], sum[kPer], acc[kPer][H::kCols];
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      m[i] = kNegInf, sum[i] = 0.0f;
#pragma unroll
      for (int c = 0; c < H::kCols; ++c) acc[i][c] = 0.0f;
    }
    const int64_t kend = causal ? (s < q0 + kTile ? s : q0 + kTile) : s;
    for (int64_t k0 = 0; k0 < kend; k0 += kTile) {
      __syncthreads();  // the last tile's readers are done with ks, vs, ps
      load_tile<HD>(ks, kb, k0, s, e, lk.row_stride);
      if constexpr (!kShareKV<HD>) load_tile<HD>(vs, vb, k0, s, ev, lv.row_stride);
      __syncthreads();
      float sc[kPer][kPer];
      tile_dots<HD>(qs, ks, tx, ty, sc);
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const int64_t row = q0 + ty + kSide * i;
        float mx = m[i];
#pragma unroll
        for (int j = 0; j < kPer; ++j) {
          sc[i][j] = masked(row, k0 + tx + kSide * j, s, causal) ? kNegInf : sc[i][j] * scale;
          mx = fmaxf(mx, sc[i][j]);
        }
        mx = row_max(mx);
        // mx == -inf: every key so far masked (or NaN: fmaxf skips NaN); nothing accumulates
        // (exp(-inf - -inf) would be NaN), but a NaN score's exp makes the row's sum, and so its
        // output and logsumexp, NaN (PyTorch's result)
        const float alpha = mx == kNegInf ? 1.0f : expf(m[i] - mx);
        const float shift = mx == kNegInf ? 0.0f : mx;
        float rs = 0.0f;
#pragma unroll
        for (int j = 0; j < kPer; ++j) {
          const float p = expf(sc[i][j] - shift);
          ps[(ty + kSide * i) * kScoreStride + tx + kSide * j] = p;
          rs += p;
        }
        sum[i] = sum[i] * alpha + row_sum(rs);
        m[i] = mx;
#pragma unroll
        for (int c = 0; c < H::kCols; ++c) acc[i][c] *= alpha;
      }
      __syncthreads();  // P complete (and, sharing one buffer, K's readers done)
      if constexpr (kShareKV<HD>) {
        load_tile<HD>(vs, vb, k0, s, ev, lv.row_stride);
        __syncthreads();
      }
      tile_product<HD>(ps, vs, tx, ty, acc);
    }
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int64_t row = q0 + ty + kSide * i;
      // sum is 0 only for a row with every key masked (O = 0, L = -inf), NaN after a NaN score
      const float inv = sum[i] != 0.0f ? 1.0f / sum[i] : 0.0f;
#pragma unroll
      for (int c = 0; c < H::kCols; ++c) acc[i][c] *= inv;
      if (row < l && tx == 0)
        out[(b * l + row) * (ev + 1) + ev] = sum[i] != 0.0f ? m[i] + logf(sum[i]) : kNegInf;
    }
    store_tile<HD>(qs, acc, 1.0f, out + (b * l + q0) * (ev + 1), l - q0, ev, ev + 1, tx, ty);
    __syncthreads();  // qs is reloaded for the next tile
  }
}

// acc[i][c] += sum over r < kTile of w[r * kScoreStride + 4 ty + i] * m[r * stride + col(tx, c)] for
// the head columns c0 <= c < c0 + kVec: the transpose of a score tile w times a 64-row head tile m.
// A thread's rows here are 4 ty .. 4 ty + 3, so that they are one float4 of each row of w (a warp's
// two ty read 32 consecutive bytes).
template <int HD>
__device__ void tile_product_transposed(const float* w, const float* m, int tx, int ty, int c0,
                                        float (&acc)[kPer][Head<HD>::kVec]) {
  using H = Head<HD>;
#pragma unroll 4
  for (int r = 0; r < kTile; ++r) {
    const float4 p = *reinterpret_cast<const float4*>(w + r * kScoreStride + kPer * ty);
    float mv[H::kVec];
    const float* src = m + r * H::kStride + H::col(tx, c0);
    if constexpr (H::kVec == 4) {
      const float4 t = *reinterpret_cast<const float4*>(src);
      mv[0] = t.x, mv[1] = t.y, mv[2] = t.z, mv[3] = t.w;
    } else if constexpr (H::kVec == 2) {
      const float2 t = *reinterpret_cast<const float2*>(src);
      mv[0] = t.x, mv[1] = t.y;
    } else {
      mv[0] = *src;
    }
    const float pr[kPer] = {p.x, p.y, p.z, p.w};
#pragma unroll
    for (int i = 0; i < kPer; ++i)
#pragma unroll
      for (int c = 0; c < H::kVec; ++c) acc[i][c] = fmaf(pr[i], mv[c], acc[i][c]);
  }
}

// dk (batch, s, e), dv (batch, s, ev) laid out as k and v (lk, lv); dout and out (batch, l, ev + 1).
// A thread's rows are keys, its score columns queries. With WithDq (FlashAttention-2's backward) it
// also adds each query tile's scale dS K into dq (batch, l, e as q: lq; zeroed before the launch)
// with float atomics: one kernel
// computes the scores once for all three gradients (five tile products per tile pair instead of the
// two-kernel path's seven), but the order of dq's sums, and so its last bits, varies between runs.
template <int HD, bool WithDq>
__global__ void __launch_bounds__(kThreads, kBlocksPerSM<HD>)
    attention_dkdv_kernel(const float* q, const float* k, const float* v, const float* out, const float* dout,
                          float* dq, float* dk, float* dv, int64_t batch, int64_t l, int64_t s, int64_t e,
                          int64_t ev, HeadLayout lq, HeadLayout lk, HeadLayout lv, float scale, bool causal) {
  using H = Head<HD>;
  float* ks = dynamic_smem<float>();
  float* vs = ks + H::kTileFloats;
  float* qs = vs + H::kTileFloats;
  float* dos = qs + H::kTileFloats;
  float* pts = dos + H::kTileFloats;         // P^T: kTile keys x kScoreStride
  float* dsts = pts + kTile * kScoreStride;  // dS^T
  float* lse = dsts + kTile * kScoreStride;  // kTile query rows
  float* dsum = lse + kTile;
  const int tx = threadIdx.x % kSide, ty = threadIdx.x / kSide;
  const int64_t kblocks = (s + kTile - 1) / kTile;
  for (int64_t t = blockIdx.x; t < batch * kblocks; t += gridDim.x) {
    const int64_t b = t / kblocks, k0 = (t % kblocks) * kTile;  // causal: the first keys see most rows
    const float* ob = out + b * l * (ev + 1);
    const float* gb = dout + b * l * (ev + 1);
    load_tile<HD>(ks, k + lk.start(b), k0, s, e, lk.row_stride);
    load_tile<HD>(vs, v + lv.start(b), k0, s, ev, lv.row_stride);
    float dka[kPer][H::kCols], dva[kPer][H::kCols];
#pragma unroll
    for (int i = 0; i < kPer; ++i)
#pragma unroll
      for (int c = 0; c < H::kCols; ++c) dka[i][c] = dva[i][c] = 0.0f;
    // causal: query rows before k0 see none of these keys
    for (int64_t q0 = causal ? k0 : 0; q0 < l; q0 += kTile) {
      __syncthreads();  // the last tile's readers are done with qs, dos, pts, dsts, lse, dsum
      load_tile<HD>(qs, q + lq.start(b), q0, l, e, lq.row_stride);
      load_tile<HD>(dos, gb, q0, l, ev, ev + 1);
      load_row_stats<HD>(lse, dsum, ob, gb, q0, l, ev, tx, ty);
      __syncthreads();
      float st[kPer][kPer], dpt[kPer][kPer];
      tile_dots<HD>(ks, qs, tx, ty, st);
      tile_dots<HD>(vs, dos, tx, ty, dpt);
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const int64_t key = k0 + ty + kSide * i;
#pragma unroll
        for (int j = 0; j < kPer; ++j) {
          const int c = tx + kSide * j;
          const int64_t row = q0 + c;
          const bool off = row >= l || masked(row, key, s, causal);
          const float p = off ? 0.0f : expf(st[i][j] * scale - lse[c]);
          pts[(ty + kSide * i) * kScoreStride + c] = p;
          dsts[(ty + kSide * i) * kScoreStride + c] = off ? 0.0f : p * (dpt[i][j] - dsum[c]);
        }
      }
      __syncthreads();
      tile_product<HD>(pts, dos, tx, ty, dva);
      tile_product<HD>(dsts, qs, tx, ty, dka);
      if constexpr (WithDq) {
        // dq rows q0 + 4 ty + i += scale dS K, kVec head columns at a time (registers)
        for (int c0 = 0; c0 < H::kCols; c0 += H::kVec) {
          float dqa[kPer][H::kVec] = {};
          tile_product_transposed<HD>(dsts, ks, tx, ty, c0, dqa);
#pragma unroll
          for (int i = 0; i < kPer; ++i) {
            const int64_t row = q0 + kPer * ty + i;
#pragma unroll
            for (int c = 0; c < H::kVec; ++c) {
              const int col = H::col(tx, c0 + c);
              if (row < l && col < e)
                atomicAdd(dq + lq.start(b) + row * lq.row_stride + col, dqa[i][c] * scale);
            }
          }
        }
      }
    }
    store_tile<HD>(qs, dka, scale, dk + lk.start(b) + k0 * lk.row_stride, s - k0, e, lk.row_stride, tx, ty);
    store_tile<HD>(dos, dva, 1.0f, dv + lv.start(b) + k0 * lv.row_stride, s - k0, ev, lv.row_stride, tx, ty);
    __syncthreads();  // ks, vs are reloaded for the next tile
  }
}

// dq (batch, l, e), laid out as q (lq)
template <int HD>
__global__ void __launch_bounds__(kThreads, kBlocksPerSM<HD>)
    attention_dq_kernel(const float* q, const float* k, const float* v, const float* out, const float* dout,
                        float* dq, int64_t batch, int64_t l, int64_t s, int64_t e, int64_t ev, HeadLayout lq,
                        HeadLayout lk, HeadLayout lv, float scale, bool causal) {
  using H = Head<HD>;
  float* qs = dynamic_smem<float>();
  float* dos = qs + H::kTileFloats;
  float* ks = dos + H::kTileFloats;
  float* vs = ks + H::kTileFloats;
  float* dss = vs + H::kTileFloats;  // kTile x kScoreStride
  float* lse = dss + kTile * kScoreStride;
  float* dsum = lse + kTile;
  const int tx = threadIdx.x % kSide, ty = threadIdx.x / kSide;
  const int64_t qblocks = (l + kTile - 1) / kTile;
  for (int64_t t = blockIdx.x; t < batch * qblocks; t += gridDim.x) {
    const int64_t b = t / qblocks, q0 = (qblocks - 1 - t % qblocks) * kTile;  // long causal rows first
    const float* kb = k + lk.start(b);
    const float* vb = v + lv.start(b);
    load_tile<HD>(qs, q + lq.start(b), q0, l, e, lq.row_stride);
    load_tile<HD>(dos, dout + b * l * (ev + 1), q0, l, ev, ev + 1);
    load_row_stats<HD>(lse, dsum, out + b * l * (ev + 1), dout + b * l * (ev + 1), q0, l, ev, tx, ty);
    float acc[kPer][H::kCols];
#pragma unroll
    for (int i = 0; i < kPer; ++i)
#pragma unroll
      for (int c = 0; c < H::kCols; ++c) acc[i][c] = 0.0f;
    const int64_t kend = causal ? (s < q0 + kTile ? s : q0 + kTile) : s;
    for (int64_t k0 = 0; k0 < kend; k0 += kTile) {
      __syncthreads();  // qs, dos, lse loaded; the last tile's readers are done with ks, vs, dss
      load_tile<HD>(ks, kb, k0, s, e, lk.row_stride);
      load_tile<HD>(vs, vb, k0, s, ev, lv.row_stride);
      __syncthreads();
      float sc[kPer][kPer], dp[kPer][kPer];
      tile_dots<HD>(qs, ks, tx, ty, sc);
      tile_dots<HD>(dos, vs, tx, ty, dp);
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const int r = ty + kSide * i;
        const int64_t row = q0 + r;
#pragma unroll
        for (int j = 0; j < kPer; ++j) {
          const bool off = row >= l || masked(row, k0 + tx + kSide * j, s, causal);
          const float p = off ? 0.0f : expf(sc[i][j] * scale - lse[r]);
          dss[r * kScoreStride + tx + kSide * j] = off ? 0.0f : p * (dp[i][j] - dsum[r]);
        }
      }
      __syncthreads();
      tile_product<HD>(dss, ks, tx, ty, acc);
    }
    store_tile<HD>(ks, acc, scale, dq + lq.start(b) + q0 * lq.row_stride, l - q0, e, lq.row_stride, tx, ty);
    __syncthreads();  // qs, dos, ks, lse are reloaded for the next tile
  }
}

// Zeros rows [0, l) x columns [0, e) of every head-batch of a region laid out as `lay` (dq before
// the atomic adds, where it is not one contiguous block that cudaMemsetAsync could clear).
__global__ void zero_rows_kernel(float* m, int64_t batch, int64_t l, int64_t e, HeadLayout lay) {
  const int64_t n = batch * l * e;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / e;
    m[lay.start(row / l) + (row % l) * lay.row_stride + i % e] = 0.0f;
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
  return sizeof(float) * ((kShareKV<HD> ? 2 : 3) * Head<HD>::kTileFloats + kTile * kScoreStride);
}
template <int HD>
constexpr size_t dkdv_smem() {
  return sizeof(float) * (4 * Head<HD>::kTileFloats + 2 * kTile * kScoreStride + 2 * kTile);
}
template <int HD>
constexpr size_t dq_smem() {
  return sizeof(float) * (4 * Head<HD>::kTileFloats + kTile * kScoreStride + 2 * kTile);
}
static_assert(dkdv_smem<128>() <= 227 * 1024, "the largest tiles fit a block's shared memory");

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
             int64_t l, int64_t s, int64_t e, int64_t ev, HeadLayout lq, HeadLayout lk, HeadLayout lv,
             float scale, bool causal) {
  launch_tiles<attention_forward_kernel<HD>>("attention", tile_grid(batch * ceil_div(l, kTile)),
                                             forward_smem<HD>(), stream, q, k, v, out, batch, l, s, e, ev, lq,
                                             lk, lv, scale, causal);
}

template <int HD>
void gradient(cudaStream_t stream, const float* q, const float* k, const float* v, const float* out,
              const float* dout, float* dq, float* dk, float* dv, int64_t batch, int64_t l, int64_t s,
              int64_t e, int64_t ev, HeadLayout lq, HeadLayout lk, HeadLayout lv, float scale, bool causal,
              bool deterministic) {
  const unsigned key_tiles = tile_grid(batch * ceil_div(s, kTile));
  if (!deterministic) {
    if (lq.heads == 1 && lq.row_stride == e && lq.batch_stride == l * e) {  // one contiguous block
      check(cudaMemsetAsync(dq, 0, sizeof(float) * static_cast<size_t>(batch * l * e), stream),
            "attention_gradient");
    } else if (batch * l * e > 0) {
      launch<zero_rows_kernel>("attention_gradient", grid_for(batch * l * e, kBlockSize), kBlockSize, 0,
                               stream, dq, batch, l, e, lq);
    }
    if (s > 0) {
      note_flops(2.0 * pairs(batch, l, s, causal) * static_cast<double>(3 * e + 2 * ev));
      launch_tiles<attention_dkdv_kernel<HD, true>>("attention_gradient", key_tiles, dkdv_smem<HD>(), stream,
                                                    q, k, v, out, dout, dq, dk, dv, batch, l, s, e, ev, lq,
                                                    lk, lv, scale, causal);
    }
    return;
  }
  if (s > 0) {
    note_flops(2.0 * pairs(batch, l, s, causal) * static_cast<double>(2 * e + 2 * ev));
    launch_tiles<attention_dkdv_kernel<HD, false>>("attention_gradient", key_tiles, dkdv_smem<HD>(), stream,
                                                   q, k, v, out, dout, nullptr, dk, dv, batch, l, s, e, ev,
                                                   lq, lk, lv, scale, causal);
  }
  if (l > 0) {
    note_flops(2.0 * pairs(batch, l, s, causal) * static_cast<double>(2 * e + ev));
    launch_tiles<attention_dq_kernel<HD>>("attention_gradient", tile_grid(batch * ceil_div(l, kTile)),
                                          dq_smem<HD>(), stream, q, k, v, out, dout, dq, batch, l, s, e, ev,
                                          lq, lk, lv, scale, causal);
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
               int64_t s, int64_t e, int64_t ev, HeadLayout lq, HeadLayout lk, HeadLayout lv, float scale,
               bool causal) {
  cudaStream_t stream = activate(dev);
  note_flops(2.0 * pairs(batch, l, s, causal) * static_cast<double>(e + ev));
  switch (head_bucket(e, ev)) {
    case 16:
      return forward<16>(stream, q, k, v, out, batch, l, s, e, ev, lq, lk, lv, scale, causal);
    case 32:
      return forward<32>(stream, q, k, v, out, batch, l, s, e, ev, lq, lk, lv, scale, causal);
    case 64:
      return forward<64>(stream, q, k, v, out, batch, l, s, e, ev, lq, lk, lv, scale, causal);
    default:
      return forward<128>(stream, q, k, v, out, batch, l, s, e, ev, lq, lk, lv, scale, causal);
  }
}

void attention_gradient(int dev, const float* q, const float* k, const float* v, const float* out,
                        const float* dout, float* dq, float* dk, float* dv, int64_t batch, int64_t l,
                        int64_t s, int64_t e, int64_t ev, HeadLayout lq, HeadLayout lk, HeadLayout lv,
                        float scale, bool causal, bool deterministic) {
  cudaStream_t stream = activate(dev);
  switch (head_bucket(e, ev)) {
    case 16:
      return gradient<16>(stream, q, k, v, out, dout, dq, dk, dv, batch, l, s, e, ev, lq, lk, lv, scale,
                          causal, deterministic);
    case 32:
      return gradient<32>(stream, q, k, v, out, dout, dq, dk, dv, batch, l, s, e, ev, lq, lk, lv, scale,
                          causal, deterministic);
    case 64:
      return gradient<64>(stream, q, k, v, out, dout, dq, dk, dv, batch, l, s, e, ev, lq, lk, lv, scale,
                          causal, deterministic);
    default:
      return gradient<128>(stream, q, k, v, out, dout, dq, dk, dv, batch, l, s, e, ev, lq, lk, lv, scale,
                           causal, deterministic);
  }
}

}  // namespace gpumat::GPUMAT_CUDA_NS
