"""The :class:`gpumat.Tensor` class and how its ops run (``apply_op``), with the helpers that make
tensors from data.

The class here holds what every tensor needs: construction, its properties, its host values, the
autograd entry points (``detach``, ``backward``) and the moves between devices and dtypes. Its
other methods are grouped by topic in the modules beside this one (operators and math, reductions,
layout, in-place ops), which import this module; :mod:`gpumat.tensor` adds them to the class. The
split keeps each file to one topic, and the imports go one way (topics -> this module), so there
is no cycle.
"""

from __future__ import annotations

import contextlib
import math
import numbers

import numpy as np

from gpumat import ops
from gpumat._checks import as_int
from gpumat._core import PyGpuMatrix
from gpumat.arrays import array, empty
from gpumat.autograd import (
    VersionCounter,
    check_backward,
    current_trace,
    is_grad_enabled,
    leaf_node,
    no_grad,
    record,
    run_node,
)
from gpumat.autograd import backward as _engine_backward
from gpumat.devices import Device, as_device, cpu
from gpumat.dtypes import (
    DTYPE_NAMES,
    TYPE_NAMES,
    as_dtype,
    bool_,
    dtype,
    float32,
    from_type_name,
    host_storage,
    int64,
    scalar_for,
    value_bounds,
)
from gpumat.graph.elementwise import detach_op, mul_byconst_op, oneslike_op
from gpumat.graph.node import Node, PlaceholderOp, Variable, shape_str
from gpumat.graph.strided import as_strided_op

# --------------------------------------------------------------------------------------------------
# Tensor
# --------------------------------------------------------------------------------------------------


def _is_number(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, (Tensor, np.ndarray))


def _size_args(size, op: str) -> tuple:
    """``(2, 3)`` from ``f(2, 3)`` or ``f((2, 3))``; TypeError / ValueError for bad sizes."""
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    out = tuple(as_int(d, "size", op) for d in size)
    if any(d < 0 for d in out):
        raise ValueError(f"{op}: sizes must be >= 0, got {out}")
    return out


class StridedView:
    """What makes a tensor a view: the strided region (``stride``, ``offset``, in elements) of its
    ``base``'s contiguous storage that it shows, and the base's version (``seen``) its values were
    copied at.

    gpumat's arrays are contiguous, so a view (``x[:, 0]``, ``permute``, ``expand``, ``narrow``,
    ...) holds a copy of its region, made by one strided-copy kernel, and keeps PyTorch's view
    semantics by copying in both directions: reading a view whose base changed in place since
    (its version moved) copies the region again (:meth:`refresh`), and an in-place change of the
    view writes the region back into the base (:meth:`write_back`), which counts as an in-place
    change of the base. ``base`` is never itself a view: a view of a view composes the strides.
    """

    __slots__ = ("base", "stride", "offset", "seen")

    def __init__(self, base: Tensor, stride: tuple, offset: int, copied: bool = True) -> None:
        self.base = base
        self.stride = tuple(stride)
        self.offset = int(offset)
        self.seen = base._vc.value if copied else -1  # -1: not copied yet (lazy_view)

    def refresh(self, storage) -> None:
        """Copy the base's region into ``storage`` (the view's array) again."""
        ops.as_strided(self.base._data, storage, self.stride, self.offset)
        self.seen = self.base._vc.value

    def overlaps_itself(self, shape: tuple) -> bool:
        """Whether two elements of the view are one element of the base (an expand's stride 0)."""
        dims = sorted((abs(s), n) for s, n in zip(self.stride, shape, strict=True) if n > 1)
        reach = 0
        for s, n in dims:
            if s <= reach:
                return True
            reach += s * (n - 1)
        return False

    def write_back(self, storage, bounds=None) -> None:
        """Write ``storage`` (the view's changed values) into the base's region: an in-place
        change of the base (its version moves; ``bounds``: the new value range of an int64 or
        bool view, None for unknown)."""
        base = self.base
        ops.as_strided_scatter(storage, base._data, self.stride, self.offset)
        base._vc.value += 1
        if base._dtype is not float32:
            base._range = None if bounds is None else _union(base._range, bounds)
        self.seen = base._vc.value


def _union(a, b):
    """The smallest range holding ranges a and b (None: unknown)."""
    if a is None or b is None:
        return None
    return (min(a[0], b[0]), max(a[1], b[1]))


class Tensor:
    """A float32, int64 or bool tensor on a device, with autograd (PyTorch's ``torch.Tensor``).

    Make tensors with :func:`gpumat.tensor`, :func:`gpumat.from_numpy`, :func:`gpumat.zeros`,
    :func:`gpumat.ones`, :func:`gpumat.rand`, :func:`gpumat.randn`, :func:`gpumat.arange`;
    ``gpumat.Tensor(data, dtype=None, device=None, requires_grad=False)`` is ``gpumat.tensor``.

    Attributes:
        shape: a tuple of ints (also ``size()``); ``ndim``, ``dim()``, ``numel()``.
        dtype: ``gpumat.float32``, ``gpumat.int64`` or ``gpumat.bool``.
        device: the :class:`gpumat.Device` the values live on.
        requires_grad: whether backward computes a gradient for it (float32 leaves only may be
            set; op results require one when an input does and grad mode is on).
        grad: the accumulated gradient (a float32 tensor of the same shape), or None.
        is_leaf: made by the user rather than by a recorded op.
        grad_fn: the recorded :class:`gpumat.graph.Node` that made it (None for leaves).
        data: a detached tensor sharing the storage (assigning replaces the storage).

    Methods follow PyTorch: ``numpy()``, ``item()``, ``tolist()``, ``to(device | dtype)``,
    ``detach()``, ``requires_grad_()``, ``backward(gradient=None)``, ``+ - * / @ ** ==`` (with
    numbers and the broadcasting of the module docstring), unary ``-``, ``exp``, ``log``,
    ``relu``, ``tanh``, ``sigmoid``, ``softmax(dim)``, ``log_softmax(dim)``, ``sum``, ``mean``,
    ``max``, ``argmax``, ``eq``, ``reshape``, ``view``, ``view_as``, ``flatten``, ``squeeze``,
    ``unsqueeze``, ``t()``, ``transpose(0, 1)``, and the in-place ``zero_``, ``fill_``, ``add_``,
    ``sub_``, ``mul_``, ``copy_``, ``uniform_``, ``normal_``.
    """

    # numpy scalars and arrays on the left of an operator defer to Tensor's reflected methods
    # (numpy's override protocol), and numpy ufuncs do not take tensors as arrays.
    __array_priority__ = 1000
    __array_ufunc__ = None

    def __init__(self, data, dtype=None, device=None, requires_grad: bool = False) -> None:
        made = _copy_of(data, as_dtype(dtype, "tensor"), device, "tensor")
        self._fill(made._data, made._dtype, made._device, made._range)
        self.requires_grad = requires_grad

    # The state every tensor starts with, as class attributes: a new tensor sets only what
    # differs (_fill runs for every eager op's result).
    _requires_grad = False
    _grad = None
    _node = None
    _range = None
    _range_src = None
    _trace = None
    _tnode = None
    _view = None  # a StridedView: this tensor shows a strided region of another's storage
    # In a gpumat.compile trace, a view's (base, stride, offset) against a traced base, so that
    # views of it are views of that base (one as_strided node, one copy), as StridedView makes
    # them eagerly. Safe because traces refuse in-place changes: a traced value never changes.
    _trace_view = None

    def _fill(self, data, dt, device, bounds=None, vc=None) -> None:
        """Make this tensor hold ``data`` afresh: every other state back to a new tensor's."""
        self._hold(data, dt, device, bounds, vc)
        self._requires_grad = False
        self._grad = None
        self._node = None
        self._range_src = None
        self._trace = None
        self._tnode = None
        self._view = None
        self._trace_view = None

    # The values: a PyGpuMatrix. A view's copy is brought up to date with its base first, when
    # the base changed in place since the copy was made (see StridedView), or made now, on the
    # first read of a view that lazy_view made.
    @property
    def _data(self):
        view = self._view
        if view is not None and view.seen != view.base._vc.value:
            if self._storage is None:
                self._storage = empty(self._shape, self._device)
                saved = self._node.saved if self._node is not None else None
                if saved is not None and not saved.freed:
                    saved.value = self._storage  # what backward reads as the view's value
            view.refresh(self._storage)
        return self._storage

    @_data.setter
    def _data(self, value) -> None:
        self._storage = value

    def _hold(self, data, dt, device, bounds, vc) -> None:
        """The storage, shape, dtype, device, version counter and range: all a new tensor sets
        (the rest is the class attributes' defaults)."""
        self._storage = data  # what the _data setter does, without its call
        self._shape = tuple(data.shape) if data is not None else ()
        self._dtype = dt
        self._device = device
        if vc is None:
            self._vc = VersionCounter()
            self._range = bounds
        else:  # a tensor over another's storage keeps the range that storage has
            self._vc = vc

    @classmethod
    def _make(cls, data, dt, device, bounds=None, vc=None) -> Tensor:
        t = Tensor.__new__(Tensor)
        t._hold(data, dt, device, bounds, vc)
        return t

    @classmethod
    def _symbolic(cls, trace, node, shape, dt, device, bounds=None) -> Tensor:
        t = Tensor.__new__(Tensor)
        t._fill(None, dt, device, bounds)
        t._shape = tuple(int(d) for d in shape)
        t._trace = trace
        t._tnode = node
        return t

    # ---------------------------------------------------------------- properties

    @property
    def shape(self) -> tuple:
        """The shape, a tuple of ints."""
        return self._shape

    def size(self, dim: int | None = None):
        """The shape, or its length along ``dim`` (negative counts from the end)."""
        if dim is None:
            return self._shape
        return self._shape[self._axis(dim, "size")]

    @property
    def ndim(self) -> int:
        """The number of dimensions."""
        return len(self._shape)

    def dim(self) -> int:
        """The number of dimensions."""
        return len(self._shape)

    def numel(self) -> int:
        """The number of elements."""
        return math.prod(self._shape)

    @property
    def dtype(self):
        """``gpumat.float32``, ``gpumat.int64`` or ``gpumat.bool``."""
        return self._dtype

    @property
    def device(self) -> Device:
        """The :class:`gpumat.Device` of the values."""
        return self._device

    @property
    def is_leaf(self) -> bool:
        """True unless a recorded op made this tensor (PyTorch's rule)."""
        if self._trace is not None:
            return not (self._requires_grad and isinstance(self._tnode, Node))
        return self._node is None or isinstance(self._node.op, PlaceholderOp)

    @property
    def grad_fn(self):
        """The recorded graph node that made this tensor, or None for a leaf."""
        return None if self.is_leaf else (self._tnode if self._trace is not None else self._node)

    @property
    def requires_grad(self) -> bool:
        """Whether backward computes a gradient for this tensor."""
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"requires_grad must be a bool, got {value!r}")
        value = bool(value)
        if value == self._requires_grad:
            return
        if not self.is_leaf:
            raise RuntimeError(
                "you can only change requires_grad flags of leaf variables (this tensor was made "
                "by a recorded op; use .detach() for a leaf)"
            )
        if value and not self._dtype.is_floating_point:
            raise RuntimeError(
                f"only tensors of floating point dtype can require gradients, not {self._dtype}"
            )
        self._requires_grad = value
        if self._node is not None:
            self._node.saved.leaf = self if value else None

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        """Set ``requires_grad`` in place (leaves only) and return self."""
        self.requires_grad = requires_grad
        return self

    @property
    def grad(self):
        """The gradient accumulated by backward (a float32 tensor of this shape), or None."""
        return self._grad

    @grad.setter
    def grad(self, value) -> None:
        if value is not None:
            if not isinstance(value, Tensor):
                raise TypeError(f"grad must be a Tensor or None, got {type(value).__name__}")
            if value._shape != self._shape or value._device != self._device:
                raise ValueError(
                    f"grad: assigned a {shape_str(value._shape)} tensor on {value._device} to the "
                    f"grad of a {shape_str(self._shape)} tensor on {self._device}"
                )
            if value._dtype is not float32:
                raise TypeError(f"grad must be a float32 tensor, got {value._dtype}")
        trace = current_trace()
        if trace is not None:
            trace.touch_grad(self)
        self._grad = value

    @property
    def _version(self) -> int:
        """How many in-place changes the storage has seen (PyTorch's ``_version``)."""
        return self._vc.value

    @property
    def data(self) -> Tensor:
        """A detached tensor sharing this one's storage; assigning a tensor replaces the storage
        (shape, dtype and device follow it), as PyTorch's ``.data``. The version counter and the
        value range follow the storage too (PyTorch keeps the tensor's own counter): both describe
        the storage, so a later in-place change through ``value`` shows in this tensor."""
        return self.detach()

    @data.setter
    def data(self, value: Tensor) -> None:
        if not isinstance(value, Tensor):
            raise TypeError(f"data must be a Tensor, got {type(value).__name__}")
        value._concrete("data")
        self._concrete("data")
        self._data, self._shape = value._data, value._shape
        self._dtype, self._device, self._vc = value._dtype, value._device, value._vc
        if self._node is not None and isinstance(self._node.op, PlaceholderOp):
            self._node = None  # the next op makes a leaf node for the new storage

    @property
    def _range(self):
        """``(lo, hi)`` bounds of the values of an int64 or bool tensor (None for float32), which
        class-index checks and integer sums rely on instead of reading the device.

        They live on the version counter, which every tensor over one storage shares, so a write
        through any view or alias is seen by all; they hold for the version they were set at.
        After an in-place change that declared no bounds they are read from the device once
        (synchronizing), so a stale range is never used.

        Raises:
            ValueError: the storage holds a value its dtype cannot (not a whole number within
                2**24 for int64, not 0 or 1 for bool): it was written around the front end.
        """
        if self._dtype is float32:
            return None
        vc = self._vc
        if vc.bounds is None or vc.bounds_version != vc.value:
            if self._data is None:
                return None  # a traced value: its op gave no bounds
            self._range = value_bounds(self._data.asnumpy(), self._dtype)
        return vc.bounds

    @_range.setter
    def _range(self, bounds) -> None:
        vc = self._vc
        vc.bounds, vc.bounds_version = bounds, vc.value

    @property
    def T(self) -> Tensor:  # noqa: N802 (PyTorch's name)
        """The transpose of a 2-D tensor (``t()``)."""
        return self.t()

    @property
    def mT(self) -> Tensor:  # noqa: N802 (PyTorch's name)
        """The last two dims swapped (``transpose(-2, -1)``, a view)."""
        return self.transpose(-2, -1)

    # ---------------------------------------------------------------- helpers

    def _concrete(self, what: str) -> None:
        if self._data is None:
            raise RuntimeError(
                f"{what}: this tensor belongs to a step being traced by gpumat.compile and has no "
                "value yet; return it from the step and read it from the result"
            )

    def _axis(self, dim, op: str) -> int:
        d = as_int(dim, "dim", op)
        nd = len(self._shape)
        if not -max(nd, 1) <= d < max(nd, 1):
            raise IndexError(
                f"{op}: dim {d} is out of range for a tensor of shape {shape_str(self._shape)}"
            )
        return d % nd if nd else 0

    def _graph_node(self) -> Node:
        """The node standing for this tensor in recorded graphs: the op node that made it, or a
        placeholder leaf over its storage (made once, refreshed on each use)."""
        node = self._node
        if node is None:
            node = self._node = leaf_node(self, getattr(self, "_name", "tensor"))
        elif isinstance(node.op, PlaceholderOp):
            node.saved.value = self._data
            node.saved.leaf = self if self._requires_grad else None
        return node

    def _host_values(self) -> np.ndarray:
        """The values as a numpy array of this tensor's dtype (a copy; synchronizes)."""
        self._concrete("numpy")
        values = self._data.asnumpy()
        if self._dtype is float32:
            return values
        return values.astype(self._dtype._numpy)

    def _accumulate_grad(self, contribs: list) -> None:
        """Add backward's contributions [(node, array, owned)] into ``.grad``: adopt an owned
        array as the new gradient, else sum into a new array (or into the existing gradient, in
        place, as PyTorch accumulates)."""
        g = self._grad
        if g is None:
            if len(contribs) == 1 and contribs[0][2]:
                total = contribs[0][1]
            else:
                total = empty(self._shape, self._device)
                if len(contribs) == 1:
                    ops.copy(contribs[0][1], total)
                else:
                    ops.add(contribs[0][1], contribs[1][1], total)
                    for _, value, _ in contribs[2:]:
                        ops.add(total, value, total)
            self._grad = Tensor._make(total, float32, self._device)
            return
        g._concrete("backward")
        for _, value, _ in contribs:
            ops.add(g._data, value, g._data)
        g._vc.value += 1

    # ---------------------------------------------------------------- host values

    def numpy(self) -> np.ndarray:
        """The values as a new numpy array (float32, int64 or bool; a copy, synchronizing).

        Raises:
            RuntimeError: the tensor requires a gradient (use ``detach().numpy()``, as in
                PyTorch), or it is a traced value without a value yet.
        """
        if self._requires_grad:
            raise RuntimeError(
                "Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() "
                "instead."
            )
        return self._host_values()

    def __array__(self, dtype=None, copy=None):
        values = self.numpy()
        return values if dtype is None else values.astype(dtype)

    def item(self):
        """The value of a one-element tensor as a Python float, int or bool (synchronizes).

        Raises:
            ValueError: the tensor has more or fewer than one element.
        """
        if self.numel() != 1:
            raise ValueError(
                f"item(): a tensor with {self.numel()} elements (shape "
                f"{shape_str(self._shape)}) cannot be converted to a Python number"
            )
        return self._host_values().reshape(-1)[0].item()

    def tolist(self):
        """The values as nested Python lists (a number for a 0-d tensor)."""
        return self._host_values().tolist()

    def __bool__(self) -> bool:
        if self.numel() != 1:
            raise ValueError(
                f"the truth value of a tensor with {self.numel()} elements is ambiguous"
            )
        return bool(self.item())

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if self._dtype is float32:
            raise TypeError("only integer tensors of a single element can be used as an index")
        return int(self.item())

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d tensor")
        return self._shape[0]

    def __hash__(self) -> int:
        return id(self)

    def __format__(self, spec: str) -> str:
        if not self._shape and self._data is not None:
            return format(self.item(), spec)
        return object.__format__(self, spec)

    def __repr__(self) -> str:
        extras = []
        if self._device.device_type != "cpu":
            extras.append(f"device='{self._device.device_type}:{self._device.index}'")
        if self._dtype is not float32:
            extras.append(f"dtype={self._dtype}")
        if self.grad_fn is not None:
            extras.append(f"grad_fn=<{self.grad_fn.op.name}>")
        elif self._requires_grad:
            extras.append("requires_grad=True")
        if self._data is None:
            body = f"<traced: shape={shape_str(self._shape)}>"
        else:
            body = np.array2string(self._host_values(), separator=", ", prefix="tensor(")
        return "tensor(" + ", ".join([body, *extras]) + ")"

    # ---------------------------------------------------------------- autograd

    def detach(self) -> Tensor:
        """A tensor sharing this one's storage (and version counter) with no graph: it does not
        require a gradient."""
        trace = current_trace()
        if self._trace is not None:
            if self._trace is not trace:
                raise RuntimeError("detach(): a tensor of a finished gpumat.compile trace")
            if not self._requires_grad:
                return self
            return trace.apply("detach", detach_op, [self], self._dtype, self._range, False)
        out = Tensor._make(self._data, self._dtype, self._device, None, self._vc)
        out._view = self._view  # one storage, one region of the base
        return out

    def detach_(self) -> Tensor:
        """Make this tensor a leaf that does not require a gradient, in place; returns self."""
        if self._trace is not None:
            raise RuntimeError("detach_(): in-place changes are not traced by gpumat.compile")
        self._node = None
        self._requires_grad = False
        return self

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None) -> None:
        """Accumulate the gradient of this tensor into the ``.grad`` of the leaves it depends on.

        Args:
            gradient: the vector of the vector-Jacobian product, a tensor of this shape (or an
                array-like); required unless this tensor has one element (then it is 1).
            retain_graph: keep the graph's values so backward can run through it again (default:
                release them, as PyTorch does).
            create_graph: higher-order gradients are not supported (NotImplementedError if True).
            inputs: not supported (NotImplementedError unless None).

        Raises:
            RuntimeError: the tensor does not require a gradient; it has more than one element and
                no ``gradient``; the graph was released by an earlier backward; a value the
                gradient needs was changed in place.
            ValueError / TypeError: a ``gradient`` of another shape, device or dtype.
        """
        if create_graph:
            raise NotImplementedError("backward(create_graph=True): gpumat has no second order")
        if inputs is not None:
            raise NotImplementedError("backward(inputs=...): not supported by gpumat")
        trace = current_trace()
        if self._trace is not None or trace is not None:
            if trace is None or self._trace is not trace:
                raise RuntimeError("backward(): a tensor of a finished gpumat.compile trace")
            trace.backward(self, gradient, bool(retain_graph))
            return
        check_backward(self, gradient)
        root = self._graph_node()
        if gradient is None:
            seed_node = oneslike_op(root)
            seed = (seed_node, run_node(seed_node, [self._data], self._device), True)
        else:
            g = self._gradient_arg(gradient)
            seed = (Variable("gradient"), g._data, False)
        _engine_backward(root, seed, self._device, bool(retain_graph))

    def _gradient_arg(self, gradient) -> Tensor:
        g = (
            gradient
            if isinstance(gradient, Tensor)
            else _copy_of(gradient, None, self._device, "tensor")
        )
        g._concrete("backward")
        if g._shape != self._shape:
            raise ValueError(
                f"backward: gradient has shape {shape_str(g._shape)}, the tensor "
                f"{shape_str(self._shape)}"
            )
        if g._device != self._device:
            raise ValueError(f"backward: gradient is on {g._device}, the tensor on {self._device}")
        if g._dtype is not float32:
            raise TypeError(f"backward: gradient must be float32, got {g._dtype}")
        return g

    # ---------------------------------------------------------------- devices and dtypes

    def to(self, *args, **kwargs) -> Tensor:
        """This tensor on another device and/or with another dtype: ``to(device)``,
        ``to(dtype)``, ``to(device, dtype)``, ``to(other_tensor)``, ``to(device=..., dtype=...)``.

        Returns self when nothing changes. A copy between devices is not recorded for backward:
        moving a tensor that requires a gradient (with grad mode on) is a RuntimeError; move
        leaves before using them (``model.to(device)``, ``tensor(..., device=...)``). A float to
        int64 conversion truncates toward zero (through the host: it synchronizes).

        Raises:
            TypeError / ValueError: arguments that are neither a device nor a dtype.
        """
        device, dt = None, None
        for a in [*args, kwargs.pop("device", None), kwargs.pop("dtype", None)]:
            if a is None:
                continue
            if isinstance(a, Tensor):
                device, dt = a._device, a._dtype
            elif (
                isinstance(a, (dtype, type, np.dtype))
                or (isinstance(a, str) and a in DTYPE_NAMES)
                or str(a).startswith("torch.")  # torch's dtypes (as_dtype takes three of them)
            ):
                dt = as_dtype(a, "to")
            else:
                device = as_device(a, "to")
        if kwargs:
            raise TypeError(f"to(): unexpected arguments {sorted(kwargs)}")
        out = self
        if dt is not None and dt is not self._dtype:
            out = out._cast(dt)
        if device is not None and device != out._device:
            out = out._move(device)
        return out

    def _move(self, device: Device) -> Tensor:
        self._concrete("to")
        if self._requires_grad and is_grad_enabled():
            raise RuntimeError(
                f"to({device}): copies between devices are not recorded for backward in gpumat; "
                "move leaves before using them (model.to(device), tensor(..., device=...)) or "
                "move a detach()ed tensor"
            )
        return Tensor._make(array(self._data, device), self._dtype, device, self._range)

    def _cast(self, dt) -> Tensor:
        if dt is float32 or (dt is int64 and self._dtype is bool_):
            # Exact: the storage already holds the values.
            if self._trace is not None:
                trace = self._trace
                return trace.apply("to", lambda n: mul_byconst_op(n, 1.0), [self], dt, self._range)
            self._concrete("to")
            out = empty(self._shape, self._device)
            ops.copy(self._data, out)
            return Tensor._make(out, dt, self._device, self._range if dt is not float32 else None)
        self._concrete("to")
        if self._requires_grad and is_grad_enabled():
            raise RuntimeError(f"to({dt}): conversions to {dt} are not recorded for backward")
        values = self._host_values()
        if dt is int64:
            return _from_host(np.trunc(values), int64, self._device, "to")
        return _from_host(values != 0, bool_, self._device, "to")

    def cpu(self) -> Tensor:
        """``to(gpumat.cpu())``."""
        return self.to(cpu())

    def float(self) -> Tensor:
        """``to(gpumat.float32)``."""
        return self.to(float32)

    def long(self) -> Tensor:
        """``to(gpumat.int64)``."""
        return self.to(int64)

    def bool(self) -> Tensor:
        """``to(gpumat.bool)`` (nonzero is True)."""
        return self.to(bool_)

    def type(self, dtype=None, non_blocking: bool = False):
        """``type()``: the tensor's type name, ``'gpumat.FloatTensor'``, ``'gpumat.LongTensor'``
        or ``'gpumat.BoolTensor'`` (PyTorch's ``'torch.FloatTensor'`` under gpumat's name, on every
        device). ``type(dtype)``: ``to(dtype)``, the dtype a gpumat dtype or any spelling
        ``to`` takes, or a type name (``'gpumat.LongTensor'``, or ``'torch.LongTensor'`` as
        PyTorch code writes it).

        Raises:
            TypeError: a dtype or type name gpumat does not have (float64, int32, ...).
        """
        if dtype is None:
            return f"gpumat.{TYPE_NAMES[self._dtype.name]}"
        if isinstance(dtype, str) and dtype not in DTYPE_NAMES:
            return self.to(from_type_name(dtype, "type"))
        return self.to(as_dtype(dtype, "type"))

    def is_floating_point(self) -> bool:
        """True for float32 tensors."""
        return self._dtype.is_floating_point

    def __deepcopy__(self, memo) -> Tensor:
        """``copy.deepcopy``: a new leaf with a copy of the values, the same dtype, device,
        ``requires_grad`` and class (a ``Parameter`` stays one), as PyTorch's; how
        ``nn.TransformerEncoder`` clones its layer.

        Raises:
            RuntimeError: a tensor made by a recorded op (PyTorch's rule: only leaves).
        """
        if not self.is_leaf:
            raise RuntimeError(
                "Only Tensors created explicitly by the user (graph leaves) support the deepcopy "
                "protocol at the moment"
            )
        out = self.detach().clone()
        if type(self) is not Tensor:
            out.__class__ = type(self)
        out.requires_grad = self.requires_grad
        memo[id(self)] = out
        return out

    def clone(self) -> Tensor:
        """A copy with its own storage (recorded: the gradient flows to this tensor)."""
        return apply_op("clone", lambda n: mul_byconst_op(n, 1.0), [self], self._dtype, self._range)

    def contiguous(self) -> Tensor:
        """Self when its strides are row-major (``is_contiguous()``), else a copy with its own
        storage (a view of a permute, a slice with steps, an expand: PyTorch's rule)."""
        if self.is_contiguous():
            return self
        if self._trace_view is not None:  # in a trace, a view's node holds the region, contiguous:
            out = object.__new__(type(self))  # the same node without the view, no copy
            out.__dict__.update(self.__dict__)
            out._trace_view = None
            return out
        view = self._view
        base = view.base if view is not None else None
        if base is not None and 0 not in view.stride and self._requires_grad <= base._requires_grad:
            # One copy of the region straight from the base, as the view's own node makes it (a
            # clone would copy the view's copy: two, and a head split's first read is the copy)
            # (a view made under no_grad from a base that requires grad passes no gradient back)
            same = self._requires_grad == base._requires_grad
            with contextlib.nullcontext() if same else no_grad():
                return apply_op(
                    "contiguous",
                    lambda n: as_strided_op(n, self._shape, view.stride, view.offset),
                    [base],
                    self._dtype,
                    self._range,
                )
        return self.clone()

    # ---------------------------------------------------------------- new tensors like this one

    def new_full(self, size, fill_value, *, dtype=None, device=None, requires_grad=False):
        """``fill_value`` in shape ``size``, of this tensor's dtype and device unless given
        (PyTorch's ``new_full``).

        Raises:
            TypeError / ValueError: a bad size; a value the dtype cannot hold.
        """
        return _filled(
            "new_full",
            (size,),
            fill_value,
            dtype or self._dtype,
            self._device if device is None else device,
            requires_grad,
        )

    def new_zeros(self, *size, dtype=None, device=None, requires_grad=False) -> Tensor:
        """Zeros of shape ``size`` (``new_zeros(2, 3)`` or ``new_zeros((2, 3))``), of this
        tensor's dtype and device unless given."""
        shape = _size_args(size, "new_zeros")
        return self.new_full(shape, 0, dtype=dtype, device=device, requires_grad=requires_grad)

    def new_ones(self, *size, dtype=None, device=None, requires_grad=False) -> Tensor:
        """Ones of shape ``size``, of this tensor's dtype and device unless given."""
        shape = _size_args(size, "new_ones")
        return self.new_full(shape, 1, dtype=dtype, device=device, requires_grad=requires_grad)

    def new_empty(self, *size, dtype=None, device=None, requires_grad=False) -> Tensor:
        """A float32 tensor of shape ``size`` with unset values, on this tensor's device unless
        given (PyTorch's ``new_empty``; see :func:`gpumat.empty_like`).

        Raises:
            TypeError: a dtype other than float32 (int64 and bool tensors know their range).
        """
        dt = as_dtype(dtype, "new_empty") or self._dtype
        if dt is not float32:
            raise TypeError(
                f"new_empty: only float32 ({dt} tensors know their values' range, which unset "
                "memory has not; use new_zeros)"
            )
        dev = self._device if device is None else as_device(device, "new_empty")
        out = Tensor._make(empty(_size_args(size, "new_empty"), dev), float32, dev)
        if requires_grad:
            out.requires_grad = True
        return out

    def new_tensor(self, data, *, dtype=None, device=None, requires_grad=False) -> Tensor:
        """A copy of ``data`` (host data or a tensor), of this tensor's dtype and device unless
        given (PyTorch's ``new_tensor``: the copy never shares memory or gradient history)."""
        dt = as_dtype(dtype, "new_tensor") or self._dtype
        dev = self._device if device is None else as_device(device, "new_tensor")
        if isinstance(data, Tensor):
            data._concrete("new_tensor")
            data = data._host_values()
        out = _from_host(data, dt, dev, "new_tensor")
        if requires_grad:
            out.requires_grad = True
        return out

    def data_ptr(self) -> int:
        """The address of the first element in device (or host) memory, as an int; 0 for an
        empty tensor (PyTorch's ``data_ptr``).

        Raises:
            RuntimeError: a tensor of a step being traced by gpumat.compile (it has no memory yet).
        """
        self._concrete("data_ptr")
        return self._data._address_range()[0]

    def _kernel_argument(self, where: str):
        """The storage a user CUDA kernel (gpumat.cuda.RawKernel) receives for this tensor.

        Raises:
            TypeError: an int64 or bool tensor (stored as float32 values: a kernel would read
                them as the wrong type).
            RuntimeError: a tensor of a step being traced by gpumat.compile (a kernel launch
                needs memory; trace it through gpumat.autograd.Function's ops instead).
        """
        self._concrete(where)
        if self._dtype is not float32:
            raise TypeError(
                f"{where}: a {self._dtype} tensor is stored as float32 values; pass a float32 "
                "tensor (convert with .float()) and read the values as float in the kernel"
            )
        return self._data


def _require_float(op: str, *tensors) -> None:
    for t in tensors:
        if t._dtype is not float32:
            raise TypeError(
                f"{op}: expected float32 tensors, got {t._dtype} (shape {shape_str(t._shape)}): "
                "int64 and bool tensors hold class indices and comparisons; convert with .float()"
            )


# --------------------------------------------------------------------------------------------------
# Running ops: eagerly, recorded for backward, or traced
# --------------------------------------------------------------------------------------------------


def _device_of(op: str, inputs) -> Device:
    device = inputs[0]._device
    for t in inputs[1:]:
        if t._device is not device and t._device != device:
            raise ValueError(
                f"{op}: tensors on different devices: {shape_str(inputs[0]._shape)} on {device} "
                f"and {shape_str(t._shape)} on {t._device}; devices are never mixed implicitly: "
                "move one with .to()"
            )
    return device


def apply_op(
    op: str,
    make,
    inputs: list,
    out_dtype=float32,
    bounds=None,
    differentiable: bool = True,
    view: bool = False,
) -> Tensor:
    """Run one graph op on tensors: the front end's single way of computing.

    Args:
        op: the front-end name, prefixed to shape errors (``"linear"``, ``"add"``).
        make: builds the graph node from the inputs' nodes (an op helper, e.g. ``relu_op`` or
            ``lambda x, w: matmul_op(x, w, False, True)``).
        inputs: the tensors, all on one device.
        out_dtype: the result's dtype; bounds: its value range (int64 and bool results).
        differentiable: whether the result may require a gradient.
        view: the result shares the input's version counter (reshapes).

    Eagerly the node's kernel runs at once (:func:`gpumat.autograd.run_node`) and, when an input
    requires a gradient and grad mode is on, the node is recorded for backward; under
    :func:`gpumat.compile` the node is recorded symbolically (:class:`Trace`).

    Raises:
        ValueError: devices differ, or the op's shape rule rejects the shapes (the message names
            ``op``, the graph op and the shapes).
    """
    # One pass over the inputs for their device, trace and requires_grad: this runs for every
    # eager op, so it avoids the helper calls and generators a plainer form would make.
    first = inputs[0]
    device = first._device
    traced = first._trace is not None
    wants_grad = first._requires_grad
    for t in inputs[1:]:
        if t._device is not device and t._device != device:
            _device_of(op, inputs)  # raises, naming the devices
        traced = traced or t._trace is not None
        wants_grad = wants_grad or t._requires_grad
    trace = current_trace()
    if trace is not None or traced:
        if trace is None:
            raise RuntimeError(f"{op}: a tensor of a finished gpumat.compile trace")
        return trace.apply(op, make, inputs, out_dtype, bounds, differentiable)
    grad = wants_grad and differentiable and is_grad_enabled()
    node = make(*[t._graph_node() for t in inputs])
    try:
        value = run_node(node, [t._data for t in inputs], device)
    except ValueError as exc:
        raise ValueError(f"{op}: {exc}") from None
    out = Tensor._make(value, out_dtype, device, bounds, first._vc if view else None)
    if grad:
        out._requires_grad = True
        record(node, value, out._vc, tuple([t._vc.value for t in inputs]))
        out._node = node
    return out


def lazy_view(op: str, base: Tensor, shape: tuple, stride: tuple, offset: int) -> Tensor:
    """Eagerly, the view of ``base``'s storage (``shape``, ``stride``, ``offset`` in elements;
    ``base`` not itself a view) as ``apply_op`` of ``as_strided_op`` makes it (the same node, the
    same record for backward), but copied when first read (``Tensor._data``), not now: the views
    that are only viewed again, as in ``q.view(b, t, h, d).transpose(1, 2)`` of a ``split``, are
    never copied. Raises ValueError (prefixed with ``op``) for a region outside the base."""
    node = as_strided_op(base._graph_node(), shape, stride, offset)
    try:
        shape = tuple(node.op.infer_shape(node, [base._shape]))
    except ValueError as exc:
        raise ValueError(f"{op}: {exc}") from None
    out = Tensor._make(None, base._dtype, base._device, base._range)
    out._shape = shape
    if is_grad_enabled() and base._requires_grad:
        out._requires_grad = True
        record(node, None, out._vc, (base._vc.value,))
        out._node = node
    out._view = StridedView(base, stride, offset, copied=False)
    return out


# --------------------------------------------------------------------------------------------------
# Creation
# --------------------------------------------------------------------------------------------------


def _from_host(data, dt, device: Device, op: str) -> Tensor:
    values, dt, bounds = host_storage(data, dt, op)
    return Tensor._make(array(values, device), dt, device, bounds)


def _copy_of(data, dt, device, op: str) -> Tensor:
    """A new tensor holding a copy of ``data`` (a Tensor, a PyGpuMatrix or host data), on
    ``device`` (default: the Tensor's, else the host) and of dtype ``dt`` (default: the data's)."""
    if isinstance(data, Tensor):
        data._concrete(op)
        device = data._device if device is None else as_device(device, op)
        out = Tensor._make(array(data._data, device), data._dtype, device, data._range)
        return out if dt is None or dt is out._dtype else out.to(dt)
    if isinstance(data, PyGpuMatrix):
        data = data.asnumpy()
    return _from_host(data, dt, as_device(device, op), op)


def _filled(op: str, size, value, dtype, device, requires_grad) -> Tensor:
    shape = _size_args(size, op)
    dt = as_dtype(dtype, op)
    if dt is None:
        if isinstance(value, (bool, np.bool_)):
            dt = bool_
        elif isinstance(value, numbers.Integral):
            dt = int64
        else:
            dt = float32
    value = scalar_for(dt, value, op)
    device = as_device(device, op)
    data = empty(shape, device)
    ops.fill(data, float(value))
    bounds = None if dt is float32 else (int(value), int(value))
    out = Tensor._make(data, dt, device, bounds)
    if requires_grad:
        out.requires_grad = True
    return out
