// The norm family's ops (gpumat/ops.h): layer_norm (and RMS norm), batch_norm, their statistics and
// gradients. Checks here and in checks.h; kernels in ../cuda/norm.cu and ../host/norm.cpp.
#include <string>

#include "checks.h"
#include "gpumat/ops.h"

namespace gpumat::ops {

namespace {

std::string str(int64_t v) { return std::to_string(v); }

// rows = x.size() / d, after checking that x's trailing dims multiply to d (d >= 1).
int64_t rows_of(const char* op, const GpuMatrix& x, int64_t d, const char* d_from) {
  if (d < 1)
    throw ShapeError(std::string(op) + ": " + d_from + " is empty; the normalized size must be >= 1");
  // Some suffix of x's dims must multiply to d exactly.
  bool found = d == 1;
  int64_t tail = 1;
  for (int64_t k = x.ndim() - 1; k >= 0 && !found && tail > 0 && tail < d; --k) {
    tail *= x.dim(k);
    found = tail == d;
  }
  if (!found)
    throw ShapeError(std::string(op) + ": the input " + x.shape_str() + " has no trailing dims of " + str(d) +
                     " elements (" + d_from + ")");
  return x.size() / d;
}

void require_size(const char* op, const char* what, const GpuMatrix& m, int64_t n, const char* of) {
  if (m.size() != n)
    throw ShapeError(std::string(op) + ": " + what + " has shape " + m.shape_str() + ", expected " + str(n) +
                     " values (" + of + ")");
}

void require_stats(const char* op, const GpuMatrix& stats, int64_t n, const char* per) {
  if (stats.ndim() != 2 || stats.dim(0) != n || stats.dim(1) != 2)
    throw ShapeError(std::string(op) + ": stats has shape " + stats.shape_str() + ", expected (" + str(n) +
                     ", 2) (one [mean, " + (std::string(per) == "row" ? "rstd" : "var") + "] per " + per +
                     ")");
}

// x as (n, c, inner) for batch norm: rank >= 2, channels on axis 1.
struct ChannelView {
  int64_t n, c, inner;
};

ChannelView channel_view(const char* op, const GpuMatrix& x) {
  if (x.ndim() < 2)
    throw ShapeError(std::string(op) + ": the input must be (N, C, ...) of rank >= 2, got " + x.shape_str());
  ChannelView v{x.dim(0), x.dim(1), 1};
  for (int64_t k = 2; k < x.ndim(); ++k) v.inner *= x.dim(k);
  return v;
}

}  // namespace

void layer_norm(const GpuMatrix& x, const GpuMatrix& weight, const GpuMatrix& bias, GpuMatrix& out, float eps,
                bool rms) {
  const char* op = rms ? "rms_norm" : "layer_norm";
  const Backend& be = same_device(op, x, weight, bias, out);
  same_shape(op, x, out);
  not_aliased(op, x, out);
  not_aliased(op, weight, out);
  not_aliased(op, bias, out);
  const int64_t d = weight.size();
  const int64_t rows = rows_of(op, x, d, "the weight's size");
  require_size(op, "the bias", bias, d, "the weight's size");
  if (out.size() > 0)
    be.layer_norm(x.device().index, x.data(), weight.data(), bias.data(), out.data(), rows, d, eps, rms);
  finish(out);
}

void layer_norm_stats(const GpuMatrix& x, GpuMatrix& stats, float eps, bool rms) {
  const char* op = "layer_norm_stats";
  const Backend& be = same_device(op, x, stats);
  not_aliased(op, x, stats);
  if (stats.ndim() != 2 || stats.dim(1) != 2)
    throw ShapeError(std::string(op) + ": stats has shape " + stats.shape_str() + ", expected (rows, 2)");
  const int64_t rows = stats.dim(0);
  if (rows == 0 ? x.size() != 0 : x.size() % rows != 0)
    throw ShapeError(std::string(op) + ": the input " + x.shape_str() + " does not split into " + str(rows) +
                     " rows (stats " + stats.shape_str() + ")");
  if (rows > 0) {
    const int64_t d = x.size() / rows;
    rows_of(op, x, d, "the input's size / rows");
    be.layer_norm_stats(x.device().index, x.data(), stats.data(), rows, d, eps, rms);
  }
  finish(stats);
}

void layer_norm_gradient(const GpuMatrix& x, const GpuMatrix& stats, const GpuMatrix& weight,
                         const GpuMatrix& dy, GpuMatrix& dx, bool rms) {
  const char* op = "layer_norm_gradient";
  const Backend& be = same_device(op, x, stats, weight, dy, dx);
  same_shape(op, x, dy);
  same_shape(op, x, dx);
  for (const GpuMatrix* in : {&x, &stats, &weight, &dy}) not_aliased(op, *in, dx);
  const int64_t d = weight.size();
  const int64_t rows = rows_of(op, x, d, "the weight's size");
  require_stats(op, stats, rows, "row");
  if (dx.size() > 0)
    be.layer_norm_gradient(x.device().index, x.data(), stats.data(), weight.data(), dy.data(), dx.data(),
                           rows, d, rms);
  finish(dx);
}

void layer_norm_weight_gradient(const GpuMatrix& x, const GpuMatrix& stats, const GpuMatrix& dy,
                                GpuMatrix& dweight) {
  const char* op = "layer_norm_weight_gradient";
  const Backend& be = same_device(op, x, stats, dy, dweight);
  same_shape(op, x, dy);
  for (const GpuMatrix* in : {&x, &stats, &dy}) not_aliased(op, *in, dweight);
  const int64_t d = dweight.size();
  const int64_t rows = rows_of(op, x, d, "dweight's size");
  require_stats(op, stats, rows, "row");
  if (d > 0)
    be.layer_norm_weight_gradient(x.device().index, x.data(), stats.data(), dy.data(), dweight.data(), rows,
                                  d);
  finish(dweight);
}

void layer_norm_backward(const GpuMatrix& x, const GpuMatrix& weight, const GpuMatrix& dy, GpuMatrix& dx,
                         GpuMatrix& dweight, GpuMatrix& dbias, float eps, bool rms) {
  const char* op = "layer_norm_backward";
  const Backend& be = same_device(op, x, weight, dy, dx, dweight, dbias);
  same_shape(op, x, dy);
  same_shape(op, x, dx);
  const int64_t d = weight.size();
  const int64_t rows = rows_of(op, x, d, "the weight's size");
  require_size(op, "dweight", dweight, d, "the weight's size");
  require_size(op, "dbias", dbias, d, "the weight's size");
  for (GpuMatrix* out : {&dx, &dweight, &dbias}) {
    for (const GpuMatrix* in : {&x, &weight, &dy}) not_aliased(op, *in, *out);
  }
  not_aliased(op, dx, dweight);
  not_aliased(op, dx, dbias);
  not_aliased(op, dweight, dbias);
  be.layer_norm_backward(x.device().index, x.data(), weight.data(), dy.data(), dx.data(), dweight.data(),
                         dbias.data(), rows, d, eps, rms);
  finish(dx);
}

void batch_norm_stats(const GpuMatrix& x, GpuMatrix& stats) {
  const char* op = "batch_norm_stats";
  const Backend& be = same_device(op, x, stats);
  not_aliased(op, x, stats);
  const ChannelView v = channel_view(op, x);
  require_stats(op, stats, v.c, "channel");
  if (v.c > 0) be.batch_norm_stats(x.device().index, x.data(), stats.data(), v.n, v.c, v.inner);
  finish(stats);
}

void batch_norm(const GpuMatrix& x, const GpuMatrix& stats, const GpuMatrix& weight, const GpuMatrix& bias,
                GpuMatrix& out, float eps) {
  const char* op = "batch_norm";
  const Backend& be = same_device(op, x, stats, weight, bias, out);
  same_shape(op, x, out);
  for (const GpuMatrix* in : {&x, &stats, &weight, &bias}) not_aliased(op, *in, out);
  const ChannelView v = channel_view(op, x);
  require_stats(op, stats, v.c, "channel");
  require_size(op, "the weight", weight, v.c, "one per channel");
  require_size(op, "the bias", bias, v.c, "one per channel");
  if (out.size() > 0)
    be.batch_norm(x.device().index, x.data(), stats.data(), weight.data(), bias.data(), out.data(), v.n, v.c,
                  v.inner, eps);
  finish(out);
}

void batch_norm_gradient(const GpuMatrix& x, const GpuMatrix& stats, const GpuMatrix& weight,
                         const GpuMatrix& dy, GpuMatrix& dx, float eps, bool training) {
  const char* op = "batch_norm_gradient";
  const Backend& be = same_device(op, x, stats, weight, dy, dx);
  same_shape(op, x, dy);
  same_shape(op, x, dx);
  for (const GpuMatrix* in : {&x, &stats, &weight, &dy}) not_aliased(op, *in, dx);
  const ChannelView v = channel_view(op, x);
  require_stats(op, stats, v.c, "channel");
  require_size(op, "the weight", weight, v.c, "one per channel");
  if (dx.size() > 0)
    be.batch_norm_gradient(x.device().index, x.data(), stats.data(), weight.data(), dy.data(), dx.data(), v.n,
                           v.c, v.inner, eps, training);
  finish(dx);
}

void batch_norm_weight_gradient(const GpuMatrix& x, const GpuMatrix& stats, const GpuMatrix& dy,
                                GpuMatrix& dweight, float eps) {
  const char* op = "batch_norm_weight_gradient";
  const Backend& be = same_device(op, x, stats, dy, dweight);
  same_shape(op, x, dy);
  for (const GpuMatrix* in : {&x, &stats, &dy}) not_aliased(op, *in, dweight);
  const ChannelView v = channel_view(op, x);
  require_stats(op, stats, v.c, "channel");
  require_size(op, "dweight", dweight, v.c, "one per channel");
  if (v.c > 0)
    be.batch_norm_weight_gradient(x.device().index, x.data(), stats.data(), dy.data(), dweight.data(), v.n,
                                  v.c, v.inner, eps);
  finish(dweight);
}

}  // namespace gpumat::ops
