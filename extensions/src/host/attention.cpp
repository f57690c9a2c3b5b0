// Host attention family: the fused scaled dot-product attention of ../cuda/attention.cu with the
// same algorithm (FlashAttention-2, Dao 2023): per tile of kBr query rows, an online softmax over
// tiles of kBc keys (running max m and sum, the accumulated output rescaled by exp(m_old - m_new)),
// the (l, s) score matrix never stored; out (batch, l, ev + 1) holds O and the row's logsumexp L.
// OpenMP over (batch, query tile). Gradient: P = exp(scale q.k - L), dS = P (dO.v - D) with
// D = rowsum(dO * O) - dL (dL the gradient of the logsumexp column), each computed once per (query
// row, key) in one pass per batch entry (OpenMP over the batch), which accumulates dV = P^T dO and
// dK = scale dS^T Q over the rows in order and dQ = scale dS K over the keys: deterministic. Dot
// products and row updates in SIMD lanes; arithmetic in float. The CUDA kernels tile differently
// (64 rows, register blocks), so the two agree to rounding, not bit for bit.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels.h"
#include "parallel.h"
#include "vec_math.h"

namespace gpumat::host {

namespace {

constexpr int64_t kBr = 16;  // query rows per tile
constexpr int64_t kBc = 16;  // key rows per tile
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// In SIMD lanes (the OpenMP reduction lets the compiler reassociate the sum).
float dot(const float* a, const float* b, int64_t n) {
  float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
  for (int64_t x = 0; x < n; ++x) acc += a[x] * b[x];
  return acc;
}

bool masked(int64_t row, int64_t col, int64_t s, bool causal) { return col >= s || (causal && col > row); }

int64_t key_end(int64_t q0, int64_t s, bool causal) { return causal ? std::min(s, q0 + kBr) : s; }

}  // namespace

void attention(int, const float* q, const float* k, const float* v, float* out, int64_t batch, int64_t l,
               int64_t s, int64_t e, int64_t ev, float scale, bool causal) {
  const int64_t qblocks = (l + kBr - 1) / kBr;
  parallel_for(batch * qblocks, batch * l * s * (e + ev), [&](int64_t t) {
    const int64_t b = t / qblocks, q0 = (t % qblocks) * kBr, rows = std::min(kBr, l - q0);
    const float* kb = k + b * s * e;
    const float* vb = v + b * s * ev;
    std::vector<float> acc(static_cast<size_t>(kBr * ev), 0.0f), m(kBr, kNegInf), sum(kBr, 0.0f);
    float p[kBc];
    const int64_t kend = key_end(q0, s, causal);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t row = q0 + r;
      const float* qr = q + (b * l + row) * e;
      float* a = acc.data() + r * ev;
      for (int64_t k0 = 0; k0 < kend; k0 += kBc) {
        float mx = m[r];
        for (int64_t c = 0; c < kBc; ++c) {
          p[c] = masked(row, k0 + c, s, causal) ? kNegInf : dot(qr, kb + (k0 + c) * e, e) * scale;
          mx = std::max(mx, p[c]);
        }
        const float alpha = mx == kNegInf ? 1.0f : std::exp(m[r] - mx);
        float rs = 0.0f;
        const float shift = mx == kNegInf ? 0.0f : mx;  // all masked: every p[c] = exp(-inf) = 0
#pragma omp simd reduction(+ : rs)
        for (int64_t c = 0; c < kBc; ++c) {
          p[c] = vexp(p[c] - shift);
          rs += p[c];
        }
        sum[r] = sum[r] * alpha + rs;
        for (int64_t x = 0; x < ev; ++x) a[x] *= alpha;
        for (int64_t c = 0; c < kBc && k0 + c < s; ++c) {  // rows of V: each a[x] in key order
          const float pc = p[c];
          const float* vr = vb + (k0 + c) * ev;
#pragma omp simd
          for (int64_t x = 0; x < ev; ++x) a[x] += pc * vr[x];
        }
        m[r] = mx;
      }
      float* o = out + (b * l + row) * (ev + 1);
      const float inv = sum[r] > 0.0f ? 1.0f / sum[r] : 0.0f;
      for (int64_t x = 0; x < ev; ++x) o[x] = a[x] * inv;
      o[ev] = sum[r] > 0.0f ? m[r] + std::log(sum[r]) : kNegInf;
    }
  });
}

void attention_gradient(int, const float* q, const float* k, const float* v, const float* out,
                        const float* dout, float* dq, float* dk, float* dv, int64_t batch, int64_t l,
                        int64_t s, int64_t e, int64_t ev, float scale, bool causal) {
  // One task per batch entry, one pass over its (query row, key) pairs: P and dS computed once
  // each, dV and dK accumulated over the query rows in order, dQ over the keys (deterministic).
  parallel_for(batch, batch * l * s * (e + ev), [&](int64_t b) {
    const float* qb = q + b * l * e;
    const float* kb = k + b * s * e;
    const float* vb = v + b * s * ev;
    float* dkb = dk + b * s * e;
    float* dvb = dv + b * s * ev;
    std::fill(dkb, dkb + s * e, 0.0f);
    std::fill(dvb, dvb + s * ev, 0.0f);
    std::vector<float> prow(static_cast<size_t>(s));  // one query row's P over the keys
    for (int64_t row = 0; row < l; ++row) {
      const float* qr = qb + row * e;
      const float* o = out + (b * l + row) * (ev + 1);
      const float* gr = dout + (b * l + row) * (ev + 1);
      const float lse = o[ev];
      const float d = dot(gr, o, ev) - gr[ev];  // the logsumexp's own gradient: dL/ds = P dlse
      float* dqr = dq + (b * l + row) * e;
      std::fill(dqr, dqr + e, 0.0f);
      const int64_t kend = causal ? std::min(s, row + 1) : s;
      for (int64_t col = 0; col < kend; ++col) prow[col] = dot(qr, kb + col * e, e) * scale - lse;
#pragma omp simd
      for (int64_t col = 0; col < kend; ++col) prow[col] = vexp(prow[col]);
      for (int64_t col = 0; col < kend; ++col) {
        const float* kc = kb + col * e;
        const float* vc = vb + col * ev;
        const float p = prow[col];
        const float ds = p * (dot(gr, vc, ev) - d);
        float* dvc = dvb + col * ev;
        float* dkc = dkb + col * e;
#pragma omp simd
        for (int64_t x = 0; x < ev; ++x) dvc[x] += p * gr[x];
#pragma omp simd
        for (int64_t x = 0; x < e; ++x) dkc[x] += ds * qr[x];
#pragma omp simd
        for (int64_t x = 0; x < e; ++x) dqr[x] += ds * kc[x];
      }
      for (int64_t x = 0; x < e; ++x) dqr[x] *= scale;
    }
    for (int64_t x = 0; x < s * e; ++x) dkb[x] *= scale;
  });
}

}  // namespace gpumat::host
