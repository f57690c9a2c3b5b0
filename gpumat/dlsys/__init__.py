"""The dlsys course's ``dlsys`` package, on gpumat's kernels and executor.

The course's scripts (``tests/test_gpu_op.py``, ``tests/mnist_dlsys.py`` of the CSE599G1
assignment 2) run with only ``from dlsys import ...`` changed to ``from gpumat.dlsys import ...``.
This namespace keeps the dlsys course's conventions exactly:

- ``autodiff.softmaxcrossentropy_op``'s gradient is summed over the batch, ``softmax(y) - y_``
  (the loss value is still the batch mean), so the course's ``lr = 1e-3`` at batch 1000 trains as
  the course says. :mod:`gpumat.autodiff` divides the gradient by N instead.
- contexts report ``device_type`` 1 (cpu) and 2 (gpu); ``ndarray.gpu(i)`` raises
  ``gpumat.CudaError`` when no such GPU is usable.
- ``Executor.memory_plan(feed_shapes)`` is a method and ``Executor.node_to_arr_map`` maps nodes
  to their planned arrays.

Kernels, graph machinery and executor are gpumat's own; only the op definitions that differ
live here.
"""

from . import autodiff, gpu_op, ndarray

__all__ = ["autodiff", "gpu_op", "ndarray"]
