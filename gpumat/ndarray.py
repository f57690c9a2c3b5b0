"""The dlsys course's ``ndarray`` module names over gpumat's own devices (a face: it only
re-exports).

Devices here report ``device_type`` as ``"cpu"``/``"gpu"``; :mod:`gpumat.dlsys.ndarray` is the
course's module exactly (integer device types, ``gpu(0)`` raising without a GPU), the one the
course's scripts use through ``from gpumat.dlsys import ndarray``.

``ndarray.array(np_arr, ctx)``, ``ndarray.empty(shape, ctx)``, ``ndarray.cpu(0)``,
``ndarray.gpu(0)``, ``ndarray.is_gpu_ctx(ctx)``, ``ndarray.NDArray`` (= PyGpuMatrix, with
``asnumpy()``, ``copyfrom()``, ``shape``, ``ctx``) and ``ndarray.DLContext`` (= gpumat.Device);
``array`` and ``empty`` take the course's ``ctx`` argument (gpumat's own take ``device``).
"""

from gpumat._core import PyGpuMatrix as NDArray
from gpumat.devices import Device as DLContext
from gpumat.devices import cpu, gpu
from gpumat.devices import is_gpu_device as is_gpu_ctx
from gpumat.dlsys.ndarray import array, empty

__all__ = ["DLContext", "NDArray", "array", "cpu", "empty", "gpu", "is_gpu_ctx"]
