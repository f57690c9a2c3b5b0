// The matmul family's ops (gpumat/ops.h): matmul, matmul_bias. Checks here and in checks.h; kernels
// in ../cuda/matmul.cu and ../host/matmul.cpp.
#include "gpumat/ops.h"

#include <string>

#include "checks.h"

namespace gpumat::ops {

void matmul(const GpuMatrix& a, bool trans_a, const GpuMatrix& b, bool trans_b, GpuMatrix& c) {
  const char* op = "matrix_multiply";
  const Backend& be = same_device(op, a, b, c);
  require_ndim(op, "A", a, 2);
  require_ndim(op, "B", b, 2);
  require_ndim(op, "C", c, 2);
  not_aliased(op, a, c);
  not_aliased(op, b, c);
  int64_t m = trans_a ? a.dim(1) : a.dim(0);
  int64_t k = trans_a ? a.dim(0) : a.dim(1);
  int64_t kb = trans_b ? b.dim(1) : b.dim(0);
  int64_t n = trans_b ? b.dim(0) : b.dim(1);
  auto desc = [&] {
    return std::string(trans_a ? "A^T" : "A") + " " + a.shape_str() + " @ " + (trans_b ? "B^T " : "B ") +
           b.shape_str();
  };
  if (k != kb) throw ShapeError(std::string(op) + ": inner dimensions differ: " + desc());
  if (c.dim(0) != m || c.dim(1) != n)
    throw ShapeError(std::string(op) + ": C has shape " + c.shape_str() + ", expected (" + std::to_string(m) +
                     ", " + std::to_string(n) + ") for " + desc());
  const int64_t kBlasMax = 2147483647;  // host BLAS takes 32-bit sizes; one limit for every device
  if (m > kBlasMax || n > kBlasMax || k > kBlasMax)
    throw ShapeError(std::string(op) + ": dimensions over 2^31-1 are not supported: " + desc());
  if (c.size() == 0) return finish(c);
  if (k == 0) {
    be.array_set(c.device().index, c.data(), c.size(), 0.0f);
  } else {
    be.matmul(c.device().index, a.data(), trans_a, b.data(), trans_b, c.data(), m, n, k);
  }
  finish(c);
}

void matmul_bias(const GpuMatrix& a, bool trans_a, const GpuMatrix& b, bool trans_b, const GpuMatrix& bias,
                 GpuMatrix& c, bool relu) {
  const char* op = "matmul_bias";
  const Backend& be = same_device(op, a, b, bias, c);
  require_ndim(op, "A", a, 2);
  require_ndim(op, "B", b, 2);
  require_ndim(op, "C", c, 2);
  require_ndim(op, "the bias", bias, 1);
  not_aliased(op, a, c);
  not_aliased(op, b, c);
  not_aliased(op, bias, c);
  int64_t m = trans_a ? a.dim(1) : a.dim(0);
  int64_t k = trans_a ? a.dim(0) : a.dim(1);
  int64_t kb = trans_b ? b.dim(1) : b.dim(0);
  int64_t n = trans_b ? b.dim(0) : b.dim(1);
  auto desc = [&] {
    return std::string(trans_a ? "A^T" : "A") + " " + a.shape_str() + " @ " + (trans_b ? "B^T " : "B ") +
           b.shape_str() + " + bias " + bias.shape_str();
  };
  if (k != kb) throw ShapeError(std::string(op) + ": inner dimensions differ: " + desc());
  if (c.dim(0) != m || c.dim(1) != n)
    throw ShapeError(std::string(op) + ": C has shape " + c.shape_str() + ", expected (" + std::to_string(m) +
                     ", " + std::to_string(n) + ") for " + desc());
  if (bias.dim(0) != n)
    throw ShapeError(std::string(op) + ": the bias must have shape (" + std::to_string(n) + ",) for " +
                     desc());
  const int64_t kBlasMax = 2147483647;
  if (m > kBlasMax || n > kBlasMax || k > kBlasMax)
    throw ShapeError(std::string(op) + ": dimensions over 2^31-1 are not supported: " + desc());
  if (c.size() == 0) return finish(c);
  const int dev = c.device().index;
  if (k == 0) {  // an empty sum: c is the bias on every row
    be.broadcast_to(dev, bias.data(), n, c.data(), c.size());
    if (relu) be.relu(dev, c.data(), c.data(), c.size());
  } else {
    be.matmul_bias(dev, a.data(), trans_a, b.data(), trans_b, bias.data(), c.data(), m, n, k, relu);
  }
  finish(c);
}

}  // namespace gpumat::ops
