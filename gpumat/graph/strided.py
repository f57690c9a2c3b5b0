"""Strided graph ops: broadcasting in any rank, and the copies behind views, index assignment
and joining, each one kernel of the strided family (:func:`gpumat.ops.broadcast_binary`,
``broadcast_where``, ``sum_to``, ``as_strided``, ``as_strided_scatter``).

- ``broadcast_binary_op(a, b, kind)``: ``a (kind) b`` with numpy's broadcasting in up to 8 dims,
  the repeated operand read in place (``kind`` one of ``gpumat.ops.BROADCAST_BINARY_OPS``);
  gradients summed back to each operand's shape by ``sum_to_op``.
- ``broadcast_where_op(cond, a, b)``: ``torch.where`` with broadcasting.
- ``sum_to_op(x, like)``: x summed to like's shape (the gradient of a broadcast); its own gradient
  is ``expand_like_op``.
- ``expand_op(x, shape)`` / ``expand_like_op(x, like)``: x repeated to a shape (a copy, dims of 1
  read with stride 0); gradient ``sum_to_op``.
- ``as_strided_op(x, size, stride, offset)``: the elements a strided view of contiguous x sees,
  copied (permute, slicing, flip, diagonal); gradient ``as_strided_backward_op`` (zeros with the
  gradient written back into the view's addresses, which must be distinct).
- ``as_strided_scatter_op(base, src, stride, offset)``: base with a strided region replaced by src
  (index assignment out of place).
- ``cat_op(nodes, dim)``: ``torch.cat``; gradient ``cat_slice_op`` per input.
- ``constant_pad_op(x, pad, value)``: x inside a border of ``value`` (``F.pad``'s constant
  mode, pads >= 0): a fill and one ``as_strided_scatter``; gradient ``constant_pad_gradient_op``,
  one ``as_strided`` gather of the interior.

Strides and offsets are in elements of the contiguous input.
"""

from __future__ import annotations

import math

import numpy as np

from gpumat import ops
from gpumat._checks import as_int, as_int_tuple, as_real
from gpumat.graph.elementwise import mul_byconst_op, where_op, zeroslike_op
from gpumat.graph.node import Attr, Node, Op, kernels_for, shape_str, short_name

__all__ = [
    "AssembleOp",
    "AsStridedBackwardOp",
    "AsStridedLikeOp",
    "AsStridedOp",
    "AsStridedScatterOp",
    "BroadcastBinaryOp",
    "BroadcastWhereOp",
    "CatOp",
    "CatSliceOp",
    "ConstantPadGradientOp",
    "ConstantPadOp",
    "ExpandLikeOp",
    "ExpandOp",
    "MAX_DIMS",
    "SumToOp",
    "as_strided_backward_op",
    "assemble_op",
    "as_strided_like_op",
    "as_strided_op",
    "as_strided_scatter_op",
    "broadcast_binary_op",
    "broadcast_where_op",
    "cat_op",
    "cat_slice_op",
    "constant_pad_gradient_op",
    "constant_pad_op",
    "contiguous_strides",
    "expand_like_op",
    "expand_op",
    "sum_to_op",
]

#: The most dims a strided op's operands may have (extensions/src/strided.h).
MAX_DIMS = 8


def contiguous_strides(shape) -> tuple:
    """Row-major element strides of a contiguous array of ``shape``."""
    strides, step = [], 1
    for d in reversed(tuple(shape)):
        strides.append(step)
        step *= d
    return tuple(reversed(strides))


def _kind(value, what: str, op: str) -> str:
    if value not in ops.BROADCAST_BINARY_OPS:
        raise ValueError(f"{op}: {what} must be one of {ops.BROADCAST_BINARY_OPS}, got {value!r}")
    return value


def _broadcast(op: Op, node: Node, shapes) -> tuple:
    try:
        out = tuple(int(d) for d in np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        shown = " and ".join(shape_str(s) for s in shapes)
        raise op._error(node, f"shapes {shown} cannot be broadcast together") from None
    if len(out) > MAX_DIMS:
        raise op._error(node, f"{len(out)} dims {shape_str(out)}; at most {MAX_DIMS}")
    return out


class BroadcastBinaryOp(Op):
    """``broadcast_binary_op(a, b, kind)``: a (kind) b elementwise with numpy's broadcasting (any
    ranks up to 8, either operand repeated, read in place). Gradients (None for the comparisons
    and logic): add, sub, mul and div by the product and quotient rules (PyTorch's
    ``-g * a / (b * b)`` for div's b), minimum and maximum by PyTorch's rule (g to the winner, g/2
    to each on a tie, g to both where unordered), each summed back to its operand's shape by
    :func:`sum_to_op`."""

    name, label, kernel = "broadcast_binary_op", "Broadcast", "broadcast_binary"
    inputs = ("node_A", "node_B")
    attrs = (Attr("kind", _kind, type=str),)

    def node_name(self, node):
        a, b = node.inputs
        return f"{node.kind}({short_name(a)},{short_name(b)})"

    def kernel_args(self, node):
        return (node.kind,)

    def infer_shape(self, node, input_shapes):
        return _broadcast(self, node, input_shapes)

    def gradient(self, node, output_grad):
        a, b = node.inputs
        g, kind = output_grad, node.kind
        if kind == "add":
            return [sum_to_op(g, a), sum_to_op(g, b)]
        if kind == "sub":
            return [sum_to_op(g, a), sum_to_op(mul_byconst_op(g, -1.0), b)]
        if kind == "mul":
            return [
                sum_to_op(broadcast_binary_op(g, b, "mul"), a),
                sum_to_op(broadcast_binary_op(g, a, "mul"), b),
            ]
        if kind == "div":
            num = broadcast_binary_op(mul_byconst_op(g, -1.0), a, "mul")
            return [
                sum_to_op(broadcast_binary_op(g, b, "div"), a),
                sum_to_op(broadcast_binary_op(num, broadcast_binary_op(b, b, "mul"), "div"), b),
            ]
        if kind in ("minimum", "maximum"):
            zeros = zeroslike_op(g)
            tie = broadcast_binary_op(a, b, "eq")
            split = where_op(tie, mul_byconst_op(g, 0.5), g)
            a_loses, b_loses = ("gt", "lt") if kind == "minimum" else ("lt", "gt")
            return [
                sum_to_op(where_op(broadcast_binary_op(a, b, a_loses), zeros, split), a),
                sum_to_op(where_op(broadcast_binary_op(a, b, b_loses), zeros, split), b),
            ]
        return [None, None]  # comparisons and logic: piecewise constant


class BroadcastWhereOp(Op):
    """``broadcast_where_op(cond, a, b)``: a where cond != 0, else b, the three broadcast together
    (numpy's rules, up to 8 dims, read in place). Gradients: none for cond, ``where(cond, g, 0)``
    summed to a's shape, ``where(cond, 0, g)`` summed to b's (PyTorch's)."""

    name, label, kernel = "broadcast_where_op", "Where", "broadcast_where"
    inputs = ("node_cond", "node_A", "node_B")

    def infer_shape(self, node, input_shapes):
        return _broadcast(self, node, input_shapes)

    def gradient(self, node, output_grad):
        cond, a, b = node.inputs
        zeros = zeroslike_op(output_grad)
        return [
            None,
            sum_to_op(broadcast_where_op(cond, output_grad, zeros), a),
            sum_to_op(broadcast_where_op(cond, zeros, output_grad), b),
        ]


def _repeats_into(op: Op, node: Node, small: tuple, big: tuple, verb: str, s: tuple, t: tuple):
    """Checks that ``small`` broadcasts to ``big`` (right-aligned, each dim equal or 1), at most
    8 dims; ValueError naming the op and "cannot <verb> s to t" otherwise (the message made only
    then: eager ops check shapes on every call)."""
    lead = len(big) - len(small)
    if lead < 0 or any(small[d] not in (1, big[lead + d]) for d in range(len(small))):
        raise op._error(node, f"cannot {verb} {shape_str(s)} to {shape_str(t)}")
    if len(big) > MAX_DIMS:
        raise op._error(node, f"{len(big)} dims {shape_str(big)}; at most {MAX_DIMS}")


def _sum_to_shape(op: Op, node: Node, s: tuple, t: tuple) -> tuple:
    _repeats_into(op, node, t, s, "sum", s, t)
    return tuple(t)


class SumToOp(Op):
    """``sum_to_op(x, like)``: x summed to like's shape (``Tensor.sum_to_size``): like's shape,
    right-aligned against x's, has each dim equal to x's or 1; the other dims are summed, each
    output in index order. Only like's shape is read. Gradient: ``expand_like_op(g, x)``."""

    name, label, kernel = "sum_to_op", "SumTo", "sum_to"
    inputs = ("node_x", "node_like")
    shape_only_inputs = (1,)

    def node_name(self, node):
        x, like = node.inputs
        return f"SumTo({short_name(x)},{short_name(like)}.shape)"

    def infer_shape(self, node, input_shapes):
        return _sum_to_shape(self, node, tuple(input_shapes[0]), tuple(input_shapes[1]))

    def gradient(self, node, output_grad):
        return [expand_like_op(output_grad, node.inputs[0]), None]


def _expand_strides(shape: tuple, target: tuple) -> tuple:
    lead = len(target) - len(shape)
    own = contiguous_strides(shape)
    return (0,) * lead + tuple(
        own[d] if shape[d] == target[lead + d] else 0 for d in range(len(shape))
    )


def _expand_compute(input_vals, output_val, device) -> None:
    x = input_vals[0]
    shape, target = tuple(x.shape), tuple(output_val.shape)
    kernels_for(device).as_strided(x, output_val, _expand_strides(shape, target), 0)


def _expand_shape(op: Op, node: Node, s: tuple, target: tuple) -> tuple:
    _repeats_into(op, node, s, target, "expand", s, target)
    return tuple(target)


class ExpandOp(Op):
    """``expand_op(x, shape)``: x repeated to ``shape`` (numpy's broadcasting rules, a new
    array: dims of 1 and new leading dims repeat). Gradient: ``sum_to_op(g, x)``."""

    name, label = "expand_op", "Expand"
    inputs = ("node_x",)
    attrs = (Attr("shape", as_int_tuple, type=tuple),)

    def node_name(self, node):
        return f"Expand({short_name(node.inputs[0])},{shape_str(node.shape)})"

    def compute(self, node, input_vals, output_val, device=None):
        _expand_compute(input_vals, output_val, device)

    def infer_shape(self, node, input_shapes):
        return _expand_shape(self, node, tuple(input_shapes[0]), tuple(node.shape))

    def gradient(self, node, output_grad):
        return [sum_to_op(output_grad, node.inputs[0])]


class ExpandLikeOp(Op):
    """``expand_like_op(x, like)``: x repeated to like's shape (only its shape is read).
    Gradient: ``sum_to_op(g, x)``."""

    name, label = "expand_like_op", "ExpandLike"
    inputs = ("node_x", "node_like")
    shape_only_inputs = (1,)

    def compute(self, node, input_vals, output_val, device=None):
        _expand_compute(input_vals, output_val, device)

    def infer_shape(self, node, input_shapes):
        return _expand_shape(self, node, tuple(input_shapes[0]), tuple(input_shapes[1]))

    def gradient(self, node, output_grad):
        return [sum_to_op(output_grad, node.inputs[0]), None]


def _seq(value, what: str, op: str) -> tuple:
    if not isinstance(value, (tuple, list)):
        raise TypeError(f"{op}: {what} must be a tuple, got {type(value).__name__}")
    return tuple(value)


def _region(op: Op, node: Node, numel: int, size: tuple, stride: tuple, offset: int, what: str):
    """Checks that the strided region (size, stride, offset) lies inside ``numel`` elements."""
    if len(stride) != len(size):
        raise op._error(
            node, f"{len(stride)} strides for the {len(size)} dims of {shape_str(size)}"
        )
    if len(size) > MAX_DIMS:
        raise op._error(node, f"{len(size)} dims {shape_str(size)}; at most {MAX_DIMS}")
    if any(d < 0 for d in size):
        raise op._error(node, f"negative size {shape_str(size)}")
    if math.prod(size) == 0:
        return
    lo = hi = offset
    for n, s in zip(size, stride, strict=True):
        if s < 0:
            lo += (n - 1) * s
        else:
            hi += (n - 1) * s
    if lo < 0 or hi >= numel:
        raise op._error(
            node,
            f"the region of size {shape_str(size)}, strides {tuple(stride)} and offset {offset} "
            f"reaches elements {lo}..{hi}, outside {what} of {numel} elements",
        )


class AsStridedOp(Op):
    """``as_strided_op(x, size, stride, offset=0)``: the elements a strided view of contiguous x
    would see (``torch.as_strided``), copied into a new array of ``size``. Gradient:
    ``as_strided_backward_op``: zeros of x's shape with g written at the view's addresses, which
    must be distinct (permutes, slices, flips; use :func:`expand_op` for repeats)."""

    name, label = "as_strided_op", "AsStrided"
    inputs = ("node_x",)
    attrs = (
        Attr("size", as_int_tuple, type=tuple),
        Attr("stride", as_int_tuple, type=tuple),
        Attr("offset", as_int, default=0, type=int),
    )

    def node_name(self, node):
        return f"AsStrided({short_name(node.inputs[0])},{shape_str(node.size)})"

    def compute(self, node, input_vals, output_val, device=None):
        kernels_for(device).as_strided(input_vals[0], output_val, node.stride, node.offset)

    def infer_shape(self, node, input_shapes):
        numel = math.prod(input_shapes[0])
        _region(self, node, numel, tuple(node.size), node.stride, node.offset, "the input")
        return tuple(node.size)

    def gradient(self, node, output_grad):
        x = node.inputs[0]
        return [as_strided_backward_op(output_grad, x, node.stride, node.offset)]


class AsStridedLikeOp(Op):
    """``as_strided_like_op(x, like, stride, offset=0)``: as :func:`as_strided_op` with like's
    shape as the size (only its shape is read). Gradient: ``as_strided_backward_op``."""

    name, label = "as_strided_like_op", "AsStridedLike"
    inputs = ("node_x", "node_like")
    attrs = (Attr("stride", as_int_tuple, type=tuple), Attr("offset", as_int, default=0, type=int))
    shape_only_inputs = (1,)

    def compute(self, node, input_vals, output_val, device=None):
        kernels_for(device).as_strided(input_vals[0], output_val, node.stride, node.offset)

    def infer_shape(self, node, input_shapes):
        numel = math.prod(input_shapes[0])
        size = tuple(input_shapes[1])
        _region(self, node, numel, size, node.stride, node.offset, "the input")
        return size

    def gradient(self, node, output_grad):
        x = node.inputs[0]
        return [as_strided_backward_op(output_grad, x, node.stride, node.offset), None]


class AsStridedBackwardOp(Op):
    """``as_strided_backward_op(g, like, stride, offset=0)``: an array of like's shape, zero but
    at the strided addresses, which hold g (g's shape is the region's; the addresses must be
    distinct). The gradient of :func:`as_strided_op`; its own gradient is g's view again."""

    name, label = "as_strided_backward_op", "AsStridedBackward"
    inputs = ("node_g", "node_like")
    attrs = (Attr("stride", as_int_tuple, type=tuple), Attr("offset", as_int, default=0, type=int))
    shape_only_inputs = (1,)

    def compute(self, node, input_vals, output_val, device=None):
        k = kernels_for(device)
        g = input_vals[0]
        # The addresses are distinct (checked by the scatter), so a region of the output's size
        # (a transpose's or permute's gradient) writes every element: no zeros needed.
        if math.prod(g.shape) != math.prod(output_val.shape):
            k.fill(output_val, 0.0)
        k.as_strided_scatter(g, output_val, node.stride, node.offset)

    def infer_shape(self, node, input_shapes):
        numel = math.prod(input_shapes[1])
        _region(self, node, numel, tuple(input_shapes[0]), node.stride, node.offset, "the output")
        return tuple(input_shapes[1])

    def gradient(self, node, output_grad):
        g = node.inputs[0]
        return [as_strided_like_op(output_grad, g, node.stride, node.offset), None]


class AsStridedScatterOp(Op):
    """``as_strided_scatter_op(base, src, stride, offset=0)``: a copy of base whose strided region
    (src's shape, distinct addresses) holds src (``torch.as_strided_scatter``): index assignment
    out of place. Gradients: g with the region zeroed for base, g's region for src."""

    name, label = "as_strided_scatter_op", "AsStridedScatter"
    inputs = ("node_base", "node_src")
    attrs = (Attr("stride", as_int_tuple, type=tuple), Attr("offset", as_int, default=0, type=int))

    def compute(self, node, input_vals, output_val, device=None):
        k = kernels_for(device)
        k.copy(input_vals[0], output_val)
        k.as_strided_scatter(input_vals[1], output_val, node.stride, node.offset)

    def infer_shape(self, node, input_shapes):
        base, src = (tuple(s) for s in input_shapes)
        _region(self, node, math.prod(base), src, node.stride, node.offset, "the base")
        return base

    def gradient(self, node, output_grad):
        src = node.inputs[1]
        g = output_grad
        cleared = as_strided_scatter_op(g, zeroslike_op(src), node.stride, node.offset)
        return [cleared, as_strided_like_op(g, src, node.stride, node.offset)]


def _cat_shape(op: Op, node: Node, shapes: list, dim: int) -> tuple:
    if not shapes:
        raise op._error(node, "expected a non-empty list of tensors")
    first = tuple(shapes[0])
    nd = len(first)
    if nd == 0:
        raise op._error(node, "zero-dimensional tensors cannot be concatenated")
    if not -nd <= dim < nd:
        raise op._error(node, f"dim {dim} is out of range for {nd}-d tensors")
    d = dim % nd
    total = 0
    for s in shapes:
        s = tuple(s)
        if len(s) != nd or s[:d] != first[:d] or s[d + 1 :] != first[d + 1 :]:
            shown = ", ".join(shape_str(t) for t in shapes)
            raise op._error(node, f"sizes must match except in dim {d}: {shown}")
        total += s[d]
    return first[:d] + (total,) + first[d + 1 :]


def _cat_region(shape: tuple, d: int, start: int):
    """The strides and offset of a slab [start, start + n) along dim d of a contiguous array."""
    strides = contiguous_strides(shape)
    return strides, start * strides[d]


class CatOp(Op):
    """``cat_op(nodes, dim)``: the nodes joined along ``dim`` (``torch.cat``): their shapes equal
    but in dim. Each input is written into its slab of the output (one strided copy each).
    Gradients: each input's slab of g (:func:`cat_slice_op`)."""

    name, label = "cat_op", "Cat"
    attrs = (Attr("dim", as_int, type=int),)

    def __call__(self, nodes, dim: int = 0) -> Node:
        if not isinstance(nodes, (list, tuple)):
            raise TypeError(
                f"cat_op: nodes must be a list of graph Nodes, got {type(nodes).__name__}"
            )
        for n in nodes:
            if not isinstance(n, Node):
                raise TypeError(f"cat_op: nodes must be graph Nodes, got {type(n).__name__}")
        node = Node(self, list(nodes), self._record(dim=as_int(dim, "dim", self.name)))
        node.name = f"Cat({','.join(short_name(n) for n in nodes)},dim={node.dim})"
        return node

    def compute(self, node, input_vals, output_val, device=None):
        k = kernels_for(device)
        out_shape = tuple(output_val.shape)
        d = node.dim % len(out_shape)
        start = 0
        for v in input_vals:
            _, offset = _cat_region(out_shape, d, start)
            k.as_strided_scatter(v, output_val, contiguous_strides(out_shape), offset)
            start += v.shape[d]

    def infer_shape(self, node, input_shapes):
        return _cat_shape(self, node, list(input_shapes), node.dim)

    def gradient(self, node, output_grad):
        return [
            cat_slice_op(output_grad, node.inputs, k, node.dim) for k in range(len(node.inputs))
        ]


class AssembleOp(Op):
    """``assemble_op(nodes, shape, strides, offsets)``: an array of ``shape`` whose strided regions
    (node k's shape, ``strides[k]``, ``offsets[k]``) hold the nodes, one strided copy each. The
    regions must be disjoint and cover the array, so that every element is written: the fusion
    pass checks it when it makes this op (rule ``split_gradient``) from the sum of the nodes'
    ``as_strided_backward_op`` arrays, the gradient of views of one array that tile it (a
    transformer's q, k and v heads of one projection): one write of the whole instead of a
    zero-filled whole per view and their sums."""

    name, label = "assemble_op", "Assemble"
    no_gradient = "made by the fusion pass, after gradients"
    attrs = (
        Attr("shape", as_int_tuple, type=tuple),
        Attr(
            "strides",
            lambda v, w, op: tuple(
                as_int_tuple(s, "an element of " + w, op) for s in _seq(v, w, op)
            ),
            type=tuple,
        ),
        Attr("offsets", as_int_tuple, type=tuple),
    )

    def __call__(self, nodes, shape, strides, offsets) -> Node:
        nodes = list(nodes)
        if not nodes or not all(isinstance(n, Node) for n in nodes):
            raise TypeError("assemble_op: nodes must be a non-empty list of graph Nodes")
        values = (shape, strides, offsets)
        attrs = {
            a.name: a.check(v, a.name, self.name) for a, v in zip(self.attrs, values, strict=True)
        }
        if not len(attrs["strides"]) == len(attrs["offsets"]) == len(nodes):
            raise ValueError(f"{self.name}: one stride tuple and one offset per node")
        node = Node(self, nodes, self._record(**attrs))
        node.name = f"Assemble({','.join(short_name(n) for n in nodes)})"
        return node

    def compute(self, node, input_vals, output_val, device=None):
        k = kernels_for(device)
        for v, stride, offset in zip(input_vals, node.strides, node.offsets, strict=True):
            k.as_strided_scatter(v, output_val, stride, offset)

    def infer_shape(self, node, input_shapes):
        numel = math.prod(node.shape)
        for size, stride, offset in zip(input_shapes, node.strides, node.offsets, strict=True):
            _region(self, node, numel, tuple(size), stride, offset, "the output")
        return node.shape


class CatSliceOp(Op):
    """``cat_slice_op(g, nodes, index, dim)``: the slab of g (the gradient of ``cat_op(nodes,
    dim)``) that input ``index`` filled; the nodes are read for their shapes only."""

    name, label = "cat_slice_op", "CatSlice"
    attrs = (Attr("index", as_int, type=int), Attr("dim", as_int, type=int))

    def __call__(self, g, nodes, index: int, dim: int) -> Node:
        inputs = [g, *nodes]
        node = Node(self, inputs, self._record(index=int(index), dim=int(dim)))
        node.name = f"CatSlice({short_name(g)},{index})"
        return node

    @property
    def shape_only_inputs(self):  # every input but g
        return _ALL_BUT_FIRST

    def compute(self, node, input_vals, output_val, device=None):
        g = input_vals[0]
        shape = tuple(g.shape)
        d = node.dim % len(shape)
        start = sum(v.shape[d] for v in input_vals[1 : 1 + node.index])
        strides, offset = _cat_region(shape, d, start)
        kernels_for(device).as_strided(g, output_val, strides, offset)

    def infer_shape(self, node, input_shapes):
        _cat_shape(self, node, list(input_shapes[1:]), node.dim)
        return tuple(input_shapes[1 + node.index])

    def gradient(self, node, output_grad):
        raise NotImplementedError("cat_slice_op: second derivatives of cat")


class _AllButFirst:
    """A container of every position but 0 (CatSliceOp's shape-only inputs, any count)."""

    def __contains__(self, k) -> bool:
        return k != 0

    def __iter__(self):
        raise TypeError("the shape-only inputs of cat_slice_op are every input but the first")


_ALL_BUT_FIRST = _AllButFirst()

broadcast_binary_op = BroadcastBinaryOp()
broadcast_where_op = BroadcastWhereOp()
sum_to_op = SumToOp()
expand_op = ExpandOp()
expand_like_op = ExpandLikeOp()
as_strided_op = AsStridedOp()
as_strided_like_op = AsStridedLikeOp()
as_strided_backward_op = AsStridedBackwardOp()
as_strided_scatter_op = AsStridedScatterOp()
cat_op = CatOp()
assemble_op = AssembleOp()
cat_slice_op = CatSliceOp()


def _pads(value, what: str, op: str) -> tuple:
    """((before, after), ...) one pair of ints >= 0 per dim."""
    if not isinstance(value, (tuple, list)):
        raise TypeError(f"{op}: {what} must be a tuple of (before, after) pairs")
    pairs = []
    for pair in value:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(f"{op}: {what} must be a tuple of (before, after) pairs, got {value!r}")
        lo, hi = (as_int(v, f"an element of {what}", op) for v in pair)
        if lo < 0 or hi < 0:
            raise ValueError(f"{op}: {what} must be >= 0 (crop first), got {value!r}")
        pairs.append((lo, hi))
    return tuple(pairs)


def _pad_offset(pad: tuple, out_shape: tuple) -> tuple:
    """(the padded array's strides, the element offset of x's first element in it)."""
    strides = contiguous_strides(out_shape)
    return strides, sum(lo * s for (lo, _), s in zip(pad, strides, strict=True))


def _pad_rank(op: Op, node: Node, x: tuple) -> None:
    if len(node.pad) != len(x):
        raise op._error(node, f"{len(node.pad)} (before, after) pairs for x {shape_str(x)}")
    if len(x) > MAX_DIMS:
        raise op._error(node, f"{len(x)} dims {shape_str(x)}; at most {MAX_DIMS}")


class ConstantPadOp(Op):
    """``constant_pad_op(x, pad, value=0.0)``: x (any rank up to 8) inside a border of ``value``,
    ``pad`` one (before, after) pair of ints >= 0 per dim of x, in dim order: the output is
    x.shape[d] + before + after long in dim d. Computed by a fill and one ``as_strided_scatter``
    of x into the interior. Gradient: ``constant_pad_gradient_op(g, x, pad)``, the interior of g
    (one ``as_strided`` gather)."""

    name, label = "constant_pad_op", "ConstantPad"
    inputs = ("node_x",)
    attrs = (Attr("pad", _pads, type=tuple), Attr("value", as_real, 0.0, float))

    def node_name(self, node):
        return f"ConstantPad({short_name(node.inputs[0])},{node.pad},{node.value!r})"

    def compute(self, node, input_vals, output_val, device=None):
        k = kernels_for(device)
        x = input_vals[0]
        k.fill(output_val, node.value)
        if math.prod(x.shape):
            strides, offset = _pad_offset(node.pad, tuple(output_val.shape))
            k.as_strided_scatter(x, output_val, strides, offset)

    def infer_shape(self, node, input_shapes):
        x = tuple(input_shapes[0])
        _pad_rank(self, node, x)
        return tuple(d + lo + hi for d, (lo, hi) in zip(x, node.pad, strict=True))

    def gradient(self, node, output_grad):
        return [constant_pad_gradient_op(output_grad, node.inputs[0], node.pad)]


class ConstantPadGradientOp(Op):
    """``constant_pad_gradient_op(g, x, pad)``: the interior of g (the padded shape) that x filled,
    of x's shape (only x's shape is read): one ``as_strided`` gather. Linear: its gradient is
    ``constant_pad_op(gg, pad, 0.0)``."""

    name, label = "constant_pad_gradient_op", "ConstantPadGrad"
    inputs = ("node_g", "node_x")
    shape_only_inputs = (1,)
    attrs = (Attr("pad", _pads, type=tuple),)

    def compute(self, node, input_vals, output_val, device=None):
        if math.prod(output_val.shape):
            strides, offset = _pad_offset(node.pad, tuple(input_vals[0].shape))
            kernels_for(device).as_strided(input_vals[0], output_val, strides, offset)

    def infer_shape(self, node, input_shapes):
        g, x = (tuple(s) for s in input_shapes)
        _pad_rank(self, node, x)
        want = tuple(d + lo + hi for d, (lo, hi) in zip(x, node.pad, strict=True))
        if g != want:
            raise self._error(node, f"g has shape {shape_str(g)}, expected {shape_str(want)}")
        return x

    def gradient(self, node, output_grad):
        return [constant_pad_op(output_grad, node.pad, 0.0), None]


constant_pad_op = ConstantPadOp()
constant_pad_gradient_op = ConstantPadGradientOp()
