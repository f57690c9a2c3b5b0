"""Making device arrays: :func:`empty`, :func:`array`, and recognising them.

A device array is a :class:`gpumat.PyGpuMatrix`: float32, row-major, contiguous, on one device
(``gpumat.cpu()``, ``gpumat.gpu(i)`` or ``gpumat.emu(i)``), owning its buffer through that device's
caching allocator. ``asnumpy()`` copies it back to the host.
"""

from __future__ import annotations

import numpy as np

from gpumat._core import PyGpuMatrix, _as_float32
from gpumat.devices import Device, check_device

__all__ = ["array", "empty", "is_device_array"]


def empty(shape, device: Device | None = None) -> PyGpuMatrix:
    """A new uninitialised float32 array.

    Args:
        shape: an int or a sequence of ints >= 0 (a 0 dimension gives an empty array).
        device: the device, default ``gpumat.cpu()``.

    Raises:
        ValueError: a negative dimension. TypeError: a non-integer dimension or a bad device.
        MemoryError: the device is out of memory. gpumat.CudaError: the GPU does not exist.
    """
    device = check_device(device)
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    try:
        dims = tuple(shape)
    except TypeError as exc:
        raise TypeError(f"shape must be an int or a sequence of ints, got {shape!r}") from exc
    if any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) for d in dims):
        raise TypeError(f"shape must contain only ints, got {shape!r}")
    dims = tuple(int(d) for d in dims)
    kind, index = device._native
    return PyGpuMatrix._empty(dims, device, kind, index)


def array(x, device: Device | None = None) -> PyGpuMatrix:
    """A new float32 array on ``device`` holding a copy of ``x``.

    Args:
        x: a numpy array, a PyGpuMatrix, or anything ``numpy.asarray`` accepts. float64, integer
            and bool data are converted to float32 (float64 values round to nearest); any layout
            (non-contiguous, negative strides) is accepted and copied.
        device: the device, default ``gpumat.cpu()``.

    Raises:
        TypeError: complex, object or string data, or a bad device.
        MemoryError, gpumat.CudaError: as for :func:`empty`.
    """
    device = check_device(device)
    if isinstance(x, PyGpuMatrix):
        out = empty(x.shape, device)
        out._copy_from_array(x)
        return out
    src = _as_float32(x)
    out = empty(src.shape, device)
    out._copy_from_numpy(src)
    return out


def is_device_array(value) -> bool:
    """True for a gpumat device array (a :class:`gpumat.PyGpuMatrix`), False for anything else
    (numpy arrays, lists, other libraries' tensors)."""
    return isinstance(value, PyGpuMatrix)
