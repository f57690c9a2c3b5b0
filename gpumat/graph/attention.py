"""Fused scaled dot-product attention as graph ops, with the gradient op.

- ``attention_op(q, k, v, scale, causal=False)``: q (batch, l, e), k (batch, s, e), v (batch, s,
  ev) with e, ev <= 128 give (batch, l, ev + 1): per query row softmax(scale q k^T) v and, last,
  the row's logsumexp, which the gradient reads instead of recomputing the softmax statistics
  (the front end's :func:`gpumat.nn.functional.scaled_dot_product_attention` takes the first ev
  columns). Kernel: :func:`gpumat.ops.attention`, FlashAttention-2's tiling (Dao, "FlashAttention-2:
  Faster Attention with Better Parallelism and Work Partitioning", 2023): the (l, s) score matrix
  is never stored.
- ``attention_gradient_op(q, k, v, out, dout, scale, causal)``: (q.size + k.size + v.size,) =
  dq, dk, dv flattened one after the other (a node has one value); ``attention_op``'s gradient
  takes each back with ``attention_part_op`` (eagerly a view of it; in a compiled step one
  ``as_strided`` copy, or one gather of all three by the fusion pass). Kernel:
  :func:`gpumat.ops.attention_gradient`.

- ``attention_strided_op(qkv, batch, heads, lengths, offsets, strides, scale, causal=False)``: the
  same attention over q, k, v read where they lie in one value qkv (the heads of a fused q/k/v
  projection, ``x.view(B, T, H, D).transpose(1, 2)`` of its three column blocks), no copies; its
  gradient ``attention_strided_gradient_op(qkv, out, dout, ...)`` is qkv's shape, dq, dk, dv in
  place of q, k, v. Kernels: :func:`gpumat.ops.attention_strided` and
  :func:`gpumat.ops.attention_strided_gradient`.

A graph node has one value, so the forward's logsumexp travels as the output's last column and the
three gradients as one flat array (of the contiguous op) or as qkv's gradient (of the strided one).
"""

from __future__ import annotations

import math

from gpumat._checks import as_flag, as_int, as_int_tuple, as_real
from gpumat.graph.node import Attr, Op, kernels_for, shape_str, short_name
from gpumat.graph.strided import contiguous_strides
from gpumat.reference import attention_strided_regions, attention_strided_written_once

__all__ = [
    "AttentionGradientOp",
    "AttentionOp",
    "AttentionPartOp",
    "AttentionStridedGradientOp",
    "AttentionStridedOp",
    "MAX_HEAD_DIM",
    "attention_gradient_op",
    "attention_op",
    "attention_part_op",
    "attention_strided_gradient_op",
    "attention_strided_op",
]

#: The largest head dim (e and ev) the fused kernels take.
MAX_HEAD_DIM = 128


def _scale(value, what, op) -> float:
    s = as_real(value, what, op)
    if not math.isfinite(s):
        raise ValueError(f"{op}: {what} must be finite, got {value!r}")
    return s


_ATTRS = (Attr("scale", _scale, type=float), Attr("causal", as_flag, False, bool))


def _dims(op: Op, node, shapes) -> tuple:
    q, k, v = (tuple(s) for s in shapes[:3])
    given = f"q {shape_str(q)}, k {shape_str(k)}, v {shape_str(v)}"
    if len(q) != 3 or len(k) != 3 or len(v) != 3:
        raise op._error(node, f"q, k, v must be 3-D (batch, length, head dim), got {given}")
    if k[0] != q[0] or v[0] != q[0] or k[2] != q[2] or v[1] != k[1]:
        raise op._error(
            node, f"expected q (batch, l, e), k (batch, s, e), v (batch, s, ev), got {given}"
        )
    if q[2] > MAX_HEAD_DIM or v[2] > MAX_HEAD_DIM:
        raise op._error(node, f"head dims must be at most {MAX_HEAD_DIM}, got {given}")
    return q, k, v


class AttentionOp(Op):
    """``attention_op(q, k, v, scale, causal=False)``: (batch, l, ev + 1), per query row
    softmax(scale q k^T) v (causal: key j > query i masked, top-left aligned) and its logsumexp
    last. Gradient: one ``attention_gradient_op`` and three ``attention_part_op`` slices of it.
    ValueError for shapes that do not fit or a head dim over 128."""

    name, label, kernel = "attention_op", "Attention", "attention"
    inputs = ("node_q", "node_k", "node_v")
    attrs = _ATTRS

    def node_name(self, node):
        q, k, v = (short_name(i) for i in node.inputs)
        return f"Attention({q},{k},{v}{',causal' if node.causal else ''})"

    def kernel_args(self, node):
        return (node.scale, node.causal)

    def gradient(self, node, output_grad):
        q, k, v = node.inputs
        g = attention_gradient_op(q, k, v, node, output_grad, node.scale, node.causal)
        return [attention_part_op(g, q, k, v, i) for i in range(3)]

    def infer_shape(self, node, input_shapes):
        q, _, v = _dims(self, node, input_shapes)
        return (q[0], q[1], v[2] + 1)


class AttentionGradientOp(Op):
    """``attention_gradient_op(q, k, v, out, dout, scale, causal=False)``: (q.size + k.size +
    v.size,), dq, dk and dv flattened one after the other, from the forward's ``out`` and
    ``dout`` (both (batch, l, ev + 1))."""

    name, label, kernel = "attention_gradient_op", "AttentionGrad", "attention_gradient"
    no_gradient = "second derivatives of attention"
    inputs = ("node_q", "node_k", "node_v", "node_out", "node_dout")
    attrs = _ATTRS

    def kernel_args(self, node):
        return (node.scale, node.causal)

    def infer_shape(self, node, input_shapes):
        q, k, v = _dims(self, node, input_shapes)
        out, dout = (tuple(s) for s in input_shapes[3:])
        want = (q[0], q[1], v[2] + 1)
        if out != want or dout != want:
            raise self._error(
                node,
                f"out {shape_str(out)} and dout {shape_str(dout)} must be {shape_str(want)}",
            )
        return (math.prod(q) + math.prod(k) + math.prod(v),)


class AttentionPartOp(Op):
    """``attention_part_op(g, q, k, v, index)``: dq, dk or dv (index 0, 1, 2; the shape of q, k
    or v) out of the flat ``attention_gradient_op`` value g: eagerly a view of g's elements, in
    the executor one ``as_strided`` copy."""

    name, label = "attention_part_op", "AttentionPart"
    no_gradient = "second derivatives of attention"
    inputs = ("node_g", "node_q", "node_k", "node_v")
    shape_only_inputs = (1, 2, 3)
    attrs = (Attr("index", lambda i, _n, _op: int(i), type=int),)

    # Eagerly a view of g's elements (backward reads each part once and never writes it); the
    # executor copies it into its planned buffer (or the fusion pass gathers all three at once).
    view_of_input = True

    def view_offset(self, node, input_shapes):
        return sum(math.prod(s) for s in input_shapes[1 : 1 + node.index])

    def compute(self, node, input_vals, output_val, device=None):
        shapes = [tuple(v.shape) for v in input_vals]
        strides = contiguous_strides(shapes[1 + node.index])
        kernels_for(device).as_strided(
            input_vals[0], output_val, strides, self.view_offset(node, shapes)
        )

    def infer_shape(self, node, input_shapes):
        return tuple(input_shapes[1 + node.index])


attention_op = AttentionOp()
attention_gradient_op = AttentionGradientOp()
attention_part_op = AttentionPartOp()


def _ints(n: int):
    def check(value, what, op):
        t = as_int_tuple(value, what, op)
        if len(t) != n:
            raise ValueError(f"{op}: {what} must be {n} integers, got {t}")
        return t

    return check


_STRIDED_ATTRS = (
    Attr("batch", as_int, type=int),
    Attr("heads", as_int, type=int),
    Attr("lengths", _ints(4), type=tuple),  # (l, s, e, ev)
    Attr("offsets", _ints(3), type=tuple),  # of q, k, v in qkv
    Attr("strides", _ints(3), type=tuple),  # (batch, head, row)
    *_ATTRS,
)


def _strided_out(op: Op, node, qkv_shape) -> tuple:
    """The forward's (batch * heads, l, ev + 1), after the regions' checks (ValueError)."""
    lq, _, e, ev = node.lengths
    if max(e, ev) > MAX_HEAD_DIM:
        raise op._error(node, f"head dims must be at most {MAX_HEAD_DIM}, got e {e}, ev {ev}")
    try:
        attention_strided_regions(
            op.name, math.prod(qkv_shape), node.batch, node.heads, node.lengths, node.offsets,
            node.strides,
        )  # fmt: skip
    except ValueError as exc:
        message = str(exc).removeprefix(f"{op.name}: ")
        raise op._error(node, f"{message} (qkv {shape_str(qkv_shape)})") from None
    return (node.batch * node.heads, lq, ev + 1)


class AttentionStridedOp(Op):
    """``attention_strided_op(qkv, batch, heads, lengths, offsets, strides, scale, causal=False)``:
    :class:`AttentionOp`'s (batch * heads, l, ev + 1) output over q, k, v read in place from qkv
    (``lengths`` (l, s, e, ev), ``offsets`` of q, k, v, ``strides`` (batch, head, row) in
    elements; :func:`gpumat.ops.attention_strided`). Gradient: one
    ``attention_strided_gradient_op``, qkv's shape. ValueError for regions outside qkv."""

    name, label, kernel = "attention_strided_op", "AttentionStrided", "attention_strided"
    inputs = ("node_qkv",)
    attrs = _STRIDED_ATTRS

    def node_name(self, node):
        return f"AttentionStrided({short_name(node.inputs[0])}{',causal' if node.causal else ''})"

    def kernel_args(self, node):
        return (node.heads, node.lengths, node.offsets, node.strides, node.scale, node.causal)

    def gradient(self, node, output_grad):
        (qkv,) = node.inputs
        return [
            attention_strided_gradient_op(
                qkv,
                node,
                output_grad,
                node.batch,
                node.heads,
                node.lengths,
                node.offsets,
                node.strides,
                node.scale,
                node.causal,
            )
        ]

    def infer_shape(self, node, input_shapes):
        return _strided_out(self, node, tuple(input_shapes[0]))


class AttentionStridedGradientOp(Op):
    """``attention_strided_gradient_op(qkv, out, dout, batch, heads, lengths, offsets, strides,
    scale, causal=False)``: qkv's shape, dq, dk and dv where q, k and v lie and zeros elsewhere
    (:func:`gpumat.ops.attention_strided_gradient`). ValueError where the regions could share
    an element."""

    name, label = "attention_strided_gradient_op", "AttentionStridedGrad"
    kernel = "attention_strided_gradient"
    no_gradient = "second derivatives of attention"
    inputs = ("node_qkv", "node_out", "node_dout")
    attrs = _STRIDED_ATTRS

    def kernel_args(self, node):
        return (node.heads, node.lengths, node.offsets, node.strides, node.scale, node.causal)

    def infer_shape(self, node, input_shapes):
        qkv, out, dout = (tuple(s) for s in input_shapes)
        want = _strided_out(self, node, qkv)
        if out != want or dout != want:
            raise self._error(
                node,
                f"out {shape_str(out)} and dout {shape_str(dout)} must be {shape_str(want)}",
            )
        args = (node.batch, node.heads, node.lengths, node.offsets, node.strides)
        if not attention_strided_written_once(*args):
            raise self._error(
                node,
                f"q, k and v must lie side by side in qkv's rows (offsets {node.offsets}, "
                f"strides {node.strides})",
            )
        return qkv


attention_strided_op = AttentionStridedOp()
attention_strided_gradient_op = AttentionStridedGradientOp()
