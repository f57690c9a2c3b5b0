"""Reductions and broadcasts as graph ops, each the other's gradient.

Over leading axes (the dlsys course's pair): ``reducesumaxiszero_op(a[, like])`` and
``broadcastto_op(a, like)``. Along one axis of any rank: ``reduce_sum_op``, ``reduce_mean_op``,
``reduce_max_op`` ``(x, axis, keepdims=False)``, their gradients ``broadcast_axis_op`` and
``reduce_max_gradient_op``, and ``argmax_op(x, axis, keepdims=False)`` (no gradient);
``reduce_prod_op`` (gradient ``prod_gradient_op``) and ``cumsum_op(x, axis, reverse=False)`` (its
gradient the reverse cumsum). Kernels:
:func:`gpumat.ops.sum_to_size`, :func:`gpumat.ops.broadcast_to`,
:func:`gpumat.ops.sum` and the rest of the family; the axis kernels see their input as
(outer, n, inner) around the axis, so any axis works without a transpose.
"""

from __future__ import annotations

import math

import numpy as np

from gpumat.graph.layout import reshape_op
from gpumat.graph.node import AXIS, Attr, AxisOp, Op, Undefined, kernels_for, shape_str, short_name

__all__ = [
    "ArgmaxOp",
    "BroadcastAxisOp",
    "BroadcastToOp",
    "CumsumOp",
    "ProdGradientOp",
    "ReduceMaxGradientOp",
    "ReduceMaxOp",
    "ReduceMeanOp",
    "ReduceProdOp",
    "ReduceSumAxisZeroOp",
    "ReduceSumOp",
    "argmax_op",
    "broadcast_axis_op",
    "broadcastto_op",
    "cumsum_op",
    "prod_gradient_op",
    "reduce_max_gradient_op",
    "reduce_max_op",
    "reduce_mean_op",
    "reduce_prod_op",
    "reduce_sum_op",
    "reducesumaxiszero_op",
]


def _strip_leading_ones(shape: tuple) -> tuple:
    i = 0
    while i < len(shape) and shape[i] == 1:
        i += 1
    return tuple(shape[i:])


def _ending(op: Op, node, short: tuple, long: tuple, what: str, roles: tuple) -> tuple:
    """``short``, once it ends ``long`` without its leading 1s; else ValueError: ``what``, and
    the rule in the words of ``roles`` = (short's name, long's name)."""
    tail = _strip_leading_ones(short)
    if len(tail) > len(long) or tuple(long[len(long) - len(tail) :]) != tail:
        rule = f"the {roles[0]}'s shape, without leading 1s, must end the {roles[1]}'s shape"
        raise op._error(node, f"{what} ({rule})")
    return short


def _keepdims(value, name: str, op: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{op}: {name} must be a bool, got {value!r}")
    return bool(value)


KEEPDIMS = Attr("keepdims", _keepdims, False, bool)


class ReduceSumAxisZeroOp(Op):
    """Sum over leading axes.

    ``reducesumaxiszero_op(a)`` sums over axis 0: (N, ...) -> (...), the dlsys course's op.
    ``reducesumaxiszero_op(a, like)`` sums over as many leading axes as it takes to reach
    ``like``'s shape, which must end a's shape once its own leading 1s are dropped:
    (4, 5, 6) -> (6,), (8, 10) -> (1, 10). This is the gradient of ``broadcastto_op(like, a)``.
    """

    name = "reducesumaxiszero_op"
    kernel = "sum_to_size"
    shape_only_inputs = (1,)  # like
    inputs = ("node_A", "like")
    optional_inputs = ("like",)

    def node_name(self, node):
        if len(node.inputs) == 1:
            return f"ReduceSumAxisZero({short_name(node.inputs[0])})"
        return f"ReduceSumTo({short_name(node.inputs[0])},{short_name(node.inputs[1])})"

    def gradient(self, node, output_grad):
        grads = [broadcastto_op(output_grad, node.inputs[0])]
        if len(node.inputs) == 2:
            grads.append(None)  # only like's shape is used
        return grads

    def infer_shape(self, node, input_shapes):
        s = tuple(input_shapes[0])
        if len(node.inputs) == 1:
            if len(s) == 0:
                raise self._error(node, "cannot sum over axis 0 of a 0-d array")
            return s[1:]
        like = tuple(input_shapes[1])
        what = f"cannot sum {shape_str(s)} down to {shape_str(like)}"
        return _ending(self, node, like, s, what, ("target", "input"))


class BroadcastToOp(Op):
    """``broadcastto_op(a, b)``: a repeated over new leading axes to b's shape.

    a's shape, without its leading 1s, must end b's shape: (200, 300) -> (130, 200, 300),
    (10,) -> (7, 10), (1, 10) -> (7, 10). The gradient sums over the added axes.
    """

    name = "broadcastto_op"
    kernel = "broadcast_to"
    shape_only_inputs = (1,)  # the target
    inputs = ("node_A", "node_B")

    def node_name(self, node):
        a, b = node.inputs
        return f"BroadcastTo({short_name(a)},{short_name(b)}.shape)"

    def gradient(self, node, output_grad):
        return [reducesumaxiszero_op(output_grad, node.inputs[0]), None]

    def infer_shape(self, node, input_shapes):
        a, b = (tuple(s) for s in input_shapes)
        what = f"cannot broadcast {shape_str(a)} to {shape_str(b)}"
        _ending(self, node, a, b, what, ("input", "target"))
        return b


class _ReduceOp(AxisOp):
    """``reduce_<kind>_op(x, axis, keepdims=False)``: the sum, mean or max of x along ``axis``;
    the output drops that axis, or keeps it with length 1 when ``keepdims``."""

    kind = "sum"
    kernel = "sum"
    label = "ReduceSum"
    inputs = ("node_x",)
    attrs = (AXIS, KEEPDIMS)

    def node_name(self, node):
        kd = ",keepdims" if node.keepdims else ""
        return f"{self.label}({short_name(node.inputs[0])},axis={node.axis}{kd})"

    def gradient(self, node, output_grad):
        x = node.inputs[0]
        if self.kind == "max":
            return [reduce_max_gradient_op(x, node, output_grad, node.axis)]
        return [broadcast_axis_op(output_grad, x, node.axis, self.kind == "mean")]

    def infer_shape(self, node, input_shapes):
        s = tuple(input_shapes[0])
        a = self.check_axis(node, s, node.axis)
        if self.kind in ("mean", "max") and s[a] == 0:
            others = s[:a] + s[a + 1 :]
            if math.prod(others) > 0:
                raise self._error(
                    node, f"cannot take the {self.kind} of an empty axis {a} of {shape_str(s)}"
                )
        return s[:a] + (1,) + s[a + 1 :] if node.keepdims else s[:a] + s[a + 1 :]


class ReduceSumOp(_ReduceOp):
    """``reduce_sum_op(x, axis, keepdims=False)``: the sum along ``axis``. Gradient: dy repeated
    along the axis (``broadcast_axis_op``)."""

    name = "reduce_sum_op"
    kind = "sum"
    kernel = "sum"


class ReduceMeanOp(_ReduceOp):
    """``reduce_mean_op(x, axis, keepdims=False)``: the mean along a non-empty ``axis``.
    Gradient: dy / n repeated along the axis."""

    name = "reduce_mean_op"
    label = "ReduceMean"
    kind = "mean"
    kernel = "mean"


class ReduceMaxOp(_ReduceOp):
    """``reduce_max_op(x, axis, keepdims=False)``: the max along a non-empty ``axis`` (NaN wins).

    Gradient (``reduce_max_gradient_op``): each slice's dy is **split equally among its tied
    maxima**, as TensorFlow's ``reduce_max`` and PyTorch's ``amax`` do (PyTorch's ``max(dim)``
    instead routes it to one index). Splitting is the symmetric choice: it does not depend on the
    order of the elements along the axis (so it commutes with permutations of that axis), it is
    the average of the one-hot subgradients, and it keeps the gradient of max(x, x) = x equal to
    1 in total. (``max_pool2d_op`` routes to the first maximum instead: its kernel recomputes one
    argmax per window.)
    """

    name = "reduce_max_op"
    label = "ReduceMax"
    kind = "max"
    kernel = "amax"


class ArgmaxOp(AxisOp):
    """``argmax_op(x, axis, keepdims=False)``: the index along ``axis`` of each slice's maximum,
    as float32 numbers holding the integers (:func:`gpumat.ops.argmax`: the first maximum wins,
    a NaN counts as the maximum, PyTorch's rule); the output drops the axis, or keeps it with
    length 1 when ``keepdims``. Piecewise constant, so it has no gradient: ``None`` for its input
    (like ``zeroslike_op``)."""

    name = "argmax_op"
    kernel = "argmax"
    label = "Argmax"
    inputs = ("node_x",)
    attrs = (AXIS, KEEPDIMS)
    node_name = _ReduceOp.node_name

    def gradient(self, node, output_grad):
        return [None]

    def infer_shape(self, node, input_shapes):
        s = tuple(input_shapes[0])
        a = self.check_axis(node, s, node.axis)
        others = s[:a] + s[a + 1 :]
        if s[a] == 0 and math.prod(others) > 0:
            raise self._error(
                node, f"cannot take the argmax of an empty axis {a} of {shape_str(s)}"
            )
        return s[:a] + (1,) + s[a + 1 :] if node.keepdims else others


class BroadcastAxisOp(AxisOp):
    """``broadcast_axis_op(g, like, axis, mean=False)``: g (like's shape reduced along ``axis``,
    the axis dropped or kept as 1) repeated along ``axis`` to like's shape, times 1/n when
    ``mean`` (n = like's length along the axis): the gradient of sum / mean. Only
    ``like``'s shape is used. Linear in g: its gradient is sum / mean again."""

    name = "broadcast_axis_op"
    shape_only_inputs = (1,)
    inputs = ("node_g", "node_like")
    attrs = (AXIS, Attr("mean", lambda v, _n, _op: bool(v), False, bool))

    def node_name(self, node):
        g, like = (short_name(i) for i in node.inputs)
        return f"BroadcastAxis({g},{like},axis={node.axis}{',mean' if node.mean else ''})"

    def compute(self, node, input_vals, output_val, device=None):
        a = node.axis % output_val.ndim
        n = output_val.shape[a]
        scale = 1.0 / n if node.mean and n > 0 else 1.0
        kernels_for(device).broadcast_dim(input_vals[0], output_val, a, scale)

    def gradient(self, node, output_grad):
        g = node.inputs[0]
        op = reduce_mean_op if node.mean else reduce_sum_op
        return [reshape_op(op(output_grad, node.axis), g), None]

    def infer_shape(self, node, input_shapes):
        g, like = (tuple(s) for s in input_shapes)
        a = self.check_axis(node, like, node.axis)
        if g not in (like[:a] + like[a + 1 :], like[:a] + (1,) + like[a + 1 :]):
            raise self._error(
                node,
                f"g has shape {shape_str(g)}, expected {shape_str(like)} reduced along axis {a}",
            )
        return like


class ReduceMaxGradientOp(AxisOp):
    """``reduce_max_gradient_op(x, y, dy, axis)``: dL/dx of y = amax(x, axis) given y and
    dy: dy / t at the t tied maxima of each slice, 0 elsewhere (see ``reduce_max_op``)."""

    name = "reduce_max_gradient_op"
    kernel = "amax_gradient"
    inputs = ("node_x", "node_y", "node_dy")
    attrs = (AXIS,)

    def node_name(self, node):
        return f"ReduceMaxGrad({','.join(short_name(i) for i in node.inputs)},axis={node.axis})"

    def gradient(self, node, output_grad):
        # Piecewise constant in x and y; linear in dy (a gather at the maxima: no kernel yet).
        return [None, None, Undefined("reduce_max_gradient_op: second derivatives of max")]

    def infer_shape(self, node, input_shapes):
        x, y, dy = (tuple(s) for s in input_shapes)
        a = self.check_axis(node, x, node.axis)
        if y != dy or y not in (x[:a] + x[a + 1 :], x[:a] + (1,) + x[a + 1 :]):
            raise self._error(
                node,
                f"y {shape_str(y)} and dy {shape_str(dy)} must be x {shape_str(x)} reduced "
                f"along axis {a}",
            )
        return x


class ReduceProdOp(_ReduceOp):
    """``reduce_prod_op(x, axis, keepdims=False)``: the product along ``axis`` in index order
    (1 for an empty axis). Gradient: ``prod_gradient_op(x, dy, axis)``, dy times the product of
    the other elements (exact at zeros, PyTorch's values)."""

    name = "reduce_prod_op"
    label = "ReduceProd"
    kind = "prod"
    kernel = "prod"

    def gradient(self, node, output_grad):
        return [prod_gradient_op(node.inputs[0], output_grad, node.axis)]


class ProdGradientOp(AxisOp):
    """``prod_gradient_op(x, dy, axis)``: dL/dx of y = prod(x, axis) given dy (y's shape): dy
    times the product of each element's slice-mates (no division). Its own gradient (a second
    derivative) is not implemented."""

    name = "prod_gradient_op"
    kernel = "prod_gradient"
    inputs = ("node_x", "node_dy")
    attrs = (AXIS,)
    no_gradient = "second derivatives of prod"

    def node_name(self, node):
        return f"ProdGrad({','.join(short_name(i) for i in node.inputs)},axis={node.axis})"

    def infer_shape(self, node, input_shapes):
        x, dy = (tuple(s) for s in input_shapes)
        a = self.check_axis(node, x, node.axis)
        if dy not in (x[:a] + x[a + 1 :], x[:a] + (1,) + x[a + 1 :]):
            raise self._error(
                node, f"dy {shape_str(dy)} must be x {shape_str(x)} reduced along axis {a}"
            )
        return x


class CumsumOp(AxisOp):
    """``cumsum_op(x, axis, reverse=False)``: the running sums of x along ``axis`` (from the end
    when ``reverse``), accumulated in float64 in a fixed order; x's shape. Gradient: the
    running sums of dy the other way (``cumsum_op(dy, axis, not reverse)``)."""

    name = "cumsum_op"
    kernel = "cumsum"
    label = "Cumsum"
    inputs = ("node_x",)
    attrs = (AXIS, Attr("reverse", _keepdims, False, bool))

    def node_name(self, node):
        rev = ",reverse" if node.reverse else ""
        return f"Cumsum({short_name(node.inputs[0])},axis={node.axis}{rev})"

    def kernel_args(self, node):
        return (node.axis, node.reverse)

    def gradient(self, node, output_grad):
        return [cumsum_op(output_grad, node.axis, not node.reverse)]

    def infer_shape(self, node, input_shapes):
        s = tuple(input_shapes[0])
        self.check_axis(node, s, node.axis)
        return s


reducesumaxiszero_op = ReduceSumAxisZeroOp()
broadcastto_op = BroadcastToOp()
reduce_sum_op = ReduceSumOp()
reduce_mean_op = ReduceMeanOp()
reduce_max_op = ReduceMaxOp()
broadcast_axis_op = BroadcastAxisOp()
reduce_max_gradient_op = ReduceMaxGradientOp()
argmax_op = ArgmaxOp()
reduce_prod_op = ReduceProdOp()
prod_gradient_op = ProdGradientOp()
cumsum_op = CumsumOp()
