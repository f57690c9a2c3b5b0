"""Tensor's shape methods: ``reshape``, ``view``, ``view_as``, ``flatten``, ``squeeze``,
``unsqueeze`` (views: they share the storage, or, of a view, show its base as
:mod:`gpumat.tensor._views` does), and ``tril`` / ``triu``.

One topic of the class, apart so that each file stays readable; :mod:`gpumat.tensor` adds
``LayoutMethods``' methods to :class:`gpumat.Tensor`.
"""

from __future__ import annotations

import math

from gpumat._checks import as_int
from gpumat.graph.layout import reshape_op, tril_op, triu_op
from gpumat.graph.node import shape_str
from gpumat.tensor._tensor import Tensor, apply_op
from gpumat.tensor._views import reshape_view


def _resolved(shape: tuple, have: tuple, op: str) -> tuple:
    """``shape`` with its one -1 worked out for ``have``'s element count; ValueError if the
    counts differ."""
    n = math.prod(have)
    if shape.count(-1) > 1 or any(d < -1 for d in shape):
        raise ValueError(f"{op}: invalid shape {shape}")
    if -1 in shape:
        known = math.prod(d for d in shape if d != -1)
        if known == 0 or n % known:
            raise ValueError(f"{op}: shape {shape} is invalid for input of size {n}")
        shape = tuple(n // known if d == -1 else d for d in shape)
    if math.prod(shape) != n:
        raise ValueError(f"{op}: shape {shape} is invalid for input of size {n}")
    return shape


def _flat(shape) -> tuple:
    return tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape


class LayoutMethods:
    """The shape methods of Tensor."""

    # ---------------------------------------------------------------- shapes (views)

    def reshape(self, *shape) -> Tensor:
        """The same values in row-major order with a new shape (one entry may be -1). A view: it
        shares the storage and the version counter."""
        node_shape = tuple(as_int(d, "shape", "reshape") for d in _flat(shape))
        if self._view is not None or self._trace_view is not None:  # a view: of its base if it can
            out = reshape_view(
                self, _resolved(node_shape, self._shape, "reshape"), "reshape", False
            )
            return out if out is not None else self.contiguous().reshape(node_shape)
        out = apply_op(
            "reshape",
            lambda n: reshape_op(n, node_shape),
            [self],
            self._dtype,
            self._range,
            view=True,
        )
        out._range_src = self._range_src
        return out

    def view(self, *shape) -> Tensor:
        """``reshape``; of a view, a view of its base where strides allow, else a RuntimeError
        (PyTorch's rule)."""
        if self._view is not None or self._trace_view is not None:
            node_shape = tuple(as_int(d, "shape", "view") for d in _flat(shape))
            return reshape_view(self, _resolved(node_shape, self._shape, "view"), "view", True)
        return self.reshape(*shape)

    def view_as(self, other: Tensor) -> Tensor:
        """``reshape(other.shape)``."""
        if not isinstance(other, Tensor):
            raise TypeError(f"view_as: expected a Tensor, got {type(other).__name__}")
        return self.reshape(other._shape)

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        """Axes ``start_dim`` to ``end_dim`` merged into one (a view)."""
        if not self._shape:
            return self.reshape(1)
        s = self._axis(start_dim, "flatten")
        e = self._axis(end_dim, "flatten")
        if s > e:
            raise ValueError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
        shape = self._shape[:s] + (math.prod(self._shape[s : e + 1]),) + self._shape[e + 1 :]
        return self.reshape(shape)

    def squeeze(self, dim=None) -> Tensor:
        """Axes of length 1 removed (all, or ``dim`` if it has length 1); a view."""
        if dim is None:
            return self.reshape(tuple(d for d in self._shape if d != 1))
        a = self._axis(dim, "squeeze")
        if self._shape and self._shape[a] == 1:
            return self.reshape(self._shape[:a] + self._shape[a + 1 :])
        return self

    def unsqueeze(self, dim: int) -> Tensor:
        """A new axis of length 1 at ``dim`` (in [-ndim - 1, ndim]); a view."""
        d = as_int(dim, "dim", "unsqueeze")
        nd = self.ndim
        if not -nd - 1 <= d <= nd:
            raise IndexError(f"unsqueeze: dim {d} is out of range for {nd + 1} dimensions")
        d %= nd + 1
        return self.reshape(self._shape[:d] + (1,) + self._shape[d:])

    # ---------------------------------------------------------------- triangles

    def _triangle(self, op: str, graph_op, diagonal) -> Tensor:
        k = as_int(diagonal, "diagonal", op)
        if self.ndim < 2:
            raise ValueError(
                f"{op}: input tensor must have at least 2 dimensions, got {shape_str(self._shape)}"
            )
        bounds = None
        if not self._dtype.is_floating_point:  # the zeros join the range
            lo, hi = self._range
            bounds = (min(lo, 0), max(hi, 0))
        return apply_op(op, lambda n: graph_op(n, k), [self], self._dtype, bounds)

    def tril(self, diagonal: int = 0) -> Tensor:
        """The lower triangle of each matrix of the last two dims (``torch.tril``): element
        (i, j) kept where j - i <= ``diagonal``, else 0; leading dims are a batch; any dtype.
        Gradient: the same mask. Raises ValueError for fewer than 2 dims, TypeError for a
        non-integer diagonal."""
        return self._triangle("tril", tril_op, diagonal)

    def triu(self, diagonal: int = 0) -> Tensor:
        """The upper triangle (``torch.triu``): element (i, j) kept where j - i >=
        ``diagonal``, else 0; as ``tril`` otherwise."""
        return self._triangle("triu", triu_op, diagonal)
