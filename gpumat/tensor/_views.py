"""Tensor's views and indexing: ``x[...]`` and ``x[...] = v`` with ints, slices, ``...`` and
``None`` (advanced indices go to :mod:`gpumat.tensor._advanced_indexing`), ``permute``,
``transpose``, ``t``, ``movedim``, ``expand``, ``expand_as``, ``narrow``, ``select``,
``unbind``, ``split``, ``chunk``, ``flip``, ``stride``, ``storage_offset``, ``is_contiguous``,
``contiguous``, ``roll``, ``repeat``, ``tile``, ``repeat_interleave``, iteration, and the
functions ``cat``, ``stack`` and ``meshgrid``.

A view is a tensor with a :class:`gpumat.tensor._tensor.StridedView`: a copy of a strided region
of its base's storage, made by one strided-copy kernel (``as_strided_op``; ``expand_op`` for the
repeated dims of an expand, so that its gradient sums) when it is first read (a view only viewed
again is never copied: ``lazy_view``), kept in step with the base in both
directions (PyTorch's view semantics on gpumat's contiguous arrays; the class says how). The
strides and offsets are PyTorch's: a view of a view composes them against the one base.

One topic of the class, apart so that each file stays readable; :mod:`gpumat.tensor` adds
``ViewMethods``' methods to :class:`gpumat.Tensor`.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from gpumat import ops
from gpumat._checks import as_int
from gpumat.autograd import current_trace, is_grad_enabled, no_grad
from gpumat.dtypes import float32
from gpumat.graph.node import shape_str
from gpumat.graph.strided import (
    MAX_DIMS,
    as_strided_op,
    cat_op,
    contiguous_strides,
    expand_op,
)
from gpumat.tensor import _advanced_indexing
from gpumat.tensor._tensor import StridedView, Tensor, _copy_of, apply_op, lazy_view

__all__ = ["ViewMethods", "cat", "concat", "concatenate", "meshgrid", "stack"]


# ---------------------------------------------------------------------------- strided views


def layout(t: Tensor) -> tuple:
    """``(base, stride, offset)``: where t's elements lie. A view's base and region; any other
    tensor is its own base, contiguous. Strides and offset in elements."""
    view = t._view
    if view is not None and not (t._requires_grad and t._node is None and view.base is not t):
        return view.base, view.stride, view.offset
    if t._trace_view is not None:
        return t._trace_view
    return t, contiguous_strides(t._shape), 0


def _make_view(
    t: Tensor, shape: tuple, stride: tuple, offset: int, op: str, lazy: bool = True
) -> Tensor:
    """The view of t's storage with ``shape``, ``stride`` and ``offset`` (against t's base, as
    :func:`layout` gives them): one copy of the region, linked back to the base, made when first
    read (``lazy``, eagerly) or now."""
    shape, stride = tuple(int(d) for d in shape), tuple(int(s) for s in stride)
    if len(shape) > MAX_DIMS:
        raise ValueError(f"{op}: {len(shape)} dims {shape_str(shape)}; gpumat views have at most 8")
    base, _, _ = layout(t)
    if base is not t and base._requires_grad and not t._requires_grad and is_grad_enabled():
        # t was made under no_grad from a base that requires grad: views of it pass no gradient
        # to the base either (PyTorch's rule)
        with no_grad():
            return _make_view(t, shape, stride, offset, op, lazy)
    # The dims an expand repeats (stride 0, length > 1): copied once, then repeated by expand_op,
    # whose gradient sums what as_strided_op's gradient could only scatter.
    repeated = [d for d, (n, s) in enumerate(zip(shape, stride, strict=True)) if s == 0 and n > 1]

    if lazy and not repeated and base._trace is None and current_trace() is None:
        out = lazy_view(op, base, shape, stride, offset)  # copied when first read
    else:
        once = tuple(1 if d in repeated else n for d, n in enumerate(shape))
        out = apply_op(
            op, lambda n: as_strided_op(n, once, stride, offset), [base], base._dtype, base._range
        )
        if repeated:
            out = apply_op(op, lambda n: expand_op(n, shape), [out], base._dtype, base._range)
        if base._trace is None:
            out._view = StridedView(base, stride, offset)
        elif not repeated and out._requires_grad == base._requires_grad:
            # (not across a no_grad boundary: a view of it must not pass gradients to the base)
            out._trace_view = (base, stride, offset)
    out._range_src = base._range_src
    return out


def _is_contiguous(shape: tuple, stride: tuple) -> bool:
    expected = 1
    for n, s in zip(reversed(shape), reversed(stride), strict=True):
        if n != 1 and s != expected:
            return False
        expected *= n
    return True


def view_strides(shape: tuple, stride: tuple, new_shape: tuple):
    """The strides that show a tensor of ``shape`` and ``stride`` as ``new_shape`` without a
    copy, or None where no strides can (PyTorch's ``computeStride``, aten/src/ATen/TensorUtils.cpp:
    each run of dims that are contiguous with each other may be split and merged freely)."""
    numel = math.prod(shape)
    if numel == 0 or not shape:
        return contiguous_strides(new_shape)
    new_stride = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    chunk_base = stride[-1]
    tensor_numel = view_numel = 1
    for d in range(len(shape) - 1, -1, -1):
        tensor_numel *= shape[d]
        if d == 0 or (shape[d - 1] != 1 and stride[d - 1] != tensor_numel * chunk_base):
            while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
                new_stride[view_d] = view_numel * chunk_base
                view_numel *= new_shape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if d > 0:
                chunk_base = stride[d - 1]
                tensor_numel = view_numel = 1
    return tuple(new_stride) if view_d == -1 else None


def reshape_view(t: Tensor, new_shape: tuple, op: str, must_view: bool):
    """``t`` (a view) shown as ``new_shape``: a view of its base where strides allow, else a
    copy (``reshape``) or a RuntimeError (``view``, as PyTorch's)."""
    base, stride, offset = layout(t)
    new_stride = view_strides(t._shape, stride, new_shape)
    if new_stride is not None:
        return _make_view(t, new_shape, new_stride, offset, op)
    if must_view:
        raise RuntimeError(
            f"view size is not compatible with input tensor's size and stride (at least one "
            f"dimension spans across two contiguous subspaces); use .reshape(...) instead "
            f"(view of {shape_str(t._shape)} with strides {tuple(stride)} as "
            f"{shape_str(new_shape)})"
        )
    return None


# ---------------------------------------------------------------------------- basic indexing


def _is_basic(entry) -> bool:
    return (
        entry is None
        or entry is Ellipsis
        or isinstance(entry, slice)
        or (isinstance(entry, numbers.Integral) and not isinstance(entry, (bool, np.bool_)))
    )


def _index_int(value, what: str) -> int:
    if value is None:
        return None
    if isinstance(value, Tensor):
        if value.numel() != 1 or value._dtype is float32:
            raise TypeError(f"{what}: slice indices must be integers or None, got a tensor")
        return int(value.item())
    if not isinstance(value, numbers.Integral) or isinstance(value, (bool, np.bool_)):
        if hasattr(value, "__index__"):
            return int(value.__index__())
        raise TypeError(f"{what}: slice indices must be integers or None, got {value!r}")
    return int(value)


def _expand_ellipsis(key: tuple, ndim: int, op: str) -> tuple:
    """key with its ``...`` replaced by full slices (at most one ``...``)."""
    ellipses = [i for i, e in enumerate(key) if e is Ellipsis]
    if len(ellipses) > 1:
        raise IndexError(f"{op}: an index can only have a single ellipsis ('...')")
    used = sum(1 for e in key if e is not None and e is not Ellipsis and not _is_bool_mask(e))
    used += sum(_mask_ndim(e) for e in key if _is_bool_mask(e))
    if used > ndim:
        raise IndexError(f"{op}: too many indices for tensor of dimension {ndim}")
    if not ellipses:
        return key + (slice(None),) * (ndim - used)
    i = ellipses[0]
    return key[:i] + (slice(None),) * (ndim - used) + key[i + 1 :]


def _is_bool_mask(e) -> bool:
    if isinstance(e, Tensor):
        return e._dtype.name == "bool"
    if isinstance(e, list):
        try:
            a = np.asarray(e)
        except ValueError:  # ragged: not a mask (the advanced module says what is wrong)
            return False
        return a.dtype == np.bool_
    if isinstance(e, np.ndarray):
        return e.dtype == np.bool_
    return isinstance(e, (bool, np.bool_))


def _mask_ndim(e) -> int:
    if isinstance(e, (bool, np.bool_)):
        return 0
    return np.ndim(e) if isinstance(e, list) else e.ndim


def basic_index(t: Tensor, key: tuple, op: str = "index"):
    """``(shape, stride, offset)`` of t's view under a basic key (ints, slices with steps > 0,
    ``None``; ``...`` already expanded), against t's base.

    Raises:
        IndexError: an int out of range. ValueError: a slice step <= 0 (PyTorch's rule).
    """
    _, stride, offset = layout(t)
    shape_out, stride_out = [], []
    d = 0
    for e in key:
        if e is None:
            shape_out.append(1)
            stride_out.append(0)
            continue
        n, s = t._shape[d], stride[d]
        if isinstance(e, slice):
            step = 1 if e.step is None else _index_int(e.step, op)
            if step <= 0:
                raise ValueError(f"{op}: step must be greater than zero, got {step}")
            start, stop, _ = slice(_index_int(e.start, op), _index_int(e.stop, op), step).indices(n)
            length = len(range(start, stop, step))
            offset += start * s if length else 0
            shape_out.append(length)
            stride_out.append(s * step)
        else:
            i = int(e)
            if not -n <= i < n:
                raise IndexError(
                    f"{op}: index {i} is out of bounds for dimension {d} with size {n}"
                )
            offset += (i % n) * s
        d += 1
    return tuple(shape_out), tuple(stride_out), offset


def _is_index(entry) -> bool:
    """Whether ``entry`` is an index of any kind PyTorch takes (basic or advanced)."""
    return _is_basic(entry) or isinstance(
        entry, (Tensor, list, tuple, range, np.ndarray, bool, np.bool_, np.integer)
    )


def _check_key(key: tuple, op: str) -> None:
    for e in key:
        if not _is_index(e):
            raise IndexError(
                f"{op}: only integers, slices (`:`), ellipsis (`...`), None and long or bool "
                f"tensors are valid indices (got {type(e).__name__})"
            )


def _key_tuple(key) -> tuple:
    if isinstance(key, tuple):
        return key
    if isinstance(key, list) and key and any(isinstance(k, (slice, list, Tensor)) for k in key):
        return tuple(key)  # numpy's old rule for lists holding slices: PyTorch takes it as a tuple
    return (key,)


def _getitem(t: Tensor, key):
    key = _key_tuple(key)
    _check_key(key, "index")
    if t.ndim == 0 and key == ((),):
        key = ()
    if all(_is_basic(e) for e in key):
        full = _expand_ellipsis(key, t.ndim, "index")
        shape, stride, offset = basic_index(t, full)
        return _make_view(t, shape, stride, offset, "index")
    sliced, rest = _split_key(t, key, "index")
    return _advanced_indexing.getitem(sliced, rest)


def _split_key(t: Tensor, key: tuple, op: str):
    """A key with advanced entries as (a view of t under its partial slices and Nones, the rest
    of the key with those entries made full slices): the advanced module sees only advanced
    entries, ints, full slices and ``...``."""
    n_basic = sum(1 for e in key if e is not Ellipsis and e is not None and _is_basic(e))
    n_adv = sum(_mask_ndim(e) if _is_bool_mask(e) else 1 for e in key if not _is_basic(e))
    if n_basic + n_adv > t.ndim:
        raise IndexError(f"{op}: too many indices for tensor of dimension {t.ndim}")
    if not any((isinstance(e, slice) and e != slice(None)) or e is None for e in key):
        return t, key
    # Each entry's dims: a mask spans its ndim, ... the dims nothing else names.
    spans = [
        _mask_ndim(e) if _is_bool_mask(e) else (0 if e is None or e is Ellipsis else 1) for e in key
    ]
    fill = t.ndim - sum(spans)
    basic, rest = [], []
    for e, span in zip(key, spans, strict=True):
        if e is Ellipsis:
            basic += [slice(None)] * fill
            rest.append(Ellipsis)
        elif e is None:
            basic.append(None)
            rest.append(slice(None))
        elif isinstance(e, slice):
            basic.append(e)
            rest.append(slice(None))
        else:
            basic += [slice(None)] * span
            rest.append(e)
    if Ellipsis not in key:
        basic += [slice(None)] * fill
    return _getitem(t, tuple(basic)), tuple(rest)


def _setitem(t: Tensor, key, value) -> None:
    key = _key_tuple(key)
    _check_key(key, "index_put")
    if not all(_is_basic(e) for e in key):
        target, rest = _split_key(t, key, "index_put")
        _advanced_indexing.setitem(target, rest, value)
        return
    full = _expand_ellipsis(key, t.ndim, "index_put")
    shape, stride, offset = basic_index(t, full, "index_put")
    t._check_inplace("index_put")
    region = _region_value(t, shape, value)
    # The dims the key's Nones added (length 1, stride 0) are not written: drop them.
    made = [e for e in full if not _is_int(e)]
    dims = [k for k, e in enumerate(made) if e is not None]
    size = tuple(shape[k] for k in dims)
    strides = tuple(stride[k] for k in dims)
    base, _, _ = layout(t)
    src = region.reshape(size)
    ops.as_strided_scatter(src._data, base._data, strides, offset)
    bounds = None
    if t._dtype is not float32 and base._range is not None and region._range is not None:
        bounds = (min(base._range[0], region._range[0]), max(base._range[1], region._range[1]))
    base._vc.value += 1
    if base._dtype is not float32:
        base._range = bounds


def _is_int(e) -> bool:
    return isinstance(e, numbers.Integral) and not isinstance(e, (bool, np.bool_))


def _region_value(t: Tensor, shape: tuple, value) -> Tensor:
    """The assigned value as a tensor of the region's shape (broadcast; converted to t's dtype)."""
    if isinstance(value, Tensor):
        value._concrete("index_put")
        v = value if value._dtype is t._dtype else value.to(t._dtype)
        if v._device != t._device:
            raise ValueError(f"index_put: the value is on {v._device}, the tensor on {t._device}")
    else:
        v = _copy_of(np.asarray(value), None, t._device, "index_put")
        v = v if v._dtype is t._dtype else v.to(t._dtype)
    try:
        target = tuple(np.broadcast_shapes(v._shape, shape))
    except ValueError:
        target = None
    if target != shape:
        raise ValueError(
            f"index_put: shape mismatch: value tensor of shape {shape_str(v._shape)} cannot be "
            f"broadcast to indexing result of shape {shape_str(shape)}"
        )
    if v._shape != shape:
        v = v.expand(shape).contiguous()
    return v


# ---------------------------------------------------------------------------- methods


def _dims(args, op: str) -> tuple:
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    return tuple(as_int(a, "dims", op) for a in args)


class ViewMethods:
    """The views, indexing, splitting and joining methods of Tensor."""

    # ---------------------------------------------------------------- indexing

    def __getitem__(self, key):
        """``x[key]``: basic indexing (ints, slices with positive steps, ``...``, ``None``) makes
        a view (module docstring); advanced indexing (int lists and tensors, bool masks) a
        gather whose gradient is a deterministic scatter-add.

        Raises:
            IndexError: an index out of range, too many indices. ValueError: a slice step <= 0.
            TypeError: an index of another type.
        """
        return _getitem(self, key)

    def __setitem__(self, key, value) -> None:
        """``x[key] = value`` in place: value a number or a tensor broadcast to ``x[key]``'s shape
        (converted to x's dtype). The in-place rules of ``add_`` apply (a leaf that requires grad
        needs ``no_grad()``; a tensor recorded for backward is refused).

        Raises:
            ValueError: a value that does not broadcast. IndexError / TypeError: as indexing.
            RuntimeError: the in-place rules.
        """
        _setitem(self, key, value)

    def __iter__(self):
        """The sub-tensors along dim 0 (``x[0]``, ``x[1]``, ...: views).

        Raises:
            TypeError: a 0-d tensor.
        """
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self._shape[0]))

    # ---------------------------------------------------------------- views

    def permute(self, *dims) -> Tensor:
        """The dims reordered (a view): ``dims`` a permutation of range(ndim), negatives counting
        from the end.

        Raises:
            ValueError: not a permutation of the dims.
        """
        order = _dims(dims, "permute")
        nd = self.ndim
        if len(order) != nd or sorted(d % nd if nd else d for d in order) != list(range(nd)):
            raise ValueError(
                f"permute: dims {order} are not a permutation of the {nd} dims of "
                f"{shape_str(self._shape)}"
            )
        if any(not -nd <= d < nd for d in order):
            raise IndexError(f"permute: dims {order} out of range for {nd} dims")
        order = tuple(d % nd for d in order)
        _, stride, offset = layout(self)
        shape = tuple(self._shape[d] for d in order)
        return _make_view(self, shape, tuple(stride[d] for d in order), offset, "permute")

    def transpose(self, dim0: int, dim1: int) -> Tensor:
        """Dims ``dim0`` and ``dim1`` swapped (a view)."""
        if self.ndim == 0:
            return _make_view(self, (), (), layout(self)[2], "transpose")
        a, b = self._axis(dim0, "transpose"), self._axis(dim1, "transpose")
        order = list(range(self.ndim))
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    def swapaxes(self, axis0: int, axis1: int) -> Tensor:
        """``transpose(axis0, axis1)``."""
        return self.transpose(axis0, axis1)

    def t(self) -> Tensor:
        """The transpose of a 2-D tensor (a view); 0-d and 1-d tensors as they are (views).

        Raises:
            ValueError: a tensor of more than 2 dims.
        """
        if self.ndim > 2:
            raise ValueError(
                f"t(): expects a tensor of at most 2 dims, got {shape_str(self._shape)}"
            )
        return self.transpose(0, 1) if self.ndim == 2 else self[...]

    def movedim(self, source, destination) -> Tensor:
        """Dims ``source`` (an int or a tuple) moved to positions ``destination`` (a view)."""
        src = (source,) if isinstance(source, numbers.Integral) else tuple(source)
        dst = (destination,) if isinstance(destination, numbers.Integral) else tuple(destination)
        if len(src) != len(dst):
            raise ValueError(f"movedim: source {src} and destination {dst} have different lengths")
        src = tuple(self._axis(d, "movedim") for d in src)
        dst = tuple(self._axis(d, "movedim") for d in dst)
        if len(set(src)) != len(src) or len(set(dst)) != len(dst):
            raise ValueError(f"movedim: repeated dims in {src} or {dst}")
        order = [None] * self.ndim
        for s, d in zip(src, dst, strict=True):
            order[d] = s
        rest = iter(d for d in range(self.ndim) if d not in src)
        order = [next(rest) if o is None else o for o in order]
        return self.permute(order)

    moveaxis = movedim

    def expand(self, *sizes) -> Tensor:
        """A view repeating dims of length 1 (and new leading dims) to ``sizes``; -1 keeps a
        dim. In-place ops on the result are refused (its elements share memory), as PyTorch's.

        Raises:
            ValueError: a dim that is not 1 asked to change; fewer sizes than dims.
        """
        sizes = _dims(sizes, "expand")
        nd = self.ndim
        if len(sizes) < nd:
            raise ValueError(
                f"expand: the number of sizes provided ({len(sizes)}) must be greater or equal "
                f"to the number of dimensions in the tensor ({nd})"
            )
        lead = len(sizes) - nd
        _, stride, offset = layout(self)
        shape, new_stride = [], []
        for i, want in enumerate(sizes):
            if i < lead:
                if want < 0:
                    raise ValueError(f"expand: -1 is not allowed for a new leading dim {i}")
                shape.append(want)
                new_stride.append(0)
                continue
            have = self._shape[i - lead]
            if want == -1:
                want = have
            if want != have:
                if have != 1:
                    raise ValueError(
                        f"expand: the expanded size {want} must match the existing size {have} "
                        f"at non-singleton dimension {i}; target sizes {sizes}, tensor shape "
                        f"{shape_str(self._shape)}"
                    )
                if want < 0:
                    raise ValueError(f"expand: size {want} at dim {i} is negative")
                shape.append(want)
                new_stride.append(0)
            else:
                shape.append(have)
                new_stride.append(stride[i - lead])
        return _make_view(self, tuple(shape), tuple(new_stride), offset, "expand")

    def expand_as(self, other: Tensor) -> Tensor:
        """``expand(other.shape)``."""
        if not isinstance(other, Tensor):
            raise TypeError(f"expand_as: expected a Tensor, got {type(other).__name__}")
        return self.expand(other._shape)

    def broadcast_to(self, size) -> Tensor:
        """``expand(size)``."""
        return self.expand(tuple(size))

    def narrow(self, dim: int, start: int, length: int) -> Tensor:
        """Elements ``start`` to ``start + length`` of dim ``dim`` (a view; start may be
        negative).

        Raises:
            IndexError: start or length out of range.
        """
        d = self._axis(dim, "narrow")
        n = self._shape[d]
        start, length = as_int(start, "start", "narrow"), as_int(length, "length", "narrow")
        if start < 0:
            start += n
        if not 0 <= start <= n or length < 0 or start + length > n:
            raise IndexError(
                f"narrow: start ({start}) + length ({length}) exceeds dimension size ({n}) of "
                f"{shape_str(self._shape)}, or is negative"
            )
        # x[:, ..., start:start + length] (basic_index's view) without parsing a key: split and
        # chunk make one per piece
        _, stride, offset = layout(self)
        shape = (*self._shape[:d], length, *self._shape[d + 1 :])
        return _make_view(
            self, shape, stride, offset + start * stride[d] if length else offset, "index"
        )

    def select(self, dim: int, index: int) -> Tensor:
        """``x[..., index, ...]`` along ``dim`` (a view without that dim)."""
        d = self._axis(dim, "select")
        return self[(slice(None),) * d + (as_int(index, "index", "select"),)]

    def unbind(self, dim: int = 0) -> tuple:
        """The views ``select(dim, i)`` for every i."""
        d = self._axis(dim, "unbind")
        return tuple(self.select(d, i) for i in range(self._shape[d]))

    def split(self, split_size_or_sections, dim: int = 0) -> tuple:
        """Views of consecutive pieces along ``dim``: of ``split_size`` each (the last smaller),
        or of the listed sizes (which must add up to the dim's length).

        Raises:
            ValueError: sizes that do not add up; a split size <= 0 on a nonempty dim.
        """
        d = self._axis(dim, "split")
        n = self._shape[d]
        if isinstance(split_size_or_sections, (list, tuple)):
            sizes = [as_int(s, "sizes", "split") for s in split_size_or_sections]
            if sum(sizes) != n or any(s < 0 for s in sizes):
                raise ValueError(
                    f"split: sizes {sizes} do not add up to dim {d} of size {n} "
                    f"({shape_str(self._shape)})"
                )
        else:
            size = as_int(split_size_or_sections, "split_size", "split")
            if size <= 0 and n > 0 or size < 0:
                raise ValueError(f"split: split_size must be positive, got {size}")
            sizes = [min(size, n - i) for i in range(0, n, size)] if n else [0]
        out, start = [], 0
        for s in sizes:
            out.append(self.narrow(d, start, s))
            start += s
        return tuple(out)

    def tensor_split(self, sections, dim: int = 0) -> tuple:
        """``sections`` pieces along ``dim`` as equal as can be (the first ones one longer)."""
        d = self._axis(dim, "tensor_split")
        k = as_int(sections, "sections", "tensor_split")
        if k <= 0:
            raise ValueError(f"tensor_split: sections must be positive, got {k}")
        n = self._shape[d]
        sizes = [n // k + (1 if i < n % k else 0) for i in range(k)]
        return self.split(sizes, d)

    def chunk(self, chunks: int, dim: int = 0) -> tuple:
        """At most ``chunks`` views along ``dim`` of ceil(n / chunks) elements each (PyTorch's
        rule; the last smaller, fewer chunks when n is small).

        Raises:
            ValueError: chunks <= 0.
        """
        k = as_int(chunks, "chunks", "chunk")
        if k <= 0:
            raise ValueError(f"chunk: chunks must be positive, got {k}")
        d = self._axis(dim, "chunk")
        n = self._shape[d]
        return self.split(max(-(-n // k), 1) if n else 1, d) if n else (self.narrow(d, 0, 0),) * 1

    def flip(self, *dims) -> Tensor:
        """The elements in reverse order along ``dims`` (a copy, as PyTorch's)."""
        given = [self._axis(d, "flip") for d in _dims(dims, "flip")]
        order = set(given)
        if len(order) != len(given):
            raise ValueError(f"flip: dims {tuple(given)} name a dim more than once")
        _, stride, offset = layout(self)
        new_stride = list(stride)
        for d in order:
            n = self._shape[d]
            if n > 0:
                offset += (n - 1) * stride[d]
            new_stride[d] = -stride[d]
        out = _make_view(self, self._shape, tuple(new_stride), offset, "flip", lazy=False)
        out._view = out._trace_view = None  # a copy, not a view
        return out

    def unflatten(self, dim: int, sizes) -> Tensor:
        """Dim ``dim`` split into ``sizes`` (one may be -1); a view."""
        d = self._axis(dim, "unflatten")
        sizes = tuple(as_int(s, "sizes", "unflatten") for s in sizes)
        n = self._shape[d]
        if sizes.count(-1) == 1:
            known = math.prod(s for s in sizes if s != -1)
            sizes = tuple(n // known if s == -1 and known else s for s in sizes)
        if math.prod(sizes) != n:
            raise ValueError(
                f"unflatten: sizes {sizes} do not multiply to dim {d} of size {n} "
                f"({shape_str(self._shape)})"
            )
        return self.reshape(self._shape[:d] + sizes + self._shape[d + 1 :])

    def repeat(self, *sizes) -> Tensor:
        """The tensor tiled ``sizes[i]`` times along each dim (new leading dims for extra sizes;
        a copy).

        Raises:
            ValueError: fewer sizes than dims, a negative size.
        """
        reps = _dims(sizes, "repeat")
        if len(reps) < self.ndim or any(r < 0 for r in reps):
            raise ValueError(
                f"repeat: {reps} must give a non-negative count for each of the {self.ndim} "
                "dims (or more)"
            )
        x = self.reshape((1,) * (len(reps) - self.ndim) + self._shape)
        inter = []
        for r, n in zip(reps, x._shape, strict=True):
            inter += [r, n]
        expanded = x.reshape(tuple(v for n in x._shape for v in (1, n))).expand(inter)
        return expanded.reshape(tuple(r * n for r, n in zip(reps, x._shape, strict=True)))

    def roll(self, shifts, dims=None) -> Tensor:
        """The elements shifted by ``shifts`` along ``dims`` (ints or tuples of one length),
        wrapping around (``torch.roll``; without dims, over the flattened tensor, then reshaped):
        a copy, the two pieces of each dim joined by ``cat``.

        Raises:
            ValueError: shifts and dims of different lengths. TypeError: non-int shifts.
        """
        if dims is None:
            if isinstance(shifts, (tuple, list)) and len(shifts) != 1:
                raise ValueError(f"roll: {len(shifts)} shifts need as many dims")
            shift = shifts[0] if isinstance(shifts, (tuple, list)) else shifts
            return self.reshape(-1).roll(shift, 0).reshape(self._shape)
        shifts = tuple(shifts) if isinstance(shifts, (tuple, list)) else (shifts,)
        dims = tuple(dims) if isinstance(dims, (tuple, list)) else (dims,)
        if len(shifts) != len(dims):
            raise ValueError(f"roll: shifts {shifts} and dims {dims} have different lengths")
        out = self
        for shift, dim in zip(shifts, dims, strict=True):
            d = self._axis(dim, "roll")
            n = self._shape[d]
            k = as_int(shift, "shifts", "roll") % n if n else 0
            if k:
                out = cat([out.narrow(d, n - k, k), out.narrow(d, 0, n - k)], d)
        return out if out is not self else self.clone()

    def repeat_interleave(self, repeats, dim=None) -> Tensor:
        """Each element repeated ``repeats`` times along ``dim`` (``torch.repeat_interleave``;
        without dim, over the flattened tensor): repeats an int (an expand and a reshape) or a 1-D
        int64 tensor of one count per element (read to the host for the output's length, as
        PyTorch's; then an index_select).

        Raises:
            ValueError: negative repeats, a repeats tensor of the wrong length.
            TypeError: repeats neither an int nor an int64 tensor.
        """
        if dim is None:
            return self.reshape(-1).repeat_interleave(repeats, 0)
        d = self._axis(dim, "repeat_interleave")
        if isinstance(repeats, Tensor):
            if repeats._dtype.name != "int64" or repeats.ndim > 1:
                raise TypeError("repeat_interleave: repeats must be an int or a 1-D int64 tensor")
            counts = np.rint(repeats.detach().numpy()).astype(np.int64).reshape(-1)
            if counts.size == 1:
                return self.repeat_interleave(int(counts[0]), d)
            if counts.size != self._shape[d] or (counts < 0).any():
                raise ValueError(
                    f"repeat_interleave: repeats {counts.tolist()} must be {self._shape[d]} "
                    "non-negative counts, one per element of the dim"
                )
            index = np.repeat(np.arange(self._shape[d]), counts)
            return self.index_select(d, _copy_of(index, None, self._device, "repeat_interleave"))
        r = as_int(repeats, "repeats", "repeat_interleave")
        if r < 0:
            raise ValueError(f"repeat_interleave: repeats must be non-negative, got {r}")
        shape = self._shape
        wide = self.unsqueeze(d + 1).expand(shape[: d + 1] + (r,) + shape[d + 1 :])
        return wide.reshape(shape[:d] + (shape[d] * r,) + shape[d + 1 :])

    def tile(self, *dims) -> Tensor:
        """``repeat`` with leading 1s added to ``dims`` when it has fewer than the tensor's."""
        reps = _dims(dims, "tile")
        return self.repeat((1,) * (self.ndim - len(reps)) + reps)

    # ---------------------------------------------------------------- layout queries

    def stride(self, dim: int | None = None):
        """The strides (in elements) PyTorch would give this tensor: a view's region's, else
        row-major contiguous ones; ``stride(dim)`` one of them."""
        _, stride, _ = layout(self)
        if dim is None:
            return tuple(stride)
        return stride[self._axis(dim, "stride")]

    def storage_offset(self) -> int:
        """Where the tensor starts in its base's storage, in elements (0 but for views)."""
        return layout(self)[2]

    def is_contiguous(self) -> bool:
        """Whether the strides are row-major contiguous (PyTorch's rule: dims of length 1 do not
        count)."""
        _, stride, _ = layout(self)
        return _is_contiguous(self._shape, stride)


# ---------------------------------------------------------------------------- joining


def _tensors(tensors, op: str) -> list:
    if isinstance(tensors, Tensor) or not isinstance(tensors, (list, tuple)):
        raise TypeError(f"{op}: expected a sequence of Tensors, got {type(tensors).__name__}")
    if not tensors:
        raise ValueError(f"{op}: expected a non-empty list of Tensors")
    for t in tensors:
        if not isinstance(t, Tensor):
            raise TypeError(f"{op}: expected Tensors, got {type(t).__name__}")
    dts = {t._dtype for t in tensors}
    if len(dts) > 1:
        raise TypeError(f"{op}: tensors of different dtypes {sorted(d.name for d in dts)}")
    return list(tensors)


def cat(tensors, dim: int = 0) -> Tensor:
    """The tensors joined along ``dim`` (``torch.cat``): one shape but in ``dim``, one dtype and
    device; each written into its slab of the result by one strided copy. 1-D empty tensors of
    shape (0,) are skipped, as PyTorch's legacy rule. Gradient: each input's slab.

    Raises:
        TypeError: not a sequence of tensors, mixed dtypes. ValueError: an empty list, shapes
            that differ outside ``dim``, a dim out of range, mixed devices.
    """
    ts = _tensors(tensors, "cat")
    kept = [t for t in ts if t._shape != (0,)] or ts[:1]
    dt = kept[0]._dtype
    bounds = None
    if dt is not float32 and all(t._range is not None for t in kept):
        bounds = (min(t._range[0] for t in kept), max(t._range[1] for t in kept))
    d = as_int(dim, "dim", "cat")
    return apply_op("cat", lambda *nodes: cat_op(list(nodes), d), kept, dt, bounds)


concat = concatenate = cat


def meshgrid(*tensors, indexing: str = "ij") -> tuple:
    """Coordinate grids from 1-D tensors (``torch.meshgrid``): output i holds tensor i's values
    repeated over the other tensors' dims; ``indexing="ij"`` (matrix, the default) or ``"xy"``
    (Cartesian: the first two dims swapped). Each output is an ``expand`` view.

    Raises:
        TypeError: not tensors. ValueError: a tensor that is not 0-d or 1-d, another indexing.
    """
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    ts = _tensors(list(tensors), "meshgrid")
    if indexing not in ("ij", "xy"):
        raise ValueError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    for t in ts:
        if t.ndim > 1:
            raise ValueError(f"meshgrid: expects 0-d or 1-d tensors, got {shape_str(t._shape)}")
    sizes = [t.numel() for t in ts]
    swap = indexing == "xy" and len(ts) >= 2
    if swap:
        sizes[0], sizes[1] = sizes[1], sizes[0]
    out = []
    for k, t in enumerate(ts):
        at = (1 - k if k < 2 else k) if swap else k
        shape = [1] * len(ts)
        shape[at] = t.numel()
        out.append(t.reshape(tuple(shape)).expand(tuple(sizes)))
    return tuple(out)


def stack(tensors, dim: int = 0) -> Tensor:
    """The tensors (one shape) joined along a new dim ``dim`` (``torch.stack``)."""
    ts = _tensors(tensors, "stack")
    shape = ts[0]._shape
    for t in ts:
        if t._shape != shape:
            raise ValueError(
                f"stack: expects each tensor to be equal size, but got {shape_str(shape)} and "
                f"{shape_str(t._shape)}"
            )
    nd = len(shape) + 1
    d = as_int(dim, "dim", "stack")
    if not -nd <= d < nd:
        raise IndexError(f"stack: dim {d} is out of range for {nd} dims")
    return cat([t.unsqueeze(d % nd) for t in ts], d % nd)
