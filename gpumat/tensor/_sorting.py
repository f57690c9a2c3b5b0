"""Tensor's sorting: ``sort``, ``argsort`` and ``topk`` along a dim, with PyTorch's names and
results (named tuples ``(values, indices)``, int64 indices).

One topic of the class, apart so that each file stays readable; :mod:`gpumat.tensor` adds
``SortingMethods``' methods to :class:`gpumat.Tensor`. Each is ``argsort_op`` (the indices) and
``gather_op`` (the values, whose gradient sends dy back to the sorted positions). The order is
always the stable one (ties keep their index order; ``torch.sort(stable=True)``) and a NaN sorts
as the largest value, so results are the same on every device and run.
"""

from __future__ import annotations

import collections
import numbers

import numpy as np

from gpumat.dtypes import int64
from gpumat.graph.sort import argsort_op, gather_op
from gpumat.tensor._tensor import Tensor, apply_op

# Named as PyTorch's (torch.return_types.sort / topk), from gpumat.tensor.
_SortResult = collections.namedtuple("sort", ["values", "indices"], module="gpumat.tensor")
_TopkResult = collections.namedtuple("topk", ["values", "indices"], module="gpumat.tensor")


def _flag(value, name: str, op: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{op}: {name} must be a bool, got {value!r}")
    return bool(value)


class SortingMethods:
    """The sorting methods of Tensor."""

    def _sorted(self, op: str, dim, descending: bool, k):
        """(values, indices) of the first k (None: all) along dim in sorted order."""
        x = self.reshape(1) if self.ndim == 0 else self  # PyTorch sorts a 0-d tensor as (1,)
        axis = x._axis(dim, op)
        n = x._shape[axis]
        kk = -1 if k is None else k
        indices = apply_op(
            op,
            lambda v: argsort_op(v, axis, descending, kk),
            [x],
            int64,
            (0, max(n - 1, 0)),
            False,
        )
        values = apply_op(op, lambda v, i: gather_op(v, i, axis), [x, indices], x._dtype, x._range)
        values._range_src = getattr(x, "_range_src", None)
        if self.ndim == 0:
            return values.reshape(()), indices.reshape(())
        return values, indices

    def sort(self, dim: int = -1, descending: bool = False, stable: bool = False):
        """A named tuple ``(values, indices)``: the elements along ``dim`` in ascending order
        (descending when ``descending``) and their positions (int64), as ``torch.sort``.

        The order is always the stable one (ties keep their index order), whatever ``stable``
        says, so results are deterministic; a NaN sorts as the largest value (PyTorch's rule).
        Shapes: both of the input's shape. Gradient: the values' gradient goes back to the
        positions the indices name. Any dtype (float32, int64, bool); no ``out=``.

        Raises:
            IndexError: dim out of range. TypeError: a non-int dim or non-bool flag. ValueError:
                a dim longer than 2**24 (indices would not be exact).
        """
        _flag(stable, "stable", "sort")
        values, indices = self._sorted("sort", dim, _flag(descending, "descending", "sort"), None)
        return _SortResult(values, indices)

    def argsort(self, dim: int = -1, descending: bool = False, stable: bool = False) -> Tensor:
        """The positions (int64, the input's shape) that sort the tensor along ``dim``:
        ``sort(dim, descending).indices`` (``torch.argsort``; always the stable order, NaN the
        largest). Not differentiable.

        Raises:
            IndexError: dim out of range. TypeError: a non-int dim or non-bool flag.
        """
        _flag(stable, "stable", "argsort")
        x = self.reshape(1) if self.ndim == 0 else self
        axis = x._axis(dim, "argsort")
        n = x._shape[axis]
        desc = _flag(descending, "descending", "argsort")
        out = apply_op(
            "argsort", lambda v: argsort_op(v, axis, desc), [x], int64, (0, max(n - 1, 0)), False
        )
        return out.reshape(()) if self.ndim == 0 else out

    def topk(self, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):  # noqa: A002
        """A named tuple ``(values, indices)``: the ``k`` largest elements along ``dim`` (the
        smallest when not ``largest``) and their positions (int64), as ``torch.topk``; the
        input's shape with length k along ``dim``.

        Always in sorted order (``sorted=False`` allows any order in PyTorch; this one is
        sorted) with ties in index order, a NaN the largest value. Gradient: dy goes back to
        the chosen positions, zeros elsewhere.

        Raises:
            TypeError: a non-int k or dim, a non-bool flag. IndexError: dim out of range.
            ValueError: k outside [0, size of dim] (naming topk and the shape).
        """
        if not isinstance(k, numbers.Integral) or isinstance(k, (bool, np.bool_)):
            raise TypeError(f"topk: k must be an int, got {k!r}")
        _flag(sorted, "sorted", "topk")
        desc = _flag(largest, "largest", "topk")
        axis = (self.reshape(1) if self.ndim == 0 else self)._axis(dim, "topk")
        n = self._shape[axis] if self.ndim else 1
        if not 0 <= int(k) <= n:
            raise ValueError(
                f"topk: k = {int(k)} is out of range for dim {axis} of size {n} (shape "
                f"{tuple(self._shape)})"
            )
        values, indices = self._sorted("topk", dim, desc, int(k))
        return _TopkResult(values, indices)
