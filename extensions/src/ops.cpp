// gpumat::ops: argument checks (device, shape, aliasing) and dispatch to the device's Backend.
// Every message names the op and the shapes involved.
#include "gpumat/ops.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "backend.h"
#include "gpumat/error.h"

namespace gpumat {

const Backend& backend_for(const Device& device) {
  if (device.kind == DeviceKind::Host) return host_backend();
  check_device(device);  // throws for a build without CUDA or a missing device
  if (device.kind == DeviceKind::Emu) return emu::backend();
#ifdef GPUMAT_WITH_CUDA
  return cuda::backend();
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
    throw ShapeError(std::string(op) + ": " + what + " must be " + std::to_string(ndim) + "-D, got shape " +
                     m.shape_str());
}

// The checks every mean-over-rows loss shares: x is 2-D (rows, classes) with at least one of each,
// labels has x's shape, and out (named `out_name`) is (1,) and distinct from both inputs.
void check_row_mean_loss(const char* op, const char* x_name, const GpuMatrix& x, const GpuMatrix& labels,
                         const char* out_name, const GpuMatrix& out) {
  require_ndim(op, x_name, x, 2);
  same_shape(op, x, labels);
  if (out.shape() != std::vector<int64_t>{1})
    throw ShapeError(std::string(op) + ": " + out_name + " must have shape (1,), got " + out.shape_str());
  not_aliased(op, x, out);
  not_aliased(op, labels, out);
  if (x.dim(0) == 0 || x.dim(1) == 0)
    throw ShapeError(std::string(op) + ": the mean over rows needs at least one row and one class, got " +
                     x.shape_str());
}

// Per-device op counters (op_count): kinds Host, Cuda, Emu; ordinals beyond the table share the
// last slot rather than index out of it.
constexpr int kCountedOrdinals = 64;
std::atomic<int64_t> g_op_counts[3][kCountedOrdinals];

std::atomic<int64_t>& op_counter(const Device& d) {
  const int kind = static_cast<int>(d.kind);
  const int index = d.index < 0 ? 0 : (d.index < kCountedOrdinals ? d.index : kCountedOrdinals - 1);
  return g_op_counts[kind < 0 || kind > 2 ? 0 : kind][index];
}

void finish(const GpuMatrix& m) {
  op_counter(m.device()).fetch_add(1, std::memory_order_relaxed);
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

#define GPUMAT_BINARY_OP(NAME, OPNAME)                                                         \
  void NAME(const GpuMatrix& a, const GpuMatrix& b, GpuMatrix& out) {                          \
    const Backend& be = same_device(OPNAME, a, b, out);                                        \
    same_shape(OPNAME, a, b);                                                                  \
    same_shape(OPNAME, a, out);                                                                \
    if (out.size() > 0) be.NAME(a.device().index, a.data(), b.data(), out.data(), out.size()); \
    finish(out);                                                                               \
  }
GPUMAT_BINARY_OP(add, "matrix_elementwise_add")
GPUMAT_BINARY_OP(multiply, "matrix_elementwise_multiply")
#undef GPUMAT_BINARY_OP

#define GPUMAT_CONST_OP(NAME, OPNAME)                                                         \
  void NAME(const GpuMatrix& in, float value, GpuMatrix& out) {                               \
    const Backend& be = same_device(OPNAME, in, out);                                         \
    same_shape(OPNAME, in, out);                                                              \
    if (out.size() > 0) be.NAME(in.device().index, in.data(), value, out.data(), out.size()); \
    finish(out);                                                                              \
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
  const int64_t kBlasMax = 2147483647;  // host BLAS takes 32-bit sizes; one limit for every device
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
  check_row_mean_loss(op, "the logits", logits, labels, "the output", out);
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
  if (!std::isfinite(low) || !std::isfinite(high))
    throw ShapeError("random_uniform: low and high must be finite, got [" + std::to_string(low) + ", " +
                     std::to_string(high) + ")");
  if (!(low <= high))
    throw ShapeError("random_uniform: low must not exceed high, got [" + std::to_string(low) + ", " +
                     std::to_string(high) + ")");
  if (out.size() > 0) be.random_uniform(out.device().index, out.data(), out.size(), low, high, seed);
  finish(out);
}

void random_normal(GpuMatrix& out, float mean, float stddev, uint64_t seed) {
  const Backend& be = same_device("random_normal", out);
  if (!std::isfinite(mean) || !std::isfinite(stddev))
    throw ShapeError("random_normal: mean and stddev must be finite, got " + std::to_string(mean) + " and " +
                     std::to_string(stddev));
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
  if (dst.size() > 0 && src.data() != dst.data())
    be.copy(dst.device().index, src.data(), dst.data(), dst.size());
  finish(dst);
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

// ---------------------------------------------------------------------------- convolution

namespace {

std::atomic<int64_t> g_conv_workspace_limit{int64_t{64} << 20};  // bytes of im2col scratch

// (in + 2 pad - k) / stride + 1, or 0 when the padded input is shorter than the kernel (C++
// division truncates toward zero, so the negative case is handled apart).
int64_t pooled_size(int64_t in, int64_t k, int64_t stride, int64_t pad) {
  int64_t span = in + 2 * pad - k;
  return span < 0 ? 0 : span / stride + 1;
}

std::string dims_str(std::vector<int64_t> v) { return shape_to_string(v); }

// Strides, paddings and window sizes above 2^31 - 1 are refused on every device: the CUDA kernels
// keep them in int32 when the indices fit (conv.cu's fits_int32), and `in + 2 * pad` must not
// overflow int64 anywhere. No real geometry comes near: the padded input would hold > 2^32 elements
// per row.
constexpr int64_t kMaxWindowParam = std::numeric_limits<int32_t>::max();

void check_window_param(const std::string& op, const char* what, int64_t v, int64_t lowest) {
  if (v < lowest || v > kMaxWindowParam)
    throw ShapeError(op + ": " + what + " must be between " + std::to_string(lowest) +
                     " and 2147483647 (2^31 - 1), got " + std::to_string(v));
}

// The geometry of a conv op from its three arrays. `spatial` is 2 (conv2d: (N, C, H, W)) or 1
// (conv1d: (N, C, W), seen as H = 1). `in_like` has x's shape (x or dx), `filt` w's (w or dw) and
// `out_like` y's (y or dy); the names say which array each is in messages.
ConvShape conv_shape(const char* op, int spatial, const GpuMatrix& in_like, const char* in_name,
                     const GpuMatrix& filt, const char* filt_name, const GpuMatrix& out_like,
                     const char* out_name, int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w) {
  const std::string o(op);
  const char* layout = spatial == 2 ? "(N, C, H, W)" : "(N, C, W)";
  const char* flayout = spatial == 2 ? "(F, C, KH, KW)" : "(F, C, K)";
  if (in_like.ndim() != 2 + spatial)
    throw ShapeError(o + ": " + in_name + " must be " + std::to_string(2 + spatial) + "-D " + layout +
                     ", got " + in_like.shape_str());
  if (filt.ndim() != 2 + spatial)
    throw ShapeError(o + ": " + filt_name + " must be " + std::to_string(2 + spatial) + "-D " + flayout +
                     ", got " + filt.shape_str());
  if (out_like.ndim() != 2 + spatial)
    throw ShapeError(o + ": " + out_name + " must be " + std::to_string(2 + spatial) + "-D, got " +
                     out_like.shape_str());
  if (stride_h < 1 || stride_w < 1)
    throw ShapeError(o + ": stride must be >= 1, got " + std::to_string(spatial == 2 ? stride_h : stride_w) +
                     (spatial == 2 ? " x " + std::to_string(stride_w) : std::string()));
  if (pad_h < 0 || pad_w < 0)
    throw ShapeError(o + ": padding must be >= 0, got " + std::to_string(spatial == 2 ? pad_h : pad_w) +
                     (spatial == 2 ? " x " + std::to_string(pad_w) : std::string()));
  check_window_param(o, "stride", std::max(stride_h, stride_w), 1);
  check_window_param(o, "padding", std::max(pad_h, pad_w), 0);
  if (spatial == 2) check_window_param(o, "the filter height", filt.dim(2), 0);
  check_window_param(o, "the filter width", filt.dim(-1), 0);
  ConvShape s{};
  s.n = in_like.dim(0);
  s.c = in_like.dim(1);
  s.h = spatial == 2 ? in_like.dim(2) : 1;
  s.w = in_like.dim(-1);
  s.f = filt.dim(0);
  s.kh = spatial == 2 ? filt.dim(2) : 1;
  s.kw = filt.dim(-1);
  s.stride_h = stride_h;
  s.stride_w = stride_w;
  s.pad_h = pad_h;
  s.pad_w = pad_w;
  auto geometry = [&] {
    return std::string(in_name) + " " + in_like.shape_str() + ", " + filt_name + " " + filt.shape_str() +
           ", stride " + std::to_string(spatial == 2 ? stride_h : stride_w) +
           (spatial == 2 ? "x" + std::to_string(stride_w) : std::string()) + ", padding " +
           std::to_string(spatial == 2 ? pad_h : pad_w) +
           (spatial == 2 ? "x" + std::to_string(pad_w) : std::string());
  };
  if (filt.dim(1) != s.c)
    throw ShapeError(o + ": channel mismatch: " + in_name + " has " + std::to_string(s.c) + " channels but " +
                     filt_name + " expects " + std::to_string(filt.dim(1)) + " (" + geometry() + ")");
  if (s.kh < 1 || s.kw < 1)
    throw ShapeError(o + ": the filter's spatial size must be >= 1, got " + geometry());
  s.oh = pooled_size(s.h, s.kh, s.stride_h, s.pad_h);
  s.ow = pooled_size(s.w, s.kw, s.stride_w, s.pad_w);
  if (s.oh < 1 || s.ow < 1)
    throw ShapeError(o + ": the output would be empty: the padded input is smaller than the filter (" +
                     geometry() + ")");
  std::vector<int64_t> expected =
      spatial == 2 ? std::vector<int64_t>{s.n, s.f, s.oh, s.ow} : std::vector<int64_t>{s.n, s.f, s.ow};
  if (out_like.shape() != expected)
    throw ShapeError(o + ": " + out_name + " has shape " + out_like.shape_str() + ", expected " +
                     dims_str(expected) + " for " + geometry());
  // Scratch per image: its im2col columns (C*KH*KW, OH*OW) plus its outputs or output gradients
  // in (F, OH*OW) layout. Our matmuls index with 32-bit sizes, so a chunk's columns stay below 2^31.
  const int64_t kIntMax = std::numeric_limits<int32_t>::max();
  const int64_t ckk = s.c * s.kh * s.kw, ohw = s.oh * s.ow;
  if (ckk > kIntMax || s.f > kIntMax || ohw > kIntMax)
    throw ShapeError(o + ": sizes over 2^31-1 are not supported (" + geometry() + ")");
  const int64_t per_image = std::max<int64_t>(1, (ckk + s.f) * ohw * static_cast<int64_t>(sizeof(float)));
  s.chunk = std::clamp<int64_t>(g_conv_workspace_limit.load() / per_image, 1, std::max<int64_t>(s.n, 1));
  s.chunk = std::min(s.chunk, std::max<int64_t>(1, kIntMax / ohw));
  return s;
}

}  // namespace

int64_t set_conv_workspace_limit(int64_t bytes) {
  if (bytes < 0)
    throw ShapeError("set_conv_workspace_limit: bytes must be >= 0, got " + std::to_string(bytes));
  return g_conv_workspace_limit.exchange(bytes);
}

namespace {

void conv_forward(const char* op, int spatial, const GpuMatrix& x, const GpuMatrix& w, GpuMatrix& y,
                  int64_t sh, int64_t sw, int64_t ph, int64_t pw) {
  const Backend& be = same_device(op, x, w, y);
  ConvShape s = conv_shape(op, spatial, x, "x", w, "w", y, "y", sh, sw, ph, pw);
  not_aliased(op, x, y);
  not_aliased(op, w, y);
  if (y.size() == 0) return finish(y);
  if (x.size() == 0 || w.size() == 0) {  // C == 0: empty sums
    be.array_set(y.device().index, y.data(), y.size(), 0.0f);
  } else {
    be.conv2d(y.device().index, x.data(), w.data(), y.data(), s);
  }
  finish(y);
}

void conv_gradient_input(const char* op, int spatial, const GpuMatrix& dy, const GpuMatrix& w, GpuMatrix& dx,
                         int64_t sh, int64_t sw, int64_t ph, int64_t pw) {
  const Backend& be = same_device(op, dy, w, dx);
  ConvShape s = conv_shape(op, spatial, dx, "dx", w, "w", dy, "dy", sh, sw, ph, pw);
  not_aliased(op, dy, dx);
  not_aliased(op, w, dx);
  if (dx.size() == 0) return finish(dx);
  if (dy.size() == 0 || w.size() == 0) {  // F == 0: no output depends on x
    be.array_set(dx.device().index, dx.data(), dx.size(), 0.0f);
  } else {
    be.conv2d_gradient_input(dx.device().index, dy.data(), w.data(), dx.data(), s);
  }
  finish(dx);
}

void conv_gradient_filter(const char* op, int spatial, const GpuMatrix& x, const GpuMatrix& dy, GpuMatrix& dw,
                          int64_t sh, int64_t sw, int64_t ph, int64_t pw) {
  const Backend& be = same_device(op, x, dy, dw);
  ConvShape s = conv_shape(op, spatial, x, "x", dw, "dw", dy, "dy", sh, sw, ph, pw);
  not_aliased(op, x, dw);
  not_aliased(op, dy, dw);
  if (dw.size() == 0) return finish(dw);
  if (x.size() == 0 || dy.size() == 0) {  // N == 0: an empty sum over the batch
    be.array_set(dw.device().index, dw.data(), dw.size(), 0.0f);
  } else {
    be.conv2d_gradient_filter(dw.device().index, x.data(), dy.data(), dw.data(), s);
  }
  finish(dw);
}

}  // namespace

void conv2d(const GpuMatrix& x, const GpuMatrix& w, GpuMatrix& y, int64_t stride_h, int64_t stride_w,
            int64_t pad_h, int64_t pad_w) {
  conv_forward("conv2d", 2, x, w, y, stride_h, stride_w, pad_h, pad_w);
}

void conv2d_gradient_input(const GpuMatrix& dy, const GpuMatrix& w, GpuMatrix& dx, int64_t stride_h,
                           int64_t stride_w, int64_t pad_h, int64_t pad_w) {
  conv_gradient_input("conv2d_gradient_input", 2, dy, w, dx, stride_h, stride_w, pad_h, pad_w);
}

void conv2d_gradient_filter(const GpuMatrix& x, const GpuMatrix& dy, GpuMatrix& dw, int64_t stride_h,
                            int64_t stride_w, int64_t pad_h, int64_t pad_w) {
  conv_gradient_filter("conv2d_gradient_filter", 2, x, dy, dw, stride_h, stride_w, pad_h, pad_w);
}

void conv1d(const GpuMatrix& x, const GpuMatrix& w, GpuMatrix& y, int64_t stride, int64_t pad) {
  conv_forward("conv1d", 1, x, w, y, 1, stride, 0, pad);
}

void conv1d_gradient_input(const GpuMatrix& dy, const GpuMatrix& w, GpuMatrix& dx, int64_t stride,
                           int64_t pad) {
  conv_gradient_input("conv1d_gradient_input", 1, dy, w, dx, 1, stride, 0, pad);
}

void conv1d_gradient_filter(const GpuMatrix& x, const GpuMatrix& dy, GpuMatrix& dw, int64_t stride,
                            int64_t pad) {
  conv_gradient_filter("conv1d_gradient_filter", 1, x, dy, dw, 1, stride, 0, pad);
}

void add_channel_bias(const GpuMatrix& in, const GpuMatrix& bias, GpuMatrix& out) {
  const char* op = "add_channel_bias";
  const Backend& be = same_device(op, in, bias, out);
  if (in.ndim() < 2)
    throw ShapeError(std::string(op) + ": the input must be (N, C, ...) with rank >= 2, got " +
                     in.shape_str());
  same_shape(op, in, out);
  if (bias.shape() != std::vector<int64_t>{in.dim(1)})
    throw ShapeError(std::string(op) + ": bias has shape " + bias.shape_str() + ", expected (" +
                     std::to_string(in.dim(1)) + ",) for input " + in.shape_str());
  not_aliased(op, bias, out);
  if (out.size() == 0) return finish(out);
  const int64_t outer = in.dim(0), channels = in.dim(1), inner = in.size() / (outer * channels);
  be.add_channel_bias(in.device().index, in.data(), bias.data(), out.data(), outer, channels, inner);
  finish(out);
}

void reduce_sum_channels(const GpuMatrix& in, GpuMatrix& out) {
  const char* op = "reduce_sum_channels";
  const Backend& be = same_device(op, in, out);
  if (in.ndim() < 2)
    throw ShapeError(std::string(op) + ": the input must be (N, C, ...) with rank >= 2, got " +
                     in.shape_str());
  if (out.shape() != std::vector<int64_t>{in.dim(1)})
    throw ShapeError(std::string(op) + ": the output has shape " + out.shape_str() + ", expected (" +
                     std::to_string(in.dim(1)) + ",) for input " + in.shape_str());
  not_aliased(op, in, out);
  if (out.size() == 0) return finish(out);
  if (in.size() == 0) {  // an empty sum per channel
    be.array_set(out.device().index, out.data(), out.size(), 0.0f);
    return finish(out);
  }
  const int64_t outer = in.dim(0), channels = in.dim(1), inner = in.size() / (outer * channels);
  be.reduce_sum_channels(in.device().index, in.data(), out.data(), outer, channels, inner);
  finish(out);
}

// ---------------------------------------------------------------------------- pooling

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

}  // namespace

void max_pool2d(const GpuMatrix& x, GpuMatrix& y, int64_t kernel_h, int64_t kernel_w, int64_t stride_h,
                int64_t stride_w, int64_t pad_h, int64_t pad_w) {
  const char* op = "max_pool2d";
  const Backend& be = same_device(op, x, y);
  PoolShape s = pool_shape(op, x, "x", y, "y", kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w);
  not_aliased(op, x, y);
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

// ---------------------------------------------------------------------------- regression losses

namespace {

void check_loss(const char* op, const GpuMatrix& pred, const GpuMatrix& target) {
  same_shape(op, pred, target);
  if (pred.size() == 0)
    throw ShapeError(std::string(op) + ": the mean needs at least one element, got shape " +
                     pred.shape_str());
}

void check_scalar(const char* op, const char* what, const GpuMatrix& m) {
  if (m.shape() != std::vector<int64_t>{1})
    throw ShapeError(std::string(op) + ": " + what + " must have shape (1,), got " + m.shape_str());
}

}  // namespace

#define GPUMAT_LOSS_OP(NAME)                                                                               \
  void NAME(const GpuMatrix& pred, const GpuMatrix& target, GpuMatrix& out) {                              \
    const Backend& be = same_device(#NAME, pred, target, out);                                             \
    check_loss(#NAME, pred, target);                                                                       \
    check_scalar(#NAME, "the output", out);                                                                \
    not_aliased(#NAME, pred, out);                                                                         \
    not_aliased(#NAME, target, out);                                                                       \
    be.NAME(out.device().index, pred.data(), target.data(), out.data(), pred.size());                      \
    finish(out);                                                                                           \
  }                                                                                                        \
  void NAME##_gradient(const GpuMatrix& pred, const GpuMatrix& target, const GpuMatrix& dloss,             \
                       GpuMatrix& out_grad) {                                                              \
    const char* op = #NAME "_gradient";                                                                    \
    const Backend& be = same_device(op, pred, target, dloss, out_grad);                                    \
    check_loss(op, pred, target);                                                                          \
    check_scalar(op, "the loss gradient dloss", dloss);                                                    \
    same_shape(op, pred, out_grad);                                                                        \
    not_aliased(op, dloss, out_grad); /* every element reads dloss[0] */                                   \
    be.NAME##_gradient(out_grad.device().index, pred.data(), target.data(), dloss.data(), out_grad.data(), \
                       pred.size());                                                                       \
    finish(out_grad);                                                                                      \
  }
GPUMAT_LOSS_OP(mse_loss)
GPUMAT_LOSS_OP(mae_loss)
#undef GPUMAT_LOSS_OP

// ---------------------------------------------------------------------------- optimizer

namespace {

// Adam's hyper-parameter checks (adam_update, adam_update_multi); returns the bias corrections
// 1 - beta1^step and 1 - beta2^step. NOTE: computed in double: beta^t underflows gracefully to 0
// for large t.
std::pair<float, float> adam_bias_corrections(const char* op, float lr, float beta1, float beta2, float eps,
                                              int64_t step) {
  if (!(beta1 >= 0.0f && beta1 < 1.0f) || !(beta2 >= 0.0f && beta2 < 1.0f))
    throw ShapeError(std::string(op) + ": beta1 and beta2 must be in [0, 1), got " + std::to_string(beta1) +
                     " and " + std::to_string(beta2));
  if (!(lr >= 0.0f) || !std::isfinite(lr) || !(eps >= 0.0f) || !std::isfinite(eps))
    throw ShapeError(std::string(op) + ": lr and eps must be finite and >= 0, got " + std::to_string(lr) +
                     " and " + std::to_string(eps));
  if (step < 1) throw ShapeError(std::string(op) + ": step must be >= 1, got " + std::to_string(step));
  return {static_cast<float>(1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(step))),
          static_cast<float>(1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(step)))};
}

}  // namespace

void adam_update(GpuMatrix& param, const GpuMatrix& grad, GpuMatrix& m, GpuMatrix& v, float lr, float beta1,
                 float beta2, float eps, int64_t step) {
  const char* op = "adam_update";
  const Backend& be = same_device(op, param, grad, m, v);
  same_shape(op, param, grad);
  same_shape(op, param, m);
  same_shape(op, param, v);
  if (param.size() > 0) {
    const float* ptrs[4] = {param.data(), grad.data(), m.data(), v.data()};
    for (int i = 0; i < 4; ++i)
      for (int j = i + 1; j < 4; ++j)
        if (ptrs[i] == ptrs[j])
          throw ShapeError(std::string(op) + ": param, grad, m and v must be four different arrays (shape " +
                           param.shape_str() + ")");
  }
  const auto [bc1, bc2] = adam_bias_corrections(op, lr, beta1, beta2, eps, step);
  if (param.size() > 0)
    be.adam_update(param.device().index, param.data(), grad.data(), m.data(), v.data(), param.size(), lr,
                   beta1, beta2, eps, bc1, bc2);
  finish(param);
}

// ---------------------------------------------------------------------------- layers (issue 11)

namespace {

struct AxisView {
  int64_t outer, n, inner;
};

// The (outer, n, inner) view of m around `axis` (negative counts from the end).
AxisView axis_view(const char* op, const GpuMatrix& m, int64_t axis, int64_t* normalized = nullptr) {
  const int64_t nd = m.ndim();
  if (nd < 1 || axis < -nd || axis >= nd)
    throw ShapeError(std::string(op) + ": axis " + std::to_string(axis) + " is out of range for shape " +
                     m.shape_str());
  const int64_t a = axis < 0 ? axis + nd : axis;
  if (normalized) *normalized = a;
  AxisView v{1, m.dim(a), 1};
  for (int64_t i = 0; i < a; ++i) v.outer *= m.dim(i);
  for (int64_t i = a + 1; i < nd; ++i) v.inner *= m.dim(i);
  return v;
}

// Checks that `r` is `full` reduced along axis a: the axis removed or kept with length 1.
void reduced_shape(const char* op, const char* what, const GpuMatrix& full, int64_t a, const GpuMatrix& r) {
  std::vector<int64_t> keep = full.shape(), drop = full.shape();
  keep[static_cast<size_t>(a)] = 1;
  drop.erase(drop.begin() + static_cast<std::ptrdiff_t>(a));
  if (r.shape() != keep && r.shape() != drop)
    throw ShapeError(std::string(op) + ": " + what + " has shape " + r.shape_str() + ", expected " +
                     dims_str(drop) + " or " + dims_str(keep) + " (" + full.shape_str() +
                     " reduced along axis " + std::to_string(a) + ")");
}

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

void reduce_common(const char* op, const GpuMatrix& in, GpuMatrix& out, int64_t axis, int kind) {
  const Backend& be = same_device(op, in, out);
  not_aliased(op, in, out);
  int64_t a = 0;
  AxisView v = axis_view(op, in, axis, &a);
  reduced_shape(op, "the output", in, a, out);
  if (kind != 0 && v.n == 0 && out.size() > 0)
    throw ShapeError(std::string(op) + ": cannot reduce an empty axis " + std::to_string(a) + " of shape " +
                     in.shape_str());
  if (out.size() > 0) be.reduce_axis(in.device().index, in.data(), out.data(), v.outer, v.n, v.inner, kind);
  finish(out);
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

void nll_loss(const GpuMatrix& log_probs, const GpuMatrix& target, GpuMatrix& out) {
  const char* op = "nll_loss";
  const Backend& be = same_device(op, log_probs, target, out);
  check_row_mean_loss(op, "the log-probabilities", log_probs, target, "the output", out);
  be.nll_loss(out.device().index, log_probs.data(), target.data(), out.data(), log_probs.dim(0),
              log_probs.dim(1));
  finish(out);
}

void nll_loss_gradient(const GpuMatrix& target, const GpuMatrix& dloss, GpuMatrix& out_grad) {
  const char* op = "nll_loss_gradient";
  const Backend& be = same_device(op, target, dloss, out_grad);
  require_ndim(op, "the target", target, 2);
  same_shape(op, target, out_grad);
  check_scalar(op, "the loss gradient dloss", dloss);
  not_aliased(op, dloss, out_grad);  // every element reads dloss[0]
  if (target.dim(0) == 0 || target.dim(1) == 0)
    throw ShapeError(std::string(op) + ": needs at least one row and one class, got " + target.shape_str());
  be.nll_loss_gradient(out_grad.device().index, target.data(), dloss.data(), out_grad.data(), target.dim(0),
                       target.dim(1));
  finish(out_grad);
}

#define GPUMAT_UNARY_OP(NAME)                                                                              \
  void NAME(const GpuMatrix& in, GpuMatrix& out) {                                                         \
    const Backend& be = same_device(#NAME, in, out);                                                       \
    same_shape(#NAME, in, out);                                                                            \
    if (out.size() > 0) be.NAME(in.device().index, in.data(), out.data(), out.size());                     \
    finish(out);                                                                                           \
  }                                                                                                        \
  void NAME##_gradient(const GpuMatrix& y, const GpuMatrix& dy, GpuMatrix& out) {                          \
    const char* op = #NAME "_gradient";                                                                    \
    const Backend& be = same_device(op, y, dy, out);                                                       \
    same_shape(op, y, dy);                                                                                 \
    same_shape(op, y, out);                                                                                \
    if (out.size() > 0) be.NAME##_gradient(y.device().index, y.data(), dy.data(), out.data(), out.size()); \
    finish(out);                                                                                           \
  }
GPUMAT_UNARY_OP(tanh)
GPUMAT_UNARY_OP(sigmoid)
#undef GPUMAT_UNARY_OP

void dropout(const GpuMatrix& in, GpuMatrix& out, float p, uint64_t seed) {
  const char* op = "dropout";
  const Backend& be = same_device(op, in, out);
  same_shape(op, in, out);
  if (!(p >= 0.0f && p <= 1.0f))
    throw ShapeError(std::string(op) + ": p must be in [0, 1], got " + std::to_string(p));
  // NOTE: p = 1 drops every element, so the scale is never used (1/0 would give 0 * inf = NaN).
  const float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
  if (out.size() > 0) be.dropout(in.device().index, in.data(), out.data(), out.size(), p, scale, seed);
  finish(out);
}

void reduce_sum(const GpuMatrix& in, GpuMatrix& out, int64_t axis) {
  reduce_common("reduce_sum", in, out, axis, 0);
}

void reduce_mean(const GpuMatrix& in, GpuMatrix& out, int64_t axis) {
  reduce_common("reduce_mean", in, out, axis, 1);
}

void reduce_max(const GpuMatrix& in, GpuMatrix& out, int64_t axis) {
  reduce_common("reduce_max", in, out, axis, 2);
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

void reduce_max_gradient(const GpuMatrix& x, const GpuMatrix& y, const GpuMatrix& dy, GpuMatrix& dx,
                         int64_t axis) {
  const char* op = "reduce_max_gradient";
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

// ---------------------------------------------------------------------------- fused (issue 16)

void matmul_bias(const GpuMatrix& a, bool trans_a, const GpuMatrix& b, bool trans_b, const GpuMatrix& bias,
                 GpuMatrix& c, bool relu) {
  const char* op = "matmul_bias";
  const Backend& be = same_device(op, a, b, bias, c);
  require_ndim(op, "A", a, 2);
  require_ndim(op, "B", b, 2);
  require_ndim(op, "C", c, 2);
  require_ndim(op, "the bias", bias, 1);
  not_aliased(op, a, c);
  not_aliased(op, b, c);
  not_aliased(op, bias, c);
  int64_t m = trans_a ? a.dim(1) : a.dim(0);
  int64_t k = trans_a ? a.dim(0) : a.dim(1);
  int64_t kb = trans_b ? b.dim(1) : b.dim(0);
  int64_t n = trans_b ? b.dim(0) : b.dim(1);
  auto desc = [&] {
    return std::string(trans_a ? "A^T" : "A") + " " + a.shape_str() + " @ " + (trans_b ? "B^T " : "B ") +
           b.shape_str() + " + bias " + bias.shape_str();
  };
  if (k != kb) throw ShapeError(std::string(op) + ": inner dimensions differ: " + desc());
  if (c.dim(0) != m || c.dim(1) != n)
    throw ShapeError(std::string(op) + ": C has shape " + c.shape_str() + ", expected (" + std::to_string(m) +
                     ", " + std::to_string(n) + ") for " + desc());
  if (bias.dim(0) != n)
    throw ShapeError(std::string(op) + ": the bias must have shape (" + std::to_string(n) + ",) for " +
                     desc());
  const int64_t kBlasMax = 2147483647;
  if (m > kBlasMax || n > kBlasMax || k > kBlasMax)
    throw ShapeError(std::string(op) + ": dimensions over 2^31-1 are not supported: " + desc());
  if (c.size() == 0) return finish(c);
  const int dev = c.device().index;
  if (k == 0) {  // an empty sum: c is the bias on every row
    be.broadcast_to(dev, bias.data(), n, c.data(), c.size());
    if (relu) be.relu(dev, c.data(), c.data(), c.size());
  } else {
    be.matmul_bias(dev, a.data(), trans_a, b.data(), trans_b, bias.data(), c.data(), m, n, k, relu);
  }
  finish(c);
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

void softmax_cross_entropy_with_gradient(const GpuMatrix& logits, const GpuMatrix& labels, GpuMatrix& loss,
                                         GpuMatrix& grad) {
  const char* op = "softmax_cross_entropy_with_gradient";
  const Backend& be = same_device(op, logits, labels, loss, grad);
  check_row_mean_loss(op, "the logits", logits, labels, "the loss", loss);
  same_shape(op, logits, grad);
  not_aliased(op, logits, grad);
  not_aliased(op, labels, grad);
  not_aliased(op, grad, loss);
  be.softmax_cross_entropy_with_gradient(grad.device().index, logits.data(), labels.data(), loss.data(),
                                         grad.data(), logits.dim(0), logits.dim(1));
  finish(grad);
}

namespace {

// One list of a multi-tensor optimizer step: its arrays (one per parameter) and whether the step
// writes them.
struct TensorList {
  const char* name;    // one array, in messages: "parameter"
  const char* plural;  // "parameters"
  std::vector<const GpuMatrix*> arrays;
  bool written;
};

template <typename Array>
TensorList tensor_list(const char* name, const char* plural, const std::vector<Array*>& arrays,
                       bool written) {
  return {name, plural, std::vector<const GpuMatrix*>(arrays.begin(), arrays.end()), written};
}

// Checks the lists of a multi-tensor step (lists[0] the parameters): one length (at most 2^31 - 1),
// no null array, every array on the first parameter's device, each tensor's arrays of one shape,
// and no written array overlapping any other array (written twice, or written while another
// tensor reads it, the result would depend on the kernel's order); read-only arrays may share
// memory. Returns the tensors' sizes (empty when there are no tensors); throws ShapeError.
std::vector<int64_t> check_tensor_lists(const char* op, const std::vector<TensorList>& lists) {
  const TensorList& params = lists[0];
  const size_t count = params.arrays.size();
  for (const TensorList& l : lists)
    if (l.arrays.size() != count)
      throw ShapeError(std::string(op) + ": got " + std::to_string(l.arrays.size()) + " " + l.plural +
                       " for " + std::to_string(count) + " " + params.plural);
  if (count > 2147483647u) throw ShapeError(std::string(op) + ": too many tensors");
  for (const TensorList& l : lists)
    for (size_t i = 0; i < count; ++i)
      if (l.arrays[i] == nullptr)
        throw ShapeError(std::string(op) + ": " + l.name + " " + std::to_string(i) + " is a null array");
  std::vector<int64_t> sizes(count);
  if (count == 0) return sizes;
  const Device& device = params.arrays[0]->device();
  struct Span {
    const float* begin;
    const float* end;
    size_t list, tensor;
  };
  std::vector<Span> spans;
  spans.reserve(count * lists.size());
  for (size_t i = 0; i < count; ++i) {
    const GpuMatrix& p = *params.arrays[i];
    for (size_t k = 0; k < lists.size(); ++k) {
      const GpuMatrix& a = *lists[k].arrays[i];
      const std::string what = std::string(op) + ": " + lists[k].name + " " + std::to_string(i);
      if (a.device() != device)
        throw ShapeError(what + " is on " + a.device().str() + ", not on " + device.str() +
                         " (arrays are on different devices)");
      if (a.shape() != p.shape())
        throw ShapeError(what + " has shape " + a.shape_str() + ", its parameter " + p.shape_str());
      if (a.size() > 0) spans.push_back({a.data(), a.data() + a.size(), k, i});
    }
    sizes[i] = p.size();
  }
  // Sorted by start, a span overlaps an earlier one exactly when it starts before the largest end
  // seen so far; tracking that end over all spans and over written spans finds every forbidden pair.
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  const Span* furthest = nullptr;          // the earlier span reaching furthest
  const Span* furthest_written = nullptr;  // ... among written spans
  for (const Span& s : spans) {
    const Span* other = lists[s.list].written ? furthest : furthest_written;
    if (other != nullptr && other->end > s.begin) {
      const TensorList& a = lists[s.list];
      const TensorList& b = lists[other->list];
      throw ShapeError(std::string(op) + ": " + a.name + " " + std::to_string(s.tensor) +
                       " shares memory with " + b.name + " " + std::to_string(other->tensor) +
                       "; every array the step writes must be distinct from all the others");
    }
    if (furthest == nullptr || s.end > furthest->end) furthest = &s;
    if (lists[s.list].written && (furthest_written == nullptr || s.end > furthest_written->end))
      furthest_written = &s;
  }
  return sizes;
}

template <typename Array>
std::vector<float*> data_of(const std::vector<Array*>& arrays) {
  std::vector<float*> out(arrays.size());
  for (size_t i = 0; i < arrays.size(); ++i) out[i] = const_cast<float*>(arrays[i]->data());
  return out;
}

void check_lr(const char* op, float lr) {
  if (!(lr >= 0.0f) || !std::isfinite(lr))
    throw ShapeError(std::string(op) + ": lr must be finite and >= 0, got " + std::to_string(lr));
}

}  // namespace

void sgd_update(const std::vector<GpuMatrix*>& params, const std::vector<const GpuMatrix*>& grads, float lr) {
  const char* op = "sgd_update";
  check_lr(op, lr);
  const std::vector<int64_t> n = check_tensor_lists(op, {tensor_list("parameter", "parameters", params, true),
                                                         tensor_list("gradient", "gradients", grads, false)});
  if (n.empty()) return;
  const std::vector<float*> p = data_of(params), g = data_of(grads);
  backend_for(params[0]->device())
      .sgd_update_multi(params[0]->device().index, p.data(), g.data(), n.data(), static_cast<int>(n.size()),
                        lr);
  finish(*params[0]);
}

void momentum_sgd_update(const std::vector<GpuMatrix*>& params, const std::vector<const GpuMatrix*>& grads,
                         const std::vector<GpuMatrix*>& velocities, float lr, float momentum) {
  const char* op = "momentum_sgd_update";
  check_lr(op, lr);
  if (!(momentum >= 0.0f && momentum < 1.0f))
    throw ShapeError(std::string(op) + ": momentum must be in [0, 1), got " + std::to_string(momentum));
  const std::vector<int64_t> n =
      check_tensor_lists(op, {tensor_list("parameter", "parameters", params, true),
                              tensor_list("gradient", "gradients", grads, false),
                              tensor_list("velocity", "velocities", velocities, true)});
  if (n.empty()) return;
  const std::vector<float*> p = data_of(params), g = data_of(grads), v = data_of(velocities);
  backend_for(params[0]->device())
      .momentum_sgd_update_multi(params[0]->device().index, p.data(), g.data(), v.data(), n.data(),
                                 static_cast<int>(n.size()), lr, momentum);
  finish(*params[0]);
}

void adam_update_multi(const std::vector<GpuMatrix*>& params, const std::vector<const GpuMatrix*>& grads,
                       const std::vector<GpuMatrix*>& m, const std::vector<GpuMatrix*>& v, float lr,
                       float beta1, float beta2, float eps, int64_t step) {
  const char* op = "adam_update_multi";
  const auto [bc1, bc2] = adam_bias_corrections(op, lr, beta1, beta2, eps, step);
  const std::vector<int64_t> n =
      check_tensor_lists(op, {tensor_list("parameter", "parameters", params, true),
                              tensor_list("gradient", "gradients", grads, false),
                              tensor_list("m", "m arrays", m, true), tensor_list("v", "v arrays", v, true)});
  if (n.empty()) return;
  const std::vector<float*> p = data_of(params), g = data_of(grads), pm = data_of(m), pv = data_of(v);
  backend_for(params[0]->device())
      .adam_update_multi(params[0]->device().index, p.data(), g.data(), pm.data(), pv.data(), n.data(),
                         static_cast<int>(n.size()), lr, beta1, beta2, eps, bc1, bc2);
  finish(*params[0]);
}

int64_t op_count(const Device& device) { return op_counter(device).load(std::memory_order_relaxed); }

void count_ops(const Device& device, int64_t n) {
  op_counter(device).fetch_add(n, std::memory_order_relaxed);
}

}  // namespace ops
}  // namespace gpumat
