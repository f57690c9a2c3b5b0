"""The dlsys course's ``ndarray`` module names over gpumat's own contexts (a face: it only
re-exports).

Contexts here report ``device_type`` as ``"cpu"``/``"gpu"``; :mod:`gpumat.dlsys.ndarray` is the
course's module exactly (integer device types, ``gpu(0)`` raising without a GPU), the one the
course's scripts use through ``from gpumat.dlsys import ndarray``.

``ndarray.array(np_arr, ctx)``, ``ndarray.empty(shape, ctx)``, ``ndarray.cpu(0)``,
``ndarray.gpu(0)``, ``ndarray.is_gpu_ctx(ctx)``, ``ndarray.NDArray`` (= PyGpuMatrix, with
``asnumpy()``, ``copyfrom()``, ``shape``) and ``ndarray.DLContext`` (= gpumat.Context).
"""

from gpumat._core import PyGpuMatrix as NDArray
from gpumat.arrays import array, empty
from gpumat.device import Context as DLContext
from gpumat.device import cpu, gpu, is_gpu_ctx

__all__ = ["DLContext", "NDArray", "array", "cpu", "empty", "gpu", "is_gpu_ctx"]
