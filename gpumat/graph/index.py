"""Graph ops of the index family: rows of one axis picked (``index_select_op``), summed into
(``index_add_op``) or copied into (``index_copy_op``) by a 1-D index, and index_select's gradient
(``index_select_gradient_op``: zeros, then a deterministic index_add), and the embedding lookup
(``embedding_op``: index_select of rows, whose gradient skips the padding row).

The index is a node of integers held as floats (gpumat's int64 storage), values in [-n, n)
(negative from the end); the kernels never read out of bounds (an index naming no row gives NaN
or no write, see :func:`gpumat.ops.index_select`), and the Tensor front end raises IndexError
before an index out of range reaches them. No op has a gradient for its index (piecewise
constant).
"""

from __future__ import annotations

from gpumat._checks import as_real
from gpumat.graph.elementwise import (
    add_byconst_op,
    add_op,
    eq_op,
    mul_byconst_op,
    zeroslike_op,
)
from gpumat.graph.node import AXIS, Attr, AxisOp, Op, kernels_for, shape_str, short_name

__all__ = [
    "embedding_op",
    "index_add_op",
    "index_copy_op",
    "index_select_gradient_op",
    "index_select_op",
]


def _indexed_shape(op, node, full: tuple, index: tuple, axis: int) -> tuple:
    """full with axis' length replaced by len(index); ValueError unless index is 1-D."""
    if len(index) != 1:
        raise op._error(node, f"index must be 1-D, got shape {shape_str(index)}")
    a = op.check_axis(node, full, axis)
    return full[:a] + (index[0],) + full[a + 1 :]


def _check_part(op, node, full: tuple, index: tuple, part: tuple, axis: int, what: str) -> None:
    want = _indexed_shape(op, node, full, index, axis)
    if tuple(part) != want:
        raise op._error(
            node,
            f"{what} has shape {shape_str(part)}, expected {shape_str(want)} ({shape_str(full)} "
            f"with axis {axis} of length len(index) = {index[0]})",
        )


class IndexSelectOp(AxisOp):
    """``index_select_op(x, index, axis)``: x's rows index[j] along axis (PyTorch's
    ``index_select``): out is x's shape with axis' length len(index). Gradient: for x,
    ``index_select_gradient_op`` (the rows' gradients summed into zeros in increasing j, so a
    repeated index gets the sum, deterministically); none for index."""

    name = "index_select_op"
    inputs = ("node_x", "node_index")
    attrs = (AXIS,)

    def node_name(self, node):
        x, i = (short_name(n) for n in node.inputs)
        return f"IndexSelect({x},{i},{node.axis})"

    def compute(self, node, input_vals, output_val, device=None):
        x, index = input_vals
        kernels_for(device).index_select(x, node.axis, index, output_val)

    def gradient(self, node, output_grad):
        x, index = node.inputs
        return [index_select_gradient_op(output_grad, index, x, node.axis), None]

    def infer_shape(self, node, input_shapes):
        return _indexed_shape(self, node, tuple(input_shapes[0]), tuple(input_shapes[1]), node.axis)


class IndexSelectGradientOp(AxisOp):
    """``index_select_gradient_op(dy, index, like, axis)``: zeros of like's shape (like: the
    forward input, only its shape read) with dy's rows added at index along axis in increasing j
    (:func:`gpumat.ops.index_add`). Gradient: for dy, ``index_select_op``."""

    name = "index_select_gradient_op"
    inputs = ("node_dy", "node_index", "like")
    shape_only_inputs = (2,)
    attrs = (AXIS,)

    def node_name(self, node):
        dy, i, _ = (short_name(n) for n in node.inputs)
        return f"IndexSelectGrad({dy},{i},{node.axis})"

    def compute(self, node, input_vals, output_val, device=None):
        dy, index = input_vals[:2]
        k = kernels_for(device)
        k.fill(output_val, 0.0)
        k.index_add(output_val, node.axis, index, dy, 1.0)

    def gradient(self, node, output_grad):
        return [index_select_op(output_grad, node.inputs[1], node.axis), None, None]

    def infer_shape(self, node, input_shapes):
        dy, index, like = (tuple(s) for s in input_shapes)
        _check_part(self, node, like, index, dy, node.axis, "dy")
        return like


class IndexAddOp(AxisOp):
    """``index_add_op(x, index, src, axis, alpha=1.0)``: x with alpha * src[..., j, ...] added at
    row index[j] along axis, in increasing j (PyTorch's ``index_add``; deterministic). src is x's
    shape with axis' length len(index). Gradient: dy for x, alpha * index_select(dy) for src."""

    name = "index_add_op"
    inputs = ("node_x", "node_index", "node_src")
    attrs = (AXIS, Attr("alpha", as_real, 1.0, float))

    def node_name(self, node):
        x, i, s = (short_name(n) for n in node.inputs)
        return f"IndexAdd({x},{i},{s},{node.axis})"

    def compute(self, node, input_vals, output_val, device=None):
        _into_copy(input_vals, output_val, device, "index_add", node.axis, node.alpha)

    def gradient(self, node, output_grad):
        index = node.inputs[1]
        g_src = index_select_op(output_grad, index, node.axis)
        if node.alpha != 1.0:
            g_src = mul_byconst_op(g_src, node.alpha)
        return [output_grad, None, g_src]

    def infer_shape(self, node, input_shapes):
        x, index, src = (tuple(s) for s in input_shapes)
        _check_part(self, node, x, index, src, node.axis, "src")
        return x


def _into_copy(input_vals, output_val, device, kernel: str, *args) -> None:
    """output = a copy of x, then ``kernel(output, axis, index, src, ...)`` in place on it."""
    x, index, src = input_vals
    k = kernels_for(device)
    k.copy(x, output_val)
    axis, rest = args[0], args[1:]
    getattr(k, kernel)(output_val, axis, index, src, *rest)


class IndexCopyOp(AxisOp):
    """``index_copy_op(x, index, src, axis)``: x with row index[j] along axis replaced by
    src[..., j, ...]; of repeated indices the last j wins (PyTorch leaves that case unspecified).
    Gradient: dy with the written rows zeroed for x; index_select(dy) for src (PyTorch's rule:
    with repeated indices every occurrence gets the row's gradient)."""

    name = "index_copy_op"
    inputs = ("node_x", "node_index", "node_src")
    attrs = (AXIS,)

    def node_name(self, node):
        x, i, s = (short_name(n) for n in node.inputs)
        return f"IndexCopy({x},{i},{s},{node.axis})"

    def compute(self, node, input_vals, output_val, device=None):
        _into_copy(input_vals, output_val, device, "index_copy", node.axis)

    def gradient(self, node, output_grad):
        _, index, src = node.inputs
        g_x = index_copy_op(output_grad, index, zeroslike_op(src), node.axis)
        return [g_x, None, index_select_op(output_grad, index, node.axis)]

    def infer_shape(self, node, input_shapes):
        x, index, src = (tuple(s) for s in input_shapes)
        _check_part(self, node, x, index, src, node.axis, "src")
        return x


index_select_op = IndexSelectOp()
index_select_gradient_op = IndexSelectGradientOp()
index_add_op = IndexAddOp()
index_copy_op = IndexCopyOp()


def _padding_idx(value, name: str, op: str):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TypeError(f"{op}: {name} must be None or an int >= 0, got {value!r}")
    return value


_NO_ROW = -1e30


class EmbeddingOp(Op):
    """``embedding_op(weight, index, padding_idx=None)``: rows of weight (n, D) picked by index
    (L,) (integers in [0, n), gpumat's int64 storage) -> (L, D), one ``index_select`` along axis
    0 (PyTorch's ``embedding``). Gradient: for weight, ``index_select_gradient_op`` (zeros, then
    the rows' gradients added in increasing position: deterministic, the same bits every run),
    with the index entries equal to ``padding_idx`` moved out of range (-1e30), where they name
    no row, so the padding row gets no gradient (PyTorch's rule); none for index."""

    name = "embedding_op"
    inputs = ("node_weight", "node_index")
    attrs = (Attr("padding_idx", _padding_idx, None),)

    def node_name(self, node):
        w, i = (short_name(n) for n in node.inputs)
        return f"Embedding({w},{i})"

    def compute(self, node, input_vals, output_val, device=None):
        weight, index = input_vals
        kernels_for(device).index_select(weight, 0, index, output_val)

    def gradient(self, node, output_grad):
        weight, index = node.inputs
        pad = node.padding_idx
        if pad is not None:
            padding = add_byconst_op(zeroslike_op(index), float(pad))
            # index - 1e30 where index == pad: a value out of every range names no row, so the
            # deterministic index_add skips it; elsewhere index + (-0.0), exact.
            shift = mul_byconst_op(eq_op(index, padding), _NO_ROW)
            index = add_op(index, shift)
        return [index_select_gradient_op(output_grad, index, weight, 0), None]

    def infer_shape(self, node, input_shapes):
        w, index = (tuple(s) for s in input_shapes)
        if len(w) != 2:
            raise self._error(node, f"weight must be 2-D (num_embeddings, D), got {shape_str(w)}")
        if len(index) != 1:
            raise self._error(node, f"index must be 1-D, got shape {shape_str(index)}")
        if node.padding_idx is not None and node.padding_idx >= w[0]:
            raise self._error(
                node, f"padding_idx {node.padding_idx} is not a row of weight {shape_str(w)}"
            )
        return (index[0], w[1])


embedding_op = EmbeddingOp()
