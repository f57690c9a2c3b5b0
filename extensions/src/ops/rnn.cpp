// The rnn family's ops (gpumat/ops.h): lstm_cell, gru_cell and their gradients. Checks here;
// kernels in ../cuda/rnn.cu and ../host/rnn.cpp (formulas in ../rnn_cell.h).
#include "gpumat/ops.h"

#include <string>
#include <vector>

#include "checks.h"

namespace gpumat::ops {

namespace {

// m is (n, cols); `what` names it.
void rows_of(const char* op, const char* what, const GpuMatrix& m, int64_t n, int64_t cols) {
  if (m.ndim() != 2 || m.dim(0) != n || m.dim(1) != cols)
    throw ShapeError(std::string(op) + ": " + what + " must be (" + std::to_string(n) + ", " +
                     std::to_string(cols) + "), got " + m.shape_str());
}

// The hidden size from the gate block (n, g*h) and a state (n, h), both 2-D.
int64_t hidden_size(const char* op, const GpuMatrix& gates, const char* gname, const GpuMatrix& state,
                    const char* sname, int64_t g) {
  require_ndim(op, gname, gates, 2);
  require_ndim(op, sname, state, 2);
  const int64_t h = state.dim(1);
  if (gates.dim(0) != state.dim(0) || gates.dim(1) != g * h)
    throw ShapeError(std::string(op) + ": " + gname + " " + gates.shape_str() + " must be (N, " +
                     std::to_string(g) + " * H) for " + sname + " " + state.shape_str() + " (N, H)");
  return h;
}

}  // namespace

void lstm_cell(const GpuMatrix& gates, const GpuMatrix& c, GpuMatrix& out) {
  const char* op = "lstm_cell";
  const Backend& be = same_device(op, gates, c, out);
  const int64_t h = hidden_size(op, gates, "gates", c, "c", 4), n = c.dim(0);
  rows_of(op, "out", out, n, 2 * h);
  not_aliased(op, gates, out);
  not_aliased(op, c, out);
  if (out.size() > 0) be.lstm_cell(out.device().index, gates.data(), c.data(), out.data(), n, h);
  finish(out);
}

void lstm_cell_gradient(const GpuMatrix& gates, const GpuMatrix& c, const GpuMatrix& y, const GpuMatrix& dy,
                        GpuMatrix& out) {
  const char* op = "lstm_cell_gradient";
  const Backend& be = same_device(op, gates, c, y, dy, out);
  const int64_t h = hidden_size(op, gates, "gates", c, "c", 4), n = c.dim(0);
  rows_of(op, "y", y, n, 2 * h);
  rows_of(op, "dy", dy, n, 2 * h);
  rows_of(op, "out", out, n, 5 * h);
  for (const GpuMatrix* in : {&gates, &c, &y, &dy}) not_aliased(op, *in, out);
  if (out.size() > 0)
    be.lstm_cell_gradient(out.device().index, gates.data(), c.data(), y.data(), dy.data(), out.data(), n, h);
  finish(out);
}

void gru_cell(const GpuMatrix& gi, const GpuMatrix& gh, const GpuMatrix& hx, GpuMatrix& out) {
  const char* op = "gru_cell";
  const Backend& be = same_device(op, gi, gh, hx, out);
  const int64_t h = hidden_size(op, gi, "gi", hx, "hx", 3), n = hx.dim(0);
  rows_of(op, "gh", gh, n, 3 * h);
  rows_of(op, "out", out, n, h);
  for (const GpuMatrix* in : {&gi, &gh, &hx}) not_aliased(op, *in, out);
  if (out.size() > 0) be.gru_cell(out.device().index, gi.data(), gh.data(), hx.data(), out.data(), n, h);
  finish(out);
}

void gru_cell_gradient(const GpuMatrix& gi, const GpuMatrix& gh, const GpuMatrix& hx, const GpuMatrix& dy,
                       GpuMatrix& out) {
  const char* op = "gru_cell_gradient";
  const Backend& be = same_device(op, gi, gh, hx, dy, out);
  const int64_t h = hidden_size(op, gi, "gi", hx, "hx", 3), n = hx.dim(0);
  rows_of(op, "gh", gh, n, 3 * h);
  rows_of(op, "dy", dy, n, h);
  rows_of(op, "out", out, n, 7 * h);
  for (const GpuMatrix* in : {&gi, &gh, &hx, &dy}) not_aliased(op, *in, out);
  if (out.size() > 0)
    be.gru_cell_gradient(out.device().index, gi.data(), gh.data(), hx.data(), dy.data(), out.data(), n, h);
  finish(out);
}

}  // namespace gpumat::ops
