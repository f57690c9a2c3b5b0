"""The dlsys course's ``ndarray`` module: contexts with integer device types, and gpumat's arrays.

``cpu(i)`` and ``gpu(i)`` return :class:`DLContext` values whose ``device_type`` is the course's
1 (cpu) or 2 (gpu). They are ``gpumat.Device`` values too (a ``DLContext(0, 1)`` equals
``gpumat.cpu()``), so arrays and executors accept them everywhere. ``NDArray`` is
:class:`gpumat.PyGpuMatrix`, which has the course's ``shape``, ``asnumpy()``, ``copyto(target)``,
``a[:] = numpy_array`` and ``ctx``.
"""

import numpy as np

from gpumat import arrays as _arrays
from gpumat._core import CudaError
from gpumat._core import PyGpuMatrix as NDArray
from gpumat.devices import Device, build_info

__all__ = ["DLContext", "NDArray", "array", "cpu", "empty", "gpu", "is_gpu_ctx"]


class DLContext(Device):
    """A device as the dlsys course names it: ``DLContext(device_id, device_type)``.

    ``device_type`` is 1 for the host (cpu) and 2 for a CUDA GPU; ``device_id`` is the device
    ordinal. Equal to, and hashing as, the ``gpumat.Device`` of the same device.

    Raises:
        ValueError: a device_type other than 1 or 2, or a negative device_id.
        TypeError: a device_id or device_type that is not an int.
    """

    __slots__ = ()
    MASK2STR = {1: "cpu", 2: "gpu"}

    def __init__(self, device_id: int, device_type: int):
        for what, value in (("device_id", device_id), ("device_type", device_type)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise TypeError(f"DLContext: {what} must be an int, got {value!r}")
        if int(device_type) not in self.MASK2STR:
            raise ValueError(
                f"DLContext: device_type must be 1 (cpu) or 2 (gpu), got {device_type}"
            )
        super().__init__(self.MASK2STR[int(device_type)], int(device_id))

    @property
    def device_type(self) -> int:
        """1 (cpu) or 2 (gpu), the dlsys course's encoding."""
        return 2 if self._kind == "gpu" else 1

    def __reduce__(self):
        return (DLContext, (self.index, self.device_type))


def cpu(dev_id: int = 0) -> DLContext:
    """The host device, ``device_type`` 1."""
    return DLContext(dev_id, 1)


def gpu(dev_id: int = 0) -> DLContext:
    """CUDA device ``dev_id``, ``device_type`` 2.

    Raises:
        gpumat.CudaError: gpumat was built without CUDA, no GPU is visible, or ``dev_id`` is not
            one of the visible GPUs (the message says which, and that ``cpu(0)`` works).
    """
    ctx = DLContext(dev_id, 2)  # checks the argument first
    info = build_info()
    if not info["cuda"]:
        raise CudaError(
            f"ndarray.gpu({dev_id}): this gpumat was built without CUDA (no nvcc at build time); "
            "use ndarray.cpu(0), or rebuild on a machine with the CUDA toolkit"
        )
    count = info["cuda_device_count"]
    if not 0 <= int(dev_id) < count:
        raise CudaError(
            f"ndarray.gpu({dev_id}): {count} CUDA GPU(s) usable on this machine; "
            "use ndarray.cpu(0) to run on the host"
        )
    return ctx


def is_gpu_ctx(ctx) -> bool:
    """True if ``ctx`` is a GPU context (device_type 2); False for None and the host."""
    return isinstance(ctx, Device) and ctx._kind == "gpu"


def array(arr, ctx: Device | None = None) -> NDArray:
    """A new float32 array on ``ctx`` (the course's name for the device; default the host)
    holding a copy of ``arr``.

    Raises TypeError for non-numeric data or a bad ctx (see :func:`gpumat.array`).
    """
    return _arrays.array(arr, cpu(0) if ctx is None else ctx)


def empty(shape, ctx: Device | None = None) -> NDArray:
    """A new uninitialised float32 array of ``shape`` on ``ctx`` (default the host).

    Raises ValueError/TypeError for a bad shape or ctx (see :func:`gpumat.empty`).
    """
    return _arrays.empty(shape, cpu(0) if ctx is None else ctx)
