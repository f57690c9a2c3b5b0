// gpumat::ops: argument checks (device, shape, aliasing) and dispatch to the device's Backend.
// Every message names the op and the shapes involved.
#include "gpumat/ops.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "backend.h"
#include "gpumat/error.h"

namespace gpumat {

const Backend& backend_for(const Device& device) {
  if (device.kind == DeviceKind::Host) return host_backend();
  check_device(device);  // throws for a build without CUDA or a missing device
#ifdef GPUMAT_WITH_CUDA
  return cuda_backend();
#else
  throw CudaError("unreachable: CUDA device in a build without CUDA");
#endif
}

namespace ops {
namespace {

// GPUMAT_SYNC=1 synchronizes after every op, so an asynchronous fault is reported by the op that
// caused it rather than by a later one.
bool sync_after_each_op() {
  static const bool on = [] {
    const char* v = std::getenv("GPUMAT_SYNC");
    return v != nullptr && v[0] != '\0' && v[0] != '0';
  }();
  return on;
}

// Checks that every array lives on the first one's device; returns that device's backend.
template <typename... Arrays>
const Backend& same_device(const char* op, const GpuMatrix& first, const Arrays&... rest) {
  auto check = [&](const GpuMatrix& m) {
    if (m.device() != first.device())
      throw ShapeError(std::string(op) + ": arrays are on different devices (" + first.device().str() +
                       " and " + m.device().str() + "); copy explicitly with copyfrom");
  };
  (check(rest), ...);
  (void)check;  // unused when there is only one array
  return backend_for(first.device());
}

void same_shape(const char* op, const GpuMatrix& a, const GpuMatrix& b) {
  if (a.shape() != b.shape())
    throw ShapeError(std::string(op) + ": shapes differ: " + a.shape_str() + " and " + b.shape_str());
}

void not_aliased(const char* op, const GpuMatrix& in, const GpuMatrix& out) {
  if (in.size() > 0 && in.data() == out.data())
    throw ShapeError(std::string(op) + ": the output must not be one of the inputs (shape " +
                     out.shape_str() + "); this op cannot work in place");
}

void require_ndim(const char* op, const char* what, const GpuMatrix& m, int64_t ndim) {
  if (m.ndim() != ndim)
    throw ShapeError(std::string(op) + ": " + what + " must be " + std::to_string(ndim) +
                     "-D, got shape " + m.shape_str());
}

void finish(const GpuMatrix& m) {
  if (m.device().is_cuda() && sync_after_each_op()) synchronize(m.device());
}

// Drops leading 1s: (1, 1, 10) -> (10,).
std::vector<int64_t> strip_leading_ones(const std::vector<int64_t>& s) {
  size_t i = 0;
  while (i < s.size() && s[i] == 1) ++i;
  return std::vector<int64_t>(s.begin() + static_cast<std::ptrdiff_t>(i), s.end());
}

bool is_suffix(const std::vector<int64_t>& suffix, const std::vector<int64_t>& of) {
  if (suffix.size() > of.size()) return false;
  return std::equal(suffix.begin(), suffix.end(), of.end() - static_cast<std::ptrdiff_t>(suffix.size()));
}

}  // namespace

void array_set(GpuMatrix& arr, float value) {
  const Backend& be = same_device("array_set", arr);
  if (arr.size() > 0) be.array_set(arr.device().index, arr.data(), arr.size(), value);
  finish(arr);
}

void broadcast_to(const GpuMatrix& in, GpuMatrix& out) {
  const char* op = "broadcast_to";
  const Backend& be = same_device(op, in, out);
  not_aliased(op, in, out);
  if (!is_suffix(strip_leading_ones(in.shape()), out.shape()))
    throw ShapeError(std::string(op) + ": cannot broadcast " + in.shape_str() + " to " + out.shape_str() +
                     " (the input's shape, without leading 1s, must end the output's shape)");
  if (out.size() > 0) be.broadcast_to(in.device().index, in.data(), in.size(), out.data(), out.size());
  finish(out);
}

void reduce_sum_axis_zero(const GpuMatrix& in, GpuMatrix& out) {
  const char* op = "reduce_sum_axis_zero";
  const Backend& be = same_device(op, in, out);
  not_aliased(op, in, out);
  if (!is_suffix(strip_leading_ones(out.shape()), in.shape()))
    throw ShapeError(std::string(op) + ": cannot sum " + in.shape_str() + " down to " + out.shape_str() +
                     " (the output's shape, without leading 1s, must end the input's shape)");
  if (out.size() == 0) return finish(out);
  int64_t rows = in.size() / out.size();
  be.reduce_sum_axis_zero(in.device().index, in.data(), rows, out.size(), out.data());
  finish(out);
}

#define GPUMAT_BINARY_OP(NAME, OPNAME)                                     \
  void NAME(const GpuMatrix& a, const GpuMatrix& b, GpuMatrix& out) {      \
    const Backend& be = same_device(OPNAME, a, b, out);                    \
    same_shape(OPNAME, a, b);                                              \
    same_shape(OPNAME, a, out);                                            \
    if (out.size() > 0) be.NAME(a.device().index, a.data(), b.data(), out.data(), out.size()); \
    finish(out);                                                           \
  }
GPUMAT_BINARY_OP(add, "matrix_elementwise_add")
GPUMAT_BINARY_OP(multiply, "matrix_elementwise_multiply")
#undef GPUMAT_BINARY_OP

#define GPUMAT_CONST_OP(NAME, OPNAME)                                      \
  void NAME(const GpuMatrix& in, float value, GpuMatrix& out) {            \
    const Backend& be = same_device(OPNAME, in, out);                      \
    same_shape(OPNAME, in, out);                                           \
    if (out.size() > 0) be.NAME(in.device().index, in.data(), value, out.data(), out.size()); \
    finish(out);                                                           \
  }
GPUMAT_CONST_OP(add_const, "matrix_elementwise_add_by_const")
GPUMAT_CONST_OP(multiply_const, "matrix_elementwise_multiply_by_const")
#undef GPUMAT_CONST_OP

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
  const int64_t kBlasMax = 2147483647;  // BLAS and our kernels index with 32-bit leading dimensions
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

void relu(const GpuMatrix& in, GpuMatrix& out) {
  const Backend& be = same_device("relu", in, out);
  same_shape("relu", in, out);
  if (out.size() > 0) be.relu(in.device().index, in.data(), out.data(), out.size());
  finish(out);
}

void relu_gradient(const GpuMatrix& in, const GpuMatrix& grad, GpuMatrix& out) {
  const char* op = "relu_gradient";
  const Backend& be = same_device(op, in, grad, out);
  same_shape(op, in, grad);
  same_shape(op, in, out);
  if (out.size() > 0) be.relu_gradient(in.device().index, in.data(), grad.data(), out.data(), out.size());
  finish(out);
}

void softmax(const GpuMatrix& in, GpuMatrix& out) {
  const char* op = "softmax";
  const Backend& be = same_device(op, in, out);
  require_ndim(op, "the input", in, 2);
  same_shape(op, in, out);
  not_aliased(op, in, out);
  if (out.size() > 0) be.softmax(in.device().index, in.data(), out.data(), in.dim(0), in.dim(1));
  finish(out);
}

void softmax_cross_entropy(const GpuMatrix& logits, const GpuMatrix& labels, GpuMatrix& out) {
  const char* op = "softmax_cross_entropy";
  const Backend& be = same_device(op, logits, labels, out);
  require_ndim(op, "the logits", logits, 2);
  same_shape(op, logits, labels);
  if (out.shape() != std::vector<int64_t>{1})
    throw ShapeError(std::string(op) + ": the output must have shape (1,), got " + out.shape_str());
  not_aliased(op, logits, out);
  not_aliased(op, labels, out);
  if (logits.dim(0) == 0 || logits.dim(1) == 0)
    throw ShapeError(std::string(op) + ": the mean over rows needs at least one row and one class, got " +
                     logits.shape_str());
  be.softmax_cross_entropy(logits.device().index, logits.data(), labels.data(), out.data(), logits.dim(0),
                           logits.dim(1));
  finish(out);
}

void transpose(const GpuMatrix& in, GpuMatrix& out) {
  const char* op = "transpose";
  const Backend& be = same_device(op, in, out);
  require_ndim(op, "the input", in, 2);
  require_ndim(op, "the output", out, 2);
  not_aliased(op, in, out);
  if (out.dim(0) != in.dim(1) || out.dim(1) != in.dim(0))
    throw ShapeError(std::string(op) + ": output shape " + out.shape_str() + " is not the transpose of " +
                     in.shape_str());
  if (out.size() > 0) be.transpose(in.device().index, in.data(), out.data(), in.dim(0), in.dim(1));
  finish(out);
}

void random_uniform(GpuMatrix& out, float low, float high, uint64_t seed) {
  const Backend& be = same_device("random_uniform", out);
  if (!(low <= high))
    throw ShapeError("random_uniform: low must not exceed high, got [" + std::to_string(low) + ", " +
                     std::to_string(high) + ")");
  if (out.size() > 0) be.random_uniform(out.device().index, out.data(), out.size(), low, high, seed);
  finish(out);
}

void random_normal(GpuMatrix& out, float mean, float stddev, uint64_t seed) {
  const Backend& be = same_device("random_normal", out);
  if (!(stddev >= 0.0f))
    throw ShapeError("random_normal: stddev must be >= 0, got " + std::to_string(stddev));
  if (out.size() > 0) be.random_normal(out.device().index, out.data(), out.size(), mean, stddev, seed);
  finish(out);
}

void axpy(float alpha, const GpuMatrix& x, GpuMatrix& y) {
  const Backend& be = same_device("axpy", x, y);
  same_shape("axpy", x, y);
  if (y.size() > 0) be.axpy(y.device().index, alpha, x.data(), y.data(), y.size());
  finish(y);
}

void copy(const GpuMatrix& src, GpuMatrix& dst) {
  const Backend& be = same_device("copy", src, dst);
  same_shape("copy", src, dst);
  if (dst.size() > 0 && src.data() != dst.data()) be.copy(dst.device().index, src.data(), dst.data(), dst.size());
  finish(dst);
}

}  // namespace ops
}  // namespace gpumat
