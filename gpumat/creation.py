"""Creation ops: new tensors from data (``tensor``, ``from_numpy``), filled (``zeros``, ``ones``,
``full`` and their ``_like`` forms), random (``rand``, ``randn``) and ranges (``arange``), with
PyTorch's names and arguments; and ``flatten``.

Every function takes ``dtype`` (``gpumat.float32``, ``gpumat.int64``, ``gpumat.bool`` or a name of
one), ``device`` (a ``gpumat.Device`` or a name: :func:`gpumat.devices.as_device`) and
``requires_grad`` where PyTorch does; random values come from gpumat's generator
(:func:`gpumat.manual_seed`), the same on every device.
"""

from __future__ import annotations

import numbers

import numpy as np

from gpumat import ops
from gpumat.arrays import empty
from gpumat.autograd import current_trace
from gpumat.devices import as_device, cpu
from gpumat.dtypes import as_dtype, float32, int64
from gpumat.random import draw_seed
from gpumat.tensor import Tensor, _copy_of, _filled, _from_host, _is_number, _size_args

__all__ = [
    "arange",
    "empty_like",
    "flatten",
    "from_numpy",
    "full",
    "full_like",
    "ones",
    "ones_like",
    "rand",
    "rand_like",
    "randn",
    "randn_like",
    "tensor",
    "zeros",
    "zeros_like",
]


def tensor(data, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A new tensor holding a copy of ``data``.

    Args:
        data: a number, nested lists, a numpy array or a Tensor (copied).
        dtype: ``gpumat.float32``, ``gpumat.int64``, ``gpumat.bool`` (or their names, Python's
            float/int/bool); default from the data: floats -> float32 (float64 data is rounded),
            integers -> int64, bools -> bool.
        device: ``gpumat.cpu()``, ``gpumat.emu(i)``, ``gpumat.gpu(i)`` or a name (``"cpu"``,
            ``"cuda"``, ``"cuda:0"``, ``"emu"``); default the host (or the Tensor's device).
        requires_grad: record ops on it for backward (float32 only).

    Raises:
        TypeError: non-numeric data or a bad dtype or device. ValueError: int64 data that is not
            whole or beyond 2**24 in magnitude; ragged lists. MemoryError, gpumat.CudaError: as
            for ``gpumat.array``.
    """
    out = _copy_of(data, as_dtype(dtype, "tensor"), device, "tensor")
    if requires_grad:
        out.requires_grad = True
    return out


def from_numpy(ndarray: np.ndarray) -> Tensor:
    """A tensor on the host with a copy of ``ndarray`` (PyTorch shares the memory; gpumat's
    tensors own device storage, so this copies). float64 data becomes float32, integers int64.

    Raises:
        TypeError: not a numpy array, or not numeric.
    """
    if not isinstance(ndarray, np.ndarray):
        raise TypeError(f"from_numpy: expected a numpy array, got {type(ndarray).__name__}")
    return _from_host(ndarray, None, cpu(), "from_numpy")


def zeros(*size, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A tensor of zeros: ``zeros(2, 3)`` or ``zeros((2, 3))`` (float32 unless ``dtype``)."""
    return _filled("zeros", size, 0.0, dtype or float32, device, requires_grad)


def ones(*size, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A tensor of ones (float32 unless ``dtype``)."""
    return _filled("ones", size, 1.0, dtype or float32, device, requires_grad)


def full(size, fill_value, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A tensor of ``size`` filled with ``fill_value`` (dtype from the value unless given)."""
    size = (size,) if isinstance(size, numbers.Integral) else tuple(size)
    return _filled("full", (size,), fill_value, dtype, device, requires_grad)


def zeros_like(t: Tensor, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """Zeros of ``t``'s shape, dtype and device (unless given)."""
    return zeros(
        t.shape, dtype=dtype or t.dtype, device=device or t.device, requires_grad=requires_grad
    )


def empty_like(t: Tensor, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A float32 tensor of ``t``'s shape and device (unless given) whose values are not set
    (PyTorch's ``empty_like``): the output of a kernel that writes every element, such as a
    :class:`gpumat.cuda.RawKernel`. On the emulated device its memory reads as NaN and initcheck
    reports a kernel reading it before a write.

    Raises:
        TypeError: ``dtype`` other than float32 (int64 and bool tensors carry the range of their
            values, which unset memory has not: use :func:`zeros_like`).
    """
    dt = as_dtype(dtype, "empty_like") or t.dtype
    if dt is not float32:
        raise TypeError(
            f"empty_like: only float32 ({dt} tensors know their values' range, which unset "
            "memory has not; use zeros_like)"
        )
    dev = as_device(device, "empty_like") if device is not None else t.device
    out = Tensor._make(empty(t.shape, dev), float32, dev)
    if requires_grad:
        out.requires_grad = True
    return out


def full_like(
    t: Tensor, fill_value, dtype=None, device=None, requires_grad: bool = False
) -> Tensor:
    """``fill_value`` in ``t``'s shape, dtype and device (unless given), PyTorch's ``full_like``.

    Raises:
        ValueError / TypeError: a value the dtype cannot hold (NaN or a fraction into int64).
    """
    return _filled(
        "full_like", (t.shape,), fill_value, dtype or t.dtype, device or t.device, requires_grad
    )


def ones_like(t: Tensor, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """Ones of ``t``'s shape, dtype and device (unless given)."""
    return ones(
        t.shape, dtype=dtype or t.dtype, device=device or t.device, requires_grad=requires_grad
    )


def _random(op: str, size, fill, device, dtype, requires_grad) -> Tensor:
    if current_trace() is not None:
        raise RuntimeError(
            f"{op}: a random tensor made inside a step compiled by gpumat.compile would repeat "
            "its first values on every call; make it outside the step and pass it in"
        )
    dt = as_dtype(dtype, op)
    if dt not in (None, float32):
        raise TypeError(f"{op}: random tensors are float32, got dtype {dt}")
    device = as_device(device, op)
    data = empty(_size_args(size, op), device)
    fill(data, draw_seed())
    out = Tensor._make(data, float32, device)
    if requires_grad:
        out.requires_grad = True
    return out


def rand(*size, device=None, dtype=None, requires_grad: bool = False) -> Tensor:
    """Samples of U[0, 1) (float32) from gpumat's generator (:func:`manual_seed`)."""
    return _random(
        "rand", size, lambda d, s: ops.uniform(d, 0.0, 1.0, s), device, dtype, requires_grad
    )


def randn(*size, device=None, dtype=None, requires_grad: bool = False) -> Tensor:
    """Samples of N(0, 1) (float32; Box-Muller on gpumat's counter-based generator)."""
    return _random(
        "randn", size, lambda d, s: ops.normal(d, 0.0, 1.0, s), device, dtype, requires_grad
    )


def arange(start, end=None, step=1, dtype=None, device=None, requires_grad: bool = False):
    """``start, start + step, ...`` below ``end`` (``arange(n)``: 0 .. n - 1): int64 when every
    argument is an int, else float32 (numpy's ``arange`` values).

    Raises:
        ValueError: step 0. TypeError: non-numeric arguments.
    """
    if end is None:
        start, end = 0, start
    for v in (start, end, step):
        if not _is_number(v) or isinstance(v, (bool, np.bool_)):
            raise TypeError(f"arange: start, end and step must be numbers, got {v!r}")
    if step == 0:
        raise ValueError("arange: step must be nonzero")
    ints = all(isinstance(v, numbers.Integral) for v in (start, end, step))
    dt = as_dtype(dtype, "arange") or (int64 if ints else float32)
    values = np.arange(start, end, step, dtype=np.float64 if not ints else np.int64)
    out = _from_host(values, dt, as_device(device, "arange"), "arange")
    if requires_grad:
        out.requires_grad = True
    return out


def flatten(input: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:  # noqa: A002
    """``input.flatten(start_dim, end_dim)`` (PyTorch's ``torch.flatten``)."""
    if not isinstance(input, Tensor):
        raise TypeError(f"flatten: expected a Tensor, got {type(input).__name__}")
    return input.flatten(start_dim, end_dim)


def rand_like(t: Tensor, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """:func:`rand` in ``t``'s shape, dtype and device (unless given): float32 only.

    Raises:
        TypeError: a dtype other than float32.
        RuntimeError: inside a step traced by gpumat.compile (see :func:`rand`).
    """
    return _random_like(rand, t, dtype, device, requires_grad)


def randn_like(t: Tensor, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """:func:`randn` in ``t``'s shape, dtype and device (unless given): float32 only.

    Raises:
        TypeError: a dtype other than float32.
        RuntimeError: inside a step traced by gpumat.compile (see :func:`randn`).
    """
    return _random_like(randn, t, dtype, device, requires_grad)


def _random_like(make, t: Tensor, dtype, device, requires_grad: bool) -> Tensor:
    dt = dtype or t.dtype
    return make(t.shape, device=device or t.device, dtype=dt, requires_grad=requires_grad)
