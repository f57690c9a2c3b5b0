// The layout family's ops (gpumat/ops.h): transpose, reshape (a copy into the new shape), one_hot,
// tril and triu.
// Checks here and in checks.h; kernels in ../cuda/layout.cu and ../host/layout.cpp (reshape's is
// the elementwise copy).
#include "gpumat/ops.h"

#include <string>

#include "checks.h"

namespace gpumat::ops {

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

// Class indices are float32 integers: exact up to 2^24.
constexpr int64_t kMaxOneHotClasses = int64_t{1} << 24;

void one_hot(const GpuMatrix& indices, GpuMatrix& out) {
  const char* op = "one_hot";
  const Backend& be = same_device(op, indices, out);
  require_ndim(op, "indices", indices, 1);
  require_ndim(op, "the output", out, 2);
  if (out.dim(0) != indices.dim(0))
    throw ShapeError(std::string(op) + ": the output has shape " + out.shape_str() + " for indices " +
                     indices.shape_str() + ", expected (" + std::to_string(indices.dim(0)) +
                     ", num_classes)");
  not_aliased(op, indices, out);
  if (out.dim(1) > kMaxOneHotClasses)
    throw ShapeError(std::string(op) + ": " + std::to_string(out.dim(1)) + " classes (output " +
                     out.shape_str() + ") exceed 2^24 = 16777216: float32 indices cannot name them all");
  if (out.size() > 0) be.one_hot(out.device().index, indices.data(), out.data(), out.dim(0), out.dim(1));
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

namespace {

void triangle_common(const char* op, const GpuMatrix& in, GpuMatrix& out, int64_t diagonal, bool upper) {
  const Backend& be = same_device(op, in, out);
  if (in.ndim() < 2)
    throw ShapeError(std::string(op) + ": the input must have at least 2 dims, got shape " + in.shape_str());
  same_shape(op, in, out);
  in_place_or_disjoint(op, in, out);
  const int64_t rows = in.dim(in.ndim() - 2), cols = in.dim(in.ndim() - 1);
  if (out.size() > 0)
    be.triangle(in.device().index, in.data(), out.data(), in.size() / (rows * cols), rows, cols, diagonal,
                upper);
  finish(out);
}

}  // namespace

void tril(const GpuMatrix& in, GpuMatrix& out, int64_t diagonal) {
  triangle_common("tril", in, out, diagonal, false);
}

void triu(const GpuMatrix& in, GpuMatrix& out, int64_t diagonal) {
  triangle_common("triu", in, out, diagonal, true);
}

}  // namespace gpumat::ops
