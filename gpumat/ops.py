"""gpumat.ops (also ``gpumat.gpu_op``): one call per kernel, outputs passed in.

The names and argument order are the seed assignment's ``gpu_op`` module's, so its scripts run with
only the import changed. Every array is a float32 :class:`gpumat.PyGpuMatrix`; all arrays of one
call must be on the same device (the op runs there: host loops/BLAS on ``cpu()``, CUDA kernels on
``gpu(i)``, asynchronously until a result is copied back).

Errors, raised before any kernel runs:
    TypeError: an argument is not a PyGpuMatrix (or a number where one is expected).
    ValueError: shapes that do not fit the op (the message names the op and the shapes), arrays
        on different devices, or an output that is also an input of an op that cannot work in
        place (matmul, softmax, softmax_cross_entropy, transpose, broadcast_to,
        reduce_sum_axis_zero). Elementwise ops may write in place.
    gpumat.CudaError: a CUDA call or launch failed. MemoryError: out of device memory.
Set ``GPUMAT_SYNC=1`` to synchronize after each op, so an asynchronous fault names its op.
"""

from __future__ import annotations

import numbers

from . import _core

__all__ = [
    "array_set",
    "axpy",
    "broadcast_to",
    "copy",
    "matrix_elementwise_add",
    "matrix_elementwise_add_by_const",
    "matrix_elementwise_multiply",
    "matrix_elementwise_multiply_by_const",
    "matrix_multiply",
    "random_normal",
    "random_uniform",
    "reduce_sum_axis_zero",
    "relu",
    "relu_gradient",
    "softmax",
    "softmax_cross_entropy",
    "transpose",
]


def _seed(seed) -> int:
    if not isinstance(seed, numbers.Integral) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int, got {seed!r}")
    if not 0 <= seed < 2**64:
        raise ValueError(f"seed must be in [0, 2**64), got {seed}")
    return int(seed)


def array_set(arr, value: float) -> None:
    """Sets every element of ``arr`` (any shape) to ``value``."""
    _core.array_set_(arr, value)


def broadcast_to(in_arr, out_arr) -> None:
    """Repeats ``in_arr`` over the leading axes of ``out_arr``.

    ``in_arr``'s shape, after dropping leading 1s, must end ``out_arr``'s shape:
    (200, 300) -> (130, 200, 300), (1, 10) -> (7, 10), (10,) -> (7, 10).
    """
    _core.broadcast_to_(in_arr, out_arr)


def reduce_sum_axis_zero(in_arr, out_arr) -> None:
    """Sums ``in_arr`` over its leading axes into ``out_arr``.

    ``out_arr``'s shape, after dropping leading 1s, must end ``in_arr``'s shape:
    (500, 200, 100) -> (200, 100), (4, 5, 6) -> (6,), (8, 10) -> (1, 10). The inverse of
    :func:`broadcast_to` for gradients.
    """
    _core.reduce_sum_axis_zero_(in_arr, out_arr)


def matrix_elementwise_add(matA, matB, matC) -> None:
    """matC = matA + matB, all of one shape (matC may be matA or matB)."""
    _core.add_(matA, matB, matC)


def matrix_elementwise_add_by_const(in_mat, val: float, out_mat) -> None:
    """out_mat = in_mat + val, same shapes (may be in place)."""
    _core.add_const_(in_mat, val, out_mat)


def matrix_elementwise_multiply(matA, matB, matC) -> None:
    """matC = matA * matB elementwise, all of one shape (matC may be matA or matB)."""
    _core.multiply_(matA, matB, matC)


def matrix_elementwise_multiply_by_const(in_mat, val: float, out_mat) -> None:
    """out_mat = in_mat * val, same shapes (may be in place)."""
    _core.multiply_const_(in_mat, val, out_mat)


def matrix_multiply(matA, transA: bool, matB, transB: bool, matC) -> None:
    """matC (M, N) = op(matA) @ op(matB), op(X) = X.T when its flag is true.

    matA is (M, K), or (K, M) when transA; matB is (K, N), or (N, K) when transB; all 2-D.
    K = 0 gives zeros. Host: BLAS sgemm; CUDA: shared-memory tiled kernel (see matmul.cu).
    FLOPs: 2·M·N·K.
    """
    _core.matmul_(matA, bool(transA), matB, bool(transB), matC)


def relu(in_arr, out_arr) -> None:
    """out_arr = max(in_arr, 0) elementwise (NaN stays NaN)."""
    _core.relu_(in_arr, out_arr)


def relu_gradient(in_arr, in_grad_arr, out_arr) -> None:
    """out_arr = in_grad_arr where in_arr > 0, else 0 (the subgradient at 0 is taken as 0).

    A NaN in ``in_arr`` gives NaN, so a diverged activation is not silently hidden.
    """
    _core.relu_gradient_(in_arr, in_grad_arr, out_arr)


def softmax(in_arr, out_arr) -> None:
    """Row-wise softmax of a 2-D (N, C) array: exp(x - max_row) / sum(exp(x - max_row)).

    NOTE: the row max is subtracted first so exp() cannot overflow.
    """
    _core.softmax_(in_arr, out_arr)


def softmax_cross_entropy(in_arr_a, in_arr_b, out_arr) -> None:
    """out_arr (1,) = mean over rows of -sum_c y_[r, c] * log softmax(y)[r, c].

    ``in_arr_a`` holds the logits y, ``in_arr_b`` the labels y_ (one-hot or probabilities), both
    (N, C) with N >= 1. log softmax uses the log-sum-exp trick, so large logits are safe.
    Unlike the seed skeleton, the value is the batch mean; see gpumat.autodiff for its gradient.
    """
    _core.softmax_cross_entropy_(in_arr_a, in_arr_b, out_arr)


def transpose(in_arr, out_arr) -> None:
    """out_arr (C, R) = in_arr (R, C) transposed."""
    _core.transpose_(in_arr, out_arr)


def random_uniform(out_arr, low: float = 0.0, high: float = 1.0, seed: int = 0) -> None:
    """Fills out_arr with uniform samples in [low, high).

    Element i depends only on (seed, i) (SplitMix64 counter hashing), so cpu and gpu give the
    same values for the same seed. Raises ValueError if low > high or the seed is not in [0, 2**64).
    """
    _core.random_uniform_(out_arr, low, high, _seed(seed))


def random_normal(out_arr, mean: float = 0.0, std: float = 1.0, seed: int = 0) -> None:
    """Fills out_arr with normal samples N(mean, std**2) (Box-Muller on counter-hashed uniforms).

    Same seed, same values on every device (to float32 rounding of exp/log/cos). Raises
    ValueError if std < 0 or the seed is not in [0, 2**64).
    """
    _core.random_normal_(out_arr, mean, std, _seed(seed))


def axpy(alpha: float, x, y) -> None:
    """y += alpha * x in place (BLAS axpy), same shapes: the SGD parameter update."""
    _core.axpy_(alpha, x, y)


def copy(src, dst) -> None:
    """dst = src, same shape and device (asynchronous on CUDA)."""
    _core.copy_(src, dst)
