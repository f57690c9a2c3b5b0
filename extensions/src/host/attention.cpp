// Host attention family: the fused scaled dot-product attention of ../cuda/attention.cu with the
// same algorithm (FlashAttention-2, Dao 2023): per tile of kBr query rows, an online softmax over
// tiles of kBc keys (running max m and sum, the accumulated output rescaled by exp(m_old - m_new)),
// the (l, s) score matrix never stored; out (batch, l, ev + 1) holds O and the row's logsumexp L.
// Gradient: P = exp(scale q.k - L), dS = P (dO.v - D) with D = rowsum(dO * O) - dL (dL the
// gradient of the logsumexp column);
// dV = P^T dO and dK = scale dS^T Q over key tiles, dQ = scale dS K over query tiles (each output
// written by one tile: deterministic). OpenMP over (batch, tile). Arithmetic in float; the CUDA
// kernels tile differently (64 rows, register blocks), so the two agree to rounding, not bit for bit.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels.h"
#include "parallel.h"

namespace gpumat::host {

namespace {

constexpr int64_t kBr = 16;  // query rows per tile
constexpr int64_t kBc = 16;  // key rows per tile
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

float dot(const float* a, const float* b, int64_t n) {
  float acc = 0.0f;
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
        for (int64_t c = 0; c < kBc; ++c) {
          p[c] = mx == kNegInf ? 0.0f : std::exp(p[c] - mx);
          rs += p[c];
        }
        sum[r] = sum[r] * alpha + rs;
        for (int64_t x = 0; x < ev; ++x) {
          float ax = a[x] * alpha;
          for (int64_t c = 0; c < kBc && k0 + c < s; ++c) ax += p[c] * vb[(k0 + c) * ev + x];
          a[x] = ax;
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

namespace {

// dS of query row `row` and key `col` (P into *p): P = exp(scale q.k - L), dS = P (dO.v - D).
float score_gradient(const float* qr, const float* kc, const float* gr, const float* vc, float lse, float d,
                     int64_t e, int64_t ev, float scale, float* p) {
  *p = std::exp(dot(qr, kc, e) * scale - lse);
  return *p * (dot(gr, vc, ev) - d);
}

// L and D = rowsum(dO * O) - dL of each query row of batch b.
void row_stats(const float* out, const float* dout, int64_t rows, int64_t ev, float* lse, float* d) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* o = out + r * (ev + 1);
    const float* g = dout + r * (ev + 1);
    d[r] = dot(g, o, ev) - g[ev];  // the logsumexp's own gradient: dL/ds = P dlse
    lse[r] = o[ev];
  }
}

}  // namespace

void attention_gradient(int, const float* q, const float* k, const float* v, const float* out,
                        const float* dout, float* dq, float* dk, float* dv, int64_t batch, int64_t l,
                        int64_t s, int64_t e, int64_t ev, float scale, bool causal) {
  std::vector<float> lse(static_cast<size_t>(batch * l)), dsum(static_cast<size_t>(batch * l));
  parallel_for(batch, batch * l * ev, [&](int64_t b) {
    row_stats(out + b * l * (ev + 1), dout + b * l * (ev + 1), l, ev, lse.data() + b * l,
              dsum.data() + b * l);
  });
  const int64_t work = batch * l * s * (e + ev);
  // dK, dV: one task per (batch, key tile), over the query rows that see its keys
  const int64_t kblocks = (s + kBc - 1) / kBc;
  parallel_for(batch * kblocks, work, [&](int64_t t) {
    const int64_t b = t / kblocks, k0 = (t % kblocks) * kBc, keys = std::min(kBc, s - k0);
    for (int64_t c = 0; c < keys; ++c) {
      const int64_t col = k0 + c;
      const float* kc = k + (b * s + col) * e;
      const float* vc = v + (b * s + col) * ev;
      float* dkc = dk + (b * s + col) * e;
      float* dvc = dv + (b * s + col) * ev;
      std::fill(dkc, dkc + e, 0.0f);
      std::fill(dvc, dvc + ev, 0.0f);
      for (int64_t row = causal ? (k0 / kBr) * kBr : 0; row < l; ++row) {
        if (masked(row, col, s, causal)) continue;
        const float* qr = q + (b * l + row) * e;
        const float* gr = dout + (b * l + row) * (ev + 1);
        float p;
        const float ds =
            score_gradient(qr, kc, gr, vc, lse[b * l + row], dsum[b * l + row], e, ev, scale, &p);
        for (int64_t x = 0; x < ev; ++x) dvc[x] += p * gr[x];
        for (int64_t x = 0; x < e; ++x) dkc[x] += ds * qr[x];
      }
      for (int64_t x = 0; x < e; ++x) dkc[x] *= scale;
    }
  });
  // dQ: one task per (batch, query tile), over the keys its rows see
  const int64_t qblocks = (l + kBr - 1) / kBr;
  parallel_for(batch * qblocks, work, [&](int64_t t) {
    const int64_t b = t / qblocks, q0 = (t % qblocks) * kBr, rows = std::min(kBr, l - q0);
    const int64_t kend = key_end(q0, s, causal);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t row = q0 + r;
      const float* qr = q + (b * l + row) * e;
      const float* gr = dout + (b * l + row) * (ev + 1);
      float* dqr = dq + (b * l + row) * e;
      std::fill(dqr, dqr + e, 0.0f);
      for (int64_t col = 0; col < kend; ++col) {
        if (masked(row, col, s, causal)) continue;
        float p;
        const float ds = score_gradient(qr, k + (b * s + col) * e, gr, v + (b * s + col) * ev,
                                        lse[b * l + row], dsum[b * l + row], e, ev, scale, &p);
        for (int64_t x = 0; x < e; ++x) dqr[x] += ds * k[(b * s + col) * e + x];
      }
      for (int64_t x = 0; x < e; ++x) dqr[x] *= scale;
    }
  });
}

}  // namespace gpumat::host
