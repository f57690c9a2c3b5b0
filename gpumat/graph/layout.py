"""Layout graph ops: the same values in another order or shape (``transpose_op``,
``reshape_op``, ``flatten_op``), class numbers as one-hot rows (``one_hot_op``), and the
triangles ``tril_op`` / ``triu_op``. Kernels:
:func:`gpumat.ops.transpose`, :func:`gpumat.ops.reshape` (a copy into the planned buffer of the
new shape: the executor plans buffers by shape), :func:`gpumat.ops.one_hot`,
:func:`gpumat.ops.tril`, :func:`gpumat.ops.triu`.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import numpy as np

from gpumat._checks import as_int
from gpumat.graph.node import Attr, Node, Op, shape_str, short_name

__all__ = [
    "FlattenOp",
    "OneHotOp",
    "ReshapeOp",
    "TransposeOp",
    "TrilOp",
    "TriuOp",
    "flatten_op",
    "one_hot_op",
    "reshape_op",
    "transpose_op",
    "tril_op",
    "triu_op",
]


def _as_shape(shape) -> tuple:
    """``reshape_op``'s target shape: an int or a sequence of ints, at most one of them -1."""
    if type(shape) is tuple and all(type(d) is int and d >= -1 for d in shape):
        if shape.count(-1) <= 1:  # the common case: the checks below pass, without ABC checks
            return shape
    if isinstance(shape, (numbers.Integral, np.integer)):
        shape = (shape,)
    if not isinstance(shape, Sequence) or not all(
        isinstance(d, (numbers.Integral, np.integer)) and not isinstance(d, bool) for d in shape
    ):
        raise TypeError(f"reshape_op: shape must be a sequence of ints or a node, got {shape!r}")
    shape = tuple(int(d) for d in shape)
    if sum(d == -1 for d in shape) > 1 or any(d < -1 for d in shape):
        raise ValueError(f"reshape_op: at most one -1 and no other negative entry, got {shape}")
    return shape


def _num_classes(value, name: str, op: str) -> int:
    c = as_int(value, name, op)
    if not 0 <= c <= 2**24:
        raise ValueError(
            f"{op}: num_classes must be in [0, 2**24] (float32 indices name classes up to "
            f"2**24), got {c}"
        )
    return c


class TransposeOp(Op):
    """Transpose of a 2-D array: (R, C) -> (C, R)."""

    name = "transpose_op"
    kernel = "transpose"
    inputs = ("node_A",)
    label = "Transpose"

    def gradient(self, node, output_grad):
        return [transpose_op(output_grad)]

    def infer_shape(self, node, input_shapes):
        s = tuple(input_shapes[0])
        if len(s) != 2:
            raise self._error(node, f"input must be 2-D, got {shape_str(s)}")
        return (s[1], s[0])


class ReshapeOp(Op):
    """``reshape_op(x, shape)``: x's values in row-major order with a new shape of the same size;
    one entry of ``shape`` may be -1 (inferred). ``reshape_op(x, like)`` with a node takes
    ``like``'s shape (the gradient's form). On a device this is a copy into the planned buffer of
    the new shape (the executor plans buffers by shape)."""

    name = "reshape_op"
    view_of_input = True  # eagerly a view of x (no copy)
    kernel = "reshape"
    label = "ReshapeLike"
    shape_only_inputs = (1,)  # like
    inputs = ("node_x", "like")
    optional_inputs = ("like",)
    attrs = (Attr("shape_attr", default=None),)

    def __call__(self, node_x: Node, shape) -> Node:
        # One parameter, two meanings: a node gives its shape (the gradient's form).
        if isinstance(shape, Node):
            return super().__call__(node_x, shape)
        return super().__call__(node_x, None, _as_shape(shape))  # positional: the fast path

    def node_name(self, node):
        if node.shape_attr is None:
            return Op.node_name(self, node)
        return f"Reshape({short_name(node.inputs[0])},{shape_str(node.shape_attr)})"

    def gradient(self, node, output_grad):
        grads = [reshape_op(output_grad, node.inputs[0])]
        if len(node.inputs) == 2:
            grads.append(None)
        return grads

    def _target(self, node, x: tuple, input_shapes) -> tuple:
        if node.shape_attr is None:
            return tuple(input_shapes[1])
        return node.shape_attr

    def infer_shape(self, node, input_shapes):
        x = tuple(input_shapes[0])
        target = self._target(node, x, input_shapes)
        size = math.prod(x)
        if -1 in target:
            known = math.prod(d for d in target if d != -1)
            if known == 0 or size % known != 0:
                raise self._error(node, f"cannot reshape {shape_str(x)} to {shape_str(target)}")
            target = tuple(size // known if d == -1 else d for d in target)
        if math.prod(target) != size:
            raise self._error(
                node,
                f"cannot reshape {shape_str(x)} ({size} elements) to {shape_str(target)} "
                f"({math.prod(target)} elements)",
            )
        return target


class FlattenOp(ReshapeOp):
    """``flatten_op(x)``: (N, d1, d2, ...) -> (N, d1*d2*...): conv features into a dense layer."""

    name = "flatten_op"
    label = "Flatten"
    inputs = ("node_x",)
    optional_inputs = ()
    attrs = ()
    __call__ = Op.__call__
    node_name = Op.node_name

    def _target(self, node, x, input_shapes):
        if len(x) < 1:
            raise self._error(node, "cannot flatten a 0-d array")
        return (x[0], math.prod(x[1:]))


class OneHotOp(Op):
    """``one_hot_op(indices, num_classes)``: indices (N,), class numbers held as floats, to
    (N, num_classes) rows of 0.0 with 1.0 at column indices[i] (:func:`gpumat.ops.one_hot`: an
    index outside [0, num_classes), a non-integer or NaN gives a row of zeros). Labels for
    ``softmaxcrossentropy_op`` / ``nll_loss_op`` from class numbers. Piecewise constant, so it has
    no gradient: ``None`` for indices (like ``zeroslike_op``).

    ``num_classes``: an int in [0, 2**24] (TypeError / ValueError otherwise).
    """

    name = "one_hot_op"
    kernel = "one_hot"
    inputs = ("indices",)
    attrs = (Attr("num_classes", _num_classes, type=int),)

    def node_name(self, node):
        return f"OneHot({short_name(node.inputs[0])},{node.num_classes})"

    def gradient(self, node, output_grad):
        return [None]

    def infer_shape(self, node, input_shapes):
        s = tuple(input_shapes[0])
        if len(s) != 1:
            raise self._error(node, f"indices must be 1-D (N,), got shape {shape_str(s)}")
        return (s[0], node.num_classes)


class TrilOp(Op):
    """``tril_op(x, diagonal=0)``: x on and below the ``diagonal``-th diagonal of each matrix
    of its last two dims (rank >= 2; leading dims a batch), 0 elsewhere (``torch.tril``).
    Linear: its gradient is the same mask applied to dy."""

    name = "tril_op"
    kernel = "tril"
    label = "Tril"
    inputs = ("node_x",)
    attrs = (Attr("diagonal", as_int, 0, int),)

    def node_name(self, node):
        return f"{self.label}({short_name(node.inputs[0])},{node.diagonal})"

    def kernel_args(self, node):
        return (node.diagonal,)

    def gradient(self, node, output_grad):
        return [(tril_op if self.kernel == "tril" else triu_op)(output_grad, node.diagonal)]

    def infer_shape(self, node, input_shapes):
        s = tuple(input_shapes[0])
        if len(s) < 2:
            raise self._error(node, f"needs at least 2 dims, got shape {shape_str(s)}")
        return s


class TriuOp(TrilOp):
    """``triu_op(x, diagonal=0)``: x on and above the ``diagonal``-th diagonal of each matrix
    of its last two dims, 0 elsewhere (``torch.triu``). Gradient: the same mask on dy."""

    name = "triu_op"
    kernel = "triu"
    label = "Triu"


transpose_op = TransposeOp()
reshape_op = ReshapeOp()
flatten_op = FlattenOp()
one_hot_op = OneHotOp()
tril_op = TrilOp()
triu_op = TriuOp()
