// The attention family's ops (gpumat/ops.h): fused scaled dot-product attention and its gradient,
// over contiguous q, k, v (attention) or over strided views of one buffer (attention_strided: the
// heads of a fused q/k/v projection, read where they lie). Checks here and in checks.h; kernels in
// ../cuda/attention.cu and ../host/attention.cpp, which see every operand through a HeadLayout.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "checks.h"
#include "gpumat/ops.h"

namespace gpumat::ops {

namespace {

constexpr int64_t kMaxHead = 128;  // the kernels keep a row's head columns in registers

struct Dims {
  int64_t batch, l, s, e, ev;
};

std::string shapes(const GpuMatrix& q, const GpuMatrix& k, const GpuMatrix& v) {
  return "q " + q.shape_str() + ", k " + k.shape_str() + ", v " + v.shape_str();
}

void expect(const char* op, const char* what, const GpuMatrix& m, const std::vector<int64_t>& want,
            const std::string& given) {
  if (m.shape() != want)
    throw ShapeError(std::string(op) + ": " + what + " has shape " + m.shape_str() + ", expected " +
                     dims_str(want) + " for " + given);
}

void check_head_dims(const char* op, int64_t e, int64_t ev, float scale, const std::string& given) {
  if (e > kMaxHead || ev > kMaxHead)
    throw ShapeError(std::string(op) + ": head dims e and ev must be at most " + std::to_string(kMaxHead) +
                     ", got " + given);
  if (!std::isfinite(scale))
    throw ShapeError(std::string(op) + ": scale must be finite, got " + std::to_string(scale));
}

// q (batch, l, e), k (batch, s, e), v (batch, s, ev) with e, ev <= kMaxHead; out (batch, l, ev + 1).
Dims check_inputs(const char* op, const GpuMatrix& q, const GpuMatrix& k, const GpuMatrix& v,
                  const GpuMatrix& out, float scale) {
  const std::string given = shapes(q, k, v);
  if (q.ndim() != 3 || k.ndim() != 3 || v.ndim() != 3)
    throw ShapeError(std::string(op) + ": q, k, v must be 3-D (batch, length, head dim), got " + given);
  const Dims d{q.dim(0), q.dim(1), k.dim(1), q.dim(2), v.dim(2)};
  if (k.dim(0) != d.batch || v.dim(0) != d.batch || k.dim(2) != d.e || v.dim(1) != d.s)
    throw ShapeError(std::string(op) + ": expected q (batch, l, e), k (batch, s, e), v (batch, s, ev), got " +
                     given);
  check_head_dims(op, d.e, d.ev, scale, given);
  expect(op, "out", out, {d.batch, d.l, d.ev + 1}, given);
  return d;
}

// A contiguous (batch, rows, dim) operand's layout.
HeadLayout contiguous(int64_t rows, int64_t dim) { return {1, rows * dim, 0, dim}; }

// ---------------------------------------------------------------------------- strided operands

// One of q, k, v as a strided view: (batch, heads, rows, dim) at `offset` with the shared strides.
struct Region {
  const char* name;
  int64_t offset, rows, dim;
};

struct Strided {
  int64_t batch, heads, batch_stride, head_stride, row_stride;
  Region q, k, v;
  int64_t head_batches() const { return batch * heads; }
  HeadLayout layout() const { return {heads, batch_stride, head_stride, row_stride}; }
  int64_t count(const Region& r) const { return batch * heads * r.rows * r.dim; }
};

std::string describe(const Strided& st) {
  auto region = [](const Region& r) {
    return std::string(r.name) + " (rows " + std::to_string(r.rows) + ", dim " + std::to_string(r.dim) +
           ") at offset " + std::to_string(r.offset);
  };
  return region(st.q) + ", " + region(st.k) + ", " + region(st.v) + "; " + std::to_string(st.batch) +
         " batches of " + std::to_string(st.heads) + " heads, strides (batch " +
         std::to_string(st.batch_stride) + ", head " + std::to_string(st.head_stride) + ", row " +
         std::to_string(st.row_stride) + ")";
}

std::string element_str(__int128 i) {
  return i <= std::numeric_limits<int64_t>::max() ? std::to_string(static_cast<int64_t>(i)) : "beyond 2**63";
}

Strided check_strided(const char* op, const GpuMatrix& qkv, const GpuMatrix& out, int64_t heads, int64_t l,
                      int64_t s, int64_t e, int64_t ev, int64_t q_offset, int64_t k_offset, int64_t v_offset,
                      int64_t batch_stride, int64_t head_stride, int64_t row_stride, float scale) {
  const std::string o = std::string(op) + ": ";
  if (heads < 1) throw ShapeError(o + "heads must be at least 1, got " + std::to_string(heads));
  if (std::min({l, s, e, ev}) < 0)
    throw ShapeError(o + "lengths and head dims must be >= 0, got l " + std::to_string(l) + ", s " +
                     std::to_string(s) + ", e " + std::to_string(e) + ", ev " + std::to_string(ev));
  if (std::min({q_offset, k_offset, v_offset, batch_stride, head_stride, row_stride}) < 0)
    throw ShapeError(o + "offsets and strides must be >= 0");
  if (out.ndim() != 3 || out.dim(0) % heads != 0)
    throw ShapeError(o + "out must be (batch x heads, l, ev + 1) with " + std::to_string(heads) +
                     " heads, got " + out.shape_str());
  Strided st{out.dim(0) / heads,
             heads,
             batch_stride,
             head_stride,
             row_stride,
             {"q", q_offset, l, e},
             {"k", k_offset, s, e},
             {"v", v_offset, s, ev}};
  const std::string given = describe(st) + " of qkv " + qkv.shape_str();
  check_head_dims(op, e, ev, scale, given);
  expect(op, "out", out, {st.head_batches(), l, ev + 1}, given);
  for (const Region* r : {&st.q, &st.k, &st.v}) {
    if (st.count(*r) == 0) continue;
    if (r->rows > 1 && row_stride < r->dim)
      throw ShapeError(o + "the rows of " + r->name + " overlap: row stride " + std::to_string(row_stride) +
                       " < its head dim " + std::to_string(r->dim) + " (" + given + ")");
    // the last element, in 128 bits: strides near 2**63 must not wrap around
    const __int128 last = static_cast<__int128>(r->offset) +
                          static_cast<__int128>(st.batch - 1) * batch_stride +
                          static_cast<__int128>(heads - 1) * head_stride +
                          static_cast<__int128>(r->rows - 1) * row_stride + r->dim - 1;
    if (last >= qkv.size())
      throw ShapeError(o + r->name + " reaches element " + element_str(last) + " of qkv's " +
                       std::to_string(qkv.size()) + " (" + given + ")");
  }
  return st;
}

// Whether the gradient's three regions are written once each: within a row of `row_stride`
// elements each region covers the columns [offset % row_stride, + (heads - 1) head_stride + dim),
// its heads side by side (head_stride >= dim), the batch stride a whole number of rows, at least a
// region's rows; the three column ranges do not meet. (The layout of a fused projection's q, k, v heads;
// other layouts go through attention with copies.)
bool written_once(const Strided& st) {
  const int64_t p = st.row_stride;
  int64_t lo[3], hi[3];
  int n = 0;
  for (const Region* r : {&st.q, &st.k, &st.v}) {
    if (st.count(*r) == 0) continue;
    if (p == 0 || (st.heads > 1 && st.head_stride < r->dim)) return false;
    if (st.batch > 1 && (st.batch_stride % p != 0 || st.batch_stride / p < r->rows)) return false;
    const __int128 begin = r->offset % p,
                   end = begin + static_cast<__int128>(st.heads - 1) * st.head_stride + r->dim;
    if (end > p) return false;
    lo[n] = static_cast<int64_t>(begin), hi[n] = static_cast<int64_t>(end), ++n;
  }
  for (int a = 0; a < n; ++a)
    for (int b = a + 1; b < n; ++b)
      if (lo[a] < hi[b] && lo[b] < hi[a]) return false;
  return true;
}

}  // namespace

void attention(const GpuMatrix& q, const GpuMatrix& k, const GpuMatrix& v, GpuMatrix& out, float scale,
               bool causal) {
  const char* op = "attention";
  const Backend& be = same_device(op, q, k, v, out);
  const Dims d = check_inputs(op, q, k, v, out, scale);
  not_aliased(op, q, out);
  not_aliased(op, k, out);
  not_aliased(op, v, out);
  if (out.size() > 0)
    be.attention(q.device().index, q.data(), k.data(), v.data(), out.data(), d.batch, d.l, d.s, d.e, d.ev,
                 contiguous(d.l, d.e), contiguous(d.s, d.e), contiguous(d.s, d.ev), scale, causal);
  finish(out);
}

void attention_gradient(const GpuMatrix& q, const GpuMatrix& k, const GpuMatrix& v, const GpuMatrix& out,
                        const GpuMatrix& dout, GpuMatrix& dqkv, float scale, bool causal) {
  const char* op = "attention_gradient";
  const Backend& be = same_device(op, q, k, v, out, dout, dqkv);
  const Dims d = check_inputs(op, q, k, v, out, scale);
  const std::string given = shapes(q, k, v);
  expect(op, "dout", dout, out.shape(), given);
  expect(op, "dqkv", dqkv, {q.size() + k.size() + v.size()}, given);
  for (const GpuMatrix* in : {&q, &k, &v, &out, &dout}) not_aliased(op, *in, dqkv);
  if (dqkv.size() > 0) {
    float* dq = dqkv.data();
    be.attention_gradient(q.device().index, q.data(), k.data(), v.data(), out.data(), dout.data(), dq,
                          dq + q.size(), dq + q.size() + k.size(), d.batch, d.l, d.s, d.e, d.ev,
                          contiguous(d.l, d.e), contiguous(d.s, d.e), contiguous(d.s, d.ev), scale, causal,
                          are_deterministic_algorithms_enabled());
  }
  finish(dqkv);
}

void attention_strided(const GpuMatrix& qkv, GpuMatrix& out, int64_t heads, int64_t l, int64_t s, int64_t e,
                       int64_t ev, int64_t q_offset, int64_t k_offset, int64_t v_offset, int64_t batch_stride,
                       int64_t head_stride, int64_t row_stride, float scale, bool causal) {
  const char* op = "attention_strided";
  const Backend& be = same_device(op, qkv, out);
  const Strided st = check_strided(op, qkv, out, heads, l, s, e, ev, q_offset, k_offset, v_offset,
                                   batch_stride, head_stride, row_stride, scale);
  not_aliased(op, qkv, out);
  if (out.size() > 0) {
    const float* base = qkv.data();
    const HeadLayout lay = st.layout();
    be.attention(qkv.device().index, base + q_offset, base + k_offset, base + v_offset, out.data(),
                 st.head_batches(), l, s, e, ev, lay, lay, lay, scale, causal);
  }
  finish(out);
}

void attention_strided_gradient(const GpuMatrix& qkv, const GpuMatrix& out, const GpuMatrix& dout,
                                GpuMatrix& dqkv, int64_t heads, int64_t l, int64_t s, int64_t e, int64_t ev,
                                int64_t q_offset, int64_t k_offset, int64_t v_offset, int64_t batch_stride,
                                int64_t head_stride, int64_t row_stride, float scale, bool causal) {
  const char* op = "attention_strided_gradient";
  const Backend& be = same_device(op, qkv, out, dout, dqkv);
  const Strided st = check_strided(op, qkv, out, heads, l, s, e, ev, q_offset, k_offset, v_offset,
                                   batch_stride, head_stride, row_stride, scale);
  const std::string given = describe(st) + " of qkv " + qkv.shape_str();
  expect(op, "dout", dout, out.shape(), given);
  expect(op, "dqkv", dqkv, qkv.shape(), given);
  for (const GpuMatrix* in : {&qkv, &out, &dout}) not_aliased(op, *in, dqkv);
  if (!written_once(st))
    throw ShapeError(std::string(op) +
                     ": q, k and v must lie side by side in qkv's rows (each head's dim within a row, the "
                     "three regions' columns apart), so that each gradient element has one writer: " +
                     given);
  const int64_t covered = st.count(st.q) + st.count(st.k) + st.count(st.v);
  if (covered < dqkv.size()) fill(dqkv, 0.0f);  // what no region covers gets no gradient
  if (covered > 0) {
    const float* base = qkv.data();
    float* grad = dqkv.data();
    const HeadLayout lay = st.layout();
    be.attention_gradient(qkv.device().index, base + q_offset, base + k_offset, base + v_offset, out.data(),
                          dout.data(), grad + q_offset, grad + k_offset, grad + v_offset, st.head_batches(),
                          l, s, e, ev, lay, lay, lay, scale, causal, are_deterministic_algorithms_enabled());
  }
  finish(dqkv);
}

}  // namespace gpumat::ops
