// The matmul family's ops (gpumat/ops.h): matmul, matmul_bias, bmm. Checks here and in checks.h; kernels
// in ../cuda/matmul.cu and ../host/matmul.cpp.
#include "gpumat/ops.h"

#include <string>

#include "checks.h"

namespace gpumat::ops {

namespace {

// The sizes of op(A) @ op(B): (m, k) @ (k, n).
struct Product {
  const GpuMatrix& a;
  bool trans_a;
  const GpuMatrix& b;
  bool trans_b;
  int64_t m, n, k;
  // The operands as the messages name them: "A^T (3, 2) @ B (3, 4)".
  std::string str() const {
    return std::string(trans_a ? "A^T" : "A") + " " + a.shape_str() + " @ " + (trans_b ? "B^T " : "B ") +
           b.shape_str();
  }
};

// The checks matmul and matmul_bias share: 2-D operands, C not aliased with them, matching inner
// dimensions, C of shape (m, n), sizes within the host BLAS's 32-bit ones (one limit for every
// device). `extra` ends the operands' description in messages (matmul_bias: its bias).
Product check_product(const char* op, const GpuMatrix& a, bool trans_a, const GpuMatrix& b, bool trans_b,
                      const GpuMatrix& c, const std::string& extra = "") {
  require_ndim(op, "A", a, 2);
  require_ndim(op, "B", b, 2);
  require_ndim(op, "C", c, 2);
  not_aliased(op, a, c);
  not_aliased(op, b, c);
  const Product p{a,
                  trans_a,
                  b,
                  trans_b,
                  trans_a ? a.dim(1) : a.dim(0),
                  trans_b ? b.dim(0) : b.dim(1),
                  trans_a ? a.dim(0) : a.dim(1)};
  const int64_t kb = trans_b ? b.dim(1) : b.dim(0);
  if (p.k != kb) throw ShapeError(std::string(op) + ": inner dimensions differ: " + p.str() + extra);
  if (c.dim(0) != p.m || c.dim(1) != p.n)
    throw ShapeError(std::string(op) + ": C has shape " + c.shape_str() + ", expected (" +
                     std::to_string(p.m) + ", " + std::to_string(p.n) + ") for " + p.str() + extra);
  const int64_t kBlasMax = 2147483647;
  if (p.m > kBlasMax || p.n > kBlasMax || p.k > kBlasMax)
    throw ShapeError(std::string(op) + ": dimensions over 2^31-1 are not supported: " + p.str() + extra);
  return p;
}

}  // namespace

void matmul(const GpuMatrix& a, bool trans_a, const GpuMatrix& b, bool trans_b, GpuMatrix& c) {
  const char* op = "matmul";
  const Backend& be = same_device(op, a, b, c);
  const Product p = check_product(op, a, trans_a, b, trans_b, c);
  if (c.size() == 0) return finish(c);
  if (p.k == 0) {
    be.array_set(c.device().index, c.data(), c.size(), 0.0f);
  } else {
    be.matmul(c.device().index, a.data(), trans_a, b.data(), trans_b, c.data(), p.m, p.n, p.k);
  }
  finish(c);
}

void matmul_bias(const GpuMatrix& a, bool trans_a, const GpuMatrix& b, bool trans_b, const GpuMatrix& bias,
                 GpuMatrix& c, bool relu) {
  const char* op = "matmul_bias";
  const Backend& be = same_device(op, a, b, bias, c);
  require_ndim(op, "the bias", bias, 1);
  not_aliased(op, bias, c);
  const Product p = check_product(op, a, trans_a, b, trans_b, c, " + bias " + bias.shape_str());
  if (bias.dim(0) != p.n)
    throw ShapeError(std::string(op) + ": the bias must have shape (" + std::to_string(p.n) + ",) for " +
                     p.str() + " + bias " + bias.shape_str());
  if (c.size() == 0) return finish(c);
  const int dev = c.device().index;
  if (p.k == 0) {  // an empty sum: c is the bias on every row
    be.broadcast_to(dev, bias.data(), p.n, c.data(), c.size());
    if (relu) be.relu(dev, c.data(), c.data(), c.size());
  } else {
    be.matmul_bias(dev, a.data(), trans_a, b.data(), trans_b, bias.data(), c.data(), p.m, p.n, p.k, relu);
  }
  finish(c);
}

void bmm(const GpuMatrix& a, bool trans_a, const GpuMatrix& b, bool trans_b, GpuMatrix& c) {
  const char* op = "bmm";
  const Backend& be = same_device(op, a, b, c);
  require_ndim(op, "A", a, 3);
  require_ndim(op, "B", b, 3);
  require_ndim(op, "C", c, 3);
  not_aliased(op, a, c);
  not_aliased(op, b, c);
  const std::string desc = std::string(trans_a ? "A^T" : "A") + " " + a.shape_str() + " @ " +
                           (trans_b ? "B^T " : "B ") + b.shape_str();
  const int64_t m = trans_a ? a.dim(2) : a.dim(1), k = trans_a ? a.dim(1) : a.dim(2);
  const int64_t n = trans_b ? b.dim(1) : b.dim(2), kb = trans_b ? b.dim(2) : b.dim(1);
  if (k != kb) throw ShapeError(std::string(op) + ": inner dimensions differ: " + desc);
  // The operands' batch (1 repeats a matrix), then c's: that batch, or 1 for the products' sum.
  const int64_t ab = a.dim(0) == 1 ? b.dim(0) : a.dim(0);
  if (b.dim(0) != ab && b.dim(0) != 1)
    throw ShapeError(std::string(op) + ": batch sizes differ: " + desc +
                     " (a batch of 1 repeats its matrix)");
  const int64_t batch = ab == 1 ? c.dim(0) : ab;
  if ((c.dim(0) != batch && c.dim(0) != 1) || c.dim(1) != m || c.dim(2) != n)
    throw ShapeError(std::string(op) + ": C has shape " + c.shape_str() + ", expected (" +
                     std::to_string(batch) + ", " + std::to_string(m) + ", " + std::to_string(n) +
                     ") or (1, " + std::to_string(m) + ", " + std::to_string(n) + ") for " + desc);
  const int64_t kBlasMax = 2147483647;
  if (m > kBlasMax || n > kBlasMax || k > kBlasMax)
    throw ShapeError(std::string(op) + ": dimensions over 2^31-1 are not supported: " + desc);
  if (c.size() == 0) return finish(c);
  const int dev = c.device().index;
  if (k == 0 || batch == 0) {  // empty sums
    be.array_set(dev, c.data(), c.size(), 0.0f);
  } else {
    const int64_t stride_c = c.dim(0) == batch && batch > 1 ? m * n : 0;
    be.bmm(dev, a.data(), trans_a, a.dim(0) == batch ? m * k : 0, b.data(), trans_b,
           b.dim(0) == batch ? k * n : 0, c.data(), stride_c, batch, m, n, k);
  }
  finish(c);
}

}  // namespace gpumat::ops
