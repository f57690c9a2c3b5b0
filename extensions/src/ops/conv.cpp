// The conv family's ops (gpumat/ops.h): conv2d, conv1d and their gradients, add_channel_bias,
// reduce_sum_channels, set_conv_workspace_limit. Checks here and in checks.h; kernels in
// ../cuda/conv.cu and ../host/conv.cpp.
#include "gpumat/ops.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <string>
#include <vector>

#include "checks.h"

namespace gpumat::ops {

namespace {

std::atomic<int64_t> g_conv_workspace_limit{int64_t{64} << 20};  // bytes of im2col scratch

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

using ConvKernel = void (*)(int, const float*, const float*, float*, const ConvShape&);

// The skeleton of the three conv entry points: `a` and `b` in, `out` written, none aliased; an empty
// output is done, and an empty input (C, F or N of 0) leaves only empty sums, zeros.
void conv_call(const char* op, ConvKernel Backend::* kernel, const Backend& be, const GpuMatrix& a,
               const GpuMatrix& b, GpuMatrix& out, const ConvShape& s) {
  not_aliased(op, a, out);
  not_aliased(op, b, out);
  if (out.size() == 0) return finish(out);
  if (a.size() == 0 || b.size() == 0) {
    be.array_set(out.device().index, out.data(), out.size(), 0.0f);
  } else {
    (be.*kernel)(out.device().index, a.data(), b.data(), out.data(), s);
  }
  finish(out);
}

void conv_forward(const char* op, int spatial, const GpuMatrix& x, const GpuMatrix& w, GpuMatrix& y,
                  int64_t sh, int64_t sw, int64_t ph, int64_t pw) {
  const Backend& be = same_device(op, x, w, y);
  ConvShape s = conv_shape(op, spatial, x, "x", w, "w", y, "y", sh, sw, ph, pw);
  conv_call(op, &Backend::conv2d, be, x, w, y, s);
}

void conv_gradient_input(const char* op, int spatial, const GpuMatrix& dy, const GpuMatrix& w, GpuMatrix& dx,
                         int64_t sh, int64_t sw, int64_t ph, int64_t pw) {
  const Backend& be = same_device(op, dy, w, dx);
  ConvShape s = conv_shape(op, spatial, dx, "dx", w, "w", dy, "dy", sh, sw, ph, pw);
  conv_call(op, &Backend::conv2d_gradient_input, be, dy, w, dx, s);
}

void conv_gradient_filter(const char* op, int spatial, const GpuMatrix& x, const GpuMatrix& dy, GpuMatrix& dw,
                          int64_t sh, int64_t sw, int64_t ph, int64_t pw) {
  const Backend& be = same_device(op, x, dy, dw);
  ConvShape s = conv_shape(op, spatial, x, "x", dw, "dw", dy, "dy", sh, sw, ph, pw);
  conv_call(op, &Backend::conv2d_gradient_filter, be, x, dy, dw, s);
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
  in_place_or_disjoint(op, in, out);
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

}  // namespace gpumat::ops
