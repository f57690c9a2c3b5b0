"""The seed assignment's ``ndarray`` module names, so its scripts run with only the import changed.

``ndarray.array(np_arr, ctx)``, ``ndarray.empty(shape, ctx)``, ``ndarray.cpu(0)``,
``ndarray.gpu(0)``, ``ndarray.is_gpu_ctx(ctx)``, ``ndarray.NDArray`` (= PyGpuMatrix, with
``asnumpy()``, ``copyfrom()``, ``shape``) and ``ndarray.DLContext`` (= gpumat.Context).
"""

from . import PyGpuMatrix as NDArray
from . import array, empty
from .context import Context as DLContext
from .context import cpu, gpu, is_gpu_ctx

__all__ = ["DLContext", "NDArray", "array", "cpu", "empty", "gpu", "is_gpu_ctx"]
