// The layout family's ops (gpumat/ops.h): broadcast_to, transpose, reshape (a copy into the new
// shape), broadcast_axis. Checks here and in checks.h; kernels in ../cuda/layout.cu and
// ../host/layout.cpp.
#include "gpumat/ops.h"

#include <string>

#include "checks.h"

namespace gpumat::ops {

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

void reshape(const GpuMatrix& src, GpuMatrix& dst) {
  const Backend& be = same_device("reshape", src, dst);
  if (src.size() != dst.size())
    throw ShapeError("reshape: cannot reshape " + src.shape_str() + " (" + std::to_string(src.size()) +
                     " elements) to " + dst.shape_str() + " (" + std::to_string(dst.size()) + " elements)");
  if (dst.size() > 0 && src.data() != dst.data())
    be.copy(dst.device().index, src.data(), dst.data(), dst.size());
  finish(dst);
}

void broadcast_axis(const GpuMatrix& in, GpuMatrix& out, int64_t axis, float scale) {
  const char* op = "broadcast_axis";
  const Backend& be = same_device(op, in, out);
  not_aliased(op, in, out);
  int64_t a = 0;
  AxisView v = axis_view(op, out, axis, &a);
  reduced_shape(op, "the input", out, a, in);
  if (out.size() > 0)
    be.broadcast_axis(out.device().index, in.data(), out.data(), v.outer, v.n, v.inner, scale);
  finish(out);
}

}  // namespace gpumat::ops
