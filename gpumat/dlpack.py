"""Zero-copy exchange of arrays with numpy, PyTorch, CuPy and any other DLPack library.

Export: every ``PyGpuMatrix`` has ``__dlpack__`` / ``__dlpack_device__`` (so
``torch.from_dlpack(a)``, ``numpy.from_dlpack(a)`` and ``cupy.from_dlpack(a)`` share its buffer),
``__cuda_array_interface__`` (version 3) on a GPU, and ``__array__`` (a zero-copy view on the cpu
device). Import: :func:`from_dlpack`.

Sources: the DLPack C API v1.0 and its Python specification
(https://dmlc.github.io/dlpack/latest/python_spec.html); the array API standard's ``from_dlpack``.
"""

from __future__ import annotations

import operator

from gpumat import _core
from gpumat.arrays import array

__all__ = ["DLPACK_VERSION", "from_dlpack"]

#: The DLPack version gpumat produces in versioned capsules, and the newest it reads.
DLPACK_VERSION = _core.DLPACK_VERSION

_KDLCUDA = 2


def _is_capsule(obj) -> bool:
    return type(obj).__name__ == "PyCapsule"


def _capsule_of(x):
    """Ask a DLPack producer for a capsule (versioned where it can make one)."""
    if not hasattr(x, "__dlpack__"):
        raise TypeError(
            f"from_dlpack: {type(x).__name__} has no __dlpack__ method; expected a DLPack "
            "producer (numpy array, torch tensor, cupy array, PyGpuMatrix) or a DLPack capsule"
        )
    name = type(x).__name__
    stream = None
    if hasattr(x, "__dlpack_device__"):
        device_type, device_id = _producer_device(x.__dlpack_device__(), name)
        if device_type == _KDLCUDA:
            # Our stream: the producer makes it wait for the producer's pending writes (DLPack
            # Python specification, "stream"), so gpumat's kernels see finished data.
            stream = _core.cuda_stream_(1, device_id)
    try:
        capsule = x.__dlpack__(stream=stream, max_version=DLPACK_VERSION)
    except TypeError:
        # A producer older than DLPack 1.0 takes no max_version.
        capsule = x.__dlpack__(stream=stream)
    if not _is_capsule(capsule):
        raise TypeError(
            f"from_dlpack: {name}.__dlpack__() returned {type(capsule).__name__}, not a DLPack "
            "capsule"
        )
    return capsule


def _producer_device(device, name: str) -> tuple[int, int]:
    """A producer's ``__dlpack_device__()`` as two ints; TypeError / ValueError if malformed."""
    what = f"from_dlpack: {name}.__dlpack_device__() returned {device!r}"
    if not isinstance(device, (tuple, list)) or len(device) != 2:
        raise TypeError(f"{what}, not a (device_type, device_id) pair")
    try:
        device_type, device_id = (operator.index(v) for v in device)
    except TypeError:
        raise TypeError(f"{what}: device_type and device_id must be ints") from None
    if device_id < 0:
        raise ValueError(f"{what}: a negative device id")
    return device_type, device_id


def from_dlpack(x, *, copy: bool | None = None):
    """A ``PyGpuMatrix`` sharing the memory of a DLPack tensor (no copy).

    Args:
        x: a DLPack producer (an object with ``__dlpack__``: a numpy array, a torch tensor, a
            CuPy array, a PyGpuMatrix) or a DLPack capsule (``torch.utils.dlpack.to_dlpack``).
            It must be float32 and row-major contiguous (dimensions of size 1 may have any
            stride), on the CPU (-> ``gpumat.cpu()``) or a CUDA GPU i (-> ``gpumat.gpu(i)``).
        copy: None (default): share the memory, except for a tensor the producer marked
            read-only (e.g. a read-only numpy array), which is copied so gpumat's in-place ops
            cannot write to it; True: always return a copy owned by gpumat; False: never copy
            (BufferError for a read-only tensor). Only these three values (a numpy bool counts
            as a bool): anything else is a TypeError, checked before the producer is asked.

    Returns:
        A PyGpuMatrix of the tensor's shape. Writes through it and through the producer's array
        are seen by both. It keeps the producer's memory alive (the producer's object may be
        deleted first), and the producer's DLPack deleter runs exactly once, when the last
        gpumat array over that memory (views from ``reshape`` included) is collected.

        On CUDA the producer is given gpumat's stream for the device, so work it queued on its
        own stream is ordered before gpumat's kernels.

    Raises:
        TypeError: ``x`` is neither a DLPack producer nor an unused capsule; the producer's
            ``__dlpack__`` returned no capsule or its ``__dlpack_device__`` no pair of ints;
            ``copy`` is not True, False or None; the tensor is not float32 (convert it first,
            e.g. ``t.float()``).
        ValueError: the tensor is not contiguous (pass ``t.contiguous()`` or
            ``numpy.ascontiguousarray``); the capsule was already consumed; a malformed DLPack
            descriptor (ndim outside [0, 64], a null shape, a negative dimension, a byte size
            beyond int64, a negative device id, a null or misaligned data pointer).
        BufferError: a device gpumat does not have (e.g. ROCm), a DLPack major version above 1,
            or ``copy=False`` for a read-only tensor.
        gpumat.CudaError: a CUDA tensor but no usable GPU in this build.
    """
    copy = _core._dlpack_check_copy(copy, "from_dlpack")
    capsule = x if _is_capsule(x) else _capsule_of(x)
    arr, read_only = _core._from_dlpack_capsule(capsule)
    if read_only and copy is False:
        raise BufferError(
            "from_dlpack: the producer marked the tensor read-only and copy=False was given; "
            "gpumat arrays are writable"
        )
    if copy or read_only:
        return array(arr, arr.device)
    return arr
