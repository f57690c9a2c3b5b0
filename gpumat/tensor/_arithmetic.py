"""Tensor's operators and math methods: ``+ - * / ** @ == != < <= > >= abs()`` and their named
forms (``add``, ``div``, ``pow``, ``eq``, ``lt``, ...), ``logical_not/and/or``, ``clamp``,
``minimum``, ``maximum``, ``where``, ``masked_fill``, ``matmul``, ``mm``, ``bmm``, ``softmax``
and ``log_softmax``, with the broadcasting binary op they share (``_binary``) and the maker of
the pointwise methods (``relu``, ``exp``, ``sin``, ...).

One topic of the class, apart so that each file stays readable; :mod:`gpumat.tensor` adds
``ArithmeticMethods``' methods and the pointwise ones to :class:`gpumat.Tensor`.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from gpumat import broadcasting
from gpumat.dtypes import EXACT_INT, bool_, float32, int64
from gpumat.graph.conv import add_channel_bias_op
from gpumat.graph.elementwise import (
    add_byconst_op,
    add_op,
    clamp_op,
    div_op,
    eq_op,
    ge_op,
    gt_op,
    le_op,
    logical_and_op,
    logical_not_op,
    logical_or_op,
    lt_op,
    maximum_op,
    minimum_op,
    mul_byconst_op,
    mul_op,
    pow_op,
    pow_scalar_op,
    pow_zero_op,
    scalar_pow_op,
    where_op,
)
from gpumat.graph.matmul import bmm_op, matmul_op
from gpumat.graph.node import shape_str
from gpumat.graph.reduce import broadcast_axis_op
from gpumat.graph.softmax import log_softmax_op, softmax_op
from gpumat.graph.strided import broadcast_binary_op, broadcast_where_op
from gpumat.tensor._tensor import (
    Tensor,
    _copy_of,
    _device_of,
    _filled,
    _is_number,
    _require_float,
    apply_op,
)

# The broadcast_binary_op kind of each same-shape binary graph op the operators use.
_BROADCAST_KIND = {
    add_op: "add",
    mul_op: "mul",
    div_op: "div",
    eq_op: "eq",
    lt_op: "lt",
    le_op: "le",
    gt_op: "gt",
    ge_op: "ge",
    minimum_op: "minimum",
    maximum_op: "maximum",
    logical_and_op: "logical_and",
    logical_or_op: "logical_or",
}


def _pointwise(name: str, graph_op, doc: str):
    """A float32 tensor method applying the one-input graph op ``graph_op`` elementwise."""

    def method(self: Tensor) -> Tensor:
        _require_float(name, self)
        return apply_op(name, graph_op, [self])

    method.__name__ = method.__qualname__ = name
    method.__doc__ = doc
    return method


class ArithmeticMethods:
    """The operators, matmul and elementwise functions of Tensor."""

    # ---------------------------------------------------------------- arithmetic

    def _operand(self, other, op: str):
        """A tensor or a float for the other side of a binary op, or NotImplemented."""
        if isinstance(other, Tensor):
            return other
        if isinstance(other, (bool, np.bool_)):
            return int(other)
        if isinstance(other, numbers.Integral):
            return int(other)
        if _is_number(other):
            return float(other)
        if isinstance(other, (np.ndarray, list, tuple)):
            return _copy_of(other, None, self._device, "tensor")
        return NotImplemented

    def __add__(self, other):
        other = self._operand(other, "add")
        if other is NotImplemented:
            return other
        a, other = _promoted(self, other, "add")
        if a._dtype is int64:
            return _integer_op("add", a, other)
        if isinstance(other, Tensor):
            return _add(a, other)
        return apply_op("add", lambda n: add_byconst_op(n, other), [a])

    __radd__ = __add__

    def __sub__(self, other):
        other = self._operand(other, "sub")
        if other is NotImplemented:
            return other
        a, other = _promoted(self, other, "sub")
        if a._dtype is int64:
            return _integer_op("sub", a, other)
        if isinstance(other, Tensor):
            return _add(a, other.__neg__(), "sub")
        return apply_op("sub", lambda n: add_byconst_op(n, -other), [a])

    def __rsub__(self, other):
        other = self._operand(other, "sub")
        if other is NotImplemented:
            return other
        if isinstance(other, Tensor):
            return other.__sub__(self)
        a, other = _promoted(self, other, "sub")
        if a._dtype is int64:
            return _integer_op("add", _integer_op("mul", a, -1), other)
        return apply_op("sub", lambda n: add_byconst_op(n, other), [-a])

    def __mul__(self, other):
        other = self._operand(other, "mul")
        if other is NotImplemented:
            return other
        a, other = _promoted(self, other, "mul")
        if a._dtype is int64:
            return _integer_op("mul", a, other)
        if isinstance(other, Tensor):
            return _binary("mul", a, other, mul_op)
        return apply_op("mul", lambda n: mul_byconst_op(n, other), [a])

    __rmul__ = __mul__

    def __truediv__(self, other):
        other = self._operand(other, "div")
        if other is NotImplemented:
            return other
        a, other = _promoted(self, other, "div")
        if isinstance(other, Tensor):
            return _binary("div", a, other, div_op)
        # A true division by float32(c), as PyTorch computes it: x * (1/c) is not the same
        # function (with c = 1e-39, 1/c overflows to inf, so 0 / c became NaN and 1e-10 / c inf).
        divisor = _filled("full", ((),), other, float32, a._device, False)
        return _binary("div", a, divisor, div_op)

    def __rtruediv__(self, other):
        other = self._operand(other, "div")
        if other is NotImplemented:
            return other
        if isinstance(other, Tensor):
            return other.__truediv__(self)
        a, other = _promoted(self, other, "div")
        return _binary("div", _filled("full", ((),), other, None, a._device, False), a, div_op)

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
        if self._dtype is int64:
            return _integer_op("mul", self, -1)
        _require_float("neg", self)
        return apply_op("neg", lambda n: mul_byconst_op(n, -1.0), [self])

    def neg(self) -> Tensor:
        """``-self``."""
        return -self

    def __pos__(self):
        return self

    def __pow__(self, exponent):
        """``self ** exponent``: a real number or a float32 tensor (equal shapes, or the
        broadcasting of ``+``). Exponents 0, 1, 2 and 3 are exact products as PyTorch's CPU
        computes them (x ** 2 is x * x; x ** 0 is ones, also at inf and NaN, with a zero
        gradient); any other real number runs the ``pow_scalar`` kernel (powf: a negative base to
        a non-integer exponent is NaN, as torch.pow). Gradients PyTorch's: c * x ** (c - 1)
        (0 when c == 0); for a tensor exponent also a ** b * log(a) (0 where a == 0 and
        b >= 0). Always a new tensor. float32 only (TypeError otherwise)."""
        if isinstance(exponent, Tensor):
            return _binary("pow", self, exponent, pow_op)
        if isinstance(exponent, (bool, np.bool_)) or not isinstance(exponent, numbers.Real):
            return NotImplemented
        _require_float("pow", self)
        c = float(exponent)
        if c == 0:  # ones (also for inf and NaN, as PyTorch), recorded so backward reaches self
            return apply_op("pow", lambda node: pow_zero_op(node), [self])
        if c == 1:  # a new tensor, as PyTorch's: an in-place change of the result leaves self
            return self * 1.0
        if c == 2:
            return self * self
        if c == 3:
            return self * self * self
        return apply_op("pow", lambda n: pow_scalar_op(n, c), [self])

    def __rpow__(self, other):
        """``number ** self``: the ``scalar_pow`` kernel (powf(number, x)); gradient
        ``number ** x * log(number)``, 0 where number == 0 and x >= 0 (PyTorch's)."""
        if isinstance(other, (bool, np.bool_)) or not isinstance(other, numbers.Real):
            return NotImplemented
        _require_float("pow", self)
        base = float(other)
        return apply_op("pow", lambda n: scalar_pow_op(n, base), [self])

    def pow(self, exponent) -> Tensor:
        """``self ** exponent`` (see ``__pow__``): a number or a tensor exponent."""
        out = self.__pow__(exponent)
        if out is NotImplemented:
            raise TypeError(
                f"pow: the exponent must be a real number or a Tensor, got "
                f"{type(exponent).__name__}"
            )
        return out

    def square(self) -> Tensor:
        """``self * self`` (``torch.square``; float32 only)."""
        _require_float("square", self)
        return self * self

    def __matmul__(self, other):
        if not isinstance(other, Tensor):
            return NotImplemented
        return matmul(self, other)

    def matmul(self, other) -> Tensor:
        """``self @ other`` with ``torch.matmul``'s rules (see :func:`matmul`): (N, K) @ (K, M)
        -> (N, M), batched over broadcast leading dims, 1-D operands as a row or a column."""
        return matmul(self, other)

    def mm(self, other) -> Tensor:
        """``self @ other`` for 2-D tensors."""
        if not isinstance(other, Tensor):
            raise TypeError("mm: expected two Tensors")
        if self.ndim != 2 or other.ndim != 2:
            raise ValueError(
                f"mm: expected 2-D tensors, got {shape_str(self._shape)} @ "
                f"{shape_str(other._shape)}"
            )
        return matmul(self, other)

    def bmm(self, mat2) -> Tensor:
        """``torch.bmm``: (B, N, K) @ (B, K, M) -> (B, N, M), one batched product (one launch of
        :func:`gpumat.ops.bmm`). Float32 3-D tensors of one batch size, no broadcasting (that is
        :meth:`matmul`'s).

        Raises:
            TypeError: not tensors, or not float32. ValueError: not 3-D, or the batch or inner
            sizes differ (naming bmm and the shapes).
        """
        if not isinstance(mat2, Tensor):
            raise TypeError("bmm: expected two Tensors")
        _require_float("bmm", self, mat2)
        sa, sb = self._shape, mat2._shape
        if self.ndim != 3 or mat2.ndim != 3:
            raise ValueError(f"bmm: expected 3-D tensors, got {shape_str(sa)} @ {shape_str(sb)}")
        if sa[0] != sb[0]:
            raise ValueError(f"bmm: batch sizes differ: {shape_str(sa)} @ {shape_str(sb)}")
        if sa[2] != sb[1]:
            raise ValueError(
                f"bmm: inner dimensions differ ({sa[2]} != {sb[1]}): {shape_str(sa)} @ "
                f"{shape_str(sb)}"
            )
        return apply_op("bmm", bmm_op, [self, mat2])

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

    def __lt__(self, other):
        return self._compare("lt", other, lt_op)

    def __le__(self, other):
        return self._compare("le", other, le_op)

    def __gt__(self, other):
        return self._compare("gt", other, gt_op)

    def __ge__(self, other):
        return self._compare("ge", other, ge_op)

    def _compare(self, op: str, other, graph_op, raise_unknown: bool = False):
        """A bool tensor from the comparison ``graph_op`` of self with a tensor (broadcast as for
        ``+``) or a number; NotImplemented (TypeError with ``raise_unknown``) for other types."""
        value = self._operand(other, op)
        if value is NotImplemented:
            if raise_unknown:
                raise TypeError(f"{op}: cannot compare a tensor with a {type(other).__name__}")
            return value
        if not isinstance(value, Tensor):
            value = _filled("full", ((),), value, None, self._device, False)
        return _binary(op, self, value, graph_op, out_dtype=bool_, differentiable=False)

    def lt(self, other) -> Tensor:
        """A bool tensor: True where ``self < other`` (a tensor, broadcast as for ``+``, or a
        number); any dtypes. A NaN compares false. Not differentiable."""
        return self._compare("lt", other, lt_op, True)

    def le(self, other) -> Tensor:
        """A bool tensor: True where ``self <= other`` (see ``lt``)."""
        return self._compare("le", other, le_op, True)

    def gt(self, other) -> Tensor:
        """A bool tensor: True where ``self > other`` (see ``lt``)."""
        return self._compare("gt", other, gt_op, True)

    def ge(self, other) -> Tensor:
        """A bool tensor: True where ``self >= other`` (see ``lt``)."""
        return self._compare("ge", other, ge_op, True)

    def logical_not(self) -> Tensor:
        """A bool tensor: True where self is 0 (any dtype; NaN counts as true, as PyTorch)."""
        return apply_op("logical_not", logical_not_op, [self], bool_, (0, 1), False)

    def logical_and(self, other) -> Tensor:
        """A bool tensor: True where self and ``other`` (a tensor, broadcast as for ``+``) are
        both nonzero; any dtypes (NaN counts as true, as PyTorch)."""
        return _logical("logical_and", self, other, logical_and_op)

    def logical_or(self, other) -> Tensor:
        """A bool tensor: True where self or ``other`` (a tensor, broadcast as for ``+``) is
        nonzero; any dtypes (NaN counts as true, as PyTorch)."""
        return _logical("logical_or", self, other, logical_or_op)

    def __abs__(self):
        return self.abs()

    def clamp(self, min=None, max=None) -> Tensor:  # noqa: A002 (PyTorch's names)
        """Each element limited to [min, max], as ``torch.clamp``: ``min(max(x, min), max)`` (so
        ``max`` where min > max), a NaN stays NaN; a bound left None is open. float32 with
        number bounds (gpumat has no tensor bounds: use ``minimum`` / ``maximum``). Gradient:
        the incoming one where min <= x <= max, else 0 (PyTorch's).

        Raises:
            TypeError: an int64 or bool tensor, or a bound that is not a number. ValueError: both
                bounds None, or a NaN bound.
        """
        _require_float("clamp", self)
        if min is None and max is None:
            raise ValueError("clamp: at least one of min and max must not be None")
        lo = -math.inf if min is None else _clamp_bound(min, "min")
        hi = math.inf if max is None else _clamp_bound(max, "max")
        return apply_op("clamp", lambda n: clamp_op(n, lo, hi), [self])

    def clip(self, min=None, max=None) -> Tensor:  # noqa: A002
        """``clamp(min, max)`` (PyTorch's alias)."""
        return self.clamp(min, max)

    def minimum(self, other) -> Tensor:
        """The smaller of self and ``other`` (a float32 tensor, broadcast as for ``+``)
        elementwise; NaN where either is NaN. Gradient: to the smaller, split in halves where
        they are equal (PyTorch's rule)."""
        if not isinstance(other, Tensor):
            raise TypeError(f"minimum: expected a Tensor, got {type(other).__name__}")
        return _binary("minimum", self, other, minimum_op)

    def maximum(self, other) -> Tensor:
        """The larger of self and ``other`` (a float32 tensor, broadcast as for ``+``)
        elementwise; NaN where either is NaN. Gradient: to the larger, split in halves where
        they are equal (PyTorch's rule)."""
        if not isinstance(other, Tensor):
            raise TypeError(f"maximum: expected a Tensor, got {type(other).__name__}")
        return _binary("maximum", self, other, maximum_op)

    def where(self, condition, other) -> Tensor:
        """``gpumat.where(condition, self, other)``."""
        return where(condition, self, other)

    def masked_fill(self, mask, value) -> Tensor:
        """A copy of self with ``value`` (a number) where ``mask`` (a bool tensor broadcast to
        self's shape) is True. float32. Gradient: the incoming one where mask is False.

        Raises:
            TypeError: mask not a bool tensor, self not float32, value not a number.
            ValueError: mask does not broadcast to self's shape; devices differ.
        """
        _require_float("masked_fill", self)
        if not isinstance(mask, Tensor) or mask._dtype is not bool_:
            got = mask._dtype if isinstance(mask, Tensor) else type(mask).__name__
            raise TypeError(f"masked_fill: expected a bool tensor as mask, got {got}")
        if not _is_number(value) or isinstance(value, (bool, np.bool_)):
            raise TypeError(f"masked_fill: expected a number as value, got {type(value).__name__}")
        if _broadcast_shape("masked_fill", mask._shape, self._shape) != self._shape:
            raise ValueError(
                f"masked_fill: mask of shape {shape_str(mask._shape)} does not broadcast to the "
                f"tensor's shape {shape_str(self._shape)}"
            )
        fill = _filled("full", ((),), float(value), float32, self._device, False)
        return _where("masked_fill", mask, fill, self)

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


def _promoted(a: Tensor, other, op: str):
    """PyTorch's type promotion for ``a op other``: a float32 operand makes the other float32
    (an int64 or bool tensor converted, ``2 * mask``); int64 and bool tensors with ints stay
    integers (``i + block_size``: returned as (a as int64, other) for :func:`_integer_op`); a
    division is always float32. Returns (a, other): other a tensor or a Python number."""
    is_tensor = isinstance(other, Tensor)
    integer = a._dtype is not float32 and (
        (is_tensor and other._dtype is not float32) or (not is_tensor and isinstance(other, int))
    )
    if integer and op != "div":
        if a._dtype is bool_:
            a = a.to(int64)
        if is_tensor and other._dtype is bool_:
            other = other.to(int64)
        return a, other
    if a._dtype is not float32:
        a = a.float()
    if is_tensor:
        if other._dtype is not float32:
            other = other.float()
    else:
        other = float(other)
    return a, other


def _integer_op(op: str, a: Tensor, other) -> Tensor:
    """``a op other`` for an int64 tensor ``a`` and an int or int64 tensor: int64 values held
    exactly in the float32 storage, so the result's bounds (from the operands' known ranges)
    must stay within 2**24. No gradient (integer tensors have none).

    Raises:
        ValueError: a result that could pass 2**24 in magnitude (naming the op and the bounds).
    """
    lo, hi = a._range
    if isinstance(other, Tensor):
        olo, ohi = other._range
    else:
        olo = ohi = other
    if op == "add":
        bounds = (lo + olo, hi + ohi)
    elif op == "sub":
        bounds = (lo - ohi, hi - olo)
    else:
        products = (lo * olo, lo * ohi, hi * olo, hi * ohi)
        bounds = (min(products), max(products))
    if max(abs(bounds[0]), abs(bounds[1])) > EXACT_INT:
        raise ValueError(
            f"{op}: int64 result in [{bounds[0]}, {bounds[1]}] could pass 2**24, beyond the exact "
            "integers of gpumat's float32 storage; convert with .float() first"
        )
    if isinstance(other, Tensor):
        b = other
        if op == "sub":
            negate = lambda n: mul_byconst_op(n, -1.0)  # noqa: E731
            b = apply_op("neg", negate, [other], int64, (-ohi, -olo), False)
        graph_op = mul_op if op == "mul" else add_op
        out = _binary(op, a, b, graph_op, out_dtype=int64, differentiable=False)
    else:
        c = float(-other if op == "sub" else other)
        make = (lambda n: mul_byconst_op(n, c)) if op == "mul" else (lambda n: add_byconst_op(n, c))
        out = apply_op(op, make, [a], int64, None, False)
    out._range = bounds
    return out


def _binary(op: str, a: Tensor, b: Tensor, graph_op, out_dtype=float32, differentiable=True):
    """``graph_op(a, b)`` for one shape; for two shapes numpy's broadcasting in any rank, the
    repeated operand read in place by ``broadcast_binary_op`` (its gradient summed back)."""
    if out_dtype is float32:
        _require_float(op, a, b)
    if a._device is not b._device:
        _device_of(op, [a, b])
    bounds = (0, 1) if out_dtype is bool_ else None
    if a._shape != b._shape:
        target = _broadcast_shape(op, a._shape, b._shape)  # the error names the front-end op
        kind = _BROADCAST_KIND.get(graph_op)
        if kind is None:  # an op with no broadcast kernel (pow): its operands repeated first
            a, b = (t if t._shape == target else t.expand(target) for t in (a, b))
        else:
            graph_op = lambda x, y: broadcast_binary_op(x, y, kind)  # noqa: E731
    return apply_op(op, graph_op, [a, b], out_dtype, bounds, differentiable)


def _add(a: Tensor, b: Tensor, op: str = "add") -> Tensor:
    # equal shapes are never a channel bias (one rank less)
    bias = None if a._shape == b._shape else broadcasting.channel_bias(a._shape, b._shape)
    if bias is None:
        return _binary(op, a, b, add_op)  # its checks, once
    _require_float(op, a, b)
    _device_of(op, [a, b])
    # a (C, 1, ..., 1) tensor over (N, C, ...): a convolution's bias
    x, y = (b, a) if bias == 0 else (a, b)
    return apply_op(op, add_channel_bias_op, [x, y.reshape(y._shape[0])])


def _clamp_bound(value, name: str) -> float:
    if isinstance(value, Tensor) or not _is_number(value) or isinstance(value, (bool, np.bool_)):
        raise TypeError(
            f"clamp: {name} must be a number, got {type(value).__name__} (gpumat clamps to "
            "number bounds; use minimum / maximum for tensors)"
        )
    value = float(value)
    if math.isnan(value):
        raise ValueError(f"clamp: {name} is NaN")
    return value


def _logical(op: str, a: Tensor, b, graph_op) -> Tensor:
    if not isinstance(b, Tensor):
        raise TypeError(f"{op}: expected a Tensor, got {type(b).__name__}")
    return _binary(op, a, b, graph_op, out_dtype=bool_, differentiable=False)


def _broadcast_shape(op: str, *shapes) -> tuple:
    first = tuple(shapes[0])
    if all(tuple(s) == first for s in shapes[1:]):  # the common case, without numpy's call
        return first
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        shown = [shape_str(s) for s in shapes]
        shown = ", ".join(shown[:-1]) + " and " + shown[-1]
        raise ValueError(f"{op}: shapes {shown} cannot be broadcast together") from None


def _where(op: str, condition: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """where_op on tensors of one shape; ``broadcast_where_op`` (numpy's broadcasting in any
    rank, operands read in place) otherwise."""
    _require_float(op, a, b)
    _device_of(op, [condition, a, b])
    _broadcast_shape(op, condition._shape, a._shape, b._shape)
    if condition._shape == a._shape == b._shape:
        return apply_op(op, where_op, [condition, a, b])
    return apply_op(op, broadcast_where_op, [condition, a, b])


def where(condition, input, other) -> Tensor:  # noqa: A002 (PyTorch's names)
    """``input`` where ``condition`` is True, else ``other``, elementwise, as ``torch.where``:
    condition a bool tensor, input and other float32 tensors or numbers, the three broadcast to
    the shape of one of them (the rules of ``+``). Gradients: the incoming one to input where
    condition is True and to other where it is False (zeros elsewhere), none to condition.

    Raises:
        TypeError: condition not a bool tensor; input or other not float32 tensors or numbers.
        ValueError: shapes that do not broadcast so; tensors on different devices.
    """
    if not isinstance(condition, Tensor) or condition._dtype is not bool_:
        got = condition._dtype if isinstance(condition, Tensor) else type(condition).__name__
        raise TypeError(f"where: expected a bool tensor as condition, got {got}")
    values = []
    for value in (input, other):
        if isinstance(value, Tensor):
            values.append(value)
        elif _is_number(value) and not isinstance(value, (bool, np.bool_)):
            values.append(_filled("full", ((),), float(value), float32, condition._device, False))
        else:
            raise TypeError(f"where: expected a Tensor or a number, got {type(value).__name__}")
    return _where("where", condition, *values)


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """``a @ b`` for float32 tensors of rank >= 1, with ``torch.matmul``'s rules.

    Shapes: (N, K) @ (K, M) -> (N, M); a 1-D ``a`` (K,) is a row (1, K) and a 1-D ``b`` (K,) a
    column (K, 1), the added dim removed from the result ((K,) @ (K,) -> ()); operands of rank
    >= 3 are stacks of matrices over their leading (batch) dims, which broadcast as numpy's:
    (2, 1, N, K) @ (3, K, M) -> (2, 3, N, M). A 2-D ``b`` under a batched ``a`` is one 2-D product
    of a's rows (PyTorch's folding); otherwise one :func:`gpumat.ops.bmm` launch for the whole
    batch, an operand whose batch is all 1s repeated without a copy (an operand broadcast along
    only some batch dims is copied out first, as PyTorch's ``expand().reshape()``). Gradients
    reach both operands, summed over the dims they were broadcast along.

    Raises:
        TypeError: not tensors, or not float32. ValueError: an operand is 0-d, the inner sizes
            differ, or the batch dims do not broadcast (naming matmul and the shapes).
    """
    if not isinstance(a, Tensor) or not isinstance(b, Tensor):
        raise TypeError("matmul: expected two Tensors")
    _require_float("matmul", a, b)
    sa, sb = a._shape, b._shape

    def desc():  # made only for an error
        return f"{shape_str(sa)} @ {shape_str(sb)}"

    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"matmul: both operands need at least 1 dimension, got {desc()}")
    a2 = a if a.ndim >= 2 else a.reshape(1, sa[0])
    b2 = b if b.ndim >= 2 else b.reshape(sb[0], 1)
    (n, k), (kb, m) = a2._shape[-2:], b2._shape[-2:]
    if k != kb:
        raise ValueError(f"matmul: inner dimensions differ ({k} != {kb}): {desc()}")
    batch = ()  # two 2-D operands have none: the common case, without numpy's call
    if a2.ndim > 2 or b2.ndim > 2:
        try:
            batch = tuple(int(d) for d in np.broadcast_shapes(a2._shape[:-2], b2._shape[:-2]))
        except ValueError:
            raise ValueError(f"matmul: batch dimensions do not broadcast: {desc()}") from None
    if a2.ndim == 2 and b2.ndim == 2:
        out = apply_op("matmul", matmul_op, [a2, b2])
    elif b2.ndim == 2:  # one 2-D product of all of a's rows
        rows = _reshaped(a2, (math.prod(batch) * n, k))
        out = apply_op("matmul", matmul_op, [rows, b2])
    else:
        a3, b3 = _batch_of(a2, batch), _batch_of(b2, batch)
        out = apply_op("matmul", bmm_op, [a3, b3])
    shape = batch + ((n,) if a.ndim >= 2 else ()) + ((m,) if b.ndim >= 2 else ())
    return _reshaped(out, shape)


def _reshaped(x: Tensor, shape: tuple) -> Tensor:
    return x if x._shape == tuple(shape) else x.reshape(shape)


def _batch_of(x: Tensor, batch: tuple) -> Tensor:
    """x (..., R, C), its leading dims broadcasting to ``batch``, as bmm's 3-D operand: (1, R, C)
    when its batch is all 1s (repeated by bmm), else (prod(batch), R, C), copied out first along
    the dims where x has 1 and ``batch`` more."""
    rows, cols = x._shape[-2:]
    own = (1,) * (len(batch) + 2 - x.ndim) + x._shape[:-2]
    if math.prod(own) == 1 and math.prod(batch) != 1:
        return _reshaped(x, (1, rows, cols))
    x = _reshaped(x, own + (rows, cols))
    for axis, (have, want) in enumerate(zip(own, batch, strict=True)):
        if have != want:  # have is 1: repeat along this axis (like is only a shape)
            target = x._shape[:axis] + (want,) + x._shape[axis + 1 :]
            like = _filled("zeros", (target,), 0.0, float32, x._device, False)
            x = apply_op("matmul", lambda g, t, a=axis: broadcast_axis_op(g, t, a), [x, like])
    return _reshaped(x, (math.prod(batch), rows, cols))
