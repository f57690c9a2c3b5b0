// The index family's ops (gpumat/ops.h): index_select, index_add, index_copy. Checks here and in
// checks.h; kernels in ../cuda/index.cu and ../host/index.cpp.
#include "gpumat/ops.h"

#include <string>
#include <vector>

#include "checks.h"

namespace gpumat::ops {

namespace {

// Index values are float32 integers: exact up to 2^24, so a longer dim could not be named.
constexpr int64_t kMaxIndexedDim = int64_t{1} << 24;

// The (outer, n, inner) view of `full` around dim, with the checks every index op shares: index is
// 1-D, `part` is full's shape with dim's length len(index), and n fits float32's integers.
AxisView index_view(const char* op, const GpuMatrix& full, const char* full_name, int64_t dim,
                    const GpuMatrix& index, const GpuMatrix& part, const char* part_name) {
  require_ndim(op, "index", index, 1);
  int64_t a = 0;
  AxisView v = axis_view(op, full, dim, &a);
  std::vector<int64_t> want = full.shape();
  want[static_cast<size_t>(a)] = index.dim(0);
  if (part.shape() != want)
    throw ShapeError(std::string(op) + ": " + part_name + " has shape " + part.shape_str() + ", expected " +
                     dims_str(want) + " (" + full_name + " " + full.shape_str() + " with dim " +
                     std::to_string(a) + " of length len(index) = " + std::to_string(index.dim(0)) + ")");
  if (v.n > kMaxIndexedDim)
    throw ShapeError(std::string(op) + ": dim " + std::to_string(a) + " of " + full_name + " " +
                     full.shape_str() +
                     " is longer than 2^24 = 16777216: float32 indices cannot name its rows");
  return v;
}

}  // namespace

void index_select(const GpuMatrix& in, int64_t dim, const GpuMatrix& index, GpuMatrix& out) {
  const char* op = "index_select";
  const Backend& be = same_device(op, in, index, out);
  not_aliased(op, in, out);
  not_aliased(op, index, out);
  const AxisView v = index_view(op, in, "the input", dim, index, out, "the output");
  if (out.size() > 0)
    be.index_select(out.device().index, in.data(), index.data(), out.data(), v.outer, v.n, index.dim(0),
                    v.inner);
  finish(out);
}

void index_add(GpuMatrix& out, int64_t dim, const GpuMatrix& index, const GpuMatrix& src, float alpha) {
  const char* op = "index_add";
  const Backend& be = same_device(op, out, index, src);
  not_aliased(op, src, out);
  not_aliased(op, index, out);
  const AxisView v = index_view(op, out, "the output", dim, index, src, "the source");
  if (src.size() > 0)
    be.index_add(out.device().index, out.data(), index.data(), src.data(), alpha, v.outer, v.n, index.dim(0),
                 v.inner);
  finish(out);
}

void index_copy(GpuMatrix& out, int64_t dim, const GpuMatrix& index, const GpuMatrix& src) {
  const char* op = "index_copy";
  const Backend& be = same_device(op, out, index, src);
  not_aliased(op, src, out);
  not_aliased(op, index, out);
  const AxisView v = index_view(op, out, "the output", dim, index, src, "the source");
  if (src.size() > 0)
    be.index_copy(out.device().index, out.data(), index.data(), src.data(), v.outer, v.n, index.dim(0),
                  v.inner);
  finish(out);
}

}  // namespace gpumat::ops
