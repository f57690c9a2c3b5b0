"""Tensor dtypes: ``gpumat.float32``, ``gpumat.int64``, ``gpumat.bool`` and :func:`as_dtype`,
which parses every spelling of them the front end accepts.

``gpumat.float32`` (values and gradients), ``gpumat.int64`` (class indices, ``argmax``
results, sums of those) and ``gpumat.bool`` (comparisons). int64 and bool tensors live in float32
storage holding exact integers: every integer of magnitude up to 2**24 is exact in float32, so a
tensor made from host data with a larger value is a ValueError, and every int64 tensor knows the
range of its values (from its host data, or from the op that made it: ``argmax`` along an axis of
n gives [0, n - 1]), which lets ``nll_loss`` check class indices without reading the device, and
``sum`` refuse what could round. Arithmetic and float ops on int64 and bool tensors are TypeErrors
(convert with ``.float()``).
:data:`EXACT_INT` is the bound up to which integers are exact.
"""

from __future__ import annotations

import builtins

import numpy as np

__all__ = ["DTYPE_NAMES", "EXACT_INT", "as_dtype", "bool_", "dtype", "float32", "int64"]

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
    try:
        npd = np.dtype(value)
    except TypeError:
        npd = None
    for d in (float32, int64, bool_):
        if npd == d._numpy:
            return d
    raise TypeError(f"{op}: gpumat tensors are float32, int64 or bool; got dtype {value!r}")
