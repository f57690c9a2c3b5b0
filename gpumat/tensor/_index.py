"""Tensor's index methods: ``index_select``, ``index_add`` / ``index_add_``, ``index_copy`` /
``index_copy_``, ``index_fill`` / ``index_fill_``, ``index_put`` / ``index_put_``, ``gather``,
``scatter_add`` / ``scatter_add_``, ``masked_select`` and ``nonzero``, with PyTorch's names,
argument orders and semantics, on the index kernels (:func:`gpumat.ops.index_select`,
``index_add``, ``index_copy``).

Index bounds are checked from the index tensor's known value range (IndexError, PyTorch's
message; see :mod:`gpumat.tensor._advanced_indexing`), so the device is read only for an index
whose range is unknown. Repeated indices: ``index_add`` and ``scatter_add`` sum in index order
(deterministic, no atomics); ``index_copy`` and ``index_put`` keep the last. ``gather``,
``take_along_dim`` and ``scatter_add`` run the sort family's gather kernels along the dim (as
``sort`` does), on a view of self narrowed to the index's sizes. ``masked_select`` and
``nonzero`` read the device (their shapes depend on the values), as PyTorch's synchronize.

One topic of the class, apart so that each file stays readable; :mod:`gpumat.tensor` adds
``IndexMethods``' methods to :class:`gpumat.Tensor`.
"""

from __future__ import annotations

import math

import numpy as np

from gpumat import ops
from gpumat.dtypes import EXACT_INT, bool_, float32, int64, scalar_for
from gpumat.graph.elementwise import add_op
from gpumat.graph.index import index_add_op, index_copy_op, index_select_op
from gpumat.graph.node import shape_str
from gpumat.graph.sort import gather_gradient_op, gather_op
from gpumat.graph.strided import as_strided_scatter_op
from gpumat.tensor import _advanced_indexing as adv
from gpumat.tensor._tensor import Tensor, _filled, _is_number, apply_op


def _index_1d(self: Tensor, dim, index, op: str, negative: bool = False):
    """(axis, the index as a non-negative 1-D int64 tensor) after PyTorch's checks."""
    axis = self._axis(dim, op)
    if not isinstance(index, Tensor):
        raise TypeError(f"{op}: index must be an int64 Tensor, got {type(index).__name__}")
    if index._dtype is not int64:
        raise TypeError(f"{op}: index must be an int64 tensor, got {index._dtype}")
    if index.ndim > 1:
        raise ValueError(f"{op}: index must be 0-d or 1-D, got shape {shape_str(index._shape)}")
    if index._device != self._device:
        raise ValueError(
            f"{op}: the index is on {index._device}, the tensor on {self._device}; move one with "
            ".to()"
        )
    if not self._shape and index.numel() != 1:
        raise ValueError(f"{op}: index to a 0-d tensor can have only 1 value, got {index.numel()}")
    n = self._shape[axis] if self._shape else 1
    bounds = adv.check_bounds(index, n, axis, op, negative)
    index, _ = adv.normalized(index, n, bounds)
    return axis, index if index.ndim == 1 else index.reshape(1)


def _source(self: Tensor, source, axis: int, length: int, op: str) -> Tensor:
    if not isinstance(source, Tensor):
        raise TypeError(f"{op}: source must be a Tensor, got {type(source).__name__}")
    if source._dtype is not self._dtype:
        raise TypeError(f"{op}: source has dtype {source._dtype}, self {self._dtype}")
    want = self._shape[:axis] + (length,) + self._shape[axis + 1 :] if self._shape else (length,)
    got = source._shape if source._shape else (1,)
    if got != want:
        raise ValueError(
            f"{op}: source has shape {shape_str(source._shape)}, expected {shape_str(want)} "
            f"(self {shape_str(self._shape)} with dim {axis} of length len(index) = {length})"
        )
    return source if source._shape else source.reshape(1)


def _along_index(self: Tensor, dim, index, op: str) -> tuple:
    """(axis, self narrowed to index's sizes in every dim but axis (a view, or self)) for gather
    and scatter_add, after PyTorch's checks."""
    axis = self._axis(dim, op)
    if not isinstance(index, Tensor) or index._dtype is not int64:
        got = index._dtype if isinstance(index, Tensor) else type(index).__name__
        raise TypeError(f"{op}: index must be an int64 tensor, got {got}")
    if index._device != self._device:
        raise ValueError(f"{op}: the index is on {index._device}, the tensor on {self._device}")
    shape, ishape = self._shape or (1,), index._shape or (1,)
    if len(ishape) != len(shape) or any(
        i > s for d, (i, s) in enumerate(zip(ishape, shape, strict=True)) if d != axis
    ):
        raise ValueError(
            f"{op}: index {shape_str(index._shape)} must have self's rank and sizes no larger "
            f"than self's {shape_str(self._shape)} in every dim but {axis}"
        )
    if shape[axis] > EXACT_INT:
        raise ValueError(f"{op}: dim {axis} of {shape_str(self._shape)} is beyond 2**24 positions")
    adv.check_bounds(index, shape[axis], axis, op, negative=False)
    region = self if self._shape else self.reshape(1)
    for d, i in enumerate(ishape):
        if d != axis and i != shape[d]:
            region = region.narrow(d, 0, i)
    return axis, region


class IndexMethods:
    """The index methods of Tensor."""

    def index_select(self, dim: int, index) -> Tensor:
        """The rows ``index`` (an int64 tensor, 0-d or 1-D, values in [0, n)) along ``dim``: the
        shape of self with dim's length len(index). Gradient: a deterministic index_add (a
        repeated row gets the sum of its gradients).

        Raises:
            TypeError: index not an int64 tensor. ValueError: index not 0-d or 1-D, devices
                differ. IndexError: dim out of range, an index out of [0, n).
        """
        axis, idx = _index_1d(self, dim, index, "index_select")
        x = self if self._shape else self.reshape(1)
        out = apply_op(
            "index_select",
            lambda a, i: index_select_op(a, i, axis),
            [x, idx],
            self._dtype,
            self._range,
        )
        return out if self._shape else out.reshape(())

    def _index_update(self, op: str, dim, index, source, make, inplace: bool):
        axis, idx = _index_1d(self, dim, index, op, negative=True)
        src = _source(self, source, axis, idx._shape[0], op)
        x = self if self._shape else self.reshape(1)
        if inplace:
            self._check_inplace(op + "_")
            return x, axis, idx, src
        out = apply_op(op, lambda a, i, s: make(a, i, s, axis), [x, idx, src], self._dtype)
        return out if self._shape else out.reshape(())

    def index_add(self, dim: int, index, source, *, alpha=1) -> Tensor:
        """self with ``alpha * source[..., j, ...]`` added at row ``index[j]`` along ``dim``
        (out of place). index: int64, 0-d or 1-D, values in [-n, n); source: self's shape with
        dim's length len(index), self's dtype. Repeated rows sum in index order (deterministic).
        Gradients: the incoming one for self, alpha * its rows index for source.

        Raises:
            TypeError: index not int64, source not a tensor of self's dtype, alpha not a number.
            ValueError: shapes that do not fit; devices differ. IndexError: an index out of range.
        """
        alpha = float(scalar_for(float32, alpha, "index_add"))
        make = lambda a, i, s, axis: index_add_op(a, i, s, axis, alpha)  # noqa: E731
        out = self._index_update("index_add", dim, index, source, make, False)
        if self._dtype is not float32:
            out._range = None
        return out

    def index_add_(self, dim: int, index, source, *, alpha=1) -> Tensor:
        """:meth:`index_add` in place (the in-place rules of ``add_``); returns self."""
        alpha = float(scalar_for(float32, alpha, "index_add_"))
        x, axis, idx, src = self._index_update("index_add", dim, index, source, None, True)
        ops.index_add(x._data, axis, idx._data, src._data, alpha)
        return self._changed()

    def index_copy(self, dim: int, index, source) -> Tensor:
        """self with row ``index[j]`` along ``dim`` replaced by ``source[..., j, ...]`` (out of
        place); of repeated indices the last wins. Shapes as :meth:`index_add`. Gradients: the
        incoming one with the written rows zeroed for self, its rows index for source (every
        occurrence of a repeated index, as PyTorch's).

        Raises:
            as :meth:`index_add`.
        """
        make = lambda a, i, s, axis: index_copy_op(a, i, s, axis)  # noqa: E731
        out = self._index_update("index_copy", dim, index, source, make, False)
        if self._dtype is not float32:
            out._range = adv._union(self._range, source._range)
        return out

    def index_copy_(self, dim: int, index, source) -> Tensor:
        """:meth:`index_copy` in place; returns self."""
        x, axis, idx, src = self._index_update("index_copy", dim, index, source, None, True)
        ops.index_copy(x._data, axis, idx._data, src._data)
        return self._changed(adv._union(self._range, source._range))

    def index_fill(self, dim: int, index, value) -> Tensor:
        """self with the rows ``index`` along ``dim`` set to the number ``value`` (out of place).
        Gradient: the incoming one with those rows zeroed.

        Raises:
            TypeError: value not a number; as :meth:`index_add`.
        """
        return self.index_copy(dim, index, self._fill_rows(dim, index, value, "index_fill"))

    def index_fill_(self, dim: int, index, value) -> Tensor:
        """:meth:`index_fill` in place; returns self."""
        return self.index_copy_(dim, index, self._fill_rows(dim, index, value, "index_fill_"))

    def _fill_rows(self, dim, index, value, op: str) -> Tensor:
        if not _is_number(value):
            raise TypeError(f"{op}: value must be a number, got {type(value).__name__}")
        axis = self._axis(dim, op)
        length = index.numel() if isinstance(index, Tensor) else 0
        shape = self._shape[:axis] + (length,) + self._shape[axis + 1 :] if self._shape else ()
        value = scalar_for(self._dtype, value, op, truncate=True)
        return _filled("full", (shape,), value, self._dtype, self._device, False)

    def index_put(self, indices, values, accumulate: bool = False) -> Tensor:
        """self with ``values`` written at ``self[indices]`` (out of place; ``indices`` a tuple of
        advanced indices, as ``x[indices] = values``), or added there when ``accumulate`` (then
        repeated indices sum, deterministically; else the last wins). Differentiable for self and
        values: the out-of-place form of ``x[idx] = v`` for tensors recorded for backward.

        Raises:
            as ``x[key]``; TypeError: indices not a tuple or list.
        """
        if not isinstance(indices, (tuple, list)):
            raise TypeError(
                f"index_put: indices must be a tuple of tensors, got {type(indices).__name__}"
            )
        return adv.put(self, tuple(indices), values, bool(accumulate), "index_put")

    def index_put_(self, indices, values, accumulate: bool = False) -> Tensor:
        """:meth:`index_put` in place (the in-place rules of ``add_``); returns self."""
        if not accumulate:
            adv.setitem(self, tuple(indices), values)
            return self
        self._check_inplace("index_put_")
        result = adv.put(self.detach(), tuple(indices), values, True, "index_put_")
        self._data.copyfrom(result._data)
        return self._changed()

    def gather(self, dim: int, index) -> Tensor:
        """out[i][j][k] = self[index[i][j][k]][j][k] for dim 0 (and so on): values along ``dim``
        picked by ``index`` (int64, self's rank, sizes no larger than self's in the other dims,
        values in [0, n)); out has index's shape. One gather kernel
        (:func:`gpumat.ops.gather`) over self, narrowed (a view) where index is smaller. Gradient:
        dy added back at the gathered positions, repeated ones in order (deterministic).

        Raises:
            TypeError: index not int64. ValueError: ranks or sizes that do not fit; devices
                differ; dim longer than 2**24. IndexError: dim or an index out of range.
        """
        axis, region = _along_index(self, dim, index, "gather")
        idx = index if index._shape else index.reshape(1)
        out = apply_op(
            "gather", lambda a, i: gather_op(a, i, axis), [region, idx], self._dtype, self._range
        )
        return out.reshape(index._shape)

    def take_along_dim(self, indices, dim: int | None = None) -> Tensor:
        """``torch.take_along_dim``: with ``dim``, self and ``indices`` (int64, self's rank)
        broadcast against each other in every dim but ``dim``, then :meth:`gather` along it; with
        ``dim=None`` both are flattened first. Negative indices are not accepted (as gather).

        Raises:
            TypeError: indices not int64. ValueError: ranks differ, shapes that do not broadcast.
            IndexError: dim or an index out of range.
        """
        if not isinstance(indices, Tensor) or indices._dtype is not int64:
            got = indices._dtype if isinstance(indices, Tensor) else type(indices).__name__
            raise TypeError(f"take_along_dim: indices must be an int64 tensor, got {got}")
        if dim is None:
            return self.reshape(-1).gather(0, indices.reshape(-1))
        axis = self._axis(dim, "take_along_dim")
        if indices.ndim != self.ndim:
            raise ValueError(
                f"take_along_dim: input {shape_str(self._shape)} and indices "
                f"{shape_str(indices._shape)} should have the same number of dimensions"
            )
        try:
            shape = list(
                np.broadcast_shapes(
                    self._shape[:axis] + (1,) + self._shape[axis + 1 :],
                    indices._shape[:axis] + (1,) + indices._shape[axis + 1 :],
                )
            )
        except ValueError:
            raise ValueError(
                f"take_along_dim: input {shape_str(self._shape)} and indices "
                f"{shape_str(indices._shape)} do not broadcast outside dim {axis}"
            ) from None
        shape[axis] = self._shape[axis]
        source = self if tuple(shape) == self._shape else self.expand(shape)
        shape[axis] = indices._shape[axis]
        index = indices if tuple(shape) == indices._shape else indices.expand(shape).contiguous()
        return source.gather(axis, index)

    def scatter_add(self, dim: int, index, src) -> Tensor:
        """self with ``src[i][j][k]`` added at ``[index[i][j][k]][j][k]`` for dim 0 (and so on),
        out of place; src at least index's size in every dim (only index's region of it is used,
        as PyTorch). Repeated targets sum in row-major order of index (deterministic): the
        gather's gradient kernel (:func:`gpumat.ops.gather_gradient`), its result written into
        self's region where index is smaller than self. Gradients: the incoming one for self, the
        gathered one for src's region.

        Raises:
            as :meth:`gather`; TypeError / ValueError: src not a tensor of self's dtype and rank
            with index's sizes or more.
        """
        axis, region = _along_index(self, dim, index, "scatter_add")
        src = self._scatter_src(src, index, "scatter_add")
        idx = index if index._shape else index.reshape(1)
        added = apply_op(
            "scatter_add",
            lambda i, s, r: gather_gradient_op(i, s, r, axis),
            [idx, src, region],
            self._dtype,
        )
        if region is not self and region._shape != self._shape:
            stride = tuple(math.prod(self._shape[d + 1 :]) for d in range(self.ndim))
            zeros = self.new_zeros(self._shape)
            added = apply_op(
                "scatter_add",
                lambda z, a: as_strided_scatter_op(z, a, stride, 0),
                [zeros, added],
                self._dtype,
            )
        added = added.reshape(self._shape)
        return apply_op("scatter_add", add_op, [self, added], self._dtype)

    def scatter_add_(self, dim: int, index, src) -> Tensor:
        """:meth:`scatter_add` in place; returns self."""
        return self._replaced("scatter_add_", lambda: self.scatter_add(dim, index, src))

    def _scatter_src(self, src, index: Tensor, op: str) -> Tensor:
        """src narrowed (a view) to index's shape."""
        if not isinstance(src, Tensor) or src._dtype is not self._dtype:
            got = src._dtype if isinstance(src, Tensor) else type(src).__name__
            raise TypeError(f"{op}: src must be a tensor of dtype {self._dtype}, got {got}")
        ishape = index._shape or (1,)
        sshape = src._shape or (1,)
        if len(sshape) != len(ishape) or any(s < i for s, i in zip(sshape, ishape, strict=True)):
            raise ValueError(
                f"{op}: src has shape {shape_str(src._shape)}, index {shape_str(index._shape)}: "
                "src needs index's rank and at least its size in every dim"
            )
        if not src._shape:
            src = src.reshape(1)
        for d, i in enumerate(ishape):
            if sshape[d] != i:
                src = src.narrow(d, 0, i)
        return src

    def masked_select(self, mask) -> Tensor:
        """The elements of self where ``mask`` (a bool tensor broadcastable to self's shape) is
        True, as a 1-D tensor in row-major order (reads the mask from the device, as PyTorch
        synchronizes). Gradient: scattered back into zeros.

        Raises:
            TypeError: mask not a bool tensor. ValueError: shapes that do not broadcast to
                self's; devices differ.
        """
        if not isinstance(mask, Tensor) or mask._dtype is not bool_:
            got = mask._dtype if isinstance(mask, Tensor) else type(mask).__name__
            raise TypeError(f"masked_select: expected a bool tensor as mask, got {got}")
        if mask._device != self._device:
            raise ValueError(
                f"masked_select: the mask is on {mask._device}, self on {self._device}"
            )
        mask._concrete("masked_select")
        try:
            shape = tuple(np.broadcast_shapes(mask._shape, self._shape))
        except ValueError:
            raise ValueError(
                f"masked_select: mask {shape_str(mask._shape)} and self {shape_str(self._shape)} "
                "do not broadcast together"
            ) from None
        if shape != self._shape:
            raise ValueError(
                f"masked_select: mask {shape_str(mask._shape)} broadcasts self "
                f"{shape_str(self._shape)} to {shape_str(shape)}; gpumat takes a mask that "
                "broadcasts to self's shape"
            )
        values = np.broadcast_to(mask._host_values(), shape).reshape(-1)
        idx = adv._int_tensor(np.flatnonzero(values), self._device)
        flat = self.reshape(-1)
        return apply_op(
            "masked_select",
            lambda a, i: index_select_op(a, i, 0),
            [flat, idx],
            self._dtype,
            self._range,
        )

    def nonzero(self, *, as_tuple: bool = False):
        """The indices of the nonzero elements: an int64 tensor (N, ndim) in row-major order, or
        with ``as_tuple`` a tuple of ndim 1-D tensors (reads the device, as PyTorch
        synchronizes). A 0-d tensor counts as 1-D."""
        self._concrete("nonzero")
        values = self._host_values()
        if self.ndim == 0:  # PyTorch: (1, 0) or (0, 0)
            found = np.zeros((int(values != 0), 0), np.int64)
            return () if as_tuple else adv._int_tensor(found, self._device)
        coords = np.nonzero(values.reshape(values.shape or (1,)))
        if as_tuple:
            return tuple(adv._int_tensor(c, self._device) for c in coords)
        stacked = np.stack(coords, axis=1) if coords else np.zeros((0, 0), np.int64)
        return adv._int_tensor(stacked.reshape(-1, max(self.ndim, 1)), self._device)
