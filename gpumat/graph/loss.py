"""Losses as graph ops, each a batch mean of shape (1,), with their gradient ops.

- ``softmaxcrossentropy_op(y, y_)``: the mean over rows of -sum_c y_ log softmax(y), for (N, C)
  logits y and label rows y_ (one-hot or probabilities). Its gradient with respect to y carries
  the 1/N of the mean::

      L = -(1/N) sum_r sum_c y_[r,c] log softmax(y)[r,c]
      dL/dy = (softmax(y) - y_) / N                      (times the output gradient)

  The dlsys course trained MNIST with ``lr = 1e-3`` on batches of N = 1000 with the un-scaled
  gradient ``softmax(y) - y_``: that is the same parameter update as ``lr = 1e-3 * N = 1.0`` here,
  and unlike the course's, this learning rate keeps its meaning when the batch size changes
  (``gpumat.dlsys.autodiff`` keeps the course's convention).
- ``nll_loss_op(log_probs, target)``: -sum(target * log_probs) / N, so that
  ``nll_loss_op(log_softmax_op(y), y_)`` equals ``softmaxcrossentropy_op(y, y_)``.
- ``mse_loss_op(pred, target)``, ``mae_loss_op(pred, target)``: the mean over all elements of the
  squared or absolute difference.
- ``softmaxcrossentropy_with_gradient_op(y, y_)``: the loss and its gradient from one kernel, made
  by the fusion pass (``gpumat.runtime.fusion``).

Kernels: :func:`gpumat.ops.cross_entropy`, :func:`gpumat.ops.nll_loss`,
:func:`gpumat.ops.mse_loss`, ... (the loss family). The softmax and log-softmax derivatives are
the standard ones (Goodfellow, Bengio & Courville, *Deep Learning*, 6.2.2.3).
"""

from __future__ import annotations

import numpy as np

from gpumat.graph.elementwise import oneslike_op
from gpumat.graph.node import Node, Op, Undefined, kernels_for, shape_str
from gpumat.graph.reduce import broadcastto_op

__all__ = [
    "MaeLossGradientOp",
    "MaeLossOp",
    "MseLossGradientOp",
    "MseLossOp",
    "NllLossGradientOp",
    "NllLossOp",
    "SoftmaxCrossEntropyGradientOp",
    "SoftmaxCrossEntropyOp",
    "SoftmaxCrossEntropyWithGradientOp",
    "mae_loss_gradient_op",
    "mae_loss_op",
    "mse_loss_gradient_op",
    "mse_loss_op",
    "nll_loss_gradient_op",
    "nll_loss_op",
    "softmaxcrossentropy_gradient_op",
    "softmaxcrossentropy_op",
    "softmaxcrossentropy_with_gradient_op",
]


def _loss_gradient_shape(op: Op, node: Node, input_shapes, loss: type, loss_inputs) -> tuple:
    """The shape of a loss's gradient op whose last input is dloss (1,): its first input's, once
    ``loss_inputs(*other shapes)`` pass the loss's own checks."""
    *shapes, dloss = (tuple(s) for s in input_shapes)
    loss.infer_shape(op, node, loss_inputs(*shapes))
    if dloss != (1,):
        raise op._error(node, f"dloss must have shape (1,), got {shape_str(dloss)}")
    return shapes[0]


def _check_2d(op: Op, node: Node, what: str, shape: tuple) -> None:
    if len(shape) != 2:
        raise op._error(node, f"{what} must be 2-D (rows, classes), got {shape_str(shape)}")


class SoftmaxCrossEntropyOp(Op):
    """``softmaxcrossentropy_op(y, y_)``: mean over rows of -sum_c y_ log softmax(y), shape (1,).

    y (logits) and y_ (labels, e.g. one-hot rows) are (N, C) with N >= 1. The gradient with respect
    to y is (softmax(y) - y_) / N times the output gradient. The gradient with respect to the
    labels, -log softmax(y) / N, needs a log kernel that gpumat does not have; asking for it raises
    NotImplementedError (it is never needed to train).
    """

    name = "softmaxcrossentropy_op"
    kernel = "cross_entropy"

    def gradient_op(self) -> Op:
        """The op of the gradient with respect to the logits (gpumat.dlsys: the course's)."""
        return softmaxcrossentropy_gradient_op

    inputs = ("node_A", "node_B")
    label = "SoftmaxXEntropy"

    def gradient(self, node, output_grad):
        y, y_ = node.inputs
        grad = self.gradient_op()(y, y_)
        # gradients() starts from oneslike_op(loss); multiplying by those ones is skipped.
        if not (output_grad.op is oneslike_op and output_grad.inputs[0] is node):
            grad = grad * broadcastto_op(output_grad, y)
        return [grad, Undefined("softmaxcrossentropy_op: gradient with respect to the labels")]

    def infer_shape(self, node, input_shapes):
        sy, sl = (tuple(s) for s in input_shapes)
        _check_2d(self, node, "logits", sy)
        if sy != sl:
            raise self._error(
                node, f"logits {shape_str(sy)} and labels {shape_str(sl)} differ in shape"
            )
        if sy[0] < 1:
            raise self._error(node, f"needs at least one row, got {shape_str(sy)}")
        return (1,)


class SoftmaxCrossEntropyGradientOp(Op):
    """``softmaxcrossentropy_gradient_op(y, y_)``: (softmax(y) - y_) / N for (N, C) y and y_,
    the gradient of the mean loss ``softmaxcrossentropy_op(y, y_)`` with respect to y."""

    name = "softmaxcrossentropy_gradient_op"
    no_gradient = "second derivatives of the loss"
    inputs = ("node_A", "node_B")
    label = "SoftmaxXEntropyGrad"

    def compute(self, node, input_vals, output_val, device=None):
        y, y_ = input_vals
        k = kernels_for(device)
        k.softmax(y, output_val, -1)
        k.axpy(-1.0, y_, output_val)
        k.mul_scalar(output_val, 1.0 / y.shape[0], output_val)

    def infer_shape(self, node, input_shapes):
        SoftmaxCrossEntropyOp.infer_shape(self, node, input_shapes)  # same checks as the loss
        return tuple(input_shapes[0])


class SoftmaxCrossEntropyWithGradientOp(Op):
    """``softmaxcrossentropy_with_gradient_op(y, y_)``: two outputs, the gradient (softmax(y) -
    y_) / N (N, C), the node's value, and the mean loss (1,), the value of its
    :class:`FusedOutputOp` node (index 1); see :class:`SoftmaxCrossEntropyOp`."""

    name = "softmaxcrossentropy_with_gradient_op"
    no_gradient = "second derivatives of the loss"
    num_outputs = 2
    inputs = ("node_A", "node_B")
    label = "SoftmaxXEntropyWithGrad"

    def compute(self, node, input_vals, output_val, device=None):
        y, y_ = input_vals
        grad, loss = output_val
        kernels_for(device).cross_entropy_with_gradient(y, y_, loss, grad)

    def infer_shape(self, node, input_shapes):
        return SoftmaxCrossEntropyGradientOp.infer_shape(self, node, input_shapes)


class NllLossOp(Op):
    """``nll_loss_op(log_probs, target)``: -sum(target * log_probs) / N, shape (1,).

    log_probs (N, C), e.g. ``log_softmax_op(logits)``, and ``target`` (N, C) **one-hot rows**
    (or any probability rows), N >= 1: the batch mean of -log p[class], so that
    ``nll_loss_op(log_softmax_op(y), y_)`` equals ``softmaxcrossentropy_op(y, y_)``. NOTE: unlike
    PyTorch's ``nll_loss``, which takes integer class indices, targets are one-hot as everywhere
    in gpumat (labels are float32 arrays; one-hot rows need no index checks on the device); turn
    indices into rows with ``np.eye(C, dtype=np.float32)[labels]``. Gradient with respect to
    log_probs: -target / N times the output gradient; with respect to the target it is not
    implemented (never needed to train).
    """

    name = "nll_loss_op"
    kernel = "nll_loss"
    inputs = ("node_log_probs", "node_target")
    label = "NllLoss"

    def gradient(self, node, output_grad):
        return [
            nll_loss_gradient_op(node.inputs[1], output_grad),
            Undefined("nll_loss_op: gradient with respect to the target"),
        ]

    def infer_shape(self, node, input_shapes):
        lp, t = (tuple(s) for s in input_shapes)
        if len(lp) != 2:
            raise self._error(node, f"log_probs must be 2-D (N, C), got {shape_str(lp)}")
        if lp != t:
            raise self._error(
                node, f"log_probs {shape_str(lp)} and target {shape_str(t)} differ in shape"
            )
        if lp[0] < 1 or lp[1] < 1:
            raise self._error(node, f"needs at least one row and one class, got {shape_str(lp)}")
        return (1,)


class NllLossGradientOp(Op):
    """``nll_loss_gradient_op(target, dloss)``: -dloss[0] * target / N (target's shape), the
    gradient of ``nll_loss_op`` with respect to log_probs."""

    name = "nll_loss_gradient_op"
    kernel = "nll_loss_gradient"
    no_gradient = "second derivatives of the loss"
    inputs = ("node_target", "node_dloss")
    label = "NllLossGrad"

    def infer_shape(self, node, input_shapes):
        return _loss_gradient_shape(self, node, input_shapes, NllLossOp, lambda t: [t, t])


class _LossBase(Op):
    """Mean over all elements of f(pred - target), shape (1,)."""

    kind = "mse"
    kernel = "mse_loss"
    inputs = ("node_pred", "node_target")
    label = "MSELoss"

    def gradient(self, node, output_grad):
        p, t = node.inputs
        grad_op = mse_loss_gradient_op if self.kind == "mse" else mae_loss_gradient_op
        g = grad_op(p, t, output_grad)
        return [g, g * -1.0]

    def infer_shape(self, node, input_shapes):
        p, t = (tuple(s) for s in input_shapes)
        if p != t:
            raise self._error(
                node, f"pred {shape_str(p)} and target {shape_str(t)} differ in shape"
            )
        if int(np.prod(p, dtype=np.int64)) < 1:
            raise self._error(node, f"the mean needs at least one element, got {shape_str(p)}")
        return (1,)


class MseLossOp(_LossBase):
    """``mse_loss_op(pred, target)``: mean((pred - target)**2) over all elements, shape (1,).

    Gradient with respect to pred: 2 (pred - target) / n times the output gradient (target: its
    negative). pred and target have one shape with at least one element.
    """

    name = "mse_loss_op"
    kind = "mse"
    kernel = "mse_loss"


class MaeLossOp(_LossBase):
    """``mae_loss_op(pred, target)``: mean(|pred - target|) over all elements, shape (1,).

    Gradient with respect to pred: sign(pred - target) / n times the output gradient, with
    sign(0) = 0 (the subgradient PyTorch uses).
    """

    name = "mae_loss_op"
    label = "MAELoss"
    kind = "mae"
    kernel = "l1_loss"


class _LossGradientBase(Op):
    """``<kind>_loss_gradient_op(pred, target, dloss)``: the gradient of the loss with respect to
    pred, times dloss (1,); pred's shape."""

    kind = "mse"
    kernel = "mse_loss_gradient"
    inputs = ("node_pred", "node_target", "node_dloss")
    label = "MSELossGrad"

    def compute(self, node, input_vals, output_val, device=None):
        p, t, dl = input_vals
        getattr(kernels_for(device), self.kernel)(p, t, dl, output_val)

    @property
    def no_gradient(self) -> str:
        return f"second derivatives of the {self.kind} loss"

    def infer_shape(self, node, input_shapes):
        return _loss_gradient_shape(self, node, input_shapes, _LossBase, lambda p, t: [p, t])


class MseLossGradientOp(_LossGradientBase):
    name = "mse_loss_gradient_op"
    kind = "mse"
    kernel = "mse_loss_gradient"


class MaeLossGradientOp(_LossGradientBase):
    name = "mae_loss_gradient_op"
    label = "MAELossGrad"
    kind = "mae"
    kernel = "l1_loss_gradient"


softmaxcrossentropy_op = SoftmaxCrossEntropyOp()
softmaxcrossentropy_gradient_op = SoftmaxCrossEntropyGradientOp()
softmaxcrossentropy_with_gradient_op = SoftmaxCrossEntropyWithGradientOp()
nll_loss_op = NllLossOp()
nll_loss_gradient_op = NllLossGradientOp()
mse_loss_op = MseLossOp()
mae_loss_op = MaeLossOp()
mse_loss_gradient_op = MseLossGradientOp()
mae_loss_gradient_op = MaeLossGradientOp()
