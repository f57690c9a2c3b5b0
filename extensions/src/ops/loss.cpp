// The loss family's ops (gpumat/ops.h): cross_entropy (alone and with its gradient),
// nll_loss, mse_loss, l1_loss and their gradients. Checks here and in checks.h; kernels in
// ../cuda/loss.cu and ../host/loss.cpp.
#include "gpumat/ops.h"

#include <string>
#include <vector>

#include "checks.h"

namespace gpumat::ops {

namespace {

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

void cross_entropy(const GpuMatrix& logits, const GpuMatrix& labels, GpuMatrix& out) {
  const char* op = "cross_entropy";
  const Backend& be = same_device(op, logits, labels, out);
  check_row_mean_loss(op, "the logits", logits, labels, "the output", out);
  be.softmax_cross_entropy(logits.device().index, logits.data(), labels.data(), out.data(), logits.dim(0),
                           logits.dim(1));
  finish(out);
}

void cross_entropy_with_gradient(const GpuMatrix& logits, const GpuMatrix& labels, GpuMatrix& loss,
                                 GpuMatrix& grad) {
  const char* op = "cross_entropy_with_gradient";
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
  in_place_or_disjoint(op, target, out_grad);
  if (target.dim(0) == 0 || target.dim(1) == 0)
    throw ShapeError(std::string(op) + ": needs at least one row and one class, got " + target.shape_str());
  be.nll_loss_gradient(out_grad.device().index, target.data(), dloss.data(), out_grad.data(), target.dim(0),
                       target.dim(1));
  finish(out_grad);
}

#define GPUMAT_LOSS_OP(NAME, KERNEL)                                                                         \
  void NAME(const GpuMatrix& pred, const GpuMatrix& target, GpuMatrix& out) {                                \
    const Backend& be = same_device(#NAME, pred, target, out);                                               \
    check_loss(#NAME, pred, target);                                                                         \
    check_scalar(#NAME, "the output", out);                                                                  \
    not_aliased(#NAME, pred, out);                                                                           \
    not_aliased(#NAME, target, out);                                                                         \
    be.KERNEL(out.device().index, pred.data(), target.data(), out.data(), pred.size());                      \
    finish(out);                                                                                             \
  }                                                                                                          \
  void NAME##_gradient(const GpuMatrix& pred, const GpuMatrix& target, const GpuMatrix& dloss,               \
                       GpuMatrix& out_grad) {                                                                \
    const char* op = #NAME "_gradient";                                                                      \
    const Backend& be = same_device(op, pred, target, dloss, out_grad);                                      \
    check_loss(op, pred, target);                                                                            \
    check_scalar(op, "the loss gradient dloss", dloss);                                                      \
    same_shape(op, pred, out_grad);                                                                          \
    not_aliased(op, dloss, out_grad); /* every element reads dloss[0] */                                     \
    in_place_or_disjoint(op, pred, out_grad);                                                                \
    in_place_or_disjoint(op, target, out_grad);                                                              \
    be.KERNEL##_gradient(out_grad.device().index, pred.data(), target.data(), dloss.data(), out_grad.data(), \
                         pred.size());                                                                       \
    finish(out_grad);                                                                                        \
  }
// NAME: the op (ops.h), KERNEL: its backend kernels' stem (kernels.def).
GPUMAT_LOSS_OP(mse_loss, mse_loss)
GPUMAT_LOSS_OP(l1_loss, mae_loss)
#undef GPUMAT_LOSS_OP

}  // namespace gpumat::ops
