"""Advanced indexing of tensors, numpy's and PyTorch's rules: ``getitem(x, key)`` and
``setitem(x, key, value)`` for keys of integer arrays, bool masks and full slices, and the index
plumbing the index methods share (:mod:`gpumat.tensor._index`).

A key is a tuple whose entries are each an advanced index (a list of ints, nested lists, a
``range``, a numpy int or bool array, an int64 or bool :class:`gpumat.Tensor`, or a Python int)
or a full slice ``:`` or ``...``; the basic indexing of ``Tensor.__getitem__`` hands these over
after applying any other slices. The advanced indices broadcast together to a shape B; when they
are adjacent, B replaces their dims in place, otherwise B comes first. Python ints follow
PyTorch, which applies them first (as basic indexing): they remove their dims and do not count
when deciding adjacency, so ``x[1, :, [0, 3]]`` of a (4, 5, 6) tensor is (5, 2) as in PyTorch
(numpy, which treats the int as an advanced scalar, gives (2, 5)). A bool mask indexes as its
``nonzero()`` coordinates (one read of the device, as PyTorch's), its dims matching the dims it
covers.

Every lookup is one ``index_select`` over a view of x (a reshape): adjacent indices merge the
dims they index into one and select along it; separated ones select from the flattened tensor
with linear indices, computed on the device (int64 arithmetic, exact below 2**24). So gradients
flow as index_select's: a deterministic index_add.

Index bounds: an index outside [-n, n) is an IndexError naming the dim and size, as PyTorch's,
raised from the index tensor's known value range (``_range``: exact for indices made from host
data and by gpumat's ops; read from the device once when unknown). Under ``gpumat.compile`` an
index that is a step argument is checked on every call (a range guard). The kernels themselves
never read or write out of bounds whatever the index holds (see :func:`gpumat.ops.index_select`).

Writes (``setitem``) go through ``index_copy`` in place: of repeated indices the last one in
row-major order of B wins (numpy's outcome; PyTorch leaves it unspecified). ``x[mask] = number``
is ``where(mask, number, x)``, without reading the device. Writes follow the in-place rules of
:mod:`gpumat.tensor._inplace` (refused on a leaf requiring grad in grad mode and on a tensor
recorded for backward; a new version). For a differentiable write use the out-of-place
``Tensor.index_put``.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from gpumat import ops
from gpumat.autograd import current_trace, is_grad_enabled
from gpumat.dtypes import EXACT_INT, bool_, float32, int64, scalar_for
from gpumat.graph.elementwise import add_op, lt_op, mul_byconst_op
from gpumat.graph.index import index_add_op, index_copy_op, index_select_op
from gpumat.graph.node import shape_str
from gpumat.graph.strided import broadcast_where_op
from gpumat.tensor._arithmetic import _broadcast_shape
from gpumat.tensor._tensor import Tensor, _filled, _from_host, apply_op

__all__ = ["getitem", "setitem"]


# --------------------------------------------------------------------------------------------------
# Index tensors
# --------------------------------------------------------------------------------------------------


def _int_tensor(values: np.ndarray, device) -> Tensor:
    return _from_host(np.asarray(values, dtype=np.int64), int64, device, "index")


def as_index(value, device, op: str) -> Tensor:
    """``value`` (an int64 tensor, a list, range, numpy integer array or int) as an int64 tensor
    on ``device``; bool data is a mask, refused here.

    Raises:
        IndexError: a float tensor or float data (PyTorch's wording). ValueError: a tensor on
            another device. TypeError: anything else.
    """
    if isinstance(value, Tensor):
        if value._dtype is not int64:
            raise IndexError(
                f"{op}: tensors used as indices must be long, int, byte or bool tensors, got "
                f"{value._dtype}"
            )
        if value._device != device:
            raise ValueError(
                f"{op}: the index is on {value._device}, the tensor on {device}; devices are "
                "never mixed implicitly: move one with .to()"
            )
        return value
    if isinstance(value, range):
        value = np.arange(value.start, value.stop, value.step)
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{op}: a bool is not an index here (use a bool tensor as a mask)")
    if isinstance(value, (numbers.Integral, np.integer)):
        return _int_tensor(np.int64(value), device)
    if isinstance(value, (list, tuple, np.ndarray)):
        arr = np.asarray(value)
        if arr.size == 0 and arr.dtype.kind == "f":
            arr = arr.astype(np.int64)  # [] is an empty index, as PyTorch's
        if arr.dtype.kind not in "iu":
            raise IndexError(
                f"{op}: arrays used as indices must be of integer (or boolean) type, got "
                f"{arr.dtype}"
            )
        return _int_tensor(arr, device)
    raise TypeError(
        f"{op}: an index must be an int, a list, a range, a numpy array or a Tensor, got "
        f"{type(value).__name__}"
    )


def is_mask(value) -> bool:
    """Whether an index entry is a bool mask (a bool tensor or bool numpy data)."""
    if isinstance(value, Tensor):
        return value._dtype is bool_
    if isinstance(value, np.ndarray):
        return value.dtype == np.bool_
    if isinstance(value, list) and value:
        return np.asarray(value).dtype == np.bool_
    return False


def mask_coords(mask, device, op: str) -> tuple:
    """The nonzero coordinates of a bool mask, one int64 tensor (N,) per dim (reads a device
    mask's values, as PyTorch's nonzero)."""
    if isinstance(mask, Tensor):
        if mask._device != device:
            raise ValueError(
                f"{op}: the mask is on {mask._device}, the tensor on {device}; devices are never "
                "mixed implicitly: move one with .to()"
            )
        mask._concrete(op)
        values = mask._host_values()
    else:
        values = np.asarray(mask, dtype=bool)
    return tuple(_int_tensor(c, device) for c in np.nonzero(values))


def check_bounds(idx: Tensor, n: int, dim: int, op: str, negative: bool = True) -> tuple:
    """``(lo, hi)`` of idx after checking its values name rows of a dim of n: in [-n, n) (or
    [0, n) without ``negative``). Under gpumat.compile, a step's index argument is checked on every
    call.

    Raises:
        IndexError: an index out of bounds (PyTorch's message). ValueError: an index whose range
            is unknown (computed inside a compiled step by an op that gives none).
    """
    if idx.numel() == 0:
        return (0, 0)
    bounds = idx._range
    if bounds is None:
        raise ValueError(
            f"{op}: the index was computed inside a compiled step by an op that does not give its "
            "range; pass it as an argument of the step or index outside it"
        )
    lo, hi = bounds
    low = -n if negative else 0
    if hi >= n or lo < low:
        bad = hi if hi >= n else lo
        raise IndexError(f"{op}: index {bad} is out of bounds for dimension {dim} with size {n}")
    if idx._range_src is not None:
        idx._trace.guard_range(idx._range_src, low, n - 1, op, IndexError)
    elif idx._trace is None and (trace := current_trace()) is not None:
        trace.guard_range(idx, low, n - 1, op, IndexError)
    return lo, hi


def _int_op(make, inputs: list, bounds: tuple) -> Tensor:
    return apply_op("index", make, inputs, int64, bounds, False)


def normalized(idx: Tensor, n: int, bounds: tuple) -> tuple:
    """(idx with negative values counted from the end, its bounds): idx itself when no value is
    negative, else idx + n * (idx < 0) on the device."""
    lo, hi = bounds
    if lo >= 0:
        return idx, bounds
    zero = _filled("zeros", (idx._shape,), 0, int64, idx._device, False)
    neg = apply_op("index", lt_op, [idx, zero], bool_, (0, 1), False)
    shift = _int_op(lambda a: mul_byconst_op(a, float(n)), [neg], (0, n))
    return _int_op(add_op, [idx, shift], (0, n - 1)), (0, n - 1)


def broadcast(t: Tensor, shape: tuple, op: str) -> Tensor:
    """t repeated to ``shape`` (numpy's rules): ``t.expand(shape)``, its values and range."""
    if t._shape == shape:
        return t
    try:
        return t.expand(shape)
    except ValueError:
        raise IndexError(
            f"{op}: shape mismatch: indices of shape {shape_str(t._shape)} cannot be broadcast "
            f"to {shape_str(shape)}"
        ) from None


def linear(terms: list, shape: tuple, device, const=None) -> Tensor:
    """sum of t * stride over ``terms`` [(int64 tensor, (lo, hi), stride)], each broadcast to
    ``shape`` (numpy's rules), plus ``const`` (an int numpy array broadcastable to shape) if given:
    an int64 tensor of ``shape`` with its bounds."""
    acc, lo, hi = None, 0, 0
    parts = list(terms)
    if const is not None:
        c = np.broadcast_to(np.asarray(const, dtype=np.int64), shape) if const.ndim else const
        parts.append((_int_tensor(c, device), (int(c.min(initial=0)), int(c.max(initial=0))), 1))
    for t, (tlo, thi), stride in parts:
        t = broadcast(t, shape, "index")
        if stride != 1:
            t = _int_op(
                lambda a, s=stride: mul_byconst_op(a, float(s)), [t], (tlo * stride, thi * stride)
            )
        lo, hi = lo + tlo * stride, hi + thi * stride
        acc = t if acc is None else _int_op(add_op, [acc, t], (lo, hi))
    if acc is None:
        acc = _filled("zeros", (shape,), 0, int64, device, False)
    return acc


# --------------------------------------------------------------------------------------------------
# Keys
# --------------------------------------------------------------------------------------------------


class Plan:
    """How a key indexes x: x viewed as ``view`` (a reshape) and indexed along ``dim`` by the 1-D
    int64 tensor ``index`` (non-negative, in range); the lookup has shape ``shape`` and, before
    its final reshape, ``part`` (view with dim's length len(index))."""

    def __init__(self, view, dim, index, shape) -> None:
        self.view, self.dim, self.index, self.shape = view, dim, index, shape
        self.part = view[:dim] + (index._shape[0],) + view[dim + 1 :]


def plan(x: Tensor, key, op: str):
    """The :class:`Plan` of ``key`` (a tuple) on x, or None when the key has no advanced index
    (every entry ``:`` or ``...``).

    Raises:
        IndexError: too many indices, an index out of bounds, a mask whose shape does not match
            the dims it covers, indices that do not broadcast together, a float index.
        TypeError: an entry that is no index. ValueError: a merged dim or tensor beyond 2**24
            elements (indices are exact float32 integers).
    """
    if not isinstance(key, tuple):
        key = (key,)
    device = x._device
    consumed = sum(
        (v.ndim if isinstance(v, (Tensor, np.ndarray)) else np.ndim(v)) if is_mask(v) else 1
        for v in key
        if v is not Ellipsis
    )
    if sum(v is Ellipsis for v in key) > 1:
        raise IndexError(f"{op}: an index can only have a single ellipsis ('...')")
    if consumed > x.ndim:
        raise IndexError(
            f"{op}: too many indices for tensor of dimension {x.ndim} (shape {shape_str(x._shape)})"
        )
    entries: list = []  # per dim of x: None (a full slice) or (index tensor, bounds)
    ints: set = set()  # dims indexed by a Python int: basic indexing in PyTorch, placed first
    for v in key:
        d = len(entries)
        if v is Ellipsis:
            entries += [None] * (x.ndim - consumed)
        elif isinstance(v, slice):
            if v != slice(None):
                raise IndexError(f"{op}: only full slices ':' reach advanced indexing, got {v}")
            entries.append(None)
        elif is_mask(v):
            mshape = tuple(v._shape if isinstance(v, Tensor) else np.shape(v))
            if mshape != x._shape[d : d + len(mshape)]:
                raise IndexError(
                    f"{op}: the shape of the mask {shape_str(mshape)} does not match the shape "
                    f"{shape_str(x._shape[d : d + len(mshape)])} of the indexed tensor's dims "
                    f"{d}..{d + len(mshape) - 1} (tensor {shape_str(x._shape)})"
                )
            for c in mask_coords(v, device, op):
                n = x._shape[len(entries)]
                entries.append((c, (0, n - 1) if c.numel() else (0, 0)))
        else:
            idx = as_index(v, device, op)
            n = x._shape[d]
            bounds = check_bounds(idx, n, d, op)
            entries.append(normalized(idx, n, bounds))
            if isinstance(v, (numbers.Integral, np.integer)):
                ints.add(d)
    entries += [None] * (x.ndim - len(entries))
    adv = [d for d, e in enumerate(entries) if e is not None]
    if not adv:
        return None
    try:
        bshape = tuple(np.broadcast_shapes(*(entries[d][0]._shape for d in adv)))
    except ValueError:
        shown = ", ".join(shape_str(entries[d][0]._shape) for d in adv)
        raise IndexError(
            f"{op}: shape mismatch: indexing tensors could not be broadcast together with shapes "
            f"{shown}"
        ) from None
    s = x._shape
    if adv == list(range(adv[0], adv[-1] + 1)):  # adjacent: merge their dims and select along it
        a0, a1 = adv[0], adv[-1] + 1
        merged = math.prod(s[a0:a1])
        if merged > EXACT_INT:
            raise ValueError(
                f"{op}: the indexed dims {shape_str(s[a0:a1])} of {shape_str(s)} hold more than "
                "2**24 positions, beyond exact float32 indices"
            )
        strides = [math.prod(s[d + 1 : a1]) for d in adv]
        lin = linear(
            [(*entries[d], st) for d, st in zip(adv, strides, strict=True)], bshape, device
        )
        view = s[:a0] + (merged,) + s[a1:]
        return Plan(view, a0, lin.reshape(-1), s[:a0] + bshape + s[a1:])
    # Otherwise: linear indices into the flat tensor, B placed among the other dims at p: where
    # the arrays (ints aside, as PyTorch applies ints first) are adjacent once the int dims are
    # gone, else first.
    total = math.prod(s)
    if total > EXACT_INT:
        raise ValueError(
            f"{op}: separated advanced indices on a tensor of {total} elements (shape "
            f"{shape_str(s)}): beyond exact float32 indices (2**24)"
        )
    rest = [d for d in range(x.ndim) if d not in adv]
    arrays = [d for d in adv if d not in ints]
    p = 0
    if not arrays:
        p = sum(1 for d in rest if d < adv[0])
    elif not any(arrays[0] < d < arrays[-1] for d in rest):
        p = sum(1 for d in rest if d < arrays[0])
    rshape = tuple(s[d] for d in rest)
    out_shape = rshape[:p] + bshape + rshape[p:]
    strides = [math.prod(s[d + 1 :]) for d in range(x.ndim)]
    terms = []
    for d in adv:
        t = entries[d][0]
        placed = (1,) * p + (1,) * (len(bshape) - t.ndim) + t._shape + (1,) * (len(rest) - p)
        terms.append((t.reshape(placed), entries[d][1], strides[d]))
    grids = np.meshgrid(*[np.arange(s[d]) for d in rest], indexing="ij") if rest else []
    base = sum((g * strides[d] for g, d in zip(grids, rest, strict=True)), np.zeros((), np.int64))
    base = np.asarray(base, dtype=np.int64).reshape(rshape[:p] + (1,) * len(bshape) + rshape[p:])
    lin = linear(terms, out_shape, device, const=base)
    return Plan((total,), 0, lin.reshape(-1), out_shape)


# --------------------------------------------------------------------------------------------------
# getitem / setitem
# --------------------------------------------------------------------------------------------------


def getitem(x: Tensor, key) -> Tensor:
    """``x[key]`` for a key of advanced indices, full slices and ``...`` (the module docstring's
    rules): a new tensor of x's dtype (not a view), of shape B in place of adjacent indexed dims or
    B followed by the other dims. Differentiable for float32 x (backward: a deterministic
    index_add, repeated indices summed).

    Raises:
        IndexError: an index out of bounds, too many indices, a mask of the wrong shape,
            indices that do not broadcast, a float index. TypeError: an entry that is no index.
        ValueError: devices differ; dims beyond 2**24 positions.
    """
    p = plan(x, key, "index")
    if p is None:
        return x
    xv = x if x._shape == p.view else x.reshape(p.view)
    out = apply_op(
        "index",
        lambda n, i: index_select_op(n, i, p.dim),
        [xv, p.index],
        x._dtype,
        x._range,
    )
    return out if out._shape == p.shape else out.reshape(p.shape)


def _value_tensor(x: Tensor, value, shape: tuple, op: str) -> Tensor:
    """value (a number or a tensor broadcastable to shape) as a tensor of x's dtype and shape."""
    if isinstance(value, Tensor):
        value._concrete(op)
        if value._device != x._device:
            raise ValueError(
                f"{op}: the value is on {value._device}, the tensor on {x._device}; devices are "
                "never mixed implicitly: move one with .to()"
            )
        v = x._converted(value, op)
    elif isinstance(value, (numbers.Real, np.number, np.bool_)):
        v = _filled(
            "full",
            ((),),
            scalar_for(x._dtype, value, op, truncate=True),
            x._dtype,
            x._device,
            False,
        )
    else:
        v = x._converted(value, op)  # array-like data, as PyTorch's x[i] = [..]
    if v._shape != shape:
        if _broadcast_shape(op, v._shape, shape) != shape:
            raise ValueError(
                f"{op}: shape mismatch: value tensor of shape {shape_str(v._shape)} cannot be "
                f"broadcast to indexing result of shape {shape_str(shape)}"
            )
        v = broadcast(v, shape, op)
    return v


def _union(a, b):
    if a is None or b is None:
        return None
    return (min(a[0], b[0]), max(a[1], b[1]))


def setitem(x: Tensor, key, value) -> None:
    """``x[key] = value`` in place: value a number or a tensor (or array-like data) broadcastable
    to ``x[key]``'s shape, converted to x's dtype as ``copy_`` converts. Of repeated indices the
    last in row-major order wins. A key that is one bool mask with a number value is
    ``where(mask, value, x)`` (no device read).

    Raises:
        RuntimeError: x is a leaf requiring grad in grad mode, or recorded for backward, or the
            value requires grad in grad mode (gpumat's autograd records no in-place write: use
            the out-of-place ``x.index_put(indices, values)``); inside gpumat.compile.
        IndexError, TypeError, ValueError: as :func:`getitem`; a value that does not broadcast.
    """
    op = "setitem"
    x._check_inplace(op)
    if isinstance(value, Tensor) and value._requires_grad and is_grad_enabled():
        raise RuntimeError(
            f"{op}: the value requires grad, and gpumat's autograd does not record in-place "
            "writes; use the out-of-place x.index_put(indices, values), or write under no_grad()"
        )
    if not isinstance(key, tuple):
        key = (key,)
    masks = [v for v in key if is_mask(v)]
    simple = [
        v for v in key if v is not Ellipsis and not (isinstance(v, slice) and v == slice(None))
    ]
    if (
        len(masks) == 1
        and simple == masks
        and isinstance(value, (numbers.Real, np.number, np.bool_))
        and isinstance(masks[0], Tensor)
    ):
        _masked_write(x, key, masks[0], value, op)
        return
    p = plan(x, key, op)
    if p is None:
        v = _value_tensor(x, value, x._shape, op)
        x._data.copyfrom(v._data)
        x._changed(v._range)
        return
    v = _value_tensor(x, value, p.shape, op)
    src = v if v._shape == p.part else v.reshape(p.part)
    ops.index_copy(x._data.reshape(p.view), p.dim, p.index._data, src._data)
    x._changed(_union(x._range, v._range) if x._dtype is not float32 else None)


def _masked_write(x: Tensor, key: tuple, mask: Tensor, value, op: str) -> None:
    """x[..., mask, ...] = number as where(mask, number, x) with the mask placed at its dims."""
    if mask._device != x._device:
        raise ValueError(f"{op}: the mask is on {mask._device}, the tensor on {x._device}")
    at = next(k for k, v in enumerate(key) if v is mask)
    after = sum(1 for v in key[at + 1 :] if v is not Ellipsis)
    before = sum(1 for v in key[:at] if v is not Ellipsis)
    lead = x.ndim - mask.ndim - after if any(v is Ellipsis for v in key[:at]) else before
    if (
        lead < 0
        or before + mask.ndim + after > x.ndim
        or mask._shape != x._shape[lead : lead + mask.ndim]
    ):
        raise IndexError(
            f"{op}: the shape of the mask {shape_str(mask._shape)} does not match the shape of "
            f"the indexed tensor {shape_str(x._shape)} at dim {max(lead, 0)}"
        )
    placed = mask.reshape(mask._shape + (1,) * (x.ndim - lead - mask.ndim))
    value = scalar_for(x._dtype, value, op, truncate=True)
    fill = _filled("full", ((),), value, x._dtype, x._device, False)
    out = apply_op(op, broadcast_where_op, [placed, fill, x], x._dtype, None, False)
    x._data.copyfrom(out._data)
    bounds = None if x._dtype is float32 else _union(x._range, (int(value), int(value)))
    x._changed(bounds)


def put(x: Tensor, key, value, accumulate: bool, op: str) -> Tensor:
    """Out of place: x with ``value`` written (or added, ``accumulate``) at ``key``; recorded for
    backward (index_copy_op / index_add_op)."""
    p = plan(x, key, op)
    if p is None:
        raise IndexError(f"{op}: expected at least one index tensor")
    v = _value_tensor(x, value, p.shape, op)
    src = v if v._shape == p.part else v.reshape(p.part)
    xv = x if x._shape == p.view else x.reshape(p.view)
    if accumulate:
        make = lambda a, i, s: index_add_op(a, i, s, p.dim)  # noqa: E731
    else:
        make = lambda a, i, s: index_copy_op(a, i, s, p.dim)  # noqa: E731
    bounds = None if x._dtype is float32 or accumulate else _union(x._range, v._range)
    out = apply_op(op, make, [xv, p.index, src], x._dtype, bounds)
    return out if out._shape == x._shape else out.reshape(x._shape)
