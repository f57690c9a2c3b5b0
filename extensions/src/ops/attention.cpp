// The attention family's ops (gpumat/ops.h): fused scaled dot-product attention and its gradient.
// Checks here and in checks.h; kernels in ../cuda/attention.cu and ../host/attention.cpp.
#include <cmath>
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
  if (d.e > kMaxHead || d.ev > kMaxHead)
    throw ShapeError(std::string(op) + ": head dims e and ev must be at most " + std::to_string(kMaxHead) +
                     ", got " + given);
  if (!std::isfinite(scale))
    throw ShapeError(std::string(op) + ": scale must be finite, got " + std::to_string(scale));
  expect(op, "out", out, {d.batch, d.l, d.ev + 1}, given);
  return d;
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
                 scale, causal);
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
                          dq + q.size(), dq + q.size() + k.size(), d.batch, d.l, d.s, d.e, d.ev, scale,
                          causal, are_deterministic_algorithms_enabled());
  }
  finish(dqkv);
}

}  // namespace gpumat::ops
