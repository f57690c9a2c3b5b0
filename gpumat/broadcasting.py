"""Broadcasting for the front end's binary ops (``+ - * / ==`` between tensors): shapes only.

numpy's rules where a graph op exists for the pair: the result must have one operand's shape, and
the other operand must reach it by repeating over leading dims (``broadcastto_op``: a (C,) bias
over (N, C)) or along one dim (``broadcast_axis_op``: (N, 1) over (N, C)); ``x + b`` with b of
shape (C, 1, 1) over (N, C, H, W) is a channel bias (``add_channel_bias_op``). Other pairs are a
ValueError naming the op and the shapes. The repeat is a graph op, so its gradient sums back to the
operand's shape by that op's own ``gradient``. :mod:`gpumat.tensor` applies what this module
decides.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from gpumat.graph.node import shape_str
from gpumat.graph.reduce import broadcast_axis_op, broadcastto_op

__all__ = ["channel_bias", "expanded_operand", "expansion"]


def _strip_leading_ones(shape: tuple) -> tuple:
    i = 0
    while i < len(shape) and shape[i] == 1:
        i += 1
    return shape[i:]


def expanded_operand(op: str, sa: tuple, sb: tuple) -> int | None:
    """Which operand of shapes ``sa`` and ``sb`` is repeated to the other's shape: 0, 1, or None
    when the shapes are equal.

    Raises:
        ValueError: the shapes do not broadcast, or broadcast to the shape of neither (gpumat
            repeats one operand to the other's shape), naming ``op`` and the shapes.
    """
    if sa == sb:
        return None
    try:
        out = tuple(np.broadcast_shapes(sa, sb))
    except ValueError:
        raise ValueError(
            f"{op}: shapes {shape_str(sa)} and {shape_str(sb)} cannot be broadcast together"
        ) from None
    if out == sa:
        return 1
    if out == sb:
        return 0
    raise ValueError(
        f"{op}: shapes {shape_str(sa)} and {shape_str(sb)} broadcast to {shape_str(out)}, the "
        "shape of neither; gpumat broadcasts one operand to the other's shape (expand one first)"
    )


def expansion(op: str, shape: tuple, target: tuple) -> tuple[tuple, Callable]:
    """``(padded, make)``: an operand of ``shape`` reaches ``target`` as ``make(x, like)`` of the
    operand reshaped to ``padded`` (``shape`` itself, or ``shape`` with leading 1s: one rank with
    ``target``), ``like`` being the other operand: over leading dims (``broadcastto_op``) or along
    one dim (``broadcast_axis_op``).

    Raises:
        ValueError: any other pair (it would need several dims repeated), naming ``op``.
    """
    if target[len(target) - len(_strip_leading_ones(shape)) :] == _strip_leading_ones(shape):
        return shape, broadcastto_op
    padded = (1,) * (len(target) - len(shape)) + tuple(shape)
    differ = [i for i in range(len(target)) if padded[i] != target[i]]
    if len(differ) == 1:
        k = differ[0]
        return padded, lambda g, ref: broadcast_axis_op(g, ref, k)
    raise ValueError(
        f"{op}: gpumat broadcasts {shape_str(shape)} to {shape_str(target)} over leading axes or "
        f"along one axis only; this needs axes {differ} (expand it first)"
    )


def channel_bias(sa: tuple, sb: tuple) -> int | None:
    """The operand (0 or 1) that is a channel bias of the other, or None: shape (C, 1, ..., 1)
    over (N, C, H, ...), one rank less (a convolution's bias added to its output)."""
    for which, (sx, sy) in ((1, (sa, sb)), (0, (sb, sa))):
        is_channel = len(sx) >= 3 and len(sy) == len(sx) - 1 and sy[0] == sx[1]
        if is_channel and all(d == 1 for d in sy[1:]) and sy != sx[1:]:
            return which
    return None
