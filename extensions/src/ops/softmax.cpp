// The softmax family's ops (gpumat/ops.h): softmax, softmax_axis, log_softmax and their gradients.
// Checks here and in checks.h; kernels in ../cuda/softmax.cu and ../host/softmax.cpp.
#include "gpumat/ops.h"

#include "checks.h"

namespace gpumat::ops {

void softmax(const GpuMatrix& in, GpuMatrix& out) {
  const char* op = "softmax";
  const Backend& be = same_device(op, in, out);
  require_ndim(op, "the input", in, 2);
  same_shape(op, in, out);
  not_aliased(op, in, out);
  if (out.size() > 0) be.softmax(in.device().index, in.data(), out.data(), in.dim(0), in.dim(1));
  finish(out);
}

namespace {

void softmax_common(const char* op, const GpuMatrix& in, GpuMatrix& out, int64_t axis, bool log) {
  const Backend& be = same_device(op, in, out);
  same_shape(op, in, out);
  not_aliased(op, in, out);
  AxisView v = axis_view(op, in, axis);
  if (out.size() > 0) be.softmax_axis(in.device().index, in.data(), out.data(), v.outer, v.n, v.inner, log);
  finish(out);
}

void softmax_gradient_common(const char* op, const GpuMatrix& y, const GpuMatrix& dy, GpuMatrix& dx,
                             int64_t axis, bool log) {
  const Backend& be = same_device(op, y, dy, dx);
  same_shape(op, y, dy);
  same_shape(op, y, dx);
  not_aliased(op, y, dx);
  not_aliased(op, dy, dx);
  AxisView v = axis_view(op, y, axis);
  if (dx.size() > 0)
    be.softmax_axis_gradient(y.device().index, y.data(), dy.data(), dx.data(), v.outer, v.n, v.inner, log);
  finish(dx);
}

}  // namespace

void softmax_axis(const GpuMatrix& in, GpuMatrix& out, int64_t axis) {
  softmax_common("softmax", in, out, axis, false);
}

void log_softmax(const GpuMatrix& in, GpuMatrix& out, int64_t axis) {
  softmax_common("log_softmax", in, out, axis, true);
}

void softmax_axis_gradient(const GpuMatrix& y, const GpuMatrix& dy, GpuMatrix& dx, int64_t axis) {
  softmax_gradient_common("softmax_gradient", y, dy, dx, axis, false);
}

void log_softmax_gradient(const GpuMatrix& y, const GpuMatrix& dy, GpuMatrix& dx, int64_t axis) {
  softmax_gradient_common("log_softmax_gradient", y, dy, dx, axis, true);
}

}  // namespace gpumat::ops
