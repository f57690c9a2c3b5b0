"""Sorting as graph ops: ``argsort_op(x, axis, descending=False, k=-1)`` (the positions of the
first k elements of each slice in sorted order; no gradient), ``gather_op(x, index, axis)``
(``torch.gather``: the values at those positions, whose gradient sends dy back to them) and its
gradient ``gather_gradient_op(index, dy, like, axis)``. A sort is ``gather_op(x,
argsort_op(x, axis), axis)``; top-k the same with k. Kernels: :func:`gpumat.ops.argsort`,
:func:`gpumat.ops.gather`, :func:`gpumat.ops.gather_gradient`, along any axis without a
transpose. The order is the stable one, a NaN the largest value (PyTorch's rules).
"""

from __future__ import annotations

from gpumat._checks import as_int
from gpumat.graph.node import AXIS, Attr, AxisOp, shape_str, short_name

__all__ = [
    "ArgsortOp",
    "GatherGradientOp",
    "GatherOp",
    "argsort_op",
    "gather_gradient_op",
    "gather_op",
]


def _bool(value, name: str, op: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{op}: {name} must be a bool, got {value!r}")
    return value


class ArgsortOp(AxisOp):
    """``argsort_op(x, axis, descending=False, k=-1)``: the positions along ``axis`` of the first
    k elements of each slice of x in sorted order (k = -1: all of them), as float32 numbers holding
    the integers; the output is x's shape with length k along ``axis``. Ascending, or descending
    when ``descending``; ties keep their index order and a NaN sorts as the largest value
    (``torch.sort(stable=True)``, ``torch.topk``). Piecewise constant: no gradient."""

    name = "argsort_op"
    kernel = "argsort"
    label = "Argsort"
    inputs = ("node_x",)
    attrs = (AXIS, Attr("descending", _bool, False, bool), Attr("k", as_int, -1, int))

    def node_name(self, node):
        return f"Argsort({short_name(node.inputs[0])},{node.axis})"

    def kernel_args(self, node):
        return (node.axis, node.descending)

    def gradient(self, node, output_grad):
        return [None]

    def infer_shape(self, node, input_shapes):
        s = tuple(input_shapes[0])
        a = self.check_axis(node, s, node.axis)
        k = s[a] if node.k == -1 else node.k
        if not 0 <= k <= s[a]:
            raise self._error(
                node, f"k = {node.k} is out of range for dim {a} of size {s[a]} ({shape_str(s)})"
            )
        return s[:a] + (k,) + s[a + 1 :]


def _along(op, node, full: tuple, part: tuple, a: int, what: str) -> None:
    if len(part) != len(full) or part[:a] + part[a + 1 :] != full[:a] + full[a + 1 :]:
        raise op._error(
            node,
            f"{what} has shape {shape_str(part)}; expected {shape_str(full)} but for its length "
            f"along axis {a}",
        )


class GatherOp(AxisOp):
    """``gather_op(x, index, axis)``: out[..., r, ...] = x[..., index[..., r, ...], ...] along
    ``axis`` (``torch.gather``), index (float32 integers) of x's shape but for its length k along
    ``axis``, the output index's shape. Gradient: ``gather_gradient_op(index, dy, x, axis)``
    (dy added at the gathered positions); index has none."""

    name = "gather_op"
    kernel = "gather"
    label = "Gather"
    inputs = ("node_x", "node_index")
    attrs = (AXIS,)

    def gradient(self, node, output_grad):
        x, index = node.inputs
        return [gather_gradient_op(index, output_grad, x, node.axis), None]

    def infer_shape(self, node, input_shapes):
        s, idx = (tuple(v) for v in input_shapes)
        a = self.check_axis(node, s, node.axis)
        _along(self, node, s, idx, a, "the index")
        return idx


class GatherGradientOp(AxisOp):
    """``gather_gradient_op(index, dy, like, axis)``: zeros of like's shape with dy added at the
    positions index names along ``axis`` (repeated positions summed in order); only like's shape
    is used. Linear in dy: its gradient is ``gather_op(g, index, axis)``."""

    name = "gather_gradient_op"
    kernel = "gather_gradient"
    label = "GatherGrad"
    shape_only_inputs = (2,)
    inputs = ("node_index", "node_dy", "node_like")
    attrs = (AXIS,)

    def gradient(self, node, output_grad):
        index = node.inputs[0]
        return [None, gather_op(output_grad, index, node.axis), None]

    def infer_shape(self, node, input_shapes):
        idx, dy, like = (tuple(v) for v in input_shapes)
        a = self.check_axis(node, like, node.axis)
        self._same_shapes(node, idx, dy)
        _along(self, node, like, dy, a, "dy")
        return like


argsort_op = ArgsortOp()
gather_op = GatherOp()
gather_gradient_op = GatherGradientOp()
