"""Broadcasting for the front end's binary ops: the one pattern with a kernel of its own.

Tensors of two shapes broadcast by numpy's rules in any rank through
:func:`gpumat.graph.strided.broadcast_binary_op`, which reads the repeated operand in place (no
copy) and sums its gradient back to the operand's shape. One pattern has a faster fused kernel:
``x + b`` with b of shape (C, 1, ..., 1) over x of shape (N, C, H, ...), a convolution's channel
bias (``add_channel_bias_op``, whose gradient is one channel reduction). :mod:`gpumat.tensor`
applies what this module decides.
"""

from __future__ import annotations

__all__ = ["channel_bias"]


def channel_bias(sa: tuple, sb: tuple) -> int | None:
    """The operand (0 or 1) that is a channel bias of the other, or None: shape (C, 1, ..., 1)
    over (N, C, H, ...), one rank less (a convolution's bias added to its output)."""
    for which, (sx, sy) in ((1, (sa, sb)), (0, (sb, sa))):
        is_channel = len(sx) >= 3 and len(sy) == len(sx) - 1 and sy[0] == sx[1]
        if is_channel and all(d == 1 for d in sy[1:]) and sy != sx[1:]:
            return which
    return None
