"""Tensor's reductions: ``sum``, ``mean``, ``max`` and ``argmax``, over all elements or along
dims, with the range checks that keep int64 sums exact.

One topic of the class, apart so that each file stays readable; :mod:`gpumat.tensor` adds
``ReductionMethods``' methods to :class:`gpumat.Tensor`.
"""

from __future__ import annotations

import collections
import math

import numpy as np

from gpumat.autograd import current_trace
from gpumat.dtypes import EXACT_INT, float32, int64
from gpumat.graph.reduce import argmax_op, reduce_max_op, reduce_mean_op, reduce_sum_op
from gpumat.tensor._tensor import Tensor, _require_float, apply_op

# Named from gpumat.tensor, where it was made before the split: type(x.max(1)) reads the same.
_MaxResult = collections.namedtuple("max", ["values", "indices"], module="gpumat.tensor")


class ReductionMethods:
    """The reductions of Tensor."""

    # ---------------------------------------------------------------- reductions

    def _reduce(self, name: str, op, dim, keepdim: bool, out_dtype, bounds=None):
        if not isinstance(keepdim, (bool, np.bool_)):
            raise TypeError(f"{name}: keepdim must be a bool, got {keepdim!r}")
        if dim is None:
            flat = self.reshape(-1)
            out = apply_op(name, lambda n: op(n, 0), [flat], out_dtype, bounds)
            return out.reshape((1,) * self.ndim) if keepdim else out
        dims = dim if isinstance(dim, (tuple, list)) else (dim,)
        axes = sorted({self._axis(d, name) for d in dims}, reverse=True)
        if self.ndim == 0:  # PyTorch reduces a 0-d tensor along dim 0 or -1: itself, as (1,)
            flat = self.reshape(1)
            return apply_op(name, lambda n: op(n, 0), [flat], out_dtype, bounds)
        out = self
        for a in axes:  # from the last axis, so the earlier axes keep their numbers
            out = apply_op(name, lambda n, a=a: op(n, a, bool(keepdim)), [out], out_dtype, bounds)
        return out

    def sum(self, dim=None, keepdim: bool = False) -> Tensor:
        """The sum over all elements (``dim=None``) or along ``dim`` (an int or a tuple of ints),
        keeping the summed axes as length 1 when ``keepdim``. A float32 sum in index order.
        Sums of int64 and bool tensors are int64 and must stay within 2**24 in magnitude (else
        ValueError: they would round)."""
        if self._dtype is float32:
            return self._reduce("sum", reduce_sum_op, dim, keepdim, float32)
        n = self.numel() if dim is None else self._reduced_count(dim)
        lo, hi = self._range
        bound = n * max(abs(lo), abs(hi))
        if bound > EXACT_INT:
            raise ValueError(
                f"sum: the sum of {n} values in [{lo}, {hi}] may exceed 2**24 in magnitude, "
                f"beyond what an {self._dtype} tensor holds exactly (convert with .float())"
            )
        limit = EXACT_INT // max(n, 1)
        trace = current_trace()
        if self._range_src is not None:  # an argument of a compiled step: checked on every call
            self._trace.guard_range(self._range_src, -limit, limit, "sum", ValueError)
        elif self._trace is None and trace is not None:  # a tensor the step reads
            trace.guard_range(self, -limit, limit, "sum", ValueError)
        bounds = (min(0, n * lo), max(0, n * hi))
        return self._reduce("sum", reduce_sum_op, dim, keepdim, int64, bounds)

    def _reduced_count(self, dim) -> int:
        dims = dim if isinstance(dim, (tuple, list)) else (dim,)
        return math.prod(self._shape[self._axis(d, "sum")] for d in set(dims))

    def mean(self, dim=None, keepdim: bool = False) -> Tensor:
        """The mean over all elements or along ``dim`` (float32 only, as PyTorch)."""
        _require_float("mean", self)
        return self._reduce("mean", reduce_mean_op, dim, keepdim, float32)

    def max(self, dim=None, keepdim: bool = False):
        """``max()``: the largest element (0-d). ``max(dim, keepdim=False)``: a named tuple
        ``(values, indices)`` along ``dim``, the indices an int64 tensor (``argmax``).

        Gradient: the output gradient is split equally among tied maxima (PyTorch's ``amax``
        and full ``max()``; its ``max(dim)`` sends it to one of them: the same for distinct
        values). NaN counts as the maximum.
        """
        if dim is None:
            out = self._reduce("max", reduce_max_op, None, False, self._dtype, self._range)
            out._range_src = self._range_src
            return out
        if isinstance(dim, (tuple, list)):
            raise TypeError("max: dim must be an int (use amax for several dims)")
        values = self._reduce("max", reduce_max_op, dim, keepdim, self._dtype, self._range)
        values._range_src = self._range_src
        return _MaxResult(values, self.argmax(dim, keepdim))

    def argmax(self, dim=None, keepdim: bool = False) -> Tensor:
        """The index of the largest element (int64): over the flattened tensor (``dim=None``) or
        along ``dim``. The first maximum wins; NaN counts as the maximum (PyTorch's rules)."""
        if not isinstance(keepdim, (bool, np.bool_)):
            raise TypeError(f"argmax: keepdim must be a bool, got {keepdim!r}")
        if dim is None:
            flat = self.reshape(-1)
            n = flat._shape[0]
            out = apply_op("argmax", lambda x: argmax_op(x, 0), [flat], int64, (0, max(n - 1, 0)))
            out = out if not keepdim else out.reshape((1,) * self.ndim)
            return out
        axis = self._axis(dim, "argmax")
        n = self._shape[axis]
        return apply_op(
            "argmax",
            lambda x: argmax_op(x, axis, bool(keepdim)),
            [self],
            int64,
            (0, max(n - 1, 0)),
            False,
        )
