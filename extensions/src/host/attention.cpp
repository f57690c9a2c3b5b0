// Host attention family: the fused scaled dot-product attention of ../cuda/attention.cu with the
// same algorithm (FlashAttention-2, Dao 2023, Algorithms 1 and 2): per tile of kBr query rows, an
// online softmax over tiles of kBc keys (running max m and sum, the accumulated output rescaled by
// exp(m_old - m_new)); only a (kBr, kBc) tile of scores exists at a time, so the scratch does not
// grow with the sequence. q, k, v (and dq, dk, dv, laid out as they are) are read through their
// HeadLayouts (../backend.h): a tile's rows are its operand's row stride apart, which BLAS takes as
// the leading dimension. out (batch, l, ev + 1) holds O and the row's logsumexp L. The tile
// products (S = scale Q K^T, P V, and in the gradient P^T dO, dO V^T, dS^T Q, dS K) are
// single-threaded sgemm calls (blas.h); softmax and masking are SIMD loops between them.
// Forward: parallel over (batch, query tile). Gradient: P = exp(S - L), dS = P (dP - D) with dP = dO V^T
// and D = rowsum(dO * O) - dL (dL the gradient of the logsumexp column); parallel over the batch,
// each entry's query tiles and key tiles in order, so dK and dV accumulate over the query tiles and
// dQ over the key tiles in a fixed order: deterministic, the same bits on any thread count. The CUDA
// kernels tile differently (64 rows, register blocks), so the two agree to rounding, not bit for bit.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "blas.h"
#include "kernels.h"
#include "parallel.h"
#include "vec_math.h"

namespace gpumat::host {

namespace {

constexpr int64_t kBr = 64;  // query rows per tile
constexpr int64_t kBc = 64;  // keys per tile
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// c (m, n) = alpha op(a) op(b) + beta c for a tile, any dimension possibly 0 (BLAS rejects a
// leading dimension of 0, and k = 0 leaves c to beta).
void tile_gemm(const float* a, bool ta, int64_t lda, const float* b, bool tb, int64_t ldb, float* c,
               int64_t ldc, int64_t m, int64_t n, int64_t k, float beta, float alpha = 1.0f) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (beta == 0.0f)
      for (int64_t r = 0; r < m; ++r) std::fill(c + r * ldc, c + r * ldc + n, 0.0f);
    return;
  }
  sgemm(a, ta, lda, b, tb, ldb, c, ldc, m, n, k, beta, alpha);
}

// Causal masking of a (rows, cols) score tile whose first query row is q0 and first key k0: key
// k0 + c is hidden from query q0 + r when k0 + c > q0 + r.
void mask_causal(float* st, int64_t rows, int64_t cols, int64_t q0, int64_t k0) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = std::max<int64_t>(0, q0 + r + 1 - k0); c < cols; ++c) st[r * kBc + c] = kNegInf;
}

int64_t key_end(int64_t q0, int64_t rows, int64_t s, bool causal) {
  return causal ? std::min(s, q0 + rows) : s;
}

// A region's row stride as BLAS's leading dim: at least the row's length and 1 (a region of one
// row may give any stride; it is never stepped).
int64_t row_stride(const HeadLayout& layout, int64_t dim) {
  return std::max({layout.row_stride, dim, int64_t{1}});
}

float dot(const float* a, const float* b, int64_t n) {
  float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
  for (int64_t x = 0; x < n; ++x) acc += a[x] * b[x];
  return acc;
}

// The max and the sum of a row of a tile, in kLanes fixed lanes (element c to lane c % kLanes)
// combined in order: SIMD code on every version below, the same bits on each. (An `omp simd
// reduction` left these loops scalar in GCC 12's AVX2 and AVX-512 clones, and so did a bounds test
// inside the lane loop: the whole groups run without one, the ragged end after.) The max skips NaN
// (std::max), whose exp then makes the row's sum, and so its output, NaN.
constexpr int64_t kLanes = 16;

inline float row_max(const float* p, int64_t cols) {
  float lane[kLanes];
  std::fill(lane, lane + kLanes, kNegInf);
  int64_t c0 = 0;
  for (; c0 + kLanes <= cols; c0 += kLanes)  // whole groups: one vector a group, no bounds test
#pragma omp simd
    for (int64_t j = 0; j < kLanes; ++j) lane[j] = std::max(lane[j], p[c0 + j]);
  for (int64_t j = 0; c0 + j < cols; ++j) lane[j] = std::max(lane[j], p[c0 + j]);
  float mx = kNegInf;
  for (int64_t j = 0; j < kLanes; ++j) mx = std::max(mx, lane[j]);
  return mx;
}

inline float row_sum(const float* p, int64_t cols) {
  float lane[kLanes] = {};
  int64_t c0 = 0;
  for (; c0 + kLanes <= cols; c0 += kLanes)
#pragma omp simd
    for (int64_t j = 0; j < kLanes; ++j) lane[j] += p[c0 + j];
  for (int64_t j = 0; c0 + j < cols; ++j) lane[j] += p[c0 + j];
  float total = 0.0f;
  for (int64_t j = 0; j < kLanes; ++j) total += lane[j];
  return total;
}

// The tile loops between the products, compiled also for AVX-512 and AVX2 (GPUMAT_SIMD_CLONES; vexp
// is plain arithmetic and selects, the same bits on every version).
//
// Online softmax over one (rows, cols) tile of scores st (row stride kBc): per row the running max
// m and sum are updated, st becomes exp(st - m_new), and the row's accumulated output acc (rows, ev)
// is rescaled by exp(m_old - m_new), ready for acc += P V.
GPUMAT_SIMD_CLONES void online_softmax_tile(float* st, int64_t rows, int64_t cols, float* m, float* sum,
                                            float* acc, int64_t ev) {
  for (int64_t r = 0; r < rows; ++r) {
    float* p = st + r * kBc;
    const float mx = std::max(m[r], row_max(p, cols));
    const float alpha = mx == kNegInf ? 1.0f : std::exp(m[r] - mx);
    const float shift = mx == kNegInf ? 0.0f : mx;  // all masked: every p = exp(-inf) = 0
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) p[c] = vexp(p[c] - shift);
    const float rs = row_sum(p, cols);
    sum[r] = sum[r] * alpha + rs;
    float* a = acc + r * ev;
#pragma omp simd
    for (int64_t x = 0; x < ev; ++x) a[x] *= alpha;
    m[r] = mx;
  }
}

// P = exp(S - L) for a tile of scores (row stride kBc), L the rows' logsumexps.
GPUMAT_SIMD_CLONES void probabilities_tile(float* pt, int64_t rows, int64_t cols, const float* lse) {
  for (int64_t r = 0; r < rows; ++r) {
    float* p = pt + r * kBc;
    const float shift = lse[r];
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) p[c] = vexp(p[c] - shift);
  }
}

// dS = P (dP - D) in place of dP, for a tile (row stride kBc), D per row.
GPUMAT_SIMD_CLONES void score_gradient_tile(const float* pt, float* dpt, int64_t rows, int64_t cols,
                                            const float* d) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* p = pt + r * kBc;
    float* ds = dpt + r * kBc;
    const float dr = d[r];
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) ds[c] = p[c] * (ds[c] - dr);
  }
}

}  // namespace

void attention(int, const float* q, const float* k, const float* v, float* out, int64_t batch, int64_t l,
               int64_t s, int64_t e, int64_t ev, HeadLayout lq, HeadLayout lk, HeadLayout lv, float scale,
               bool causal) {
  const int64_t qblocks = (l + kBr - 1) / kBr;
  const int64_t lev = std::max<int64_t>(ev, 1);  // the accumulator's row stride
  // BLAS's leading dims: the rows' strides (ops/attention.cpp checks them >= the dims when a
  // region has several rows; with one row the stride is never stepped, and BLAS wants >= 1)
  const int64_t ldq = row_stride(lq, e), ldk = row_stride(lk, e), ldv = row_stride(lv, ev);
  parallel_for(batch * qblocks, batch * l * s * (e + ev), [&](int64_t t) {
    const int64_t b = t / qblocks, q0 = (t % qblocks) * kBr, rows = std::min(kBr, l - q0);
    const float* qt = q + lq.start(b) + q0 * ldq;
    const float* kb = k + lk.start(b);
    const float* vb = v + lv.start(b);
    alignas(64) float st[kBr * kBc];  // one cache line per 16 scores: no peeled scalar iterations
    std::vector<float> acc(static_cast<size_t>(kBr * lev), 0.0f);
    float m[kBr], sum[kBr];
    std::fill(m, m + kBr, kNegInf);
    std::fill(sum, sum + kBr, 0.0f);
    const int64_t kend = key_end(q0, rows, s, causal);
    for (int64_t k0 = 0; k0 < kend; k0 += kBc) {
      const int64_t cols = std::min(kBc, kend - k0);
      tile_gemm(qt, false, ldq, kb + k0 * ldk, true, ldk, st, kBc, rows, cols, e, 0.0f, scale);
      if (causal) mask_causal(st, rows, cols, q0, k0);
      online_softmax_tile(st, rows, cols, m, sum, acc.data(), ev);
      tile_gemm(st, false, kBc, vb + k0 * ldv, false, ldv, acc.data(), lev, rows, ev, cols, 1.0f);
    }
    for (int64_t r = 0; r < rows; ++r) {
      float* o = out + (b * l + q0 + r) * (ev + 1);
      const float* a = acc.data() + r * ev;
      // sum is 0 only for a row with every key masked (O = 0, L = -inf); a NaN score makes it NaN,
      // and so O and L (PyTorch gives NaN there too)
      const float inv = sum[r] != 0.0f ? 1.0f / sum[r] : 0.0f;
      for (int64_t x = 0; x < ev; ++x) o[x] = a[x] * inv;
      o[ev] = sum[r] != 0.0f ? m[r] + std::log(sum[r]) : kNegInf;
    }
  });
}

void attention_gradient(int, const float* q, const float* k, const float* v, const float* out,
                        const float* dout, float* dq, float* dk, float* dv, int64_t batch, int64_t l,
                        int64_t s, int64_t e, int64_t ev, HeadLayout lq, HeadLayout lk, HeadLayout lv,
                        float scale, bool causal, bool) {
  const int64_t ldq = row_stride(lq, e), ldk = row_stride(lk, e), ldv = row_stride(lv, ev);
  parallel_for(batch, batch * l * s * (e + ev), [&](int64_t b) {
    const float* qb = q + lq.start(b);
    const float* kb = k + lk.start(b);
    const float* vb = v + lv.start(b);
    const float* ob = out + b * l * (ev + 1);
    const float* gb = dout + b * l * (ev + 1);
    float* dqb = dq + lq.start(b);  // the gradients are laid out as their operands
    float* dkb = dk + lk.start(b);
    float* dvb = dv + lv.start(b);
    for (int64_t r = 0; r < l; ++r) std::fill(dqb + r * ldq, dqb + r * ldq + e, 0.0f);
    for (int64_t r = 0; r < s; ++r) std::fill(dkb + r * ldk, dkb + r * ldk + e, 0.0f);
    for (int64_t r = 0; r < s; ++r) std::fill(dvb + r * ldv, dvb + r * ldv + ev, 0.0f);
    alignas(64) float pt[kBr * kBc], dpt[kBr * kBc];
    float d[kBr], lse[kBr];
    for (int64_t q0 = 0; q0 < l; q0 += kBr) {
      const int64_t rows = std::min(kBr, l - q0);
      const float* qt = qb + q0 * ldq;
      const float* gt = gb + q0 * (ev + 1);  // dO rows, stride ev + 1 (the lse column's gradient last)
      for (int64_t r = 0; r < rows; ++r) {
        const float* o = ob + (q0 + r) * (ev + 1);
        const float* g = gt + r * (ev + 1);
        lse[r] = o[ev];
        d[r] = dot(g, o, ev) - g[ev];  // the logsumexp's own gradient: dL/ds = P dlse
      }
      const int64_t kend = key_end(q0, rows, s, causal);
      for (int64_t k0 = 0; k0 < kend; k0 += kBc) {
        const int64_t cols = std::min(kBc, kend - k0);
        tile_gemm(qt, false, ldq, kb + k0 * ldk, true, ldk, pt, kBc, rows, cols, e, 0.0f, scale);
        if (causal) mask_causal(pt, rows, cols, q0, k0);
        probabilities_tile(pt, rows, cols, lse);
        // dV += P^T dO; dP = dO V^T; dS = P (dP - D); dK += scale dS^T Q; dQ += scale dS K
        tile_gemm(pt, true, kBc, gt, false, ev + 1, dvb + k0 * ldv, ldv, cols, ev, rows, 1.0f);
        tile_gemm(gt, false, ev + 1, vb + k0 * ldv, true, ldv, dpt, kBc, rows, cols, ev, 0.0f);
        score_gradient_tile(pt, dpt, rows, cols, d);
        tile_gemm(dpt, true, kBc, qt, false, ldq, dkb + k0 * ldk, ldk, cols, e, rows, 1.0f, scale);
        tile_gemm(dpt, false, kBc, kb + k0 * ldk, false, ldk, dqb + q0 * ldq, ldq, rows, e, cols, 1.0f,
                  scale);
      }
    }
  });
}

}  // namespace gpumat::host
