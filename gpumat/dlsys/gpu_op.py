"""The dlsys course's ``gpu_op`` module: gpumat's kernels, one call each, outputs passed in.

The same functions as :mod:`gpumat.ops` (``array_set``, ``broadcast_to``,
``reduce_sum_axis_zero``, ``matrix_elementwise_add[_by_const]``,
``matrix_elementwise_multiply[_by_const]``, ``matrix_multiply(A, trans_A, B, trans_B, C)``,
``relu``, ``relu_gradient``, ``softmax``, ``softmax_cross_entropy`` and gpumat's additions); see
that module for shapes and errors.
"""

from gpumat.ops import *  # noqa: F403
from gpumat.ops import __all__  # noqa: F401
