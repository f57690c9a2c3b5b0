// The reduce family's ops (gpumat/ops.h): reductions and broadcasts, each the other's gradient:
// sum_to_size, broadcast_to, sum, mean, amax, amax_gradient, broadcast_dim, argmax, prod,
// prod_gradient, cumsum. Checks here and in
// checks.h; kernels in ../cuda/reduce.cu and ../host/reduce.cpp.
#include "gpumat/ops.h"

#include <string>

#include "checks.h"

namespace gpumat::ops {

void sum_to_size(const GpuMatrix& in, GpuMatrix& out) {
  const char* op = "sum_to_size";
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

namespace {

void reduce_common(const char* op, const GpuMatrix& in, GpuMatrix& out, int64_t axis, int kind) {
  const Backend& be = same_device(op, in, out);
  not_aliased(op, in, out);
  int64_t a = 0;
  AxisView v = axis_view(op, in, axis, &a);
  reduced_shape(op, "the output", in, a, out);
  if ((kind == 1 || kind == 2) && v.n == 0 && out.size() > 0)  // sum and prod of none: 0 and 1
    throw ShapeError(std::string(op) + ": cannot reduce an empty axis " + std::to_string(a) + " of shape " +
                     in.shape_str());
  if (out.size() > 0) be.reduce_axis(in.device().index, in.data(), out.data(), v.outer, v.n, v.inner, kind);
  finish(out);
}

}  // namespace

void sum(const GpuMatrix& in, GpuMatrix& out, int64_t axis) { reduce_common("sum", in, out, axis, 0); }

void mean(const GpuMatrix& in, GpuMatrix& out, int64_t axis) { reduce_common("mean", in, out, axis, 1); }

void amax(const GpuMatrix& in, GpuMatrix& out, int64_t axis) { reduce_common("amax", in, out, axis, 2); }

// argmax writes indices as floats: exact up to 2^24 (float32's 24-bit significand).
constexpr int64_t kMaxArgmaxAxis = int64_t{1} << 24;

void argmax(const GpuMatrix& in, GpuMatrix& out, int64_t axis) {
  const char* op = "argmax";
  const Backend& be = same_device(op, in, out);
  not_aliased(op, in, out);
  int64_t a = 0;
  AxisView v = axis_view(op, in, axis, &a);
  reduced_shape(op, "the output", in, a, out);
  if (v.n == 0 && out.size() > 0)
    throw ShapeError(std::string(op) + ": cannot take the argmax of an empty axis " + std::to_string(a) +
                     " of shape " + in.shape_str());
  if (v.n > kMaxArgmaxAxis)
    throw ShapeError(std::string(op) + ": axis " + std::to_string(a) + " of shape " + in.shape_str() +
                     " is longer than 2^24 = 16777216: its indices would not be exact in float32");
  if (out.size() > 0) be.argmax(in.device().index, in.data(), out.data(), v.outer, v.n, v.inner);
  finish(out);
}

void amax_gradient(const GpuMatrix& x, const GpuMatrix& y, const GpuMatrix& dy, GpuMatrix& dx, int64_t axis) {
  const char* op = "amax_gradient";
  const Backend& be = same_device(op, x, y, dy, dx);
  same_shape(op, x, dx);
  same_shape(op, y, dy);
  not_aliased(op, x, dx);
  not_aliased(op, y, dx);
  not_aliased(op, dy, dx);
  int64_t a = 0;
  AxisView v = axis_view(op, x, axis, &a);
  reduced_shape(op, "the max y", x, a, y);
  if (dx.size() > 0)
    be.reduce_max_gradient(x.device().index, x.data(), y.data(), dy.data(), dx.data(), v.outer, v.n, v.inner);
  finish(dx);
}

void broadcast_dim(const GpuMatrix& in, GpuMatrix& out, int64_t axis, float scale) {
  const char* op = "broadcast_dim";
  const Backend& be = same_device(op, in, out);
  not_aliased(op, in, out);
  int64_t a = 0;
  AxisView v = axis_view(op, out, axis, &a);
  reduced_shape(op, "the input", out, a, in);
  if (out.size() > 0)
    be.broadcast_axis(out.device().index, in.data(), out.data(), v.outer, v.n, v.inner, scale);
  finish(out);
}

void prod(const GpuMatrix& in, GpuMatrix& out, int64_t axis) { reduce_common("prod", in, out, axis, 3); }

void prod_gradient(const GpuMatrix& x, const GpuMatrix& dy, GpuMatrix& dx, int64_t axis) {
  const char* op = "prod_gradient";
  const Backend& be = same_device(op, x, dy, dx);
  same_shape(op, x, dx);
  not_aliased(op, x, dx);
  not_aliased(op, dy, dx);
  int64_t a = 0;
  AxisView v = axis_view(op, x, axis, &a);
  reduced_shape(op, "dy", x, a, dy);
  if (dx.size() > 0)
    be.prod_gradient(x.device().index, x.data(), dy.data(), dx.data(), v.outer, v.n, v.inner);
  finish(dx);
}

void cumsum(const GpuMatrix& in, GpuMatrix& out, int64_t axis, bool reverse) {
  const char* op = "cumsum";
  const Backend& be = same_device(op, in, out);
  same_shape(op, in, out);
  in_place_or_disjoint(op, in, out);
  int64_t a = 0;
  AxisView v = axis_view(op, in, axis, &a);
  if (out.size() > 0) be.cumsum(in.device().index, in.data(), out.data(), v.outer, v.n, v.inner, reverse);
  finish(out);
}

}  // namespace gpumat::ops
