"""The :class:`gpumat.Tensor` class and how its ops run (``apply_op``), with the helpers that make
tensors from data.

:mod:`gpumat.tensor` (this package) re-exports what other modules use; the code is here.
"""

from __future__ import annotations

import collections
import math
import numbers

import numpy as np

from gpumat import broadcasting, ops
from gpumat._checks import as_int
from gpumat._core import PyGpuMatrix
from gpumat.arrays import array, empty
from gpumat.autograd import (
    VersionCounter,
    check_backward,
    current_trace,
    is_grad_enabled,
    leaf_node,
    record,
    run_node,
)
from gpumat.autograd import backward as _engine_backward
from gpumat.device import Device, as_device
from gpumat.dtypes import (
    DTYPE_NAMES,
    EXACT_INT,
    as_dtype,
    bool_,
    dtype,
    float32,
    host_storage,
    int64,
    scalar_for,
    value_bounds,
)
from gpumat.graph.conv import add_channel_bias_op
from gpumat.graph.elementwise import (
    add_byconst_op,
    add_op,
    detach_op,
    div_op,
    eq_op,
    mul_byconst_op,
    mul_op,
    oneslike_op,
    pow_zero_op,
)
from gpumat.graph.layout import reshape_op, transpose_op
from gpumat.graph.matmul import matmul_op
from gpumat.graph.node import TENSOR_METHODS, Node, PlaceholderOp, Variable, shape_str
from gpumat.graph.reduce import (
    argmax_op,
    reduce_max_op,
    reduce_mean_op,
    reduce_sum_op,
)
from gpumat.graph.softmax import log_softmax_op, softmax_op
from gpumat.random import draw_seed

# --------------------------------------------------------------------------------------------------
# Tensor
# --------------------------------------------------------------------------------------------------

_MaxResult = collections.namedtuple("max", ["values", "indices"])


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


def _pointwise(name: str, graph_op, doc: str):
    """A float32 tensor method applying the one-input graph op ``graph_op`` elementwise."""

    def method(self: Tensor) -> Tensor:
        _require_float(name, self)
        return apply_op(name, graph_op, [self])

    method.__name__ = method.__qualname__ = name
    method.__doc__ = doc
    return method


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

    def _fill(self, data, dt, device, bounds=None, vc=None) -> None:
        self._data = data
        self._shape = tuple(data.shape) if data is not None else ()
        self._dtype = dt
        self._device = device
        self._requires_grad = False
        self._grad = None
        self._node = None
        if vc is None:
            self._vc = VersionCounter()
            self._range = bounds
        else:  # a tensor over another's storage keeps the range that storage has
            self._vc = vc
        self._range_src = None
        self._trace = None
        self._tnode = None
        self._copy_of_view = None  # the op whose result PyTorch makes a view (see t())

    @classmethod
    def _make(cls, data, dt, device, bounds=None, vc=None) -> Tensor:
        t = Tensor.__new__(Tensor)
        t._fill(data, dt, device, bounds, vc)
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
        out._copy_of_view = self._copy_of_view  # PyTorch's would still view the original
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
            elif isinstance(a, (dtype, type, np.dtype)) or (
                isinstance(a, str) and a in DTYPE_NAMES
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
        return self.to(Device("cpu", 0))

    def float(self) -> Tensor:
        """``to(gpumat.float32)``."""
        return self.to(float32)

    def long(self) -> Tensor:
        """``to(gpumat.int64)``."""
        return self.to(int64)

    def bool(self) -> Tensor:
        """``to(gpumat.bool)`` (nonzero is True)."""
        return self.to(bool_)

    def is_floating_point(self) -> bool:
        """True for float32 tensors."""
        return self._dtype.is_floating_point

    def clone(self) -> Tensor:
        """A copy with its own storage (recorded: the gradient flows to this tensor)."""
        return apply_op("clone", lambda n: mul_byconst_op(n, 1.0), [self], self._dtype, self._range)

    def contiguous(self) -> Tensor:
        """Self (gpumat tensors are always contiguous), or a copy of a ``t()`` result, as
        PyTorch's ``contiguous()`` of a transposed view is one: in place ops may change it."""
        return self.clone() if self._copy_of_view is not None else self

    # ---------------------------------------------------------------- arithmetic

    def _operand(self, other, op: str):
        """A tensor or a float for the other side of a binary op, or NotImplemented."""
        if isinstance(other, Tensor):
            return other
        if isinstance(other, (bool, np.bool_)):
            return float(other)
        if _is_number(other):
            return float(other)
        if isinstance(other, (np.ndarray, list, tuple)):
            return _copy_of(other, None, self._device, "tensor")
        return NotImplemented

    def __add__(self, other):
        other = self._operand(other, "add")
        if other is NotImplemented:
            return other
        if isinstance(other, Tensor):
            return _add(self, other)
        _require_float("add", self)
        return apply_op("add", lambda n: add_byconst_op(n, other), [self])

    __radd__ = __add__

    def __sub__(self, other):
        other = self._operand(other, "sub")
        if other is NotImplemented:
            return other
        if isinstance(other, Tensor):
            _require_float("sub", self, other)
            return _add(self, other.__neg__(), "sub")
        _require_float("sub", self)
        return apply_op("sub", lambda n: add_byconst_op(n, -other), [self])

    def __rsub__(self, other):
        other = self._operand(other, "sub")
        if other is NotImplemented:
            return other
        if isinstance(other, Tensor):
            return other.__sub__(self)
        _require_float("sub", self)
        return apply_op("sub", lambda n: add_byconst_op(n, other), [-self])

    def __mul__(self, other):
        other = self._operand(other, "mul")
        if other is NotImplemented:
            return other
        if isinstance(other, Tensor):
            return _binary("mul", self, other, mul_op)
        _require_float("mul", self)
        return apply_op("mul", lambda n: mul_byconst_op(n, other), [self])

    __rmul__ = __mul__

    def __truediv__(self, other):
        other = self._operand(other, "div")
        if other is NotImplemented:
            return other
        if isinstance(other, Tensor):
            return _binary("div", self, other, div_op)
        _require_float("div", self)
        # A true division by float32(c), as PyTorch computes it: x * (1/c) is not the same
        # function (with c = 1e-39, 1/c overflows to inf, so 0 / c became NaN and 1e-10 / c inf).
        divisor = _filled("full", ((),), other, float32, self._device, False)
        return _binary("div", self, divisor, div_op)

    def __rtruediv__(self, other):
        other = self._operand(other, "div")
        if other is NotImplemented:
            return other
        if isinstance(other, Tensor):
            return other.__truediv__(self)
        _require_float("div", self)
        return _binary(
            "div", _filled("full", ((),), other, None, self._device, False), self, div_op
        )

    def div(self, other) -> Tensor:
        """``self / other``."""
        return self.__truediv__(other)

    def add(self, other, alpha: float = 1) -> Tensor:
        """``self + alpha * other``."""
        return self + (other * alpha if alpha != 1 else other)

    def sub(self, other, alpha: float = 1) -> Tensor:
        """``self - alpha * other``."""
        return self - (other * alpha if alpha != 1 else other)

    def mul(self, other) -> Tensor:
        """``self * other``."""
        return self * other

    def __neg__(self):
        _require_float("neg", self)
        return apply_op("neg", lambda n: mul_byconst_op(n, -1.0), [self])

    def neg(self) -> Tensor:
        """``-self``."""
        return -self

    def __pos__(self):
        return self

    def __pow__(self, exponent):
        """``self ** n`` for an integer n >= 0, as repeated products (exact as PyTorch's x * x
        for n = 2); always a new tensor (n = 1: a copy; n = 0: ones, whose gradient is zero).
        Raises TypeError for other exponents (gpumat has no pow kernel)."""
        if isinstance(exponent, bool) or not isinstance(exponent, (numbers.Integral, float)):
            return NotImplemented
        if float(exponent) != int(exponent) or exponent < 0:
            raise TypeError(
                f"pow: gpumat supports integer exponents >= 0 (products), got {exponent!r}"
            )
        n = int(exponent)
        _require_float("pow", self)
        if n == 0:  # ones (also for inf and NaN, as PyTorch), recorded so backward reaches self
            return apply_op("pow", lambda node: pow_zero_op(node), [self])
        if n == 1:  # a new tensor, as PyTorch's: an in-place change of the result leaves self
            return self * 1.0
        result, base = None, self
        while n:
            if n & 1:
                result = base if result is None else result * base
            n >>= 1
            if n:
                base = base * base
        return result

    def pow(self, exponent) -> Tensor:
        """``self ** exponent`` (see ``__pow__``)."""
        return self.__pow__(exponent)

    def __matmul__(self, other):
        if not isinstance(other, Tensor):
            return NotImplemented
        return matmul(self, other)

    def matmul(self, other) -> Tensor:
        """``self @ other``: 2-D tensors (N, K) @ (K, M) -> (N, M)."""
        return matmul(self, other)

    def mm(self, other) -> Tensor:
        """``self @ other`` for 2-D tensors."""
        return matmul(self, other)

    def __eq__(self, other):
        other = self._operand(other, "eq")
        if other is NotImplemented:
            return other
        return self.eq(other)

    def __ne__(self, other):
        other = self._operand(other, "ne")
        if other is NotImplemented:
            return other
        return self.ne(other)

    def eq(self, other) -> Tensor:
        """A bool tensor: True where ``self == other`` (a tensor, broadcast as for ``+``, or a
        number). NaN equals nothing. Not differentiable."""
        value = self._operand(other, "eq")
        if value is NotImplemented:
            raise TypeError(f"eq: cannot compare a tensor with a {type(other).__name__}")
        other = value
        if not isinstance(other, Tensor):
            other = _filled("full", ((),), other, None, self._device, False)
        return _binary("eq", self, other, eq_op, out_dtype=bool_, differentiable=False)

    def ne(self, other) -> Tensor:
        """A bool tensor: True where ``self != other`` (``1 - eq``)."""
        e = self.eq(other)
        negated = apply_op("ne", lambda n: mul_byconst_op(n, -1.0), [e], bool_, (-1, 0), False)
        return apply_op("ne", lambda n: add_byconst_op(n, 1.0), [negated], bool_, (0, 1), False)

    # ---------------------------------------------------------------- elementwise functions

    def softmax(self, dim: int) -> Tensor:
        """exp(x) / sum exp(x) along ``dim`` (max-subtracted: no overflow)."""
        _require_float("softmax", self)
        axis = self._axis(dim, "softmax")
        if self.ndim == 0:  # over its one element, as PyTorch: 1
            return self.reshape(1).softmax(0).reshape(())
        return apply_op("softmax", lambda n: softmax_op(n, axis), [self])

    def log_softmax(self, dim: int) -> Tensor:
        """x - log(sum exp(x)) along ``dim`` (the log-sum-exp trick: finite for finite x)."""
        _require_float("log_softmax", self)
        axis = self._axis(dim, "log_softmax")
        if self.ndim == 0:  # over its one element, as PyTorch: 0
            return self.reshape(1).log_softmax(0).reshape(())
        return apply_op("log_softmax", lambda n: log_softmax_op(n, axis), [self])

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

    # ---------------------------------------------------------------- shapes (views)

    def reshape(self, *shape) -> Tensor:
        """The same values in row-major order with a new shape (one entry may be -1). A view: it
        shares the storage and the version counter."""
        node_shape = tuple(as_int(d, "shape", "reshape") for d in _flat(shape))
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
        """``reshape`` (gpumat tensors are contiguous, so every view is possible). A view of a
        ``t()`` result refuses in-place ops as that result does."""
        out = self.reshape(*shape)
        out._copy_of_view = self._copy_of_view
        return out

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

    def t(self) -> Tensor:
        """The transpose of a 2-D tensor; 0-d and 1-d tensors are returned as they are.

        PyTorch returns a view, which gpumat's contiguous storage cannot be yet: the result is a
        copy, and an in-place op on it is a RuntimeError (it would not reach this tensor, as it
        would in PyTorch). Use it out of place, or ``.clone()`` it first.

        Raises:
            ValueError: a tensor of more than 2 dims.
        """
        if self.ndim < 2:
            return self
        if self.ndim != 2:
            raise ValueError(
                f"t(): expects a tensor of at most 2 dims, got {shape_str(self._shape)}"
            )
        out = apply_op("t", transpose_op, [self], self._dtype, self._range)
        out._copy_of_view = "t()"
        return out

    def transpose(self, dim0: int, dim1: int) -> Tensor:
        """Swap two axes: ``transpose(0, 1)`` of a 2-D tensor (gpumat's transpose kernel is 2-D).

        Raises:
            ValueError: other axes of a tensor of rank > 2.
        """
        a, b = self._axis(dim0, "transpose"), self._axis(dim1, "transpose")
        if a == b:
            return self
        if self.ndim != 2:
            raise ValueError(
                f"transpose: gpumat transposes 2-D tensors only, got {shape_str(self._shape)} "
                f"with dims ({dim0}, {dim1})"
            )
        return self.t()

    # ---------------------------------------------------------------- in-place ops

    def _check_inplace(self, op: str) -> None:
        if self._copy_of_view is not None:
            raise RuntimeError(
                f"{op}: this tensor is a copy made by {self._copy_of_view}, where PyTorch makes a "
                "view, so an in-place change would not reach the original; change it out of "
                "place, or .clone() it first"
            )
        if self._trace is not None or current_trace() is not None:
            raise RuntimeError(
                f"{op}: in-place ops are not traced by gpumat.compile; make the change outside "
                "the compiled step, or out of place inside it"
            )
        self._concrete(op)
        if self._requires_grad and is_grad_enabled():
            if self.is_leaf:
                raise RuntimeError(
                    f"{op}: a leaf Variable that requires grad is being used in an in-place "
                    "operation (wrap it in gpumat.no_grad())"
                )
            raise RuntimeError(
                f"{op}: in-place operations on tensors recorded for backward are not supported by "
                "gpumat's autograd; use the out-of-place op"
            )

    def _changed(self, bounds=None) -> Tensor:
        """Record an in-place change of the storage: a new version and, for int64 and bool
        tensors, the values' new bounds (None: unknown, read from the device when needed). Every
        tensor over the storage sees both (``_range``)."""
        self._vc.value += 1
        if self._dtype is not float32:
            self._range = bounds
        return self

    def zero_(self) -> Tensor:
        """Set every element to 0, in place."""
        self._check_inplace("zero_")
        ops.fill(self._data, 0.0)
        return self._changed((0, 0))

    def fill_(self, value) -> Tensor:
        """Set every element to ``value``, in place. An int64 tensor takes a float truncated
        toward zero and a bool tensor ``value != 0``, as PyTorch's ``fill_``.

        Raises:
            TypeError: not a number. ValueError: for an int64 tensor, a NaN, an infinity or a
                value beyond 2**24 in magnitude (float32 storage holds integers exactly up to
                there).
        """
        self._check_inplace("fill_")
        value = scalar_for(self._dtype, value, "fill_", truncate=True)
        ops.fill(self._data, float(value))
        return self._changed((int(value), int(value)) if self._dtype is not float32 else None)

    def _inplace_other(self, other, op: str):
        if isinstance(other, Tensor):
            other._concrete(op)
            _require_float(op, self, other)
            if other._shape != self._shape or other._device != self._device:
                raise ValueError(
                    f"{op}: the other tensor is {shape_str(other._shape)} on {other._device}, this "
                    f"one {shape_str(self._shape)} on {self._device}"
                )
            return other
        if _is_number(other):
            _require_float(op, self)
            return float(other)
        raise TypeError(f"{op}: expected a Tensor or a number, got {type(other).__name__}")

    def add_(self, other, alpha: float = 1) -> Tensor:
        """``self += alpha * other`` in place (other a tensor of this shape, or a number)."""
        self._check_inplace("add_")
        other = self._inplace_other(other, "add_")
        if isinstance(other, Tensor):
            ops.axpy(float(alpha), other._data, self._data)
        else:
            ops.add_scalar(self._data, other * float(alpha), self._data)
        return self._changed()

    def sub_(self, other, alpha: float = 1) -> Tensor:
        """``self -= alpha * other`` in place."""
        return self.add_(other, -alpha)

    def mul_(self, other) -> Tensor:
        """``self *= other`` in place (a tensor of this shape, or a number)."""
        self._check_inplace("mul_")
        other = self._inplace_other(other, "mul_")
        if isinstance(other, Tensor):
            ops.mul(self._data, other._data, self._data)
        else:
            ops.mul_scalar(self._data, other, self._data)
        return self._changed()

    def div_(self, other) -> Tensor:
        """``self /= other`` in place (a tensor of this shape, or a number), IEEE division as
        ``/`` (a number divides, it does not multiply by its reciprocal)."""
        self._check_inplace("div_")
        other = self._inplace_other(other, "div_")
        if isinstance(other, Tensor):
            ops.div(self._data, other._data, self._data)
        else:
            divisor = empty(self._shape, self._device)
            ops.fill(divisor, other)
            ops.div(self._data, divisor, self._data)
        return self._changed()

    def _augmented(self, op: str, other, inplace, out_of_place):
        """``x op= other``: in place, as PyTorch (the tutorials' ``p -= p.grad * lr`` under
        ``no_grad()`` updates ``p``). gpumat's autograd records no in-place op, so on a tensor in
        a recorded graph or a compiled step ``x op= y`` rebinds ``x`` to ``x op y`` (an alias
        made before keeps the old value); a leaf that requires a gradient is refused with grad
        mode on, as PyTorch refuses it."""
        recorded = self._requires_grad and is_grad_enabled() and not self.is_leaf
        if self._trace is not None or current_trace() is not None or recorded:
            return out_of_place(other)
        if isinstance(other, Tensor) and other._shape != self._shape:
            result = out_of_place(other)  # broadcast as the binary op does, then store
            if result._shape != self._shape:
                raise RuntimeError(
                    f"{op}: output with shape {shape_str(self._shape)} doesn't match the "
                    f"broadcast shape {shape_str(result._shape)}"
                )
            return self.copy_(result)
        return inplace(other)

    def __iadd__(self, other):
        return self._augmented("add_", other, self.add_, self.__add__)

    def __isub__(self, other):
        return self._augmented("sub_", other, self.sub_, self.__sub__)

    def __imul__(self, other):
        return self._augmented("mul_", other, self.mul_, self.__mul__)

    def __itruediv__(self, other):
        return self._augmented("div_", other, self.div_, self.__truediv__)

    def copy_(self, src) -> Tensor:
        """Copy ``src`` (a tensor of this shape on any device, or array-like data) into this
        tensor's storage, in place; its dtype is kept, and the values are converted as PyTorch's
        ``copy_`` converts them (see ``_converted``: into int64, floats truncate toward zero).

        Raises:
            ValueError: another shape; for an int64 tensor, a NaN, an infinity or a value
                beyond 2**24 in magnitude. TypeError: non-numeric data.
        """
        self._check_inplace("copy_")
        if not isinstance(src, Tensor):
            src = self._converted(src, "copy_")
        src._concrete("copy_")
        if src._shape != self._shape:
            raise ValueError(
                f"copy_: source has shape {shape_str(src._shape)}, destination "
                f"{shape_str(self._shape)}"
            )
        src = self._converted(src, "copy_")
        bounds = src._range if self._dtype is not float32 else None
        self._data.copyfrom(src._data)
        return self._changed(bounds)

    def _converted(self, src, op: str) -> Tensor:
        """``src`` (a Tensor, a ``PyGpuMatrix`` or host data) as a tensor of this one's dtype,
        holding what PyTorch's ``copy_`` would store: into int64, floats truncated toward zero;
        into bool, ``value != 0``; int64 and bool into float32, and bool into int64, as they are
        (``src`` itself when it is a tensor that needs no conversion). Host data is made on this
        tensor's device; a tensor to convert is read through the host (it synchronizes).

        Raises:
            ValueError (naming ``op``): into int64, a NaN, an infinity or a value beyond 2**24
                in magnitude. TypeError: non-numeric data.
        """
        dt = self._dtype
        if isinstance(src, Tensor):
            src._concrete(op)
            if src._dtype is dt or dt is float32 or (dt is int64 and src._dtype is bool_):
                return src  # the float32 storage already holds the values
            values, device = src._data.asnumpy(), src._device
        else:
            values = src.asnumpy() if isinstance(src, PyGpuMatrix) else np.asarray(src)
            device = self._device
            if dt is float32 or values.dtype.kind not in "f":
                return _from_host(values, dt, device, op)
        if dt is int64:
            finite = np.isfinite(values)
            if not finite.all():
                raise ValueError(
                    f"{op}: cannot convert {values[~finite].flat[0].item()!r} to an {dt} value"
                )
            values = np.trunc(values)
        return _from_host(values, dt, device, op)

    def uniform_(self, a: float = 0.0, b: float = 1.0) -> Tensor:
        """Fill with samples of U[a, b), in place, from gpumat's generator."""
        self._check_inplace("uniform_")
        _require_float("uniform_", self)
        ops.uniform(self._data, float(a), float(b), draw_seed())
        return self._changed()

    def normal_(self, mean: float = 0.0, std: float = 1.0) -> Tensor:
        """Fill with samples of N(mean, std**2), in place, from gpumat's generator."""
        self._check_inplace("normal_")
        _require_float("normal_", self)
        ops.normal(self._data, float(mean), float(std), draw_seed())
        return self._changed()


# The pointwise methods (relu, tanh, sigmoid, exp, log, sqrt, ...): one per graph op that names one.
for _op in TENSOR_METHODS:
    setattr(Tensor, _op.tensor_method, _pointwise(_op.tensor_method, _op, _op.tensor_doc))


def _flat(shape) -> tuple:
    return tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape


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
        if t._device != device:
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
    device = _device_of(op, inputs)
    trace = current_trace()
    if trace is not None or any(t._trace is not None for t in inputs):
        if trace is None:
            raise RuntimeError(f"{op}: a tensor of a finished gpumat.compile trace")
        return trace.apply(op, make, inputs, out_dtype, bounds, differentiable)
    grad = differentiable and is_grad_enabled() and any(t._requires_grad for t in inputs)
    node = make(*[t._graph_node() for t in inputs])
    try:
        value = run_node(node, [t._data for t in inputs], device)
    except ValueError as exc:
        raise ValueError(f"{op}: {exc}") from None
    out = Tensor._make(value, out_dtype, device, bounds, inputs[0]._vc if view else None)
    if grad:
        out._requires_grad = True
        record(node, value, out._vc, tuple(t._vc.value for t in inputs))
        out._node = node
    return out


def _expand(op: str, x: Tensor, like: Tensor) -> Tensor:
    """x repeated to like's shape by the graph op :func:`gpumat.broadcasting.expansion` names."""
    padded, make = broadcasting.expansion(op, x._shape, like._shape)
    if padded != x._shape:
        x = x.reshape(padded)
    return apply_op(op, make, [x, like], x._dtype, x._range)


def _binary(op: str, a: Tensor, b: Tensor, graph_op, out_dtype=float32, differentiable=True):
    if out_dtype is float32:
        _require_float(op, a, b)
    _device_of(op, [a, b])
    which = broadcasting.expanded_operand(op, a._shape, b._shape)
    if which == 0:
        a = _expand(op, a, b)
    elif which == 1:
        b = _expand(op, b, a)
    bounds = (0, 1) if out_dtype is bool_ else None
    return apply_op(op, graph_op, [a, b], out_dtype, bounds, differentiable)


def _add(a: Tensor, b: Tensor, op: str = "add") -> Tensor:
    bias = broadcasting.channel_bias(a._shape, b._shape)
    if bias is None:
        return _binary(op, a, b, add_op)  # its checks, once
    _require_float(op, a, b)
    _device_of(op, [a, b])
    # a (C, 1, ..., 1) tensor over (N, C, ...): a convolution's bias
    x, y = (b, a) if bias == 0 else (a, b)
    return apply_op(op, add_channel_bias_op, [x, y.reshape(y._shape[0])])


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """``a @ b`` for 2-D float32 tensors: (N, K) @ (K, M) -> (N, M).

    Raises:
        TypeError: not tensors, or not float32. ValueError: not 2-D, or the inner sizes differ.
    """
    if not isinstance(a, Tensor) or not isinstance(b, Tensor):
        raise TypeError("matmul: expected two Tensors")
    _require_float("matmul", a, b)
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError(
            f"matmul: gpumat multiplies 2-D tensors, got {shape_str(a._shape)} @ "
            f"{shape_str(b._shape)}"
        )
    return apply_op("matmul", matmul_op, [a, b])


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
