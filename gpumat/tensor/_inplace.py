"""Tensor's in-place ops: ``zero_``, ``fill_``, ``add_``, ``sub_``, ``mul_``, ``div_`` (the other
operand broadcast to this shape), ``copy_``, ``clamp_``, ``clip_``, ``masked_fill_``, ``neg_``,
the pointwise ``exp_``, ``log_``, ``sqrt_``, ... (one per pointwise method, made in
:mod:`gpumat.tensor`), ``uniform_``, ``normal_`` and the augmented assignments (``+=``, ...), with
the checks that refuse them where autograd or a trace could not follow.

One topic of the class, apart so that each file stays readable; :mod:`gpumat.tensor` adds
``InplaceMethods``' methods to :class:`gpumat.Tensor`.
"""

from __future__ import annotations

import numpy as np

from gpumat import ops
from gpumat._core import PyGpuMatrix
from gpumat.arrays import empty
from gpumat.autograd import current_trace, is_grad_enabled, no_grad
from gpumat.dtypes import bool_, float32, int64, scalar_for
from gpumat.graph.node import shape_str
from gpumat.random import draw_seed
from gpumat.tensor._tensor import Tensor, _from_host, _is_number, _require_float


class InplaceMethods:
    """The in-place ops of Tensor."""

    # ---------------------------------------------------------------- in-place ops

    def _check_inplace(self, op: str) -> None:
        if self._trace is not None or current_trace() is not None:
            raise RuntimeError(
                f"{op}: in-place ops are not traced by gpumat.compile; make the change outside "
                "the compiled step, or out of place inside it"
            )
        self._concrete(op)
        if self._view is not None and self._view.overlaps_itself(self._shape):
            raise RuntimeError(
                f"{op}: unsupported operation: more than one element of the written-to tensor "
                "refers to a single memory location (an expand()ed view); clone() it first"
            )
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
        if self._view is not None:  # a view: the change reaches its base (StridedView)
            self._view.write_back(self._storage, bounds)
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
        """A tensor broadcasting to this one's shape on its device, or a float."""
        if isinstance(other, Tensor):
            other._concrete(op)
            _require_float(op, self, other)
            try:
                fits = np.broadcast_shapes(other._shape, self._shape) == self._shape
            except ValueError:
                fits = False
            if not fits or other._device != self._device:
                raise ValueError(
                    f"{op}: the other tensor is {shape_str(other._shape)} on {other._device}, this "
                    f"one {shape_str(self._shape)} on {self._device} (the other must broadcast "
                    "to this shape)"
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
        if isinstance(other, Tensor) and other._shape != self._shape:
            scaled = other * float(alpha) if alpha != 1 else other
            ops.broadcast_binary(self._data, scaled._data, self._data, "add")
        elif isinstance(other, Tensor):
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
            ops.broadcast_binary(self._data, other._data, self._data, "mul")
        else:
            ops.mul_scalar(self._data, other, self._data)
        return self._changed()

    def div_(self, other) -> Tensor:
        """``self /= other`` in place (a tensor of this shape, or a number), IEEE division as
        ``/`` (a number divides, it does not multiply by its reciprocal)."""
        self._check_inplace("div_")
        other = self._inplace_other(other, "div_")
        if isinstance(other, Tensor):
            ops.broadcast_binary(self._data, other._data, self._data, "div")
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

    def _replaced(self, op: str, compute) -> Tensor:
        """Self's values replaced in place by ``compute()`` (an out-of-place op on self, run
        without recording), under the in-place rules: the ``_`` methods below."""
        self._check_inplace(op)
        with no_grad():
            result = compute()
        if result._shape != self._shape:
            raise RuntimeError(
                f"{op}: output with shape {shape_str(self._shape)} doesn't match the broadcast "
                f"shape {shape_str(result._shape)}"
            )
        result = self._converted(result, op)
        bounds = result._range if self._dtype is not float32 else None
        self._data.copyfrom(result._data)
        return self._changed(bounds)

    def clamp_(self, min=None, max=None) -> Tensor:  # noqa: A002 (PyTorch's names)
        """``clamp(min, max)`` in place."""
        return self._replaced("clamp_", lambda: self.clamp(min, max))

    def clip_(self, min=None, max=None) -> Tensor:  # noqa: A002
        """``clip(min, max)`` in place."""
        return self._replaced("clip_", lambda: self.clamp(min, max))

    def masked_fill_(self, mask, value) -> Tensor:
        """``masked_fill(mask, value)`` in place."""
        return self._replaced("masked_fill_", lambda: self.masked_fill(mask, value))

    def neg_(self) -> Tensor:
        """``-self`` in place."""
        return self._replaced("neg_", lambda: -self)

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
