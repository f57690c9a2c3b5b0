// The activation family's ops (gpumat/ops.h): relu and its gradient, dropout,
// relu_bias_gradient. Checks here and in checks.h; kernels in ../cuda/activation.cu and
// ../host/activation.cpp.
#include "gpumat/ops.h"

#include <string>

#include "checks.h"

namespace gpumat::ops {

void relu(const GpuMatrix& in, GpuMatrix& out) {
  const Backend& be = same_device("relu", in, out);
  same_shape("relu", in, out);
  in_place_or_disjoint("relu", in, out);
  if (out.size() > 0) be.relu(in.device().index, in.data(), out.data(), out.size());
  finish(out);
}

void relu_gradient(const GpuMatrix& in, const GpuMatrix& grad, GpuMatrix& out) {
  const char* op = "relu_gradient";
  const Backend& be = same_device(op, in, grad, out);
  same_shape(op, in, grad);
  same_shape(op, in, out);
  in_place_or_disjoint(op, in, out);
  in_place_or_disjoint(op, grad, out);
  if (out.size() > 0) be.relu_gradient(in.device().index, in.data(), grad.data(), out.data(), out.size());
  finish(out);
}

void dropout(const GpuMatrix& in, GpuMatrix& out, float p, uint64_t seed) {
  const char* op = "dropout";
  const Backend& be = same_device(op, in, out);
  same_shape(op, in, out);
  in_place_or_disjoint(op, in, out);
  if (!(p >= 0.0f && p <= 1.0f))
    throw ShapeError(std::string(op) + ": p must be in [0, 1], got " + std::to_string(p));
  // NOTE: p = 1 drops every element, so the scale is never used (1/0 would give 0 * inf = NaN).
  const float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
  if (out.size() > 0) be.dropout(in.device().index, in.data(), out.data(), out.size(), p, scale, seed);
  finish(out);
}

void relu_bias_gradient(const GpuMatrix& y, const GpuMatrix& dy, GpuMatrix& dz, GpuMatrix& dbias) {
  const char* op = "relu_bias_gradient";
  const Backend& be = same_device(op, y, dy, dz, dbias);
  require_ndim(op, "y", y, 2);
  same_shape(op, y, dy);
  same_shape(op, y, dz);
  if (dbias.ndim() != 1 || dbias.dim(0) != y.dim(1))
    throw ShapeError(std::string(op) + ": dbias has shape " + dbias.shape_str() + ", expected (" +
                     std::to_string(y.dim(1)) + ",) for y " + y.shape_str());
  not_aliased(op, y, dz);  // y is the saved forward value: later gradients still read it
  not_aliased(op, y, dbias);
  not_aliased(op, dy, dbias);
  not_aliased(op, dz, dbias);
  if (dbias.size() == 0) return finish(dz);
  if (y.dim(0) == 0) {
    be.array_set(dbias.device().index, dbias.data(), dbias.size(), 0.0f);
    return finish(dz);
  }
  be.relu_bias_gradient(dz.device().index, y.data(), dy.data(), dz.data(), dbias.data(), y.dim(0), y.dim(1));
  finish(dz);
}

}  // namespace gpumat::ops
