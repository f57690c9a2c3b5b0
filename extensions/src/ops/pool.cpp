// The pool family's ops (gpumat/ops.h): max_pool2d, avg_pool2d, adaptive_avg_pool2d and their
// gradients. Checks here and
// in checks.h; kernels in ../cuda/pool.cu and ../host/pool.cpp.
#include "gpumat/ops.h"

#include <algorithm>
#include <string>
#include <vector>

#include "checks.h"

namespace gpumat::ops {

namespace {

// The geometry of a pool op: `in_like` has x's shape (x or dx), `out_like` y's (y or dy).
PoolShape pool_shape(const char* op, const GpuMatrix& in_like, const char* in_name, const GpuMatrix& out_like,
                     const char* out_name, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph,
                     int64_t pw) {
  const std::string o(op);
  auto geometry = [&] {
    return std::string(in_name) + " " + in_like.shape_str() + ", kernel " + std::to_string(kh) + "x" +
           std::to_string(kw) + ", stride " + std::to_string(sh) + "x" + std::to_string(sw) + ", padding " +
           std::to_string(ph) + "x" + std::to_string(pw);
  };
  if (in_like.ndim() != 4)
    throw ShapeError(o + ": " + in_name + " must be 4-D (N, C, H, W), got " + in_like.shape_str());
  if (out_like.ndim() != 4)
    throw ShapeError(o + ": " + out_name + " must be 4-D (N, C, OH, OW), got " + out_like.shape_str());
  if (kh < 1 || kw < 1) throw ShapeError(o + ": kernel size must be >= 1 (" + geometry() + ")");
  check_window_param(o, "kernel size", std::max(kh, kw), 1);
  check_window_param(o, "stride", std::max(sh, sw), 1);
  if (sh < 1 || sw < 1) throw ShapeError(o + ": stride must be >= 1 (" + geometry() + ")");
  if (ph < 0 || pw < 0 || ph > kh / 2 || pw > kw / 2)
    throw ShapeError(o + ": padding must be between 0 and half the kernel size (" + geometry() + ")");
  PoolShape s{};
  s.planes = in_like.dim(0) * in_like.dim(1);
  s.h = in_like.dim(2);
  s.w = in_like.dim(3);
  s.kh = kh;
  s.kw = kw;
  s.stride_h = sh;
  s.stride_w = sw;
  s.pad_h = ph;
  s.pad_w = pw;
  s.oh = pooled_size(s.h, kh, sh, ph);
  s.ow = pooled_size(s.w, kw, sw, pw);
  if (s.oh < 1 || s.ow < 1)
    throw ShapeError(o + ": the output would be empty: the padded input is smaller than the kernel (" +
                     geometry() + ")");
  std::vector<int64_t> expected{in_like.dim(0), in_like.dim(1), s.oh, s.ow};
  if (out_like.shape() != expected)
    throw ShapeError(o + ": " + out_name + " has shape " + out_like.shape_str() + ", expected " +
                     dims_str(expected) + " for " + geometry());
  return s;
}

// Max pooling: with H or W = 0 every window holds only padding, whose maximum is undefined (the
// kernels would index an empty plane). Otherwise a window always holds an element of x, since the
// padding is at most half the kernel.
void require_a_real_element(const char* op, const GpuMatrix& x, const GpuMatrix& windows,
                            const PoolShape& s) {
  if (windows.size() > 0 && (s.h == 0 || s.w == 0))
    throw ShapeError(std::string(op) + ": x " + x.shape_str() +
                     " has an empty spatial dimension: every window would hold only padding, whose "
                     "maximum is undefined");
}

}  // namespace

void max_pool2d(const GpuMatrix& x, GpuMatrix& y, int64_t kernel_h, int64_t kernel_w, int64_t stride_h,
                int64_t stride_w, int64_t pad_h, int64_t pad_w) {
  const char* op = "max_pool2d";
  const Backend& be = same_device(op, x, y);
  PoolShape s = pool_shape(op, x, "x", y, "y", kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w);
  not_aliased(op, x, y);
  require_a_real_element(op, x, y, s);
  if (y.size() > 0) be.max_pool2d(y.device().index, x.data(), y.data(), s);
  finish(y);
}

void max_pool2d_gradient(const GpuMatrix& x, const GpuMatrix& dy, GpuMatrix& dx, int64_t kernel_h,
                         int64_t kernel_w, int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w) {
  const char* op = "max_pool2d_gradient";
  const Backend& be = same_device(op, x, dy, dx);
  PoolShape s = pool_shape(op, x, "x", dy, "dy", kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w);
  same_shape(op, x, dx);
  not_aliased(op, x, dx);
  not_aliased(op, dy, dx);
  require_a_real_element(op, x, dy, s);
  if (dx.size() > 0) be.max_pool2d_gradient(dx.device().index, x.data(), dy.data(), dx.data(), s);
  finish(dx);
}

void avg_pool2d(const GpuMatrix& x, GpuMatrix& y, int64_t kernel_h, int64_t kernel_w, int64_t stride_h,
                int64_t stride_w, int64_t pad_h, int64_t pad_w) {
  const char* op = "avg_pool2d";
  const Backend& be = same_device(op, x, y);
  PoolShape s = pool_shape(op, x, "x", y, "y", kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w);
  not_aliased(op, x, y);
  if (y.size() > 0) be.avg_pool2d(y.device().index, x.data(), y.data(), s);
  finish(y);
}

void avg_pool2d_gradient(const GpuMatrix& dy, GpuMatrix& dx, int64_t kernel_h, int64_t kernel_w,
                         int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w) {
  const char* op = "avg_pool2d_gradient";
  const Backend& be = same_device(op, dy, dx);
  PoolShape s = pool_shape(op, dx, "dx", dy, "dy", kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w);
  not_aliased(op, dy, dx);
  if (dx.size() > 0) be.avg_pool2d_gradient(dx.device().index, dy.data(), dx.data(), s);
  finish(dx);
}

namespace {

// The geometry of an adaptive pool op: `in_like` (N, C, H, W) is x or dx, `out_like` (N, C, OH, OW)
// y or dy; every spatial size >= 1 (a window is never empty), N and C any.
PoolShape adaptive_shape(const char* op, const GpuMatrix& in_like, const char* in_name,
                         const GpuMatrix& out_like, const char* out_name) {
  const std::string o(op);
  if (in_like.ndim() != 4)
    throw ShapeError(o + ": " + in_name + " must be 4-D (N, C, H, W), got " + in_like.shape_str());
  if (out_like.ndim() != 4)
    throw ShapeError(o + ": " + out_name + " must be 4-D (N, C, OH, OW), got " + out_like.shape_str());
  if (in_like.dim(0) != out_like.dim(0) || in_like.dim(1) != out_like.dim(1))
    throw ShapeError(o + ": " + in_name + " " + in_like.shape_str() + " and " + out_name + " " +
                     out_like.shape_str() + " differ in (N, C)");
  if (in_like.dim(2) < 1 || in_like.dim(3) < 1 || out_like.dim(2) < 1 || out_like.dim(3) < 1)
    throw ShapeError(o + ": the spatial sizes must be >= 1, got " + in_name + " " + in_like.shape_str() +
                     " and " + out_name + " " + out_like.shape_str());
  PoolShape s{};
  s.planes = in_like.dim(0) * in_like.dim(1);
  s.h = in_like.dim(2);
  s.w = in_like.dim(3);
  s.oh = out_like.dim(2);
  s.ow = out_like.dim(3);
  return s;
}

}  // namespace

void adaptive_avg_pool2d(const GpuMatrix& x, GpuMatrix& y) {
  const char* op = "adaptive_avg_pool2d";
  const Backend& be = same_device(op, x, y);
  PoolShape s = adaptive_shape(op, x, "x", y, "y");
  not_aliased(op, x, y);
  if (y.size() > 0) be.adaptive_avg_pool2d(y.device().index, x.data(), y.data(), s);
  finish(y);
}

void adaptive_avg_pool2d_gradient(const GpuMatrix& dy, GpuMatrix& dx) {
  const char* op = "adaptive_avg_pool2d_gradient";
  const Backend& be = same_device(op, dy, dx);
  PoolShape s = adaptive_shape(op, dx, "dx", dy, "dy");
  not_aliased(op, dy, dx);
  if (dx.size() > 0) be.adaptive_avg_pool2d_gradient(dx.device().index, dy.data(), dx.data(), s);
  finish(dx);
}

}  // namespace gpumat::ops
