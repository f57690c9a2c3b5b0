"""Tensor dtypes: ``gpumat.float32``, ``gpumat.int64``, ``gpumat.bool`` and :func:`as_dtype`,
which parses every spelling of them the front end accepts (PyTorch's aliases ``gpumat.float`` and
``gpumat.long``, names, Python and numpy types, torch's dtypes of those three).

``gpumat.float32`` (values and gradients), ``gpumat.int64`` (class indices, ``argmax``
results, sums of those) and ``gpumat.bool`` (comparisons). int64 and bool tensors live in float32
storage holding exact integers: every integer of magnitude up to 2**24 is exact in float32, so a
tensor made from host data with a larger value is a ValueError, and every int64 tensor knows the
range of its values (from its host data, or from the op that made it: ``argmax`` along an axis of
n gives [0, n - 1]), which lets ``nll_loss`` check class indices without reading the device, and
``sum`` refuse what could round. Arithmetic and float ops on int64 and bool tensors are TypeErrors
(convert with ``.float()``).
:data:`EXACT_INT` is the bound up to which integers are exact. There is no int32 (``torch.int``),
float64 or float16: a dtype gpumat would only pretend to have is a TypeError naming the ones it
has, rather than an int64 or float32 tensor under another name.
"""

from __future__ import annotations

import builtins
import math
import numbers

import numpy as np

__all__ = [
    "DTYPE_NAMES",
    "EXACT_INT",
    "TYPE_NAMES",
    "as_dtype",
    "bool_",
    "dtype",
    "float32",
    "from_type_name",
    "host_storage",
    "int64",
    "scalar_for",
    "value_bounds",
]

#: Integers of magnitude up to this are exact in float32 storage (2**24).
EXACT_INT = 2**24


class dtype:  # noqa: N801 (PyTorch's name: gpumat.float32 is a gpumat.dtype)
    """A tensor's element type: ``gpumat.float32``, ``gpumat.int64`` or ``gpumat.bool``.

    Attributes:
        name: ``"float32"``, ``"int64"`` or ``"bool"``.
        is_floating_point: True for float32 (the only dtype that takes gradients).
    """

    __slots__ = ("name", "is_floating_point", "_numpy")

    def __init__(self, name: str, is_floating_point: bool, numpy_dtype) -> None:
        self.name = name
        self.is_floating_point = is_floating_point
        self._numpy = np.dtype(numpy_dtype)

    def __repr__(self) -> str:
        return f"gpumat.{self.name}"

    __str__ = __repr__


float32 = dtype("float32", True, np.float32)
int64 = dtype("int64", False, np.int64)
bool_ = dtype("bool", False, np.bool_)

#: The names :func:`as_dtype` accepts (PyTorch's: ``"float"`` is float32, ``"long"`` int64).
DTYPE_NAMES = {"float32": float32, "float": float32, "int64": int64, "long": int64, "bool": bool_}


def as_dtype(value, op: str = "dtype"):
    """A :class:`dtype` from a gpumat dtype, its name (``"float32"``, ``"int64"``, ``"bool"``),
    Python's ``float``/``int``/``bool`` or the matching numpy dtype; None stays None.

    Raises:
        TypeError: any other type (gpumat tensors are float32, int64 or bool).
    """
    if value is None or isinstance(value, dtype):
        return value
    if isinstance(value, str) and value in DTYPE_NAMES:
        return DTYPE_NAMES[value]
    if value is builtins.float:
        return float32
    if value is builtins.int:
        return int64
    if value is builtins.bool:
        return bool_
    # torch's dtypes by name (torch.float32, torch.long), without importing torch
    if type(value).__module__ == "torch" and str(value).startswith("torch."):
        name = str(value)[len("torch.") :]
        if name in DTYPE_NAMES:
            return DTYPE_NAMES[name]
    try:
        npd = np.dtype(value)
    except TypeError:
        npd = None
    for d in (float32, int64, bool_):
        if npd == d._numpy:
            return d
    raise TypeError(
        f"{op}: gpumat tensors are float32 (gpumat.float32, gpumat.float), int64 (gpumat.int64, "
        f"gpumat.long) or bool (gpumat.bool); got dtype {value!r}, which gpumat does not support "
        "(its storage is float32: there is no float64, float16, int32 or uint8 tensor)"
    )


#: ``Tensor.type()``'s names (PyTorch's ``'torch.FloatTensor'`` under gpumat's name), by dtype.
TYPE_NAMES = {"float32": "FloatTensor", "int64": "LongTensor", "bool": "BoolTensor"}


def from_type_name(value: str, op: str = "type"):
    """The dtype a tensor type name names: ``'gpumat.FloatTensor'``, ``'gpumat.LongTensor'``,
    ``'gpumat.BoolTensor'`` (or the same with ``torch.``, as PyTorch programs write them).

    Raises:
        TypeError: any other name (``'torch.DoubleTensor'``, ``'torch.IntTensor'``: dtypes
            gpumat does not have).
    """
    prefix, _, short = value.rpartition(".")
    for name, type_name in TYPE_NAMES.items():
        if short == type_name and prefix in ("gpumat", "torch", "torch.cuda"):
            return DTYPE_NAMES[name]
    raise TypeError(
        f"{op}: unknown or unsupported tensor type {value!r}; gpumat has gpumat.FloatTensor, "
        "gpumat.LongTensor and gpumat.BoolTensor (float32, int64, bool)"
    )


def scalar_for(dt, value, op: str, truncate: bool = False):
    """``value`` as the number a ``dt`` tensor stores: a float, or an int for int64 and bool.

    With ``truncate`` (``fill_``), PyTorch's conversion: a float truncated toward zero for
    int64, ``value != 0`` for bool; without it a value that is not a whole number is refused.

    Raises:
        TypeError: not a number. ValueError: for int64 or bool, a value beyond 2**24 in
            magnitude, NaN or infinity (bool with ``truncate`` takes them as True), or, without
            ``truncate``, one that is not a whole number.
    """
    if not isinstance(value, (numbers.Real, np.bool_)) or isinstance(value, np.ndarray):
        raise TypeError(f"{op}: expected a number, got {type(value).__name__}")
    if dt is float32:
        return float(value)
    if truncate and dt is bool_:
        return int(bool(value))  # NaN is nonzero: True, as PyTorch's
    if isinstance(value, (numbers.Integral, np.bool_)):
        whole = int(value)  # not through float(), which rounds (or overflows) past 2**53
    else:
        f = float(value)
        if truncate and math.isfinite(f):
            f = math.trunc(f)
        # NaN and infinities are tested first: int() of them raises without the op's name
        whole = int(f) if math.isfinite(f) and f == math.trunc(f) else None
    if whole is None or abs(whole) > EXACT_INT:
        raise ValueError(f"{op}: {value!r} is not an integer within 2**24 for a {dt} tensor")
    if dt is bool_:
        return int(bool(whole))
    return whole


def value_bounds(values: np.ndarray, dt) -> tuple:
    """``(lo, hi)`` of ``values`` (numpy, any shape), the storage of an int64 or bool tensor, read
    back when its range is unknown; ``(0, 0)`` when empty.

    Raises:
        ValueError: a value ``dt`` cannot hold (not a whole number within 2**24 for int64, not 0
            or 1 for bool): the storage was written around gpumat's checks.
    """
    if values.size == 0:
        return (0, 0)
    limit = 1 if dt is bool_ else EXACT_INT
    low = 0 if dt is bool_ else -EXACT_INT
    whole = np.isfinite(values) & (values == np.trunc(values))
    bad = ~whole | (values < low) | (values > limit)
    if bad.any():
        raise ValueError(
            f"a {dt} tensor of shape {tuple(values.shape)} holds {values[bad][0].item()!r}, which "
            "its dtype cannot (its storage was written around gpumat's checks)"
        )
    return (int(values.min()), int(values.max()))


def host_storage(data, dt, op: str) -> tuple:
    """``(values, dt, bounds)``: host data (any array-like of numbers) as the values a tensor of
    dtype ``dt`` stores (None: inferred, bool data -> bool, integers -> int64, floats ->
    float32), its dtype, and for int64 and bool the ``(lo, hi)`` bounds of the values (else None).

    Raises:
        TypeError: data that is not numbers. ValueError (naming ``op``): int64 or bool data that
            is not whole numbers, or is beyond 2**24 in magnitude (float32 storage holds integers
            exactly up to there).
    """
    arr = np.asarray(data)
    if arr.dtype.kind not in "biuf":
        raise TypeError(
            f"{op}: expected numbers (bool, int or float data), got numpy dtype {arr.dtype}"
        )
    if dt is None:
        kind = arr.dtype.kind
        dt = bool_ if kind == "b" else int64 if kind in "iu" else float32
    if dt is float32:
        return arr, dt, None
    values = arr.astype(np.float64)
    if dt is bool_:
        values = (values != 0).astype(np.float64)
    if not values.size:
        return values, dt, (0, 0)
    if not np.all(np.isfinite(values)) or np.any(values != np.trunc(values)):
        raise ValueError(f"{op}: {dt} data must be whole numbers")
    lo, hi = int(values.min()), int(values.max())
    if max(abs(lo), abs(hi)) > EXACT_INT:
        raise ValueError(
            f"{op}: {dt} values must lie within +-2**24 (gpumat keeps them in float32 "
            f"storage, exact up to there), got values in [{lo}, {hi}]"
        )
    return values, dt, (lo, hi)
