"""gpumat.ops: one call per kernel, outputs passed in.

The names and arguments are PyTorch's where PyTorch has the op (``add(a, b, out)``,
``matmul(a, b, out)``, ``sum(a, out, dim)``, ``log_softmax(a, out, dim)``, ``cross_entropy``,
``l1_loss``, ``conv2d``, ``max_pool2d``), with the output last instead of ``out=``; a gradient
kernel is its op's name with ``_gradient``. The dlsys course's names (``matrix_elementwise_add``,
``matrix_multiply``, ``array_set``, ...) are :mod:`gpumat.dlsys.gpu_op`'s. Every array is a
float32 :class:`gpumat.PyGpuMatrix`; all arrays of one call must be on the same device (the op
runs there: host loops/BLAS on ``cpu()``, CUDA kernels on ``gpu(i)`` and ``emu(i)``,
asynchronously until a result is copied back). The functions come in kernel families, in the
order of the sections below (elementwise, activations, layout, reductions, matrix product,
softmax, losses, convolution, pooling, random numbers, optimizers), the same families as
``extensions/src/cuda`` and ``extensions/src/host``. The pointwise kernels declared by their
shape in ``extensions/src/kernels.def`` (tanh, sigmoid, sqrt and their gradients) come from the
generated ``gpumat._ops_pointwise``. :mod:`gpumat.reference` has the same functions on numpy
arrays, and the graph ops of :mod:`gpumat.graph` call one or the other.

Errors, raised before any kernel runs:

- TypeError: an argument is not a PyGpuMatrix (or a number where one is expected).
- ValueError: shapes that do not fit the op (the message names the op and the shapes), arrays
  on different devices, or an output that is also an input of an op that cannot work in
  place (matmul, softmax, cross_entropy, transpose, broadcast_to, sum_to_size, the reductions
  along a dim, argmax, one_hot, the convolutions and poolings and their gradients,
  reduce_sum_channels, the losses, adam_update). Elementwise ops and add_channel_bias
  may write in place. Impossible geometry (an empty convolution or pooling output, a
  channel mismatch, a wrong rank) is a ValueError too.
- gpumat.CudaError: a CUDA call or launch failed. MemoryError: out of device memory.

Set ``GPUMAT_SYNC=1`` to synchronize after each op, so an asynchronous fault names its op.
"""

from __future__ import annotations

import contextlib
import threading

from gpumat import _core, _ops_pointwise
from gpumat._checks import (
    array_lists,
    as_flag,
    as_int,
    as_int_tuple,
    as_pair,
    as_probability,
    as_real,
    as_seed,
    pool_args,
)
from gpumat._ops_pointwise import *  # noqa: F403 (the pointwise kernels declared in kernels.def)

_core_module = _core


class _TracingCore:
    """Stands for ``gpumat._core`` in this module while :func:`trace_calls` runs: every kernel
    entry point called from the tracing thread is recorded as ``(name, args)``, then run."""

    def __init__(self, calls: list, thread: int) -> None:
        self._calls = calls
        self._thread = thread

    def __getattr__(self, name: str):
        fn = getattr(_core_module, name)
        if not callable(fn) or threading.get_ident() != self._thread:
            return fn

        def recorded(*args):
            self._calls.append((name, args))
            return fn(*args)

        return recorded


_trace_lock = threading.Lock()


@contextlib.contextmanager
def trace_calls():
    """Record the ``gpumat._core`` kernel calls that this module's functions make on this thread.

    Yields a list that fills with ``(name, args)`` pairs in call order (``name`` is the _core
    wrapper, e.g. ``"matmul_"``; ``args`` as passed, after this module's checks). The calls still
    run. The executor compiles its schedule from such a trace (``gpumat.Executor(compiled=True)``).
    One trace at a time (RuntimeError otherwise); other threads' calls are not recorded.
    """
    global _core
    if not _trace_lock.acquire(blocking=False):
        raise RuntimeError("gpumat.ops.trace_calls: another trace is running")
    calls: list = []
    # The generated pointwise functions call _core through their own module: swapped alike.
    _core = _ops_pointwise._core = _TracingCore(calls, threading.get_ident())
    try:
        yield calls
    finally:
        _core = _ops_pointwise._core = _core_module
        _trace_lock.release()


__all__ = [
    "adadelta_update_multi",
    "adam_update",
    "adam_update_multi",
    "add",
    "add_channel_bias",
    "add_scalar",
    "amax",
    "amax_gradient",
    "argmax",
    "argsort",
    "as_strided",
    "as_strided_scatter",
    "attention",
    "attention_gradient",
    "attention_strided",
    "attention_strided_gradient",
    "avg_pool2d",
    "avg_pool2d_gradient",
    "adaptive_avg_pool2d",
    "adaptive_avg_pool2d_gradient",
    "axpy",
    "batch_norm",
    "batch_norm_gradient",
    "batch_norm_stats",
    "batch_norm_weight_gradient",
    "bmm",
    "broadcast_binary",
    "broadcast_dim",
    "broadcast_to",
    "broadcast_where",
    "clip_scale_multi",
    "conv1d",
    "conv1d_gradient_filter",
    "conv1d_gradient_input",
    "conv2d",
    "conv2d_gradient_filter",
    "conv2d_gradient_input",
    "copy",
    "cross_entropy",
    "cross_entropy_with_gradient",
    "cumsum",
    "div",
    "dropout",
    "eq",
    "exp",
    "fill",
    "gather",
    "gather_gradient",
    "gru_cell",
    "gru_cell_gradient",
    "index_add",
    "index_copy",
    "index_select",
    "l1_loss",
    "l1_loss_gradient",
    "layer_norm",
    "layer_norm_gradient",
    "layer_norm_stats",
    "layer_norm_weight_gradient",
    "layer_norm_backward",
    "log",
    "log_softmax",
    "log_softmax_gradient",
    "lstm_cell",
    "lstm_cell_gradient",
    "matmul",
    "matmul_bias",
    "max_pool2d",
    "max_pool2d_gradient",
    "mean",
    "momentum_sgd_update",
    "mse_loss",
    "mse_loss_gradient",
    "mul",
    "mul_scalar",
    "nll_loss",
    "nll_loss_gradient",
    "normal",
    "one_hot",
    "prod",
    "prod_gradient",
    "randint",
    "reduce_sum_channels",
    "relu",
    "relu_bias_gradient",
    "relu_gradient",
    "reshape",
    "set_conv_workspace_limit",
    "sgd_update",
    "softmax",
    "softmax_gradient",
    "sum",
    "sum_to",
    "sum_to_size",
    "total_norm_multi",
    "trace_calls",
    "transpose",
    "tril",
    "triu",
    "uniform",
]
__all__ += _ops_pointwise.__all__


# --------------------------------------------------------------------------------------------------
# Elementwise: one element in, one out; every one of these may write in place.
# --------------------------------------------------------------------------------------------------


def fill(out, value: float) -> None:
    """Sets every element of ``out`` (any shape) to ``value`` (``Tensor.fill_``)."""
    _core.fill_(out, value)


def add(a, b, out) -> None:
    """out = a + b elementwise, all of one shape (out may be a or b)."""
    _core.add_(a, b, out)


def add_scalar(a, value: float, out) -> None:
    """out = a + value, same shapes (may be in place)."""
    _core.add_scalar_(a, value, out)


def mul(a, b, out) -> None:
    """out = a * b elementwise, all of one shape (out may be a or b)."""
    _core.mul_(a, b, out)


def div(a, b, out) -> None:
    """out = a / b elementwise, all of one shape (out may be a or b), float32.

    IEEE division, correctly rounded on every device (nvcc's default ``-prec-div=true``): x / 0
    is +-inf by the signs of x and the zero, 0 / 0 and inf / inf are NaN, NaN propagates (as
    numpy's ``a / b`` and ``torch.div``). Raises ValueError for shapes that differ or arrays on
    different devices.
    """
    _core.div_(a, b, out)


def mul_scalar(a, value: float, out) -> None:
    """out = a * value, same shapes (may be in place)."""
    _core.mul_scalar_(a, value, out)


def axpy(alpha: float, x, y) -> None:
    """y += alpha * x in place (BLAS axpy), same shapes: the SGD parameter update."""
    _core.axpy_(alpha, x, y)


def copy(a, out) -> None:
    """out = a, same shape and device (asynchronous on CUDA)."""
    _core.copy_(a, out)


def eq(a, b, out) -> None:
    """out = 1.0 where a == b, else 0.0, elementwise; all of one shape (out may be a or b),
    float32.

    IEEE equality, as numpy's ``==`` and ``torch.eq``: NaN equals nothing (not even NaN),
    -0.0 equals +0.0, inf equals inf. Accuracy (``eq(argmax(logits), labels)``) and masks
    without a comparison on the host. Raises ValueError for shapes that differ or arrays on
    different devices.
    """
    _core.eq_(a, b, out)


def exp(a, out) -> None:
    """out = exp(a) elementwise; any shape, both of one shape (may be in place), float32.

    IEEE special values, as numpy: overflows to inf for x > ~88.72 and underflows to 0 for
    x < ~-103.97 (through the float32 denormals); exp(-inf) = 0, NaN stays NaN. CUDA's expf is
    within 2 ulp of the exact value, the host's C library within 1. Raises ValueError for shapes
    that differ or arrays on different devices.
    """
    _core.exp_(a, out)


def log(a, out) -> None:
    """out = log(a), the natural logarithm, elementwise; one shape (may be in place).

    IEEE special values, as numpy: log(0) = -inf, log(x < 0) = NaN, log(inf) = inf, NaN stays
    NaN. Within 1 ulp on CUDA (logf) and on the host. Raises ValueError for shapes that differ or
    arrays on different devices.
    """
    _core.log_(a, out)


# --------------------------------------------------------------------------------------------------
# Activations: nonlinearities, their gradients, dropout, and the fused ReLU + bias gradient.
# --------------------------------------------------------------------------------------------------


def relu(a, out) -> None:
    """out = max(a, 0) elementwise (NaN stays NaN)."""
    _core.relu_(a, out)


def relu_gradient(x, dy, out) -> None:
    """out = dy where x > 0, else 0 (the subgradient at 0 is taken as 0); x is the ReLU's input
    (or its output: x > 0 is the same mask).

    A NaN in ``x`` gives NaN, so a diverged activation is not silently hidden.
    """
    _core.relu_gradient_(x, dy, out)


def relu_bias_gradient(y, dy, dz, dbias) -> None:
    """The backward pass of ``relu(z + bias)`` in one kernel: dz = dy where y > 0, else 0
    (:func:`relu_gradient`), and dbias = column sums of dz (:func:`sum_to_size`).

    y (the ReLU's output, or its input z: y > 0 is the same mask), dy and dz are (rows, cols);
    dbias is (cols,). dz may be dy; no other output may be an input. The column sums run in a
    fixed order (deterministic). Raises ValueError for shapes that do not fit or aliased outputs.
    """
    _core.relu_bias_gradient_(y, dy, dz, dbias)


def dropout(a, out, p: float, seed: int) -> None:
    """Inverted dropout: out[i] = 0 where uniform01(seed, i) < p, else a[i] / (1 - p).

    uniform01 is the counter-based generator of :func:`uniform` (SplitMix64 of (seed, i),
    24 bits), so every device and :func:`gpumat.reference.dropout` drop the same elements for a
    seed. 0 <= p <= 1 (p = 1 drops everything). The gradient is dropout of dy with the same seed
    and p. Elementwise (may be in place). TypeError / ValueError for a bad p or seed.
    """
    _core.dropout_(a, out, as_probability(p, "dropout"), as_seed(seed, "dropout"))


# --------------------------------------------------------------------------------------------------
# Layout: the same values in another shape or order.
# --------------------------------------------------------------------------------------------------


def transpose(a, out) -> None:
    """out (C, R) = a (R, C) transposed."""
    _core.transpose_(a, out)


def reshape(a, out) -> None:
    """out = a with out's shape (a copy): same number of elements, same device."""
    _core.reshape_(a, out)


def one_hot(indices, out) -> None:
    """out (N, C) = the one-hot rows of ``indices`` (N,): out[i, j] = 1.0 if
    indices[i] == j, else 0.0 (``torch.nn.functional.one_hot``, with the classes C taken from
    out's shape and the result in float32).

    ``indices`` holds class numbers as float32 integers. An index outside [0, C), a non-integer or
    NaN gives a row of zeros: a kernel cannot raise, so check the range first where it matters
    (PyTorch raises instead). -0.0 is class 0. out must not be indices. Raises ValueError
    for indices that are not 1-D, an out that is not (N, C), C > 2**24 (float32 cannot name
    every class) or aliasing.
    """
    _core.one_hot_(indices, out)


def tril(a, out, diagonal: int = 0) -> None:
    """out = a on and below the ``diagonal``-th diagonal of each matrix of its last two dims
    (element (i, j) kept where j - i <= diagonal), 0 elsewhere: ``torch.tril``. a and out have
    one shape of rank >= 2 (leading dims a batch), float32 storage; out may be a (in place).
    Raises ValueError for a rank below 2, different shapes or devices, or a partial overlap;
    TypeError for a non-integer diagonal."""
    _core.tril_(a, out, as_int(diagonal, "diagonal", "tril"))


def triu(a, out, diagonal: int = 0) -> None:
    """out = a on and above the ``diagonal``-th diagonal of each matrix of its last two dims
    (element (i, j) kept where j - i >= diagonal), 0 elsewhere: ``torch.triu``. Shapes, dtypes
    and errors as :func:`tril`'s."""
    _core.triu_(a, out, as_int(diagonal, "diagonal", "triu"))


# --------------------------------------------------------------------------------------------------
# Strided: operands read and written where they lie, by element strides (extensions/src/strided.h),
# in up to 8 dims: broadcasting without copies, and the copies behind views and index assignment.
# --------------------------------------------------------------------------------------------------

#: broadcast_binary's functions, in the order of the kernel's op codes (extensions/src/strided.h).
BROADCAST_BINARY_OPS = (
    "add",
    "sub",
    "mul",
    "div",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "minimum",
    "maximum",
    "logical_and",
    "logical_or",
)


def broadcast_binary(a, b, out, op: str) -> None:
    """out = a (op) b elementwise with numpy's broadcasting rules: ``out``'s shape is the
    broadcast of a's and b's (at most 8 dims), and a and b are read in place, a dim of 1 or a
    missing leading dim repeating (no copy of the repeated operand). ``op`` is one of
    :data:`BROADCAST_BINARY_OPS`: the arithmetic of the contiguous kernel of that name (IEEE
    division; comparisons and logic give 1.0 / 0.0, a NaN compares false and is true as a truth
    value; minimum / maximum give NaN where either is NaN, as PyTorch's). ``out`` may be an input of
    its own shape (in place).

    Raises:
        ValueError: an unknown op, shapes that do not broadcast or an ``out`` of another shape,
            more than 8 dims, or ``out`` overlapping a broadcast input.
    """
    if op not in BROADCAST_BINARY_OPS:
        raise ValueError(f"broadcast_binary: op must be one of {BROADCAST_BINARY_OPS}, got {op!r}")
    _core.broadcast_binary_(a, b, out, BROADCAST_BINARY_OPS.index(op))


def broadcast_where(cond, a, b, out) -> None:
    """out = a where cond != 0, else b (``torch.where``), cond, a and b broadcast to out's shape
    by numpy's rules and read in place. Raises ValueError as :func:`broadcast_binary`."""
    _core.broadcast_where_(cond, a, b, out)


def sum_to(a, out) -> None:
    """out = a summed over the dims that out repeats, the gradient of a broadcast: out's shape,
    right-aligned against a's (its missing leading dims summed), has every dim equal to a's or 1
    (``Tensor.sum_to_size``). Each output element is the sum of its inputs in index order, in
    float32 (deterministic). Raises ValueError for shapes that do not fit or aliasing."""
    _core.sum_to_(a, out)


def _array(x, what: str, op: str):
    if not isinstance(x, _core_module.PyGpuMatrix):  # _core may be the tracing stand-in
        raise TypeError(f"{op}: {what} must be a PyGpuMatrix, got {type(x).__name__}")
    return x


def as_strided(a, out, stride, offset: int = 0) -> None:
    """out[idx] = a.flat[offset + sum_d idx[d] * stride[d]] for every index of out's shape
    (``torch.as_strided(a, out.shape, stride, offset)`` copied into ``out``): the copy behind a
    permute, slice, flip (negative strides) or expand (stride 0). ``stride`` has one int per dim
    of out (at most 8), in elements.

    Raises:
        ValueError: an address outside a, a stride count that is not out's rank, aliasing.
        TypeError: strides or offset that are not ints.
    """
    st = as_int_tuple(stride, "stride", "as_strided", "a stride")
    if len(st) != len(_array(out, "out", "as_strided").shape):
        raise ValueError(
            f"as_strided: {len(st)} strides for an output of shape {tuple(out.shape)} (one per dim)"
        )
    _core.as_strided_(a, out, st, as_int(offset, "offset", "as_strided"))


def as_strided_scatter(src, out, stride, offset: int = 0) -> None:
    """out.flat[offset + sum_d idx[d] * stride[d]] = src[idx] for every index of src's shape, in
    place in ``out``: the write behind index assignment (``x[:, 0] = v``) and ``cat``. The
    addresses must be distinct (no element written twice) and inside out.

    Raises:
        ValueError: an address outside out, a region that writes an element twice, a stride count
            that is not src's rank, src overlapping out. TypeError: non-int strides or offset.
    """
    st = as_int_tuple(stride, "stride", "as_strided_scatter", "a stride")
    if len(st) != len(_array(src, "src", "as_strided_scatter").shape):
        raise ValueError(
            f"as_strided_scatter: {len(st)} strides for a source of shape {tuple(src.shape)} "
            "(one per dim)"
        )
    _core.as_strided_scatter_(src, out, st, as_int(offset, "offset", "as_strided_scatter"))


# --------------------------------------------------------------------------------------------------
# Reductions and broadcasts, each the other's gradient. A ``dim`` is an int in [-ndim, ndim)
# (negative counts from the end); the kernels see the array as (outer, n, inner) around it, so any
# dim works without a transpose.
# --------------------------------------------------------------------------------------------------


def sum_to_size(a, out) -> None:
    """Sums ``a`` over its leading dims into ``out`` (``Tensor.sum_to_size(out.shape)`` where
    out's shape ends a's).

    ``out``'s shape, after dropping leading 1s, must end ``a``'s shape:
    (500, 200, 100) -> (200, 100), (4, 5, 6) -> (6,), (8, 10) -> (1, 10). The inverse of
    :func:`broadcast_to` for gradients.
    """
    _core.sum_to_size_(a, out)


def broadcast_to(a, out) -> None:
    """Repeats ``a`` over the leading dims of ``out``.

    ``a``'s shape, after dropping leading 1s, must end ``out``'s shape:
    (200, 300) -> (130, 200, 300), (1, 10) -> (7, 10), (10,) -> (7, 10).
    """
    _core.broadcast_to_(a, out)


def sum(a, out, dim: int) -> None:  # noqa: A001 (torch.sum's name; this module never calls the builtin)
    """out = a summed along ``dim``; out has a's shape with that dim removed or kept as 1
    (keepdim). Float32 sums in index order on both devices."""
    _core.sum_(a, out, as_int(dim, "dim", "sum"))


def mean(a, out, dim: int) -> None:
    """out = the mean of a along a non-empty ``dim`` (shapes as for :func:`sum`)."""
    _core.mean_(a, out, as_int(dim, "dim", "mean"))


def amax(a, out, dim: int) -> None:
    """out = the max of a along a non-empty ``dim`` (shapes as for :func:`sum`; ``torch.amax``).
    A NaN in a slice makes its max NaN."""
    _core.amax_(a, out, as_int(dim, "dim", "amax"))


def amax_gradient(x, y, dy, out, dim: int) -> None:
    """out (x's shape) = dL/dx of y = amax(x, dim) given y and dy (y's shape): each slice's dy is
    shared equally by its tied maxima (x == y), the other elements get 0 (PyTorch's amax
    gradient; TensorFlow's reduce_max does the same)."""
    _core.amax_gradient_(x, y, dy, out, as_int(dim, "dim", "amax_gradient"))


def argmax(a, out, dim: int) -> None:
    """out = the index along ``dim`` of each slice's maximum of a, as float32 numbers holding
    the integers (0 .. n-1); out has a's shape with that dim removed or kept as 1 (keepdim),
    and must not be a.

    PyTorch's rule (``torch.argmax``, and numpy's): the first maximum wins ties, and a NaN counts
    as the maximum, so a slice with a NaN gives its first NaN's index. ``dim`` is an int in
    [-ndim, ndim). Raises ValueError for a bad dim, an output of the wrong shape or aliasing the
    input, an empty dim (when out is not empty), or a dim longer than 2**24 (float32 holds every
    index up to 2**24 exactly); TypeError for a non-integer dim.
    """
    _core.argmax_(a, out, as_int(dim, "dim", "argmax"))


def broadcast_dim(a, out, dim: int, scale: float = 1.0) -> None:
    """out = scale * a repeated along ``dim`` of out; a is out's shape with that dim removed or
    1. The gradient of :func:`sum` (scale 1) and :func:`mean` (scale 1/n)."""
    _core.broadcast_dim_(a, out, as_int(dim, "dim", "broadcast_dim"), scale)


def prod(a, out, dim: int) -> None:
    """out = the product of a along ``dim`` (shapes as for :func:`sum`; ``torch.prod``): float32
    products in index order on every device; an empty dim gives 1. Raises ValueError for a bad
    dim or an output of the wrong shape, on another device or aliasing a; TypeError for a
    non-integer dim."""
    _core.prod_(a, out, as_int(dim, "dim", "prod"))


def prod_gradient(x, dy, out, dim: int) -> None:
    """out (x's shape) = dL/dx of y = prod(x, dim) given dy (y's shape): dy times the product of
    the slice's other elements, as a prefix times a suffix product (no division, so a slice with
    one zero sends its gradient to that zero and one with two zeros gives 0: PyTorch's values).
    out must not be x or dy. Errors as :func:`prod`'s."""
    _core.prod_gradient_(x, dy, out, as_int(dim, "dim", "prod_gradient"))


def cumsum(a, out, dim: int, reverse: bool = False) -> None:
    """out (a's shape) = the running sums of a along ``dim`` (``torch.cumsum``), accumulated in
    float64 in index order (from the end when ``reverse``: the gradient of cumsum), rounded
    once per element; deterministic, the same on every device. out may be a (in place).
    Raises ValueError for a bad dim, different shapes or devices or a partial overlap;
    TypeError for a non-integer dim or a reverse that is not a bool."""
    _core.cumsum_(a, out, as_int(dim, "dim", "cumsum"), as_flag(reverse, "reverse", "cumsum"))


# --------------------------------------------------------------------------------------------------
# Matrix product: dense layers.
# --------------------------------------------------------------------------------------------------


def matmul(a, b, out, trans_a: bool = False, trans_b: bool = False) -> None:
    """out (M, N) = op(a) @ op(b), op(X) = X.T when its flag is true (BLAS's transA/transB).

    a is (M, K), or (K, M) when trans_a; b is (K, N), or (N, K) when trans_b; all 2-D.
    K = 0 gives zeros. Host: BLAS sgemm; CUDA: shared-memory tiled kernel (see matmul.cu).
    FLOPs: 2·M·N·K. Raises TypeError for a flag that is not a bool (a truthy array or string
    would otherwise choose a transpose silently).
    """
    ta = as_flag(trans_a, "trans_a", "matmul")
    tb = as_flag(trans_b, "trans_b", "matmul")
    _core.matmul_(a, ta, b, tb, out)


def matmul_bias(
    a, b, bias, out, trans_a: bool = False, trans_b: bool = False, relu: bool = False
) -> None:
    """out (M, N) = op(a) @ op(b) + bias, then max(., 0) when ``relu``: a dense layer.

    Shapes as :func:`matmul`; ``bias`` is (N,), added to every row. One kernel on CUDA (the tiled
    matmul with a bias/ReLU epilogue), sgemm plus one fused pass on the host; equal to matmul,
    broadcast_to, add (and relu). out must not be an input. Raises TypeError for a flag that is
    not a bool, ValueError for shapes that do not fit.
    """
    ta = as_flag(trans_a, "trans_a", "matmul_bias")
    tb = as_flag(trans_b, "trans_b", "matmul_bias")
    _core.matmul_bias_(a, ta, b, tb, bias, out, as_flag(relu, "relu", "matmul_bias"))


def bmm(a, b, out, trans_a: bool = False, trans_b: bool = False) -> None:
    """out[i] (M, N) = op(a[i]) @ op(b[i]) for a batch of B products, op(X) = X.T when its flag
    is true (PyTorch's ``torch.bmm``, with a batch of 1 repeated).

    a is (Ba, M, K), or (Ba, K, M) when trans_a; b is (Bb, K, N), or (Bb, N, K) when trans_b; all
    3-D. Ba and Bb are each the batch B or 1 (1: the same matrix for every product, a batch
    stride of 0; with Ba = Bb = 1, B is out's batch). out is (B, M, N), or (1, M, N) for the sum
    of the B products
    (the gradient of an operand repeated over the batch). K = 0 or B = 0 gives zeros. out must
    not be an input. One launch for the whole batch on CUDA (matmul.cu's tiled kernel, grid.z
    over the batch); on the host, single-threaded sgemm calls on pieces of the products taken by
    the OpenMP threads (a summed out adds the products in batch order: the same bits on any thread
    count). FLOPs: 2·B·M·N·K. Raises TypeError for a flag that is not a bool, ValueError
    for shapes that do not fit (naming bmm and the shapes).
    """
    ta = as_flag(trans_a, "trans_a", "bmm")
    tb = as_flag(trans_b, "trans_b", "bmm")
    _core.bmm_(a, ta, b, tb, out)


# --------------------------------------------------------------------------------------------------
# Attention: fused scaled dot-product attention (FlashAttention-2's tiling).
# --------------------------------------------------------------------------------------------------


def attention(q, k, v, out, scale: float, causal: bool = False) -> None:
    """Fused scaled dot-product attention, the (l, s) score matrix never stored.

    q (batch, l, e), k (batch, s, e), v (batch, s, ev), float32 with e, ev <= 128; out
    (batch, l, ev + 1): per query row, ``out[..., :ev]`` = softmax(scale * q k^T) v and
    ``out[..., ev]`` the row's logsumexp of the scaled scores (which :func:`attention_gradient`
    reads). ``causal`` masks key j > query i (top-left aligned, PyTorch's ``is_causal``). A row with
    no key (s = 0) gives zeros and -inf. Algorithm: Dao, "FlashAttention-2: Faster Attention with
    Better Parallelism and Work Partitioning" (2023): tiles of Q, K, V in shared memory and an
    online softmax (running max and sum). Raises ValueError for shapes that do not fit, a head
    dim over 128, a non-finite scale, out overlapping an input; TypeError for a non-bool causal.
    """
    c = as_flag(causal, "causal", "attention")
    _core.attention_(q, k, v, out, as_real(scale, "scale", "attention"), c)


def attention_gradient(q, k, v, out, dout, dqkv, scale: float, causal: bool = False) -> None:
    """The gradients of :func:`attention` into one flat ``dqkv`` (q.size + k.size + v.size,): dq,
    dk, dv (the shapes of q, k, v) one after the other, given its ``out`` and ``dout`` (both
    (batch, l, ev + 1); dout's last column is the logsumexp's gradient dL). FlashAttention-2's
    backward: P recomputed tile by tile from the saved logsumexp, dS = P (dO v^T - D) with
    D = rowsum(dO * O) - dL; dK, dV in
    one pass over key tiles and dQ in one over query tiles (no atomics: deterministic). Raises
    ValueError for shapes that do not fit or dqkv overlapping an input."""
    c = as_flag(causal, "causal", "attention_gradient")
    s = as_real(scale, "scale", "attention_gradient")
    _core.attention_gradient_(q, k, v, out, dout, dqkv, s, c)


def _strided_heads(op, heads, lengths, offsets, strides) -> tuple:
    """The 11 integers of the strided attention ops: heads, (l, s, e, ev), (q, k, v offsets),
    (batch, head, row strides)."""
    lens = as_int_tuple(lengths, "lengths", op, "a length")
    offs = as_int_tuple(offsets, "offsets", op, "an offset")
    st = as_int_tuple(strides, "strides", op, "a stride")
    if len(lens) != 4 or len(offs) != 3 or len(st) != 3:
        raise ValueError(
            f"{op}: expected lengths (l, s, e, ev), offsets (q, k, v) and strides (batch, head, "
            f"row), got {lens}, {offs}, {st}"
        )
    return (as_int(heads, "heads", op), *lens, *offs, *st)


def attention_strided(
    qkv, out, heads: int, lengths, offsets, strides, scale: float, causal: bool = False
) -> None:
    """:func:`attention` over q, k, v read where they lie in one array ``qkv`` (any shape: the
    output of a fused q/k/v projection), no copies. With ``lengths`` (l, s, e, ev), ``offsets``
    (q0, k0, v0) and ``strides`` (sb, sh, sr), element (b, h, r, c) of q (batch, heads, l, e) is
    ``qkv.flat[q0 + b*sb + h*sh + r*sr + c]``; k (batch, heads, s, e) and v (batch, heads, s, ev)
    likewise from k0 and v0. out is (batch * heads, l, ev + 1), float32, as :func:`attention`'s
    (batch = out.shape[0] / heads). The heads of ``x.view(B, T, H, D).transpose(1, 2)`` for the
    three C = H*D column blocks of a (B, T, 3C) x: offsets (0, C, 2C), strides (T*3C, D, 3C).

    Raises:
        ValueError: a region outside qkv, rows that overlap (row stride < head dim), negative
            offsets or strides, heads < 1, out of the wrong shape, the checks of :func:`attention`.
        TypeError: non-integer lengths, offsets or strides; a non-bool causal.
    """
    ints = _strided_heads("attention_strided", heads, lengths, offsets, strides)
    c = as_flag(causal, "causal", "attention_strided")
    _core.attention_strided_(qkv, out, *ints, as_real(scale, "scale", "attention_strided"), c)


def attention_strided_gradient(
    qkv, out, dout, dqkv, heads: int, lengths, offsets, strides, scale: float, causal: bool = False
) -> None:
    """The gradient of :func:`attention_strided` with respect to ``qkv``: ``dqkv`` (qkv's shape)
    holds dq, dk and dv where q, k and v lie and zeros elsewhere, from the forward's ``out`` and
    ``dout`` (both (batch * heads, l, ev + 1)). The kernels of :func:`attention_gradient`, writing
    each gradient in place of its operand; each element must have one writer, so the three regions
    must lie in disjoint column ranges of qkv's rows (row stride sr), each head's dim within a row
    (the fused projection's layout).

    Raises:
        ValueError: regions that share elements or that the rule above cannot tell apart, dqkv
            not qkv's shape or overlapping an input, and :func:`attention_strided`'s errors.
        TypeError: as :func:`attention_strided`.
    """
    op = "attention_strided_gradient"
    ints = _strided_heads(op, heads, lengths, offsets, strides)
    c = as_flag(causal, "causal", op)
    _core.attention_strided_gradient_(qkv, out, dout, dqkv, *ints, as_real(scale, "scale", op), c)


# --------------------------------------------------------------------------------------------------
# Softmax: along any dim.
# --------------------------------------------------------------------------------------------------


def softmax(a, out, dim: int = -1) -> None:
    """out = softmax of a (any rank >= 1) along ``dim``: exp(x - max) / sum exp(x - max)
    (max-subtracted: no overflow). Same shapes, out not a. A matrix along its rows runs the row
    kernel (one block per row on CUDA). ValueError for a bad dim."""
    _core.softmax_(a, out, as_int(dim, "dim", "softmax"))


def softmax_gradient(y, dy, out, dim: int = -1) -> None:
    """out = y * (dy - sum_dim(y * dy)): dL/dx of y = softmax(x) along ``dim`` given y and
    dy = dL/dy (the Jacobian diag(y) - y y^T applied along the dim). All of one shape."""
    _core.softmax_gradient_(y, dy, out, as_int(dim, "dim", "softmax_gradient"))


def log_softmax(a, out, dim: int = -1) -> None:
    """out = log_softmax of a along ``dim``: x - max - log(sum exp(x - max)) (the log-sum-exp
    trick; finite for any finite input). Same shapes, out not a."""
    _core.log_softmax_(a, out, as_int(dim, "dim", "log_softmax"))


def log_softmax_gradient(y, dy, out, dim: int = -1) -> None:
    """out = dy - exp(y) * sum_dim(dy): dL/dx of y = log_softmax(x) along ``dim``."""
    _core.log_softmax_gradient_(y, dy, out, as_int(dim, "dim", "log_softmax_gradient"))


# --------------------------------------------------------------------------------------------------
# Losses: each a batch mean of shape (1,), and its gradient.
# --------------------------------------------------------------------------------------------------


def cross_entropy(logits, target, out) -> None:
    """out (1,) = mean over rows of -sum_c target[r, c] * log softmax(logits)[r, c]
    (``torch.nn.functional.cross_entropy`` with class-probability targets).

    ``logits`` and ``target`` (one-hot or probabilities) are both (N, C) with N >= 1. log
    softmax uses the log-sum-exp trick, so large logits are safe. The value is the batch mean
    (the dlsys course's skeleton sums); see gpumat.graph.loss for its gradient.
    """
    _core.cross_entropy_(logits, target, out)


def cross_entropy_with_gradient(logits, target, loss, grad) -> None:
    """:func:`cross_entropy` and its gradient from one read of the logits.

    logits, target, grad: (N, C) with N, C >= 1; loss: (1,). Writes loss = mean over rows of
    -sum_c target log softmax(logits) and grad = (softmax(logits) - target) / N, the gradient of
    that mean (gpumat.graph.loss's convention). Two launches on CUDA (per-row work, then a
    deterministic mean) instead of five. Raises ValueError for shapes that do not fit or outputs
    that alias an input or each other.
    """
    _core.cross_entropy_with_gradient_(logits, target, loss, grad)


def nll_loss(log_probs, target, out) -> None:
    """out (1,) = -sum(target * log_probs) / N for (N, C) log_probs and one-hot (or probability)
    rows ``target`` of the same shape, N >= 1: the batch-mean negative log-likelihood."""
    _core.nll_loss_(log_probs, target, out)


def nll_loss_gradient(target, dloss, out) -> None:
    """out (N, C) = -dloss[0] * target / N, the gradient of :func:`nll_loss` with respect to
    log_probs times the loss's output gradient ``dloss`` (shape (1,))."""
    _core.nll_loss_gradient_(target, dloss, out)


def mse_loss(pred, target, out) -> None:
    """out (1,) = mean((pred - target)**2) over all elements; pred and target of one shape, not
    empty. Sums are in double on the host, in a fixed-order block reduction on CUDA."""
    _core.mse_loss_(pred, target, out)


def mse_loss_gradient(pred, target, dloss, out) -> None:
    """out = dloss[0] * 2 * (pred - target) / n, the gradient of :func:`mse_loss` with respect to
    pred times the loss's output gradient ``dloss`` (shape (1,)); out has pred's shape. The
    gradient with respect to target is its negative. Elementwise, so out may be pred or target
    (in place)."""
    _core.mse_loss_gradient_(pred, target, dloss, out)


def l1_loss(pred, target, out) -> None:
    """out (1,) = mean(|pred - target|) over all elements (the mean absolute error,
    ``torch.nn.functional.l1_loss``); pred and target of one shape, not empty."""
    _core.l1_loss_(pred, target, out)


def l1_loss_gradient(pred, target, dloss, out) -> None:
    """out = dloss[0] * sign(pred - target) / n, the gradient of :func:`l1_loss` with respect to
    pred. NOTE: sign(0) = 0, the subgradient PyTorch uses."""
    _core.l1_loss_gradient_(pred, target, dloss, out)


# --------------------------------------------------------------------------------------------------
# Convolution: im2col + matmul; the channel bias and its gradient.
# --------------------------------------------------------------------------------------------------


def conv2d(x, w, out, stride=1, padding=0) -> None:
    """2-D convolution (cross-correlation, as in every DL framework) with zero padding.

    ``out[n, f, oh, ow] = sum_{c,i,j} x[n, c, oh*sh - ph + i, ow*sw - pw + j] * w[f, c, i, j]``

    Shapes: x (N, C, H, W), w (F, C, KH, KW), out (N, F, OH, OW) with
    OH = (H + 2*ph - KH) // sh + 1 and OW likewise. ``stride`` (>= 1) and ``padding`` (>= 0) are
    ints or (h, w) pairs. FLOPs: 2·N·F·OH·OW·C·KH·KW.

    Method: im2col + our matmul, not a direct convolution: an image's window is unrolled into a
    (C·KH·KW, OH·OW) column matrix, so the convolution is a GEMM (BLAS sgemm on the host, the
    tiled kernel of matmul.cu on CUDA), which keeps the hardware busy for any filter size, and the
    forward pass and both gradients are the three transpose cases of that GEMM. On CUDA, and on
    the host for a batch smaller than the CPUs online, the columns of a chunk of images are built
    at once for one large GEMM, in chunks that keep the scratch under
    :func:`set_conv_workspace_limit` (64 MiB by default). On the host a batch of at least as many
    images as CPUs runs image by image: each thread builds one image's columns in its own scratch
    (still in its core's cache when its sgemm reads them) and writes that image's output.
    The schedule comes from the shape and the CPUs online, so the result is the same bits
    on any thread count.

    Raises ValueError for a wrong rank, a channel mismatch, stride outside [1, 2^31 - 1], padding
    outside [0, 2^31 - 1] (a bound of the CUDA kernels' index arithmetic, enforced on every
    device), an empty output (the padded input smaller than the filter) or an ``out`` of the wrong
    shape; TypeError for a non-integer stride or padding.
    """
    sh, sw = as_pair(stride, "stride", "conv2d")
    ph, pw = as_pair(padding, "padding", "conv2d")
    _core.conv2d_(x, w, out, sh, sw, ph, pw)


def conv2d_gradient_input(dy, w, out, stride=1, padding=0) -> None:
    """out (N, C, H, W) = dL/dx of :func:`conv2d` given dy = dL/dy (N, F, OH, OW) and w.

    The input's H and W come from ``out``'s shape (with stride > 1 several sizes give the same
    output size). im2col's transpose: dcol = w^T @ dy, then col2im: each element sums the column
    entries that read it, in one fixed order (a gather on CUDA; on the host a scatter along
    contiguous rows, ordered to add the same terms in the same order): no atomics, deterministic.
    """
    sh, sw = as_pair(stride, "stride", "conv2d_gradient_input")
    ph, pw = as_pair(padding, "padding", "conv2d_gradient_input")
    _core.conv2d_gradient_input_(dy, w, out, sh, sw, ph, pw)


def conv2d_gradient_filter(x, dy, out, stride=1, padding=0) -> None:
    """out (F, C, KH, KW) = dL/dw of :func:`conv2d` given x (N, C, H, W) and dy (N, F, OH, OW).

    dw = dy @ col(x)^T, accumulated over the batch chunks.
    """
    sh, sw = as_pair(stride, "stride", "conv2d_gradient_filter")
    ph, pw = as_pair(padding, "padding", "conv2d_gradient_filter")
    _core.conv2d_gradient_filter_(x, dy, out, sh, sw, ph, pw)


def conv1d(x, w, out, stride: int = 1, padding: int = 0) -> None:
    """1-D convolution for sequences: x (N, C, W), w (F, C, K), out (N, F, OW),
    OW = (W + 2*padding - K) // stride + 1. It is :func:`conv2d` with H = KH = 1."""
    _core.conv1d_(
        x, w, out, as_int(stride, "stride", "conv1d"), as_int(padding, "padding", "conv1d")
    )


def conv1d_gradient_input(dy, w, out, stride: int = 1, padding: int = 0) -> None:
    """out (N, C, W) = dL/dx of :func:`conv1d` given dy (N, F, OW) and w (F, C, K)."""
    op = "conv1d_gradient_input"
    _core.conv1d_gradient_input_(
        dy, w, out, as_int(stride, "stride", op), as_int(padding, "padding", op)
    )


def conv1d_gradient_filter(x, dy, out, stride: int = 1, padding: int = 0) -> None:
    """out (F, C, K) = dL/dw of :func:`conv1d` given x (N, C, W) and dy (N, F, OW)."""
    op = "conv1d_gradient_filter"
    _core.conv1d_gradient_filter_(
        x, dy, out, as_int(stride, "stride", op), as_int(padding, "padding", op)
    )


def set_conv_workspace_limit(nbytes: int) -> int:
    """Sets the scratch limit of the convolutions in bytes and returns the previous one.

    Convolutions build the im2col columns of as many images at once as fit in ``nbytes`` (at
    least one image, whatever the limit), so a smaller limit trades speed for memory. The host's
    image-by-image schedule (:func:`conv2d`) runs only when the limit holds one image per CPU
    online. Default 64 MiB. Process-wide. On CUDA (and the emulated device) the columns live in
    per-device workspaces that are kept between calls (grown, never shrunk; freed at exit), so a
    training step asks the allocator for nothing and can run as a CUDA graph. Raises ValueError for
    a negative value.
    """
    return _core.set_conv_workspace_limit_(as_int(nbytes, "nbytes", "set_conv_workspace_limit"))


def add_channel_bias(a, bias, out) -> None:
    """out = a + bias[c] along dim 1: a (N, C, ...) of rank >= 2, bias (C,).

    The bias of a convolution (and, for (N, C), of a dense layer). May work in place.
    """
    _core.add_channel_bias_(a, bias, out)


def reduce_sum_channels(a, out) -> None:
    """out (C,) = sum of a (N, C, ...) over every dim but dim 1: the bias gradient."""
    _core.reduce_sum_channels_(a, out)


# --------------------------------------------------------------------------------------------------
# Pooling: over the (H, W) planes of NCHW arrays.
# --------------------------------------------------------------------------------------------------


def max_pool2d(x, out, kernel_size, stride=None, padding=0) -> None:
    """Max over each (KH, KW) window of x (N, C, H, W) into out (N, C, OH, OW).

    OH = (H + 2*ph - KH) // sh + 1. ``kernel_size``, ``stride`` (default: the kernel size) and
    ``padding`` are ints or (h, w) pairs; 0 <= padding <= kernel_size // 2, and padding never
    wins (it acts as -inf); kernel size and stride are between 1 and 2^31 - 1 (else ValueError).
    NOTE: a NaN in a window makes its maximum NaN.
    """
    _core.max_pool2d_(x, out, *pool_args("max_pool2d", kernel_size, stride, padding))


def max_pool2d_gradient(x, dy, out, kernel_size, stride=None, padding=0) -> None:
    """out (N, C, H, W) = dL/dx of :func:`max_pool2d` given its input x and dy (N, C, OH, OW).

    Each window's dy goes to exactly one element: its argmax, recomputed from x (the forward pass
    stores no indices). Ties go to the first maximum in row-major window order; an element that
    is the argmax of several (overlapping) windows receives the sum of their dy.
    """
    _core.max_pool2d_gradient_(
        x, dy, out, *pool_args("max_pool2d_gradient", kernel_size, stride, padding)
    )


def avg_pool2d(x, out, kernel_size, stride=None, padding=0) -> None:
    """Mean over each (KH, KW) window of x (N, C, H, W) into out (N, C, OH, OW).

    Padding counts as zeros and the divisor is always KH*KW (PyTorch's ``count_include_pad=True``).
    Arguments as for :func:`max_pool2d`.
    """
    _core.avg_pool2d_(x, out, *pool_args("avg_pool2d", kernel_size, stride, padding))


def avg_pool2d_gradient(dy, out, kernel_size, stride=None, padding=0) -> None:
    """out (N, C, H, W) = dL/dx of :func:`avg_pool2d` given dy (N, C, OH, OW); every element
    receives dy / (KH*KW) from each window that covers it."""
    _core.avg_pool2d_gradient_(
        dy, out, *pool_args("avg_pool2d_gradient", kernel_size, stride, padding)
    )


def adaptive_avg_pool2d(x, out) -> None:
    """Adaptive average pooling of x (N, C, H, W) into out (N, C, OH, OW), the output size given by
    out's shape (H, W, OH, OW >= 1; OH > H allowed): out[.., oh, ow] is the mean of x's rows
    [floor(oh*H/OH), ceil((oh+1)*H/OH)) and columns likewise, PyTorch's adaptive windows
    (``adaptive_avg_pool2d``). ValueError for other shapes."""
    _core.adaptive_avg_pool2d_(x, out)


def adaptive_avg_pool2d_gradient(dy, out) -> None:
    """out (N, C, H, W) = dL/dx of :func:`adaptive_avg_pool2d` given dy (N, C, OH, OW): every
    element receives dy / (the window's area) from each adaptive window that covers it (a gather,
    deterministic)."""
    _core.adaptive_avg_pool2d_gradient_(dy, out)


# --------------------------------------------------------------------------------------------------
# Fused recurrent cells (extensions/src/rnn_cell.h has the formulas; PyTorch's gate orders).
# --------------------------------------------------------------------------------------------------


def lstm_cell(gates, c, out) -> None:
    """One LSTM cell update: gates (N, 4H) (pre-activations of i, f, g, o, PyTorch's order) and
    c (N, H) -> out (N, 2H) = [h' | c'] with c' = sigmoid(f) c + sigmoid(i) tanh(g) and
    h' = sigmoid(o) tanh(c') (``torch.nn.LSTMCell``'s formula). float32 arrays on one device;
    ValueError for other shapes or devices, or an out that overlaps an input."""
    _core.lstm_cell_(gates, c, out)


def lstm_cell_gradient(gates, c, y, dy, out) -> None:
    """out (N, 5H) = [d gates (N, 4H) | dc (N, H)], the gradient of :func:`lstm_cell` given its
    inputs, its output y (N, 2H) and dy (N, 2H) = [dh' | dc'] (the chain rule through the formula
    of :func:`lstm_cell`, sigmoid' = s (1 - s), tanh' = 1 - tanh^2). Errors as for
    :func:`lstm_cell`."""
    _core.lstm_cell_gradient_(gates, c, y, dy, out)


def gru_cell(gi, gh, hx, out) -> None:
    """One GRU cell update: gi = x W_ih^T + b_ih and gh = hx W_hh^T + b_hh (N, 3H) (r, z, n,
    PyTorch's order), hx (N, H) -> out (N, H) = n + z (hx - n) with r = sigmoid(gi_r + gh_r),
    z = sigmoid(gi_z + gh_z), n = tanh(gi_n + r gh_n) (``torch.nn.GRUCell``'s formula).
    float32 arrays on one device; ValueError for other shapes or devices, or an out that overlaps
    an input."""
    _core.gru_cell_(gi, gh, hx, out)


def gru_cell_gradient(gi, gh, hx, dy, out) -> None:
    """out (N, 7H) = [d gi (N, 3H) | d gh (N, 3H) | d hx (N, H)], the gradient of
    :func:`gru_cell` given its inputs and dy (N, H) (the chain rule through its formula; the
    gates are recomputed, nothing is stored). Errors as for :func:`gru_cell`."""
    _core.gru_cell_gradient_(gi, gh, hx, dy, out)


# --------------------------------------------------------------------------------------------------
# Random numbers, counter-based: element i depends only on (seed, i).
# --------------------------------------------------------------------------------------------------


def uniform(out, low: float = 0.0, high: float = 1.0, seed: int = 0) -> None:
    """Fills out with uniform samples in [low, high) (``torch.nn.init.uniform_``'s a, b).

    Element i depends only on (seed, i) (SplitMix64 counter hashing), so cpu and gpu give the
    same values for the same seed. Raises ValueError if low > high, low or high is not finite, or
    the seed is not in [0, 2**64).
    """
    _core.uniform_(out, low, high, as_seed(seed, "uniform"))


def normal(out, mean: float = 0.0, std: float = 1.0, seed: int = 0) -> None:
    """Fills out with normal samples N(mean, std**2) (Box-Muller on counter-hashed uniforms).

    Same seed, same values on every device (to float32 rounding of exp/log/cos). Raises
    ValueError if std < 0, mean or std is not finite, or the seed is not in [0, 2**64).
    """
    _core.normal_(out, mean, std, as_seed(seed, "normal"))


def randint(out, low: int, high: int, seed: int = 0) -> None:
    """Fills out with integers drawn uniformly from [low, high) (``torch.randint``'s range), as
    float32 numbers holding them exactly.

    Element i is ``low + h(seed, i) mod (high - low)``, h the 64-bit SplitMix64 counter hash of
    :func:`uniform` (bias below 2**-38), so every device gives the same values for the same seed.
    Raises TypeError for non-integer bounds; ValueError if low >= high, a bound is past 2**24 in
    magnitude (float32 storage holds integers exactly only up to 2**24), or the seed is not in
    [0, 2**64).
    """
    lo, hi = as_int(low, "low", "randint"), as_int(high, "high", "randint")
    _core.randint_(out, lo, hi, as_seed(seed, "randint"))


# --------------------------------------------------------------------------------------------------
# Sorting along a dim: argsort (the first k of the stable order), gather and its transpose.
# --------------------------------------------------------------------------------------------------


def argsort(a, indices, dim: int = -1, descending: bool = False) -> None:
    """indices = the positions along ``dim`` of the first k elements of each slice of a in sorted
    order, as float32 numbers holding the integers; k = indices' length along ``dim`` (0 <= k <=
    n), its other dims a's. k = n is ``torch.argsort(stable=True)``, k < n ``torch.topk``'s
    indices (``descending`` for the largest).

    The order is always the stable one (ties keep their index order) and a NaN sorts as the
    largest value, PyTorch's rules, so the result is the same on every device. On CUDA each
    element counts the elements sorting before it (n**2 comparisons per slice); on the host
    std::stable_sort per slice. Raises TypeError for a non-integer dim or non-bool descending;
    ValueError for a bad dim, indices of the wrong shape or aliasing a, or a dim longer than
    2**24 (its indices would not be exact).
    """
    d = as_int(dim, "dim", "argsort")
    _core.argsort_(a, indices, d, as_flag(descending, "descending", "argsort"))


def gather(a, index, out, dim: int) -> None:
    """out[..., r, ...] = a[..., index[..., r, ...], ...] along ``dim`` (``torch.gather`` where
    index, out are a's shape but for their length k along ``dim``). index holds integers as
    float32; one outside [0, n) or not an integer gives NaN (the Tensor layer checks the range
    first). Raises ValueError for a bad dim, shapes that do not fit or out aliasing an input;
    TypeError for a non-integer dim.
    """
    _core.gather_(a, index, out, as_int(dim, "dim", "gather"))


def gather_gradient(index, dy, out, dim: int) -> None:
    """out = gather's gradient with respect to a: zeros of a's shape (out's) with each dy[..., r,
    ...] added at position index[..., r, ...] along ``dim`` (``torch.scatter_add`` on zeros),
    repeated indices summed in r order, so the result is deterministic. index and dy have one
    shape (out's but along ``dim``); invalid indices add nothing. Raises ValueError for a bad
    dim, shapes that do not fit or out aliasing an input; TypeError for a non-integer dim.
    """
    _core.gather_gradient_(index, dy, out, as_int(dim, "dim", "gather_gradient"))


# --------------------------------------------------------------------------------------------------
# Optimizers: in-place parameter updates; the multi-tensor ones update a list of tensors per launch.
# --------------------------------------------------------------------------------------------------


def sgd_update(params, grads, lr: float, weight_decay: float = 0.0) -> None:
    """Multi-tensor SGD: ``params[i] -= lr * (grads[i] + weight_decay * params[i])`` for every i,
    in one launch per 32 tensors on CUDA (the tensors' pointers and sizes travel as one kernel
    argument) and one call on the host, instead of one axpy per parameter. ``weight_decay`` is
    torch.optim.SGD's coupled L2 term (0: the plain step, bit for bit).

    params, grads: lists (or tuples) of PyGpuMatrix on one device, grads[i] of params[i]'s shape;
    no parameter may share memory with another array (gradients may share memory with each
    other). lr, weight_decay: finite floats >= 0.
    Raises TypeError for a non-list or a non-array element, ValueError for a length, shape or
    device mismatch, an aliased parameter, or a bad lr or weight_decay. Source: Robbins & Monro
    (1951).
    """
    if type(params) is not list or type(grads) is not list:  # lists go as they are (per step)
        params, grads = array_lists("sgd_update", params=params, grads=grads)
    _core.sgd_update_(
        params,
        grads,
        as_real(lr, "lr", "sgd_update"),
        as_real(weight_decay, "weight_decay", "sgd_update"),
    )


def momentum_sgd_update(
    params,
    grads,
    velocities,
    lr: float,
    momentum: float,
    dampening: float = 0.0,
    weight_decay: float = 0.0,
    nesterov: bool = False,
) -> None:
    """Multi-tensor momentum SGD, in place, for every i (torch.optim.SGD's formula)::

        g = grads[i] + weight_decay * params[i]
        velocities[i] = momentum * velocities[i] + (1 - dampening) * g
        params[i] -= lr * (g + momentum * velocities[i] if nesterov else velocities[i])

    Polyak 1964; Sutskever et al. ICML 2013 eq. 1-2 with the learning rate factored out of the
    velocity, Nesterov's form as PyTorch writes it. PyTorch starts the velocity at g itself on
    the first step: with zero velocities that is ``dampening=0`` on the first call (what
    :class:`gpumat.optim.SGD` passes). One launch per 32 tensors on CUDA (the pointers and sizes
    travel as one kernel argument) and one call on the host, instead of three launches per
    parameter; :data:`gpumat.launch_count` counts the call once.

    Args:
        params, grads, velocities: lists (or tuples) of one length of float32 PyGpuMatrix, all on
            one device; grads[i] and velocities[i] have params[i]'s shape (any shape, any size,
            empty included). No parameter or velocity may share memory with any other array
            (gradients may share memory with each other).
        lr, weight_decay: finite numbers >= 0.
        momentum: the velocity's decay, in [0, 1). dampening: in [0, 1].
        nesterov: Nesterov momentum.

    Raises:
        TypeError: a list is not a list or tuple, an element is not a PyGpuMatrix, or a scalar
            is not a number.
        ValueError: lists of different lengths, a shape or device mismatch, a written array
            shared with another, a scalar out of its range.
    """
    op = "momentum_sgd_update"
    if type(params) is not list or type(grads) is not list or type(velocities) is not list:
        params, grads, velocities = array_lists(
            op, params=params, grads=grads, velocities=velocities
        )
    _core.momentum_sgd_update_(
        params,
        grads,
        velocities,
        as_real(lr, "lr", op),
        as_real(momentum, "momentum", op),
        as_real(dampening, "dampening", op),
        as_real(weight_decay, "weight_decay", op),
        bool(nesterov),
    )


def adam_update(param, grad, m, v, lr, beta1, beta2, eps, step: int) -> None:
    """One in-place Adam step (Kingma & Ba, "Adam: A Method for Stochastic Optimization",
    ICLR 2015, Algorithm 1), fused into one kernel::

        m = beta1*m + (1 - beta1)*grad;  v = beta2*v + (1 - beta2)*grad**2
        param -= lr * (m / (1 - beta1**step)) / (sqrt(v / (1 - beta2**step)) + eps)

    param, grad, m, v: four different arrays of one shape (m and v start at zero). ``step`` is
    t >= 1, counted from the first update. Raises ValueError for betas outside [0, 1), a negative
    or non-finite lr or eps, or step < 1.
    """
    _core.adam_update_(
        param, grad, m, v, lr, beta1, beta2, eps, as_int(step, "step", "adam_update")
    )


def adam_update_multi(
    params,
    grads,
    m,
    v,
    lr,
    beta1,
    beta2,
    eps,
    step: int,
    weight_decay: float = 0.0,
    decoupled: bool = False,
    max_v=(),
) -> None:
    """Multi-tensor Adam: :func:`adam_update` for every tensor i at one step t, in place::

        g = grads[i] + weight_decay * params[i]        (coupled: torch.optim.Adam)
        params[i] *= 1 - lr * weight_decay; g = grads[i]   (decoupled: AdamW)
        m[i] = beta1*m[i] + (1 - beta1)*g;  v[i] = beta2*v[i] + (1 - beta2)*g**2
        vd = max_v[i] = max(max_v[i], v[i])  if max_v (AMSGrad)  else v[i]
        params[i] -= lr * (m[i] / (1 - beta1**t)) / (sqrt(vd / (1 - beta2**t)) + eps)

    Kingma & Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015, Algorithm 1 (eps added
    to the corrected sqrt(v), as PyTorch does); Loshchilov & Hutter, "Decoupled Weight Decay
    Regularization", ICLR 2019 (AdamW); Reddi et al., "On the Convergence of Adam and Beyond",
    ICLR 2018 (AMSGrad, PyTorch's form). The update of :class:`gpumat.optim.Adam` and
    :class:`gpumat.optim.AdamW`. One launch per 32 tensors on CUDA and one call on the host,
    instead of one launch per parameter; :data:`gpumat.launch_count` counts the call once. With
    no weight decay and no max_v each element gives the same float32 result as
    :func:`adam_update`.

    Args:
        params, grads, m, v: lists (or tuples) of one length of float32 PyGpuMatrix, all on one
            device; grads[i], m[i] and v[i] have params[i]'s shape. m and v (the first and second
            moments) start at zero. No parameter, m or v may share memory with any other array
            (gradients may share memory with each other).
        lr, eps, weight_decay: finite numbers >= 0. beta1, beta2: in [0, 1).
        step: t >= 1, counted from the first update (the bias corrections' exponent).
        decoupled: weight decay as AdamW's (on the parameter) instead of Adam's (on the gradient).
        max_v: empty (no AMSGrad), or one array per tensor like v (starting at zero), written.

    Raises:
        TypeError: a list is not a list or tuple, an element is not a PyGpuMatrix, a scalar is
            not a number, or step is not an int.
        ValueError: lists of different lengths, a shape or device mismatch, a written array
            shared with another, or a scalar out of its range.
    """
    op = "adam_update_multi"
    params, grads, m, v, max_v = array_lists(op, params=params, grads=grads, m=m, v=v, max_v=max_v)
    _core.adam_update_multi_(
        params,
        grads,
        m,
        v,
        as_real(lr, "lr", op),
        as_real(beta1, "beta1", op),
        as_real(beta2, "beta2", op),
        as_real(eps, "eps", op),
        as_int(step, "step", op),
        as_real(weight_decay, "weight_decay", op),
        bool(decoupled),
        max_v,
    )


def total_norm_multi(arrays, norm_type: float, out) -> None:
    """``out`` (1,) = the ``norm_type``-norm of all the elements of ``arrays`` together, the
    total norm of :func:`torch.nn.utils.clip_grad_norm_`: ``(sum |x|^p)^(1/p)`` over every
    element of every array for a finite p > 0, ``max |x|`` for p = inf (NaN when an element is
    NaN); 0 when there is no element. One launch per 32 arrays and one to finish on CUDA (a
    deterministic order), one call on the host (double accumulation).

    Args:
        arrays: a list (or tuple) of float32 PyGpuMatrix of any shapes, on out's device.
        norm_type: p, a float > 0 or ``float('inf')``.
        out: a PyGpuMatrix of one element (written), none of the arrays.

    Raises:
        TypeError: a non-list, a non-array element, a non-number norm_type.
        ValueError: norm_type <= 0 or NaN, an array on another device, out not of one element.
    """
    op = "total_norm_multi"
    (arrays,) = array_lists(op, arrays=arrays)
    _core.total_norm_multi_(arrays, as_real(norm_type, "norm_type", op), out)


def clip_scale_multi(arrays, total_norm, max_norm: float) -> None:
    """``arrays[i] *= min(1, max_norm / (total_norm + 1e-6))`` for every i, in place: the scale
    of :func:`torch.nn.utils.clip_grad_norm_` (its formula and its 1e-6), with ``total_norm`` a
    (1,) array read on the device (no copy to the host between the norm and the scale; a NaN norm
    makes every element NaN, as PyTorch's). One launch per 32 arrays on CUDA.

    Args:
        arrays: a list (or tuple) of float32 PyGpuMatrix on one device, none sharing memory.
        total_norm: a one-element PyGpuMatrix on their device (:func:`total_norm_multi`'s out).
        max_norm: a finite float >= 0.

    Raises:
        TypeError: a non-list, a non-array element, a non-number max_norm.
        ValueError: max_norm negative or not finite, a device mismatch, shared arrays,
            total_norm not of one element.
    """
    op = "clip_scale_multi"
    (arrays,) = array_lists(op, arrays=arrays)
    _core.clip_scale_multi_(arrays, total_norm, as_real(max_norm, "max_norm", op))


def adadelta_update_multi(params, grads, square_avgs, acc_deltas, lr, rho, eps) -> None:
    """Multi-tensor Adadelta, in place, for every tensor i::

        square_avgs[i] = rho * square_avgs[i] + (1 - rho) * grads[i]**2
        d = sqrt(acc_deltas[i] + eps) / sqrt(square_avgs[i] + eps) * grads[i]
        acc_deltas[i] = rho * acc_deltas[i] + (1 - rho) * d**2
        params[i] -= lr * d

    Zeiler, "ADADELTA: An Adaptive Learning Rate Method" (arXiv:1212.5701, 2012), Algorithm 1,
    with PyTorch's learning-rate factor lr (1.0 gives Zeiler's update): the update of
    ``torch.optim.Adadelta(lr, rho, eps)`` without weight decay, in its order of operations, so
    float32 results agree with PyTorch's to rounding. One launch per 32 tensors on CUDA and one
    call on the host; :data:`gpumat.launch_count` counts the call once.

    Args:
        params, grads, square_avgs, acc_deltas: lists (or tuples) of one length of float32
            PyGpuMatrix, all on one device; grads[i], square_avgs[i] and acc_deltas[i] have
            params[i]'s shape. square_avgs (E[g^2]) and acc_deltas (E[dx^2]) start at zero. No
            parameter, square_avg or acc_delta may share memory with any other array (gradients
            may share memory with each other).
        lr: the learning-rate factor, a finite number >= 0 (PyTorch's default is 1.0).
        rho: the decay of both running averages, in [0, 1] (PyTorch's default 0.9).
        eps: added inside both square roots, finite and > 0 (PyTorch's default 1e-6; it also
            sets the first steps' size, since acc_deltas start at zero). PyTorch accepts 0; here
            0 is refused because the first step would divide 0 by 0 wherever a gradient is 0.

    Raises:
        TypeError: a list is not a list or tuple, an element is not a PyGpuMatrix, or a scalar is
            not a number.
        ValueError: lists of different lengths, a shape or device mismatch, a written array
            shared with another, or a scalar out of its range.
    """
    op = "adadelta_update_multi"
    params, grads, square_avgs, acc_deltas = array_lists(
        op, params=params, grads=grads, square_avgs=square_avgs, acc_deltas=acc_deltas
    )
    _core.adadelta_update_multi_(
        params,
        grads,
        square_avgs,
        acc_deltas,
        as_real(lr, "lr", op),
        as_real(rho, "rho", op),
        as_real(eps, "eps", op),
    )


# --------------------------------------------------------------------------------------------------
# Index: rows of one dim picked, summed into or copied into by a 1-D index (PyTorch's
# index_select / index_add_ / index_copy_).
# --------------------------------------------------------------------------------------------------


def index_select(a, dim: int, index, out) -> None:
    """out = a with dim ``dim`` replaced by the rows ``index`` names: out[..., j, ...] =
    a[..., index[j], ...] (PyTorch's ``torch.index_select``, with negative indices counted from
    the end as ``x[idx]`` counts them).

    a is any float32 array of rank >= 1 (dim negative counts from the end), index a 1-D array of
    len integers (gpumat's int64 storage), out a's shape with dim's length len; out is neither
    input. An index outside [-n, n), NaN or fractional names no row and gives NaN there (the
    kernel never reads out of bounds; the Tensor front end raises IndexError before). n <= 2**24.
    One thread per output element on CUDA.

    Raises:
        TypeError: dim not an int. ValueError: dim out of range, shapes that do not fit, out
            aliasing an input, or arrays on different devices (naming index_select and shapes).
    """
    _core.index_select_(a, as_int(dim, "dim", "index_select"), index, out)


def index_add(out, dim: int, index, src, alpha: float = 1.0) -> None:
    """out[..., index[j], ...] += alpha * src[..., j, ...] in place (PyTorch's ``index_add_``),
    the gradient of :func:`index_select`.

    out is float32 of rank >= 1, index 1-D of len integers (negative from the end), src out's
    shape with dim's length len. Deterministic: every element adds its contributions in
    increasing j, with no atomics (CUDA: threads own (row bucket, column) pairs and scan the
    index in order). An index naming no row (outside [-n, n), NaN, fractional) is skipped.

    Raises:
        TypeError: dim not an int or alpha not a number. ValueError: as index_select.
    """
    op = "index_add"
    _core.index_add_(out, as_int(dim, "dim", op), index, src, as_real(alpha, "alpha", op))


def index_copy(out, dim: int, index, src) -> None:
    """out[..., index[j], ...] = src[..., j, ...] in place (PyTorch's ``index_copy_``). Of
    repeated indices the last j wins (a defined rule here, unspecified in PyTorch). Shapes and
    the skipping of indices naming no row as :func:`index_add`.

    Raises:
        TypeError: dim not an int. ValueError: as index_select.
    """
    _core.index_copy_(out, as_int(dim, "dim", "index_copy"), index, src)


# --------------------------------------------------------------------------------------------------
# Norm: layer norm and RMS norm over trailing dims, batch norm per channel (PyTorch's layer_norm,
# rms_norm, batch_norm), their statistics and gradients.
# --------------------------------------------------------------------------------------------------


def layer_norm(x, weight, bias, out, eps: float = 1e-5, rms: bool = False) -> None:
    """out = (x - mean) * rstd * weight + bias over the trailing dims of x that hold
    d = weight.size values (rows = x.size / d), rstd = 1 / sqrt(var + eps), var the biased
    variance of the row (Ba, Kiros & Hinton 2016, "Layer Normalization"). With ``rms`` it is RMS
    norm (Zhang & Sennrich 2019): mean = 0 and var = mean(x**2) (pass zeros as bias).

    x float32 of any shape whose trailing dims multiply to d >= 1; weight and bias d values each
    (any shape); out x's shape, not x. The statistics are computed in the same kernel, two-pass
    (the mean, then the mean of the squared deviations: no cancellation for rows of large mean)
    with sums in a fixed order (CUDA: one warp per row, float32 lane partials joined by a shuffle
    tree; host: float64, in order), so the result is deterministic.

    Raises:
        TypeError: eps not a number or rms not a bool. ValueError: no trailing dims of d
            values, a bias of another size, shapes or devices that differ, out aliasing an input.
    """
    op = "rms_norm" if rms is True else "layer_norm"
    _core.layer_norm_(x, weight, bias, out, as_real(eps, "eps", op), as_flag(rms, "rms", op))


def layer_norm_stats(x, stats, eps: float = 1e-5, rms: bool = False) -> None:
    """stats (rows, 2) = [mean, rstd] of each of the rows of x (x.size / rows values each), as
    :func:`layer_norm` computes them (RMS: mean 0); the backward's saved statistics.

    Raises:
        TypeError: eps or rms of the wrong type. ValueError: stats not (rows, 2), x not made of
            rows trailing values, or devices that differ.
    """
    op = "layer_norm_stats"
    _core.layer_norm_stats_(x, stats, as_real(eps, "eps", op), as_flag(rms, "rms", op))


def layer_norm_gradient(x, stats, weight, dy, dx, rms: bool = False) -> None:
    """dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) per row, g = dy * weight and
    xhat = (x - mean) * rstd from ``stats`` (:func:`layer_norm_stats`); RMS: without mean(g).
    The gradient of :func:`layer_norm` with respect to x, through the row's mean and variance.
    x, dy, dx one shape (dx not an input); weight d values; stats (rows, 2).

    Raises:
        TypeError: rms not a bool. ValueError: shapes or devices that do not fit, dx aliasing an
            input.
    """
    _core.layer_norm_gradient_(x, stats, weight, dy, dx, as_flag(rms, "rms", "layer_norm_gradient"))


def layer_norm_weight_gradient(x, stats, dy, dweight) -> None:
    """dweight (d values, any shape) = the sum over rows of dy * xhat, xhat = (x - mean) * rstd
    from ``stats``: the gradient of :func:`layer_norm` with respect to its weight. Deterministic,
    no atomics: on CUDA threads own (column, run of rows) pairs and sum their run in order, and a
    second kernel adds the runs' partials in order; the host sums each column's rows in order.

    Raises:
        ValueError: shapes or devices that do not fit, dweight aliasing an input.
    """
    _core.layer_norm_weight_gradient_(x, stats, dy, dweight)


def layer_norm_backward(x, weight, dy, dx, dweight, dbias, eps: float = 1e-5, rms: bool = False):
    """The three gradients of :func:`layer_norm` at once: dx (x's shape, as
    :func:`layer_norm_gradient`), dweight (as :func:`layer_norm_weight_gradient`) and dbias (d
    values: the sum of dy over the rows), with each row's statistics computed inside (as
    :func:`layer_norm_stats`, eps and rms as the forward's). On the host one pass over x and dy in
    chunks of rows (the separate kernels read them four times; dx and dweight are their bits, dbias
    is summed in float64 partials); on CUDA the separate kernels in turn. What the fusion pass's
    ``layer_norm_backward`` rule runs.

    Raises:
        TypeError: eps not a number or rms not a bool. ValueError: no trailing dims of
            weight.size values in x, dy or dx not x's shape, dweight or dbias not weight.size
            values, shapes or devices that differ, an output aliasing an input or another output.
    """
    op = "layer_norm_backward"
    _core.layer_norm_backward_(
        x, weight, dy, dx, dweight, dbias, as_real(eps, "eps", op), as_flag(rms, "rms", op)
    )


def batch_norm_stats(x, stats) -> None:
    """stats (C, 2) = [mean, biased variance] of each channel of x (N, C, ...) (rank >= 2) over
    every axis but 1, two-pass (Ioffe & Szegedy 2015, "Batch Normalization"); one block per
    channel on CUDA, sums in a fixed order. A channel with no values gets NaN statistics.

    Raises:
        ValueError: x of rank < 2, stats not (C, 2), devices that differ.
    """
    _core.batch_norm_stats_(x, stats)


def batch_norm(x, stats, weight, bias, out, eps: float = 1e-5) -> None:
    """out = (x - mean[c]) / sqrt(var[c] + eps) * weight[c] + bias[c] for x (N, C, ...) with
    stats (C, 2) = [mean, var]: :func:`batch_norm_stats` of x in training, the running mean and
    variance in eval mode. weight, bias (C values); out x's shape, not an input.

    Raises:
        TypeError: eps not a number. ValueError: shapes or devices that do not fit.
    """
    _core.batch_norm_(x, stats, weight, bias, out, as_real(eps, "eps", "batch_norm"))


def batch_norm_gradient(x, stats, weight, dy, dx, eps: float = 1e-5, training: bool = True) -> None:
    """dx of :func:`batch_norm`: training (stats are x's own batch statistics) the full gradient
    through the batch mean and variance, w * rstd * (dy - mean(dy) - xhat * mean(dy * xhat)) over
    each channel; eval (fixed statistics) w * rstd * dy. x, dy, dx (N, C, ...), one shape.

    Raises:
        TypeError: eps or training of the wrong type. ValueError: shapes or devices that do not
            fit, dx aliasing an input.
    """
    op = "batch_norm_gradient"
    _core.batch_norm_gradient_(
        x, stats, weight, dy, dx, as_real(eps, "eps", op), as_flag(training, "training", op)
    )


def batch_norm_weight_gradient(x, stats, dy, dweight, eps: float = 1e-5) -> None:
    """dweight (C values) = the sum over each channel of dy * xhat, xhat = (x - mean) /
    sqrt(var + eps): the gradient of :func:`batch_norm` with respect to its weight.

    Raises:
        TypeError: eps not a number. ValueError: shapes or devices that do not fit.
    """
    _core.batch_norm_weight_gradient_(
        x, stats, dy, dweight, as_real(eps, "eps", "batch_norm_weight_gradient")
    )
