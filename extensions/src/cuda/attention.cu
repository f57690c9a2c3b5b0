// CUDA attention family: fused scaled dot-product attention in the FlashAttention-2 manner (Dao,
// "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning", 2023).
// q (batch, l, e), k (batch, s, e), v (batch, s, ev); out (batch, l, ev + 1): per query row the
// ev outputs O = softmax(scale q k^T [+ causal mask]) v and, in the last column, the row's
// logsumexp L = m + log(sum exp(scale q.k - m)) that the gradient reads. The (l, s) matrix is
// never stored: a block holds tiles of Q, K and V in shared memory.
//   attention_forward_kernel: a block per (batch, kBr query rows); over key tiles of kBc it keeps
//     the running max m and sum, rescaling the accumulated O by exp(m_old - m_new) (online softmax).
//   attention_dkdv_kernel: a block per (batch, kBc key rows); over query tiles it recomputes
//     P = exp(scale q.k - L) and dS = P (dO.v - D), D = rowsum(dO * O) - dL (dL: dout's last
//     column, the gradient of the logsumexp output, which adds P dL to dS), and accumulates
//     dV = P^T dO and dK = scale dS^T Q in registers.
//   attention_dq_kernel: a block per (batch, kBr query rows); over key tiles dQ = scale dS K.
// Two passes instead of float atomics: each output element has one writer, so the gradient is
// deterministic. Causal (key index > query index masked, top-left aligned as PyTorch's is_causal)
// skips the key tiles wholly above the diagonal. A row with no key (s == 0) gives O = 0, L = -inf.
// Threads: kBr rows x kLanes lanes; a lane owns head columns lane, lane + kLanes, ... (e, ev <=
// kMaxHead, checked by ../ops/attention.cpp). Host reference: ../host/attention.cpp.
#include <cmath>

#include "common.cuh"
#include "kernels.cuh"

namespace gpumat::GPUMAT_CUDA_NS {

namespace {

constexpr int kBr = 16;                     // query rows per tile
constexpr int kBc = 16;                     // key rows per tile
constexpr int kLanes = 8;                   // threads per row
constexpr int kThreads = kBr * kLanes;      // 128
constexpr int kMaxHead = 128;               // the largest e and ev
constexpr int kPer = kMaxHead / kLanes;     // head columns a lane owns
constexpr int kPad = kMaxHead + 1;          // odd row stride: rows of a warp fall in other banks
constexpr int kColsPerLane = kBc / kLanes;  // score columns a lane computes
static_assert(kBr == kBc, "the backward's thread layout uses one tile size for rows and keys");

// Loads rows [r0, r0 + kBr) of a (rows, width) matrix into tile (zeros past `rows`).
__device__ void load_tile(float (*tile)[kPad], const float* m, int64_t r0, int64_t rows, int64_t width,
                          int64_t stride) {
  for (int64_t i = threadIdx.x; i < kBr * width; i += kThreads) {
    const int64_t rr = i / width, x = i % width;
    tile[rr][x] = r0 + rr < rows ? m[(r0 + rr) * stride + x] : 0.0f;
  }
}

// The dot product of tile rows a[i] and b[j] over n columns.
__device__ float dot_rows(const float (*a)[kPad], int i, const float (*b)[kPad], int j, int64_t n) {
  float acc = 0.0f;
  for (int64_t x = 0; x < n; ++x) acc += a[i][x] * b[j][x];
  return acc;
}

__device__ bool masked(int64_t row, int64_t col, int64_t s, bool causal) {
  return col >= s || (causal && col > row);
}

// q (batch, l, e), k (batch, s, e), v (batch, s, ev), out (batch, l, ev + 1)
__global__ void attention_forward_kernel(const float* q, const float* k, const float* v, float* out,
                                         int64_t batch, int64_t l, int64_t s, int64_t e, int64_t ev,
                                         float scale, bool causal) {
  __shared__ float qs[kBr][kPad];
  __shared__ float ks[kBc][kPad];
  __shared__ float vs[kBc][kPad];
  __shared__ float ps[kBr][kBc + 1];
  const int r = threadIdx.x / kLanes, lane = threadIdx.x % kLanes;
  const int64_t qblocks = (l + kBr - 1) / kBr;
  for (int64_t t = blockIdx.x; t < batch * qblocks; t += gridDim.x) {
    const int64_t b = t / qblocks, q0 = (t % qblocks) * kBr, row = q0 + r;
    const float* kb = k + b * s * e;
    const float* vb = v + b * s * ev;
    load_tile(qs, q + b * l * e, q0, l, e, e);
    float m = -INFINITY, sum = 0.0f, acc[kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j) acc[j] = 0.0f;
    const int64_t kend = causal ? (s < q0 + kBr ? s : q0 + kBr) : s;
    for (int64_t k0 = 0; k0 < kend; k0 += kBc) {
      __syncthreads();  // the last tile's readers are done with ks, vs, ps
      load_tile(ks, kb, k0, s, e, e);
      load_tile(vs, vb, k0, s, ev, ev);
      __syncthreads();
#pragma unroll
      for (int j = 0; j < kColsPerLane; ++j) {
        const int c = lane + j * kLanes;
        ps[r][c] = masked(row, k0 + c, s, causal) ? -INFINITY : dot_rows(qs, r, ks, c, e) * scale;
      }
      __syncthreads();
      float mx = m;
      for (int c = 0; c < kBc; ++c) mx = fmaxf(mx, ps[r][c]);
      __syncthreads();  // the row's lanes have read their scores before they turn into P
      // mx == -inf: every key so far masked; nothing accumulates (exp(-inf - -inf) would be NaN)
      const float alpha = mx == -INFINITY ? 1.0f : expf(m - mx);
#pragma unroll
      for (int j = 0; j < kColsPerLane; ++j) {
        const int c = lane + j * kLanes;
        ps[r][c] = mx == -INFINITY ? 0.0f : expf(ps[r][c] - mx);
      }
      __syncthreads();
      float rs = 0.0f;
      for (int c = 0; c < kBc; ++c) rs += ps[r][c];
      sum = sum * alpha + rs;
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int x = lane + j * kLanes;
        if (x < ev) {
          float a = acc[j] * alpha;
          for (int c = 0; c < kBc; ++c) a += ps[r][c] * vs[c][x];
          acc[j] = a;
        }
      }
      m = mx;
    }
    if (row < l) {
      float* o = out + (b * l + row) * (ev + 1);
      const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int x = lane + j * kLanes;
        if (x < ev) o[x] = acc[j] * inv;
      }
      if (lane == 0) o[ev] = sum > 0.0f ? m + logf(sum) : -INFINITY;
    }
    __syncthreads();  // qs is reloaded for the next tile
  }
}

// Per query row of a tile: L (from out's last column) and D = rowsum(dO * O) - dL, 0 past l.
__device__ void load_row_stats(float* lse, float* dsum, const float* out, const float* dout, int64_t q0,
                               int64_t l, int64_t ev) {
  const int r = threadIdx.x / kLanes;
  if (threadIdx.x % kLanes != 0) return;
  const int64_t row = q0 + r;
  float d = 0.0f, lr = 0.0f;
  if (row < l) {
    const float* o = out + row * (ev + 1);
    const float* g = dout + row * (ev + 1);
    for (int64_t x = 0; x < ev; ++x) d += g[x] * o[x];
    d -= g[ev];  // the logsumexp's own gradient: dL/ds = P dlse
    lr = o[ev];
  }
  lse[r] = lr;
  dsum[r] = d;
}

// dS of tile entry (r, c): P = exp(scale q.k - L), dS = P (dO.v - D); writes P to ps if given.
__device__ float score_gradient(const float (*qs)[kPad], const float (*ks)[kPad], const float (*dos)[kPad],
                                const float (*vs)[kPad], const float* lse, const float* dsum, int r, int c,
                                int64_t row, int64_t col, int64_t l, int64_t s, int64_t e, int64_t ev,
                                float scale, bool causal, float* p_out) {
  const bool off = row >= l || masked(row, col, s, causal);
  const float p = off ? 0.0f : expf(dot_rows(qs, r, ks, c, e) * scale - lse[r]);
  if (p_out != nullptr) *p_out = p;
  return off ? 0.0f : p * (dot_rows(dos, r, vs, c, ev) - dsum[r]);
}

// dk (batch, s, e), dv (batch, s, ev); dout and out (batch, l, ev + 1)
__global__ void attention_dkdv_kernel(const float* q, const float* k, const float* v, const float* out,
                                      const float* dout, float* dk, float* dv, int64_t batch, int64_t l,
                                      int64_t s, int64_t e, int64_t ev, float scale, bool causal) {
  __shared__ float qs[kBr][kPad];
  __shared__ float dos[kBr][kPad];
  __shared__ float ks[kBc][kPad];
  __shared__ float vs[kBc][kPad];
  __shared__ float ps[kBr][kBc + 1];
  __shared__ float dss[kBr][kBc + 1];
  __shared__ float lse[kBr], dsum[kBr];
  const int r = threadIdx.x / kLanes, lane = threadIdx.x % kLanes;  // r: a query row, then a key row
  const int64_t kblocks = (s + kBc - 1) / kBc;
  for (int64_t t = blockIdx.x; t < batch * kblocks; t += gridDim.x) {
    const int64_t b = t / kblocks, k0 = (t % kblocks) * kBc;
    const float* ob = out + b * l * (ev + 1);
    const float* gb = dout + b * l * (ev + 1);
    load_tile(ks, k + b * s * e, k0, s, e, e);
    load_tile(vs, v + b * s * ev, k0, s, ev, ev);
    float dka[kPer], dva[kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j) dka[j] = dva[j] = 0.0f;
    // causal: query rows before k0 see none of these keys
    for (int64_t q0 = causal ? (k0 / kBr) * kBr : 0; q0 < l; q0 += kBr) {
      __syncthreads();  // the last tile's readers are done with qs, dos, ps, dss
      load_tile(qs, q + b * l * e, q0, l, e, e);
      load_tile(dos, gb, q0, l, ev, ev + 1);
      load_row_stats(lse, dsum, ob, gb, q0, l, ev);
      __syncthreads();
#pragma unroll
      for (int j = 0; j < kColsPerLane; ++j) {
        const int c = lane + j * kLanes;
        dss[r][c] = score_gradient(qs, ks, dos, vs, lse, dsum, r, c, q0 + r, k0 + c, l, s, e, ev, scale,
                                   causal, &ps[r][c]);
      }
      __syncthreads();
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int x = lane + j * kLanes;
        if (x < ev) {
          float a = dva[j];
          for (int rr = 0; rr < kBr; ++rr) a += ps[rr][r] * dos[rr][x];
          dva[j] = a;
        }
        if (x < e) {
          float a = dka[j];
          for (int rr = 0; rr < kBr; ++rr) a += dss[rr][r] * qs[rr][x];
          dka[j] = a;
        }
      }
    }
    const int64_t key = k0 + r;
    if (key < s) {
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int x = lane + j * kLanes;
        if (x < e) dk[(b * s + key) * e + x] = dka[j] * scale;
        if (x < ev) dv[(b * s + key) * ev + x] = dva[j];
      }
    }
    __syncthreads();  // ks, vs are reloaded for the next tile
  }
}

// dq (batch, l, e)
__global__ void attention_dq_kernel(const float* q, const float* k, const float* v, const float* out,
                                    const float* dout, float* dq, int64_t batch, int64_t l, int64_t s,
                                    int64_t e, int64_t ev, float scale, bool causal) {
  __shared__ float qs[kBr][kPad];
  __shared__ float dos[kBr][kPad];
  __shared__ float ks[kBc][kPad];
  __shared__ float vs[kBc][kPad];
  __shared__ float dss[kBr][kBc + 1];
  __shared__ float lse[kBr], dsum[kBr];
  const int r = threadIdx.x / kLanes, lane = threadIdx.x % kLanes;
  const int64_t qblocks = (l + kBr - 1) / kBr;
  for (int64_t t = blockIdx.x; t < batch * qblocks; t += gridDim.x) {
    const int64_t b = t / qblocks, q0 = (t % qblocks) * kBr, row = q0 + r;
    const float* kb = k + b * s * e;
    const float* vb = v + b * s * ev;
    load_tile(qs, q + b * l * e, q0, l, e, e);
    load_tile(dos, dout + b * l * (ev + 1), q0, l, ev, ev + 1);
    load_row_stats(lse, dsum, out + b * l * (ev + 1), dout + b * l * (ev + 1), q0, l, ev);
    float acc[kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j) acc[j] = 0.0f;
    const int64_t kend = causal ? (s < q0 + kBr ? s : q0 + kBr) : s;
    for (int64_t k0 = 0; k0 < kend; k0 += kBc) {
      __syncthreads();  // qs, dos, lse loaded; the last tile's readers are done with ks, dss
      load_tile(ks, kb, k0, s, e, e);
      load_tile(vs, vb, k0, s, ev, ev);
      __syncthreads();
#pragma unroll
      for (int j = 0; j < kColsPerLane; ++j) {
        const int c = lane + j * kLanes;
        dss[r][c] = score_gradient(qs, ks, dos, vs, lse, dsum, r, c, row, k0 + c, l, s, e, ev, scale, causal,
                                   nullptr);
      }
      __syncthreads();
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int x = lane + j * kLanes;
        if (x < e) {
          float a = acc[j];
          for (int c = 0; c < kBc; ++c) a += dss[r][c] * ks[c][x];
          acc[j] = a;
        }
      }
    }
    if (row < l) {
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int x = lane + j * kLanes;
        if (x < e) dq[(b * l + row) * e + x] = acc[j] * scale;
      }
    }
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

}  // namespace

// ---------------------------------------------------------------------------- launchers

void attention(int dev, const float* q, const float* k, const float* v, float* out, int64_t batch, int64_t l,
               int64_t s, int64_t e, int64_t ev, float scale, bool causal) {
  cudaStream_t stream = activate(dev);
  note_flops(2.0 * pairs(batch, l, s, causal) * static_cast<double>(e + ev));
  launch<attention_forward_kernel>("attention", tile_grid(batch * ceil_div(l, kBr)), kThreads, 0, stream, q,
                                   k, v, out, batch, l, s, e, ev, scale, causal);
}

void attention_gradient(int dev, const float* q, const float* k, const float* v, const float* out,
                        const float* dout, float* dq, float* dk, float* dv, int64_t batch, int64_t l,
                        int64_t s, int64_t e, int64_t ev, float scale, bool causal) {
  cudaStream_t stream = activate(dev);
  if (s > 0) {
    note_flops(2.0 * pairs(batch, l, s, causal) * static_cast<double>(2 * e + 2 * ev));
    launch<attention_dkdv_kernel>("attention_gradient", tile_grid(batch * ceil_div(s, kBc)), kThreads, 0,
                                  stream, q, k, v, out, dout, dk, dv, batch, l, s, e, ev, scale, causal);
  }
  if (l > 0) {
    note_flops(2.0 * pairs(batch, l, s, causal) * static_cast<double>(2 * e + ev));
    launch<attention_dq_kernel>("attention_gradient", tile_grid(batch * ceil_div(l, kBr)), kThreads, 0,
                                stream, q, k, v, out, dout, dq, batch, l, s, e, ev, scale, causal);
  }
}

}  // namespace gpumat::GPUMAT_CUDA_NS
