"""The dlsys course's ``gpu_op`` module: gpumat's kernels, one call each, outputs passed in.

The course's functions under its names and argument orders (``array_set``,
``reduce_sum_axis_zero``, ``matrix_elementwise_add[_by_const]``,
``matrix_elementwise_multiply[_by_const]``, ``matrix_multiply(matA, transA, matB, transB,
matC)``, ``softmax_cross_entropy``), each a call of the :mod:`gpumat.ops` function it names, and
every :mod:`gpumat.ops` function under its own name, among them the course's ``broadcast_to``,
``relu``, ``relu_gradient`` and ``softmax`` (gpumat's take the course's arguments, and more:
``softmax`` along any dim, the last by default). Shapes and errors are those of
:mod:`gpumat.ops`, whose messages name the op by its gpumat name (``add``, ``matmul``,
``sum_to_size``, ...).
"""

from gpumat import ops
from gpumat.ops import *  # noqa: F403 (every gpumat.ops function under its own name)

_COURSE = [
    "array_set",
    "matrix_elementwise_add",
    "matrix_elementwise_add_by_const",
    "matrix_elementwise_divide",
    "matrix_elementwise_multiply",
    "matrix_elementwise_multiply_by_const",
    "matrix_multiply",
    "reduce_sum_axis_zero",
    "softmax_cross_entropy",
]
__all__ = sorted(set(ops.__all__) | set(_COURSE))


def array_set(arr, value: float) -> None:
    """Sets every element of ``arr`` to ``value`` (:func:`gpumat.ops.fill`)."""
    ops.fill(arr, value)


def matrix_elementwise_add(matA, matB, matC) -> None:  # noqa: N803 (the course's names)
    """matC = matA + matB, all of one shape (:func:`gpumat.ops.add`)."""
    ops.add(matA, matB, matC)


def matrix_elementwise_add_by_const(in_mat, val: float, out_mat) -> None:
    """out_mat = in_mat + val (:func:`gpumat.ops.add_scalar`)."""
    ops.add_scalar(in_mat, val, out_mat)


def matrix_elementwise_multiply(matA, matB, matC) -> None:  # noqa: N803
    """matC = matA * matB elementwise (:func:`gpumat.ops.mul`)."""
    ops.mul(matA, matB, matC)


def matrix_elementwise_multiply_by_const(in_mat, val: float, out_mat) -> None:
    """out_mat = in_mat * val (:func:`gpumat.ops.mul_scalar`)."""
    ops.mul_scalar(in_mat, val, out_mat)


def matrix_elementwise_divide(matA, matB, matC) -> None:  # noqa: N803
    """matC = matA / matB elementwise, IEEE division (:func:`gpumat.ops.div`)."""
    ops.div(matA, matB, matC)


def matrix_multiply(matA, transA: bool, matB, transB: bool, matC) -> None:  # noqa: N803
    """matC = op(matA) @ op(matB), op(X) = X.T when its flag is true (:func:`gpumat.ops.matmul`)."""
    ops.matmul(matA, matB, matC, transA, transB)


def reduce_sum_axis_zero(in_arr, out_arr) -> None:
    """Sums in_arr over its leading axes into out_arr (:func:`gpumat.ops.sum_to_size`)."""
    ops.sum_to_size(in_arr, out_arr)


def softmax_cross_entropy(in_arr_a, in_arr_b, out_arr) -> None:
    """out_arr (1,) = the batch mean of -sum_c labels log softmax(logits), logits in_arr_a and
    labels in_arr_b, both (N, C) (:func:`gpumat.ops.cross_entropy`)."""
    ops.cross_entropy(in_arr_a, in_arr_b, out_arr)
