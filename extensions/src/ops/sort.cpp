// The sort family's ops (gpumat/ops.h): argsort, gather, gather_gradient. Checks here and in
// checks.h; kernels in ../cuda/sort.cu and ../host/sort.cpp.
#include "gpumat/ops.h"

#include <string>

#include "checks.h"

namespace gpumat::ops {

namespace {

// Indices are floats: exact up to 2^24 (float32's 24-bit significand).
constexpr int64_t kMaxSortAxis = int64_t{1} << 24;

// Checks that `part` is `full`'s shape but for its length along axis a, at most `most` (when >= 0);
// returns that length k.
int64_t along_length(const char* op, const char* what, const GpuMatrix& full, int64_t a,
                     const GpuMatrix& part, int64_t most) {
  std::vector<int64_t> expect = full.shape();
  if (part.ndim() != full.ndim()) {
    expect[static_cast<size_t>(a)] = -1;
  } else {
    expect[static_cast<size_t>(a)] = part.dim(a);
    if (part.shape() == expect && (most < 0 || part.dim(a) <= most)) return part.dim(a);
  }
  throw ShapeError(std::string(op) + ": " + what + " has shape " + part.shape_str() + ", expected " +
                   full.shape_str() + " but for its length along axis " + std::to_string(a) +
                   (most >= 0 ? " (at most " + std::to_string(most) + ")" : std::string()));
}

void check_axis_length(const char* op, const GpuMatrix& m, int64_t a, int64_t n) {
  if (n > kMaxSortAxis)
    throw ShapeError(std::string(op) + ": axis " + std::to_string(a) + " of shape " + m.shape_str() +
                     " is longer than 2^24 = 16777216: its indices would not be exact in float32");
}

}  // namespace

void argsort(const GpuMatrix& in, GpuMatrix& indices, int64_t axis, bool descending) {
  const char* op = "argsort";
  const Backend& be = same_device(op, in, indices);
  not_aliased(op, in, indices);
  int64_t a = 0;
  const AxisView v = axis_view(op, in, axis, &a);
  const int64_t k = along_length(op, "the indices", in, a, indices, v.n);
  check_axis_length(op, in, a, v.n);
  if (indices.size() > 0)
    be.argsort(in.device().index, in.data(), indices.data(), v.outer, v.n, v.inner, k, descending);
  finish(indices);
}

void gather(const GpuMatrix& in, const GpuMatrix& index, GpuMatrix& out, int64_t axis) {
  const char* op = "gather";
  const Backend& be = same_device(op, in, index, out);
  not_aliased(op, in, out);
  not_aliased(op, index, out);
  int64_t a = 0;
  const AxisView v = axis_view(op, in, axis, &a);
  const int64_t k = along_length(op, "the output", in, a, out, -1);
  same_shape(op, index, out);
  check_axis_length(op, in, a, v.n);
  if (out.size() > 0)
    be.gather(in.device().index, in.data(), index.data(), out.data(), v.outer, v.n, v.inner, k);
  finish(out);
}

void gather_gradient(const GpuMatrix& index, const GpuMatrix& dy, GpuMatrix& out, int64_t axis) {
  const char* op = "gather_gradient";
  const Backend& be = same_device(op, index, dy, out);
  not_aliased(op, index, out);
  not_aliased(op, dy, out);
  int64_t a = 0;
  const AxisView v = axis_view(op, out, axis, &a);
  const int64_t k = along_length(op, "dy", out, a, dy, -1);
  same_shape(op, index, dy);
  check_axis_length(op, out, a, v.n);
  if (out.size() > 0)
    be.gather_gradient(out.device().index, index.data(), dy.data(), out.data(), v.outer, v.n, v.inner, k);
  finish(out);
}

}  // namespace gpumat::ops
