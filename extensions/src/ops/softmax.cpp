// The softmax family's ops (gpumat/ops.h): softmax, log_softmax and their gradients.
// Checks here and in checks.h; kernels in ../cuda/softmax.cu and ../host/softmax.cpp.
#include "gpumat/ops.h"

#include "checks.h"

namespace gpumat::ops {

namespace {

void softmax_common(const char* op, const GpuMatrix& in, GpuMatrix& out, int64_t axis, bool log) {
  const Backend& be = same_device(op, in, out);
  same_shape(op, in, out);
  not_aliased(op, in, out);
  AxisView v = axis_view(op, in, axis);
  if (out.size() > 0 && !log && in.ndim() == 2 && v.outer == in.dim(0) && v.inner == 1)  // along rows
    be.softmax(in.device().index, in.data(), out.data(), in.dim(0), in.dim(1));
  else if (out.size() > 0)
    be.softmax_axis(in.device().index, in.data(), out.data(), v.outer, v.n, v.inner, log);
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

void softmax(const GpuMatrix& in, GpuMatrix& out, int64_t axis) {
  softmax_common("softmax", in, out, axis, false);
}

void log_softmax(const GpuMatrix& in, GpuMatrix& out, int64_t axis) {
  softmax_common("log_softmax", in, out, axis, true);
}

void softmax_gradient(const GpuMatrix& y, const GpuMatrix& dy, GpuMatrix& dx, int64_t axis) {
  softmax_gradient_common("softmax_gradient", y, dy, dx, axis, false);
}

void log_softmax_gradient(const GpuMatrix& y, const GpuMatrix& dy, GpuMatrix& dx, int64_t axis) {
  softmax_gradient_common("log_softmax_gradient", y, dy, dx, axis, true);
}

}  // namespace gpumat::ops
