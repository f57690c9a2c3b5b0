"""Softmax and log-softmax along any axis as graph ops, with their gradient ops.

``softmax_op(y, axis=-1)`` and ``log_softmax_op(x, axis=-1)`` work on arrays of any rank >= 1;
both are max-subtracted (no overflow). Gradients: ``softmax_gradient_op(s, g, axis)`` =
s * (g - sum_axis(s * g)), the Jacobian diag(s) - s s^T applied along the axis (Goodfellow, Bengio
& Courville, *Deep Learning*, 6.2.2.3), and ``log_softmax_gradient_op(y, g, axis)`` =
g - exp(y) * sum_axis(g). Kernels: :func:`gpumat.ops.softmax` (rows of a matrix),
:func:`gpumat.ops.softmax`, :func:`gpumat.ops.log_softmax` and their gradients.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from gpumat.graph.node import AXIS, Attr, AxisOp, Op, kernels_for, shape_str, short_name


def _int_axis(axis, _name, op) -> int:
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"{op}: axis must be an int, got {axis!r}")
    return int(axis)


__all__ = [
    "LogSoftmaxGradientOp",
    "LogSoftmaxOp",
    "SoftmaxGradientOp",
    "SoftmaxOp",
    "log_softmax_gradient_op",
    "log_softmax_op",
    "softmax_gradient_op",
    "softmax_op",
]


class SoftmaxOp(Op):
    """``softmax_op(y, axis=-1)``: exp(y) / sum exp(y) along ``axis`` of an array of any rank >= 1
    (by default the last: the dlsys course's row-wise softmax of (rows, classes)), max-subtracted.

    Gradient: ``softmax_gradient_op(s, g, axis)`` = s * (g - sum_axis(s * g)), one
    kernel (the Jacobian diag(s) - s s^T applied along the axis). ValueError for an axis out of
    range (a 0-d input has none).
    """

    name = "softmax_op"
    inputs = ("node_A",)
    attrs = (Attr("axis", _int_axis, -1, int),)

    def node_name(self, node):
        suffix = "" if node.axis == -1 else f",axis={node.axis}"
        return f"Softmax({short_name(node.inputs[0])}{suffix})"

    def compute(self, node, input_vals, output_val, device=None):
        kernels_for(device).softmax(input_vals[0], output_val, node.axis)

    def gradient(self, node, output_grad):
        return [softmax_gradient_op(node, output_grad, node.axis)]

    def infer_shape(self, node, input_shapes):
        s = tuple(input_shapes[0])
        axis = node.axis
        if not -len(s) <= axis < len(s):
            raise self._error(node, f"axis {axis} is out of range for shape {shape_str(s)}")
        return s


class SoftmaxGradientOp(AxisOp):
    """``softmax_gradient_op(y, dy, axis)``: dL/dx = y * (dy - sum_axis(y * dy)) of
    y = softmax(x) along ``axis``, given the forward output y and dy (one shape). The Jacobian of
    softmax is diag(y) - y y^T (Goodfellow, Bengio & Courville, *Deep Learning*, 6.2.2.3)."""

    name = "softmax_gradient_op"
    no_gradient = "second derivatives of softmax"
    label = "SoftmaxGrad"
    kernel = "softmax_gradient"
    inputs = ("node_y", "node_dy")
    attrs = (dataclasses.replace(AXIS, default=-1),)

    def node_name(self, node):
        y, dy = (short_name(i) for i in node.inputs)
        return f"{self.label}({y},{dy},axis={node.axis})"

    def infer_shape(self, node, input_shapes):
        s = self._same_shapes(node, input_shapes[0], input_shapes[1])
        self.check_axis(node, s, node.axis)
        return s


class LogSoftmaxGradientOp(SoftmaxGradientOp):
    """``log_softmax_gradient_op(y, dy, axis)``: dL/dx = dy - exp(y) * sum_axis(dy) of
    y = log_softmax(x) along ``axis`` (exp(y) is the softmax)."""

    name = "log_softmax_gradient_op"
    label = "LogSoftmaxGrad"
    kernel = "log_softmax_gradient"


class LogSoftmaxOp(AxisOp):
    """``log_softmax_op(x, axis=-1)``: x - max - log(sum exp(x - max)) along ``axis`` of an
    array of any rank >= 1 (the log-sum-exp trick: finite for finite inputs of any size, where
    log(softmax(x)) underflows to -inf). Gradient: ``log_softmax_gradient_op``."""

    name = "log_softmax_op"
    kernel = "log_softmax"
    inputs = ("node_x",)
    attrs = (dataclasses.replace(AXIS, default=-1),)

    def node_name(self, node):
        return f"LogSoftmax({short_name(node.inputs[0])},axis={node.axis})"

    def gradient(self, node, output_grad):
        return [log_softmax_gradient_op(node, output_grad, node.axis)]

    def infer_shape(self, node, input_shapes):
        s = tuple(input_shapes[0])
        self.check_axis(node, s, node.axis)
        return s


softmax_op = SoftmaxOp()
softmax_gradient_op = SoftmaxGradientOp()
log_softmax_op = LogSoftmaxOp()
log_softmax_gradient_op = LogSoftmaxGradientOp()
