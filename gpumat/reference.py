"""gpumat.reference: the numpy twin of :mod:`gpumat.ops`, the reference every device is checked
against.

Same function names, same arguments in the same order, same meaning, outputs passed in; the arrays
are numpy arrays instead of ``PyGpuMatrix``, and the arithmetic runs in their dtype (the
executor's numpy backend runs float32, or float64 when a feed is float64: the finite-difference
gradient checks use that). The graph ops of :mod:`gpumat.graph` call ``kernels_for(device)``,
which is this module for ``device=None`` and :mod:`gpumat.ops` for a device, so an op's
``compute`` is written once. Every function here is the plain formula; where a device kernel has
a documented choice (ties, NaN, the subgradient at 0, counter-based random numbers), this module
makes the same one,
so numpy, cpu, emu and gpu agree to float32 rounding (bit for bit for the random draws and
dropout masks).

Shapes are the caller's business here: the executor calls these after shape inference. Called
directly with mismatched arrays, numpy's own ValueError is raised.

Sources: im2col convolution as in gpumat.ops.conv2d (the windows via
``numpy.lib.stride_tricks.sliding_window_view``); SplitMix64 (Steele, Lea & Flood, OOPSLA 2014) and
Box-Muller as in ``extensions/src/random.h``; Adam as in Kingma & Ba (ICLR 2015), Algorithm 1;
Adadelta as in Zeiler (2012), Algorithm 1, with PyTorch's lr factor.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from gpumat import ops
from gpumat._checks import as_int, as_pair, as_probability, as_seed, pool_args

# gpumat.ops' kernels (not its device controls) and the counter-based generator they share.
__all__ = sorted(set(ops.__all__) - {"set_conv_workspace_limit", "trace_calls"} | {"uniform01"})


# --------------------------------------------------------------------------------------------------
# Elementwise
# --------------------------------------------------------------------------------------------------


def fill(out, value: float) -> None:
    """Sets every element of ``out`` to ``value``."""
    out.fill(value)


def add(a, b, out) -> None:
    """out = a + b."""
    np.add(a, b, out=out)


def add_scalar(a, value: float, out) -> None:
    """out = a + value."""
    np.add(a, value, out=out)


def mul(a, b, out) -> None:
    """out = a * b."""
    np.multiply(a, b, out=out)


def div(a, b, out) -> None:
    """out = a / b (IEEE: x / 0 = +-inf, 0 / 0 = NaN, without warnings)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        np.divide(a, b, out=out)


def mul_scalar(a, value: float, out) -> None:
    """out = a * value."""
    np.multiply(a, value, out=out)


def axpy(alpha: float, x, y) -> None:
    """y += alpha * x in place."""
    y += alpha * x


def copy(a, out) -> None:
    """out = a."""
    np.copyto(out, a)


def eq(a, b, out) -> None:
    """out = 1 where a == b, else 0 (NaN equals nothing)."""
    out[...] = a == b


def exp(a, out) -> None:
    """out = exp(a) (overflow to inf and underflow to 0 without warnings)."""
    with np.errstate(over="ignore", under="ignore"):
        np.exp(a, out=out)


def log(a, out) -> None:
    """out = log(a): log(0) = -inf, log(x < 0) = NaN (without warnings)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        np.log(a, out=out)


def sqrt(a, out) -> None:
    """out = sqrt(a): sqrt(x < 0) = NaN (without warnings)."""
    with np.errstate(invalid="ignore"):
        np.sqrt(a, out=out)


def sqrt_gradient(y, dy, out) -> None:
    """out = dy / (2 y), given y = sqrt(x): dy / 0 at y = 0 (without warnings)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        np.divide(dy, 2 * y, out=out)


def abs(a, out) -> None:  # noqa: A001 (the op's name, PyTorch's)
    """out = |a|."""
    np.abs(a, out=out)


def sign(a, out) -> None:
    """out = 1, -1 or 0 by the sign of a; 0 for +-0 and for NaN, as PyTorch (numpy's is NaN)."""
    out[...] = (a > 0).astype(out.dtype) - (a < 0).astype(out.dtype)


def sin(a, out) -> None:
    """out = sin(a) (NaN at +-inf, without warnings)."""
    with np.errstate(invalid="ignore"):
        np.sin(a, out=out)


def cos(a, out) -> None:
    """out = cos(a) (NaN at +-inf, without warnings)."""
    with np.errstate(invalid="ignore"):
        np.cos(a, out=out)


_erf = np.frompyfunc(math.erf, 1, 1)


def erf(a, out) -> None:
    """out = erf(a), by Python's math.erf in float64 (numpy has no erf), rounded to out's dtype."""
    out[...] = _erf(np.asarray(a, np.float64)).astype(np.float64) if a.size else a


def log1p(a, out) -> None:
    """out = log(1 + a): -inf at -1, NaN below (without warnings)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        np.log1p(a, out=out)


def rsqrt(a, out) -> None:
    """out = 1 / sqrt(a): +-inf at +-0, NaN for a < 0 (without warnings)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        np.divide(1, np.sqrt(a), out=out)


def rsqrt_gradient(y, dy, out) -> None:
    """out = -0.5 * dy * y**3, given y = rsqrt(x) (inf * 0 = NaN without warnings)."""
    with np.errstate(invalid="ignore", over="ignore"):
        np.multiply(-0.5 * dy, y * y * y, out=out)


def lt(a, b, out) -> None:
    """out = 1 where a < b, else 0 (a NaN compares false)."""
    out[...] = a < b


def le(a, b, out) -> None:
    """out = 1 where a <= b, else 0 (a NaN compares false)."""
    out[...] = a <= b


def gt(a, b, out) -> None:
    """out = 1 where a > b, else 0 (a NaN compares false)."""
    out[...] = a > b


def ge(a, b, out) -> None:
    """out = 1 where a >= b, else 0 (a NaN compares false)."""
    out[...] = a >= b


def logical_not(a, out) -> None:
    """out = 1 where a == 0, else 0 (NaN is true)."""
    out[...] = a == 0


def logical_and(a, b, out) -> None:
    """out = 1 where a != 0 and b != 0, else 0 (NaN is true)."""
    out[...] = (a != 0) & (b != 0)


def logical_or(a, b, out) -> None:
    """out = 1 where a != 0 or b != 0, else 0 (NaN is true)."""
    out[...] = (a != 0) | (b != 0)


def minimum(a, b, out) -> None:
    """out = the smaller of a and b; NaN where either is NaN (numpy's minimum, PyTorch's)."""
    np.minimum(a, b, out=out)


def maximum(a, b, out) -> None:
    """out = the larger of a and b; NaN where either is NaN (numpy's maximum, PyTorch's)."""
    np.maximum(a, b, out=out)


def where(cond, a, b, out) -> None:
    """out = a where cond != 0, else b."""
    out[...] = np.where(cond != 0, a, b)


def pow_scalar(a, s, out) -> None:
    """out = a ** s (IEEE pow, numpy's float32 power)."""
    with np.errstate(all="ignore"):
        out[...] = np.power(a, np.float32(s))


def pow_scalar_gradient(x, dy, s, out) -> None:
    """out = dy * (s * x ** (s - 1)), 0 when s == 0."""
    with np.errstate(all="ignore"):
        g = dy * (np.float32(s) * np.power(x, np.float32(s) - np.float32(1)))
    out[...] = 0 if s == 0 else g


def scalar_pow(a, s, out) -> None:
    """out = s ** a."""
    with np.errstate(all="ignore"):
        out[...] = np.power(np.float32(s), a)


def scalar_pow_gradient(x, dy, s, out) -> None:
    """out = dy * (s ** x * log(s)), 0 where s == 0 and x >= 0."""
    with np.errstate(all="ignore"):
        g = dy * (np.power(np.float32(s), x) * np.log(np.float32(s)))
    out[...] = np.where((s == 0) & (x >= 0), 0, g)


def pow(a, b, out) -> None:  # noqa: A001 (torch.pow's name)
    """out = a ** b elementwise."""
    with np.errstate(all="ignore"):
        out[...] = np.power(a, b)


def clamp(a, lo, hi, out) -> None:
    """out = min(max(a, lo), hi): hi where lo > hi; a NaN in a stays NaN."""
    low = np.where(a < lo, np.asarray(lo, a.dtype), a)
    out[...] = np.where(low > hi, np.asarray(hi, a.dtype), low)


def clamp_gradient(x, dy, lo, hi, out) -> None:
    """out = dy where lo <= x <= hi, else 0 (0 at a NaN x)."""
    out[...] = np.where((x >= lo) & (x <= hi), dy, np.zeros((), dy.dtype))


# --------------------------------------------------------------------------------------------------
# Activations
# --------------------------------------------------------------------------------------------------


def relu(a, out) -> None:
    """out = max(a, 0) (NaN stays NaN)."""
    np.maximum(a, 0.0, out=out)


def relu_gradient(x, dy, out) -> None:
    """out = dy where x > 0, else 0 (the subgradient at 0 is 0)."""
    np.copyto(out, np.where(x > 0, dy, 0.0))


def relu_bias_gradient(y, dy, dz, dbias) -> None:
    """dz = dy where y > 0, else 0 (rows, cols); dbias = the column sums of dz (cols,)."""
    np.copyto(dz, np.where(y > 0, dy, 0.0))
    np.copyto(dbias, dz.sum(axis=0))


def tanh(a, out) -> None:
    """out = tanh(a)."""
    np.tanh(a, out=out)


def tanh_gradient(y, dy, out) -> None:
    """out = dy * (1 - y**2), given y = tanh(x)."""
    out[...] = dy * (1 - y * y)


def sigmoid(a, out) -> None:
    """out = 1 / (1 + exp(-a)) through exp(-|x|): no overflow for large |x|."""
    e = np.exp(-np.abs(a))
    out[...] = np.where(a >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def sigmoid_gradient(y, dy, out) -> None:
    """out = dy * y * (1 - y), given y = sigmoid(x)."""
    out[...] = dy * y * (1 - y)


def _sigmoid(z):
    e = np.exp(-np.abs(z))
    return np.where(z >= 0, 1 / (1 + e), e / (1 + e))


def _gelu_cdf(x):
    """Phi(x) = (1 + erf(x / sqrt 2)) / 2 in float64."""
    return 0.5 * (1 + _erf(np.asarray(x, np.float64) / math.sqrt(2)).astype(np.float64))


_GELU_BETA, _GELU_KAPPA = math.sqrt(2 / math.pi), 0.044715


def gelu(a, out) -> None:
    """out = x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)), the exact GELU (Hendrycks & Gimpel 2016),
    in float64 rounded to out's dtype."""
    out[...] = a * _gelu_cdf(a) if a.size else a


def gelu_gradient(y, dy, out) -> None:
    """out = dy (Phi(x) + x phi(x)), x the forward input (passed as y)."""
    x = np.asarray(y, np.float64)
    pdf = np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    out[...] = dy * (_gelu_cdf(x) + x * pdf) if x.size else dy


def gelu_tanh(a, out) -> None:
    """out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), GELU's tanh approximation."""
    with np.errstate(over="ignore", invalid="ignore"):
        out[...] = 0.5 * a * (1 + np.tanh(_GELU_BETA * (a + _GELU_KAPPA * a * a * a)))


def gelu_tanh_gradient(y, dy, out) -> None:
    """out = dy * d/dx gelu_tanh(x), x the forward input (passed as y)."""
    x = y
    with np.errstate(over="ignore", invalid="ignore"):
        t = np.tanh(_GELU_BETA * (x + _GELU_KAPPA * x * x * x))
        d = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * _GELU_BETA * (1 + 3 * _GELU_KAPPA * x * x)
        out[...] = dy * d


def silu(a, out) -> None:
    """out = x sigmoid(x) (the sigmoid through exp(-|x|))."""
    out[...] = a * _sigmoid(a)


def silu_gradient(y, dy, out) -> None:
    """out = dy s (1 + x (1 - s)), s = sigmoid(x), x the forward input (passed as y)."""
    s = _sigmoid(y)
    out[...] = dy * s * (1 + y * (1 - s))


def softplus(a, lo, hi, out) -> None:
    """out = log(1 + exp(beta x)) / beta, x where beta x > threshold (lo = beta, hi =
    threshold), as max(z, 0) + log1p(exp(-|z|)) for z = beta x."""
    beta = a.dtype.type(lo)
    z = a * beta
    with np.errstate(over="ignore", invalid="ignore"):
        soft = (np.maximum(z, 0) + np.log1p(np.exp(-np.abs(z)))) / beta
        out[...] = np.where(z > hi, a, soft)


def softplus_gradient(x, dy, lo, hi, out) -> None:
    """out = dy sigmoid(beta x), dy where beta x > threshold (lo = beta, hi = threshold)."""
    z = x * x.dtype.type(lo)
    out[...] = np.where(z > hi, dy, dy * _sigmoid(z))


def leaky_relu(a, s, out) -> None:
    """out = x where x > 0, else s x (NaN stays NaN)."""
    out[...] = np.where(a > 0, a, a * a.dtype.type(s))


def leaky_relu_gradient(x, dy, s, out) -> None:
    """out = dy where x > 0, else s dy."""
    out[...] = np.where(x > 0, dy, dy * dy.dtype.type(s))


def elu(a, s, out) -> None:
    """out = x where x > 0, else s (exp(x) - 1) (expm1)."""
    with np.errstate(over="ignore"):
        out[...] = np.where(a > 0, a, a.dtype.type(s) * np.expm1(a))


def elu_gradient(x, dy, s, out) -> None:
    """out = dy where x > 0, else dy s exp(x)."""
    with np.errstate(over="ignore", invalid="ignore"):
        out[...] = np.where(x > 0, dy, dy * (x.dtype.type(s) * np.exp(x)))


def hardtanh_gradient(x, dy, lo, hi, out) -> None:
    """out = 0 where x <= lo or x >= hi, else dy (a NaN x passes dy, as PyTorch's)."""
    out[...] = np.where((x <= lo) | (x >= hi), np.zeros((), dy.dtype), dy)


def dropout(a, out, p: float, seed: int) -> None:
    """Inverted dropout with the devices' mask: out[i] = 0 where uniform01(seed, i) < p
    (compared in float32), else a[i] / (1 - p); p = 1 drops everything."""
    p = as_probability(p, "dropout")
    drop = uniform01(as_seed(seed, "dropout"), a.size).reshape(a.shape) < np.float32(p)
    if p >= 1.0:
        out.fill(0)
        return
    dtype = a.dtype
    # NOTE: the devices compute the scale in float32; a float64 run keeps full precision.
    scale = (
        np.float32(1.0) / (np.float32(1.0) - np.float32(p)) if dtype == np.float32 else 1 / (1 - p)
    )
    out[...] = np.where(drop, dtype.type(0), a * scale)


# --------------------------------------------------------------------------------------------------
# Layout
# --------------------------------------------------------------------------------------------------


def transpose(a, out) -> None:
    """out (C, R) = a (R, C) transposed."""
    np.copyto(out, a.T)


def reshape(a, out) -> None:
    """out = a's values in row-major order, with out's shape."""
    np.copyto(out, a.reshape(out.shape))


def one_hot(indices, out) -> None:
    """out (N, C)[i, j] = 1 if indices[i] == j, else 0: a row of zeros for an index outside
    [0, C), a non-integer or NaN (the devices' rule)."""
    out[...] = indices.reshape(-1, 1) == np.arange(out.shape[1]).reshape(1, -1)


def _diagonal(a, diagonal, op: str) -> int:
    """The diagonal clamped to [-rows - 1, cols + 1]: the same mask, and numpy's tri would
    overflow on a diagonal near the int64 limits."""
    k = as_int(diagonal, "diagonal", op)
    return max(-a.shape[-2] - 1, min(k, a.shape[-1] + 1)) if a.ndim >= 2 else k


def tril(a, out, diagonal: int = 0) -> None:
    """out = a on and below the ``diagonal``-th diagonal of its last two dims, else 0."""
    out[...] = np.tril(a, _diagonal(a, diagonal, "tril"))


def triu(a, out, diagonal: int = 0) -> None:
    """out = a on and above the ``diagonal``-th diagonal of its last two dims, else 0."""
    out[...] = np.triu(a, _diagonal(a, diagonal, "triu"))


# --------------------------------------------------------------------------------------------------
# Strided
# --------------------------------------------------------------------------------------------------

_BROADCAST_BINARY = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "minimum": np.minimum,
    "maximum": np.maximum,
    "logical_and": np.logical_and,
    "logical_or": np.logical_or,
}


def broadcast_binary(a, b, out, op: str) -> None:
    """out = a (op) b with numpy's broadcasting (the shapes must broadcast to out's)."""
    with np.errstate(all="ignore"):
        np.copyto(out, _BROADCAST_BINARY[op](a, b).astype(out.dtype))


def broadcast_where(cond, a, b, out) -> None:
    """out = a where cond != 0, else b, broadcast to out's shape."""
    np.copyto(out, np.where(cond != 0, a, b).astype(out.dtype))


def sum_to(a, out) -> None:
    """a summed over the dims out repeats (out's shape right-aligned against a's)."""
    lead = a.ndim - out.ndim
    axes = tuple(range(lead)) + tuple(
        lead + d for d in range(out.ndim) if out.shape[d] == 1 and a.shape[lead + d] != 1
    )
    np.copyto(out, np.sum(a, axis=axes, dtype=out.dtype).reshape(out.shape))


def _strided_offsets(shape, stride, offset: int):
    idx = np.indices(shape, dtype=np.int64) if len(shape) else np.zeros((0,), np.int64)
    flat = np.full(shape, offset, dtype=np.int64)
    for d in range(len(shape)):
        flat += idx[d] * stride[d]
    return flat


def as_strided(a, out, stride, offset: int = 0) -> None:
    """out[idx] = a.flat[offset + idx . stride]."""
    np.copyto(out, a.reshape(-1)[_strided_offsets(out.shape, stride, offset)])


def as_strided_scatter(src, out, stride, offset: int = 0) -> None:
    """out.flat[offset + idx . stride] = src[idx], in place."""
    view = out.reshape(-1)
    view[_strided_offsets(src.shape, stride, offset)] = src
    np.copyto(out, view.reshape(out.shape))


# --------------------------------------------------------------------------------------------------
# Reductions and broadcasts
# --------------------------------------------------------------------------------------------------


def _strip_leading_ones(shape: tuple) -> tuple:
    i = 0
    while i < len(shape) and shape[i] == 1:
        i += 1
    return tuple(shape[i:])


def sum_to_size(a, out) -> None:
    """Sums ``a`` over its leading axes into ``out``, whose shape without leading 1s ends
    a's: (4, 5, 6) -> (6,), (8, 10) -> (1, 10)."""
    lead = a.ndim - len(_strip_leading_ones(out.shape))
    np.copyto(out, np.sum(a, axis=tuple(range(lead))).reshape(out.shape))


def broadcast_to(a, out) -> None:
    """Repeats ``a`` (its shape without leading 1s ending out's) over out's leading
    axes."""
    np.copyto(out, a.reshape(_strip_leading_ones(a.shape)))


def _reduce(f, a, out, dim: int, op: str) -> None:
    out[...] = f(a, axis=as_int(dim, "dim", op)).reshape(out.shape)


def sum(a, out, dim: int) -> None:
    """out = a summed along ``dim`` (out: that dim removed or kept as 1)."""
    _reduce(np.sum, a, out, dim, "sum")


def mean(a, out, dim: int) -> None:
    """out = the mean of a along ``dim``."""
    _reduce(np.mean, a, out, dim, "mean")


def amax(a, out, dim: int) -> None:
    """out = the max of a along ``dim`` (NaN wins)."""
    _reduce(np.max, a, out, dim, "amax")


def amax_gradient(x, y, dy, out, dim: int) -> None:
    """out = dy / t at the t tied maxima (x == y, NaN ties NaN) of each slice along ``dim``, 0
    elsewhere: the gradient of y = amax(x, dim)."""
    a = as_int(dim, "dim", "amax_gradient") % x.ndim
    yk = np.expand_dims(y.reshape(x.shape[:a] + x.shape[a + 1 :]), a)
    dyk = np.expand_dims(dy.reshape(yk.shape[:a] + yk.shape[a + 1 :]), a)
    tie = (x == yk) | (np.isnan(x) & np.isnan(yk))
    out[...] = np.where(tie, dyk / np.maximum(tie.sum(axis=a, keepdims=True), 1), 0)


def argmax(a, out, dim: int) -> None:
    """out = the index along ``dim`` of each slice's first maximum (a NaN counts as the
    maximum: numpy's and PyTorch's rule), as out's dtype (out: that dim removed or 1)."""
    out[...] = np.argmax(a, axis=as_int(dim, "dim", "argmax")).reshape(out.shape)


def broadcast_dim(a, out, dim: int, scale: float = 1.0) -> None:
    """out = scale * a repeated along ``dim`` of out (a: out's shape with
    that dim removed or 1)."""
    d = as_int(dim, "dim", "broadcast_dim") % out.ndim
    shape = out.shape
    out[...] = np.expand_dims(a.reshape(shape[:d] + shape[d + 1 :]), d) * scale


def prod(a, out, dim: int) -> None:
    """out = the product of a along ``dim`` (1 for an empty dim)."""
    _reduce(np.prod, a, out, dim, "prod")


def prod_gradient(x, dy, out, dim: int) -> None:
    """out = dy times the product of each element's slice-mates along ``dim`` (exclusive
    prefix times suffix products: exact at zeros)."""
    a = as_int(dim, "dim", "prod_gradient") % x.ndim
    xm = np.moveaxis(x, a, -1)
    ones = np.ones(xm.shape[:-1] + (1,), x.dtype)
    pre = np.cumprod(np.concatenate([ones, xm[..., :-1]], -1), -1)
    suf = np.flip(np.cumprod(np.flip(np.concatenate([xm[..., 1:], ones], -1), -1), -1), -1)
    dyk = dy.reshape(xm.shape[:-1] + (1,))
    out[...] = np.moveaxis(dyk * (pre * suf), -1, a)


def cumsum(a, out, dim: int, reverse: bool = False) -> None:
    """out = the running sums of a along ``dim`` (from the end when ``reverse``), in float64."""
    d = as_int(dim, "dim", "cumsum") % max(a.ndim, 1)
    x = np.asarray(a, np.float64).reshape(a.shape or (1,))
    r = np.flip(np.cumsum(np.flip(x, d), d), d) if reverse else np.cumsum(x, d)
    out[...] = r.reshape(out.shape)


# --------------------------------------------------------------------------------------------------
# Matrix product
# --------------------------------------------------------------------------------------------------


def matmul(a, b, out, trans_a: bool = False, trans_b: bool = False) -> None:
    """out (M, N) = op(a) @ op(b), op(X) = X.T when its flag is true."""
    np.matmul(a.T if trans_a else a, b.T if trans_b else b, out=out)


def matmul_bias(
    a, b, bias, out, trans_a: bool = False, trans_b: bool = False, relu: bool = False
) -> None:
    """out (M, N) = op(a) @ op(b) + bias (N,), then max(., 0) when ``relu``."""
    np.matmul(a.T if trans_a else a, b.T if trans_b else b, out=out)
    out += bias
    if relu:
        np.maximum(out, 0.0, out=out)


def bmm(a, b, out, trans_a: bool = False, trans_b: bool = False) -> None:
    """out[i] (M, N) = op(a[i]) @ op(b[i]) over the batch (a batch of 1 repeated); an out of batch
    1 under a longer batch is the products' sum."""
    product = np.matmul(a.swapaxes(1, 2) if trans_a else a, b.swapaxes(1, 2) if trans_b else b)
    if out.shape[0] == 1 and product.shape[0] != 1:
        out[...] = product.sum(axis=0, keepdims=True)
    else:
        out[...] = product


# --------------------------------------------------------------------------------------------------
# Softmax
# --------------------------------------------------------------------------------------------------


def _log_softmax(x, dim: int):
    # NOTE: the log-sum-exp of max-shifted values: no overflow, no log(0).
    z = x - x.max(axis=dim, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=dim, keepdims=True))


def _attention_checks(op, q, k, v, scale):
    if q.ndim != 3 or k.ndim != 3 or v.ndim != 3:
        raise ValueError(
            f"{op}: q, k, v must be 3-D (batch, length, head dim), "
            f"got q {q.shape}, k {k.shape}, v {v.shape}"
        )
    if k.shape[0] != q.shape[0] or v.shape[0] != q.shape[0] or k.shape[2] != q.shape[2]:
        raise ValueError(
            f"{op}: expected q (batch, l, e), k (batch, s, e), v (batch, s, ev), "
            f"got q {q.shape}, k {k.shape}, v {v.shape}"
        )
    if v.shape[1] != k.shape[1]:
        raise ValueError(f"{op}: k {k.shape} and v {v.shape} differ in length")
    if not math.isfinite(scale):
        raise ValueError(f"{op}: scale must be finite, got {scale}")


def _attention_probs(q, k, scale, causal):
    """P = softmax(scale q k^T) (batch, l, s) in float64 and the rows' logsumexp (batch, l)."""
    z = np.einsum("ble,bse->bls", q.astype(np.float64), k.astype(np.float64)) * scale
    if causal:
        z = np.where(np.tri(z.shape[1], z.shape[2], dtype=bool), z, -np.inf)
    m = z.max(axis=-1, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(z - m)
    total = e.sum(axis=-1, keepdims=True)
    # total is 0 only for a row with every key masked (P = 0, lse = -inf); a NaN score makes it,
    # and so the row's P and lse, NaN (as the kernels and PyTorch)
    some = total != 0
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(some, e / np.where(some, total, 1.0), 0.0)
        lse = np.where(some, m + np.log(np.where(some, total, 1.0)), -np.inf)
    return p, lse[..., 0]


def attention(q, k, v, out, scale: float, causal: bool = False) -> None:
    """out (batch, l, ev + 1) = [softmax(scale q k^T) v, logsumexp], unfused, in float64."""
    _attention_checks("attention", q, k, v, scale)
    p, lse = _attention_probs(q, k, float(scale), bool(causal))
    out[..., :-1] = np.einsum("bls,bsv->blv", p, v.astype(np.float64))
    out[..., -1] = lse


def attention_gradient(q, k, v, out, dout, dqkv, scale: float, causal: bool = False) -> None:
    """dqkv = [dq, dk, dv] flattened, the gradients of :func:`attention` from its ``out`` and
    dout (batch, l, ev + 1; the last column the logsumexp's gradient dL), unfused, in float64.
    As the kernels: P = exp(scale q k^T - L) from the saved logsumexp L and
    dS = P (dO v^T - D), D = rowsum(dO * O) - dL from the saved O."""
    _attention_checks("attention_gradient", q, k, v, scale)
    q64, k64, v64 = (x.astype(np.float64) for x in (q, k, v))
    o, g = out.astype(np.float64), dout.astype(np.float64)
    z = np.einsum("ble,bse->bls", q64, k64) * scale - o[..., -1:]
    if causal:
        z = np.where(np.tri(z.shape[1], z.shape[2], dtype=bool), z, -np.inf)
    p = np.exp(z)
    dv = np.einsum("bls,blv->bsv", p, g[..., :-1])
    dp = np.einsum("blv,bsv->bls", g[..., :-1], v64)
    d = (g[..., :-1] * o[..., :-1]).sum(axis=-1, keepdims=True) - g[..., -1:]
    ds = p * (dp - d)
    dq = np.einsum("bls,bse->ble", ds, k64) * scale
    dk = np.einsum("bls,ble->bse", ds, q64) * scale
    dqkv[...] = np.concatenate([dq.ravel(), dk.ravel(), dv.ravel()])


def attention_strided_regions(
    op: str, size: int, batch: int, heads: int, lengths, offsets, strides
) -> list:
    """The (offset, rows, dim) of q, k, v for the strided attention ops over an array of ``size``
    elements, checked as ``extensions/src/ops/attention.cpp`` checks them (ValueError naming
    ``op``): heads >= 1, nothing negative, rows that do not overlap (row stride >= head dim), every
    element inside the array."""
    lq, s, e, ev = (int(x) for x in lengths)
    sb, sh, sr = (int(x) for x in strides)
    if heads < 1:
        raise ValueError(f"{op}: heads must be at least 1, got {heads}")
    if min(lq, s, e, ev) < 0 or min(*offsets, sb, sh, sr) < 0 or batch < 0:
        raise ValueError(
            f"{op}: lengths {tuple(lengths)}, offsets {tuple(offsets)} and strides "
            f"{tuple(strides)} must be >= 0"
        )
    dims = zip(offsets, (lq, s, s), (e, e, ev), strict=True)
    regions = [(int(o), rows, dim) for o, rows, dim in dims]
    for name, (o, rows, dim) in zip("qkv", regions, strict=True):
        if batch * heads * rows * dim == 0:
            continue
        if rows > 1 and sr < dim:
            raise ValueError(f"{op}: the rows of {name} overlap: row stride {sr} < head dim {dim}")
        last = o + (batch - 1) * sb + (heads - 1) * sh + (rows - 1) * sr + dim - 1
        if last >= size:
            raise ValueError(
                f"{op}: {name} reaches element {last} of qkv's {size} (offset {o}, strides "
                f"{tuple(strides)}, {batch} batches of {heads} heads of ({rows}, {dim}))"
            )
    return regions


def attention_strided_written_once(batch: int, heads: int, lengths, offsets, strides) -> bool:
    """Whether :func:`attention_strided_gradient` can write dq, dk, dv in place of q, k, v, each
    element once: in rows of ``strides[2]`` elements, each region covers the columns [offset mod
    row stride, + (heads - 1) head stride + dim), its heads side by side, the batch stride a whole
    number of rows (at least a region's rows), and the three column ranges do not meet (the rule
    of ``extensions/src/ops/attention.cpp``)."""
    lq, s, e, ev = (int(x) for x in lengths)
    sb, sh, sr = (int(x) for x in strides)
    spans = []
    for o, rows, dim in zip(offsets, (lq, s, s), (e, e, ev), strict=True):
        if batch * heads * rows * dim == 0:
            continue
        if sr == 0 or (heads > 1 and sh < dim):
            return False
        if batch > 1 and (sb % sr != 0 or sb // sr < rows):
            return False
        begin = int(o) % sr
        end = begin + (heads - 1) * sh + dim
        if end > sr:
            return False
        spans.append((begin, end))
    return all(a[1] <= b[0] or b[1] <= a[0] for i, a in enumerate(spans) for b in spans[i + 1 :])


def _heads(flat, batch, heads, o, rows, dim, strides):
    """The (batch * heads, rows, dim) float64 copy of one strided region of ``flat``."""
    sb, sh, sr = strides
    b, h, r, c = np.meshgrid(
        np.arange(batch), np.arange(heads), np.arange(rows), np.arange(dim), indexing="ij"
    )
    index = o + b * sb + h * sh + r * sr + c
    return flat[index].astype(np.float64).reshape(batch * heads, rows, dim), index


def _strided_parts(op, qkv, out, heads, lengths, offsets, strides) -> list:
    """The (values, flat indices) of q, k, v in ``qkv`` for the strided ops, batch from out's
    first dim (ValueError as :func:`attention_strided_regions`)."""
    heads = int(heads)
    batch = out.shape[0] // heads if out.ndim == 3 and heads > 0 else 0
    regions = attention_strided_regions(op, qkv.size, batch, heads, lengths, offsets, strides)
    if op == "attention_strided_gradient" and not attention_strided_written_once(
        batch, heads, lengths, offsets, strides
    ):
        raise ValueError(
            f"{op}: q, k and v must lie side by side in qkv's rows, so that each gradient element "
            f"has one writer (offsets {tuple(offsets)}, strides {tuple(strides)})"
        )
    flat = qkv.reshape(-1)
    return [_heads(flat, batch, heads, o, r, d, strides) for o, r, d in regions]


def attention_strided(
    qkv, out, heads: int, lengths, offsets, strides, scale: float, causal: bool = False
) -> None:
    """:func:`attention` of the q, k, v regions of ``qkv`` (see ``gpumat.ops.attention_strided``),
    gathered by index, in float64."""
    parts = _strided_parts("attention_strided", qkv, out, heads, lengths, offsets, strides)
    q, k, v = (values for values, _ in parts)
    attention(q, k, v, out, scale, causal)


def attention_strided_gradient(
    qkv, out, dout, dqkv, heads: int, lengths, offsets, strides, scale: float, causal: bool = False
) -> None:
    """The gradient of :func:`attention_strided` with respect to qkv: dq, dk, dv scattered to
    where q, k, v lie, zeros elsewhere (ValueError where the regions share an element)."""
    op = "attention_strided_gradient"
    parts = _strided_parts(op, qkv, out, heads, lengths, offsets, strides)
    (q, _), (k, _), (v, _) = parts
    flat_grad = np.zeros((q.size + k.size + v.size,), np.float64)
    attention_gradient(q, k, v, out, dout, flat_grad, scale, causal)
    grad = np.zeros(qkv.size, np.float64)
    start = 0
    for _, index in parts:
        grad[index.reshape(-1)] = flat_grad[start : start + index.size]
        start += index.size
    dqkv[...] = grad.reshape(qkv.shape)


def _softmax(x, dim: int):
    z = x - x.max(axis=dim, keepdims=True)  # NOTE: no overflow; softmax is shift-invariant
    e = np.exp(z)
    return e / e.sum(axis=dim, keepdims=True)


def softmax(a, out, dim: int = -1) -> None:
    """out = softmax of a along ``dim``, max-subtracted."""
    np.copyto(out, _softmax(a, as_int(dim, "dim", "softmax")))


def softmax_gradient(y, dy, out, dim: int = -1) -> None:
    """out = y * (dy - sum_dim(y * dy)), the gradient of y = softmax(x) along ``dim``."""
    a = as_int(dim, "dim", "softmax_gradient")
    out[...] = y * (dy - (y * dy).sum(axis=a, keepdims=True))


def log_softmax(a, out, dim: int = -1) -> None:
    """out = x - max - log(sum exp(x - max)) along ``dim``."""
    out[...] = _log_softmax(a, as_int(dim, "dim", "log_softmax"))


def log_softmax_gradient(y, dy, out, dim: int = -1) -> None:
    """out = dy - exp(y) * sum_dim(dy), the gradient of y = log_softmax(x) along ``dim``."""
    a = as_int(dim, "dim", "log_softmax_gradient")
    out[...] = dy - np.exp(y) * dy.sum(axis=a, keepdims=True)


# --------------------------------------------------------------------------------------------------
# Losses
# --------------------------------------------------------------------------------------------------


def cross_entropy(logits, target, out) -> None:
    """out (1,) = mean over rows of -sum_c target[r, c] log softmax(logits)[r, c] (both (N, C))."""
    out[...] = np.mean(-np.sum(target * _log_softmax(logits, 1), axis=1))


def cross_entropy_with_gradient(logits, target, loss, grad) -> None:
    """loss (1,) = :func:`cross_entropy`; grad (N, C) = (softmax(logits) - target) / N."""
    log_sm = _log_softmax(logits, 1)
    loss[...] = np.mean(-np.sum(target * log_sm, axis=1))
    np.copyto(grad, (np.exp(log_sm) - target) / logits.shape[0])


def nll_loss(log_probs, target, out) -> None:
    """out (1,) = -sum(target * log_probs) / N for (N, C) log_probs and target rows."""
    out[...] = -np.sum(target * log_probs) / log_probs.shape[0]


def nll_loss_gradient(target, dloss, out) -> None:
    """out (N, C) = -dloss[0] * target / N."""
    out[...] = (-dloss[0] / target.shape[0]) * target


def mse_loss(pred, target, out) -> None:
    """out (1,) = mean((pred - target)**2) over all elements."""
    d = pred - target
    out[...] = np.mean(d * d)


def l1_loss(pred, target, out) -> None:
    """out (1,) = mean(|pred - target|) over all elements."""
    out[...] = np.mean(np.abs(pred - target))


def mse_loss_gradient(pred, target, dloss, out) -> None:
    """out = dloss[0] * 2 * (pred - target) / n."""
    out[...] = (dloss[0] * (2.0 / pred.size)) * (pred - target)


def l1_loss_gradient(pred, target, dloss, out) -> None:
    """out = dloss[0] * sign(pred - target) / n, sign(0) = 0."""
    out[...] = (dloss[0] / pred.size) * np.sign(pred - target)


# --------------------------------------------------------------------------------------------------
# Convolution (cross-correlation, zero padding, NCHW)
# --------------------------------------------------------------------------------------------------


def _windows(xp, k: tuple, stride: tuple):
    """(N, C, OH, OW, KH, KW) read-only view of the windows of the padded xp (N, C, Hp, Wp)."""
    return sliding_window_view(xp, k, axis=(2, 3))[:, :, :: stride[0], :: stride[1]]


def _pad(x, padding: tuple, value=0.0):
    ph, pw = padding
    if ph == 0 and pw == 0:
        return x
    return np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=value)


def _conv2d(x, w, stride, padding):
    win = _windows(_pad(x, padding), w.shape[2:], stride)
    return np.tensordot(win, w, axes=([1, 4, 5], [1, 2, 3])).transpose(0, 3, 1, 2)


def _conv2d_gradient_input(dy, w, x_shape, stride, padding):
    # Each filter tap (i, j) scatters w[:, :, i, j]^T dy onto the input positions it read.
    n, c, h, wd = x_shape
    (sh, sw), (ph, pw) = stride, padding
    kh, kw = w.shape[2:]
    oh, ow = dy.shape[2:]
    dxp = np.zeros((n, c, h + 2 * ph, wd + 2 * pw), dtype=np.result_type(dy, w))
    for i in range(kh):
        for j in range(kw):
            contrib = np.tensordot(dy, w[:, :, i, j], axes=([1], [0])).transpose(0, 3, 1, 2)
            dxp[:, :, i : i + sh * oh : sh, j : j + sw * ow : sw] += contrib
    return dxp[:, :, ph : ph + h, pw : pw + wd]


def _conv2d_gradient_filter(x, dy, w_shape, stride, padding):
    win = _windows(_pad(x, padding), tuple(w_shape[2:]), stride)
    return np.tensordot(dy, win, axes=([0, 2, 3], [0, 2, 3]))


def _conv_args(op: str, stride, padding):
    return as_pair(stride, "stride", op), as_pair(padding, "padding", op)


def _as4d(a):
    # conv1d is conv2d with H = KH = 1: (N, C, W) -> (N, C, 1, W).
    return a if a.ndim == 4 else a.reshape(a.shape[0], a.shape[1], 1, a.shape[2])


def conv2d(x, w, out, stride=1, padding=0) -> None:
    """out (N, F, OH, OW) = the cross-correlation of x (N, C, H, W) with w (F, C, KH, KW)."""
    out[...] = _conv2d(x, w, *_conv_args("conv2d", stride, padding))


def conv2d_gradient_input(dy, w, out, stride=1, padding=0) -> None:
    """out (N, C, H, W) = dL/dx of :func:`conv2d` given dy and w."""
    out[...] = _conv2d_gradient_input(
        dy, w, out.shape, *_conv_args("conv2d_gradient_input", stride, padding)
    )


def conv2d_gradient_filter(x, dy, out, stride=1, padding=0) -> None:
    """out (F, C, KH, KW) = dL/dw of :func:`conv2d` given x and dy."""
    out[...] = _conv2d_gradient_filter(
        x, dy, out.shape, *_conv_args("conv2d_gradient_filter", stride, padding)
    )


def _conv1d_args(op: str, stride, padding):
    return (1, as_int(stride, "stride", op)), (0, as_int(padding, "padding", op))


def conv1d(x, w, out, stride: int = 1, padding: int = 0) -> None:
    """out (N, F, OW) = the 1-D cross-correlation of x (N, C, W) with w (F, C, K)."""
    y = _conv2d(_as4d(x), _as4d(w), *_conv1d_args("conv1d", stride, padding))
    out[...] = y.reshape(out.shape)


def conv1d_gradient_input(dy, w, out, stride: int = 1, padding: int = 0) -> None:
    """out (N, C, W) = dL/dx of :func:`conv1d` given dy (N, F, OW) and w (F, C, K)."""
    args = _conv1d_args("conv1d_gradient_input", stride, padding)
    out[...] = _conv2d_gradient_input(_as4d(dy), _as4d(w), _as4d(out).shape, *args).reshape(
        out.shape
    )


def conv1d_gradient_filter(x, dy, out, stride: int = 1, padding: int = 0) -> None:
    """out (F, C, K) = dL/dw of :func:`conv1d` given x (N, C, W) and dy (N, F, OW)."""
    args = _conv1d_args("conv1d_gradient_filter", stride, padding)
    out[...] = _conv2d_gradient_filter(_as4d(x), _as4d(dy), _as4d(out).shape, *args).reshape(
        out.shape
    )


def add_channel_bias(a, bias, out) -> None:
    """out = a + bias[c] along dim 1 of a (N, C, ...)."""
    np.add(a, bias.reshape((1, bias.shape[0]) + (1,) * (a.ndim - 2)), out=out)


def reduce_sum_channels(a, out) -> None:
    """out (C,) = a (N, C, ...) summed over every dim but 1."""
    out[...] = np.sum(a, axis=(0,) + tuple(range(2, a.ndim)))


# --------------------------------------------------------------------------------------------------
# Pooling
# --------------------------------------------------------------------------------------------------


def _pool_windows_flat(x, kernel, stride, padding, fill):
    win = _windows(_pad(x, padding, fill), kernel, stride)
    # NOTE: the window size is explicit, not -1: numpy cannot infer -1 for an empty batch.
    return win.reshape(win.shape[:4] + (kernel[0] * kernel[1],))


def _pool(op: str, kernel_size, stride, padding):
    kh, kw, sh, sw, ph, pw = pool_args(op, kernel_size, stride, padding)
    return (kh, kw), (sh, sw), (ph, pw)


def max_pool2d(x, out, kernel_size, stride=None, padding=0) -> None:
    """Max over each window of x (N, C, H, W); padding is -inf (never wins), NaN wins."""
    kernel, stride, padding = _pool("max_pool2d", kernel_size, stride, padding)
    if out.size and 0 in x.shape[2:]:
        raise ValueError(f"max_pool2d: x {x.shape} has an empty spatial dimension")
    flat = _pool_windows_flat(x, kernel, stride, padding, -np.inf)
    idx = np.argmax(flat, axis=-1)[..., None]
    out[...] = np.take_along_axis(flat, idx, axis=-1)[..., 0]


def max_pool2d_gradient(x, dy, out, kernel_size, stride=None, padding=0) -> None:
    """Each window's dy to its argmax, the first maximum in row-major window order (argmax's
    rule, the kernels' too); overlapping windows add up."""
    kernel, (sh, sw), (ph, pw) = _pool("max_pool2d_gradient", kernel_size, stride, padding)
    kw = kernel[1]
    n, c, h, w = x.shape
    flat = _pool_windows_flat(x, kernel, (sh, sw), (ph, pw), -np.inf)
    arg = np.argmax(flat, axis=-1)  # (N, C, OH, OW)
    oh, ow = arg.shape[2:]
    rows = np.arange(oh)[:, None] * sh + arg // kw
    cols = np.arange(ow)[None, :] * sw + arg % kw
    nn_, cc = np.meshgrid(np.arange(n), np.arange(c), indexing="ij")
    dxp = np.zeros((n, c, h + 2 * ph, w + 2 * pw), dtype=dy.dtype)
    np.add.at(dxp, (nn_[:, :, None, None], cc[:, :, None, None], rows, cols), dy)
    out[...] = dxp[:, :, ph : ph + h, pw : pw + w]


def avg_pool2d(x, out, kernel_size, stride=None, padding=0) -> None:
    """Mean over each window of x (N, C, H, W), padding counted as zeros (divisor KH*KW)."""
    kernel, stride, padding = _pool("avg_pool2d", kernel_size, stride, padding)
    out[...] = _pool_windows_flat(x, kernel, stride, padding, 0.0).mean(axis=-1)


def avg_pool2d_gradient(dy, out, kernel_size, stride=None, padding=0) -> None:
    """out (N, C, H, W): every element receives dy / (KH*KW) from each window covering it."""
    (kh, kw), (sh, sw), (ph, pw) = _pool("avg_pool2d_gradient", kernel_size, stride, padding)
    n, c, h, w = out.shape
    oh, ow = dy.shape[2:]
    dxp = np.zeros((n, c, h + 2 * ph, w + 2 * pw), dtype=dy.dtype)
    share = dy / (kh * kw)
    for i in range(kh):
        for j in range(kw):
            dxp[:, :, i : i + sh * oh : sh, j : j + sw * ow : sw] += share
    out[...] = dxp[:, :, ph : ph + h, pw : pw + w]


def _adaptive_spans(size: int, out: int) -> list:
    """PyTorch's adaptive windows: output o covers [floor(o size/out), ceil((o+1) size/out))."""
    return [((o * size) // out, -(-((o + 1) * size) // out)) for o in range(out)]


def _adaptive_check(op: str, x_shape, y_shape, x_name: str, y_name: str) -> None:
    if len(x_shape) != 4 or len(y_shape) != 4:
        raise ValueError(f"{op}: {x_name} and {y_name} must be 4-D, got {x_shape} and {y_shape}")
    if tuple(x_shape[:2]) != tuple(y_shape[:2]) or min(*x_shape[2:], *y_shape[2:]) < 1:
        raise ValueError(
            f"{op}: {x_name} {tuple(x_shape)} and {y_name} {tuple(y_shape)} must share (N, C) and "
            "have spatial sizes >= 1"
        )


def adaptive_avg_pool2d(x, out) -> None:
    """out (N, C, OH, OW): the mean of each adaptive window of x (N, C, H, W)."""
    _adaptive_check("adaptive_avg_pool2d", x.shape, out.shape, "x", "out")
    rows = _adaptive_spans(x.shape[2], out.shape[2])
    cols = _adaptive_spans(x.shape[3], out.shape[3])
    for i, (h0, h1) in enumerate(rows):
        for j, (w0, w1) in enumerate(cols):
            out[:, :, i, j] = x[:, :, h0:h1, w0:w1].mean(axis=(2, 3))


def adaptive_avg_pool2d_gradient(dy, out) -> None:
    """out (N, C, H, W): every element receives dy / area from each adaptive window covering it."""
    _adaptive_check("adaptive_avg_pool2d_gradient", out.shape, dy.shape, "dx", "dy")
    rows = _adaptive_spans(out.shape[2], dy.shape[2])
    cols = _adaptive_spans(out.shape[3], dy.shape[3])
    acc = np.zeros(out.shape, dtype=dy.dtype)
    for i, (h0, h1) in enumerate(rows):
        for j, (w0, w1) in enumerate(cols):
            acc[:, :, h0:h1, w0:w1] += (dy[:, :, i, j] / ((h1 - h0) * (w1 - w0)))[:, :, None, None]
    out[...] = acc


# --------------------------------------------------------------------------------------------------
# Fused recurrent cells (extensions/src/rnn_cell.h)
# --------------------------------------------------------------------------------------------------


def _sig(x):
    return 1 / (1 + np.exp(-x))


def _cell_check(op, g, state, k, others):
    if g.ndim != 2 or state.ndim != 2 or g.shape != (state.shape[0], k * state.shape[1]):
        raise ValueError(f"{op}: gates {g.shape} must be (N, {k} * H) for state {state.shape}")
    n, h = state.shape
    for what, a, cols in others:
        if a.shape != (n, cols * h):
            raise ValueError(f"{op}: {what} must be ({n}, {cols * h}), got {a.shape}")
    return h


def lstm_cell(gates, c, out) -> None:
    """out = [h' | c'] of one LSTM step from gates (N, 4H) (i, f, g, o) and c (N, H)."""
    h = _cell_check("lstm_cell", gates, c, 4, [("out", out, 2)])
    i, f, g, o = (gates[:, k * h : (k + 1) * h] for k in range(4))
    cn = _sig(f) * c + _sig(i) * np.tanh(g)
    out[...] = np.concatenate([_sig(o) * np.tanh(cn), cn], axis=1)


def lstm_cell_gradient(gates, c, y, dy, out) -> None:
    """out = [d gates | dc] of :func:`lstm_cell` from its output y and dy = [dh' | dc']."""
    h = _cell_check(
        "lstm_cell_gradient", gates, c, 4, [("y", y, 2), ("dy", dy, 2), ("out", out, 5)]
    )
    si, sf, tg, so = (
        fn(gates[:, k * h : (k + 1) * h]) for k, fn in enumerate((_sig, _sig, np.tanh, _sig))
    )
    tc = np.tanh(y[:, h:])
    dh = dy[:, :h]
    dc = dy[:, h:] + dh * so * (1 - tc * tc)
    out[...] = np.concatenate(
        [
            dc * tg * si * (1 - si),
            dc * c * sf * (1 - sf),
            dc * si * (1 - tg * tg),
            dh * tc * so * (1 - so),
            dc * sf,
        ],
        axis=1,
    )


def gru_cell(gi, gh, hx, out) -> None:
    """out = h' of one GRU step from gi, gh (N, 3H) (r, z, n) and hx (N, H)."""
    h = _cell_check("gru_cell", gi, hx, 3, [("gh", gh, 3), ("out", out, 1)])
    r = _sig(gi[:, :h] + gh[:, :h])
    z = _sig(gi[:, h : 2 * h] + gh[:, h : 2 * h])
    n = np.tanh(gi[:, 2 * h :] + r * gh[:, 2 * h :])
    out[...] = n + z * (hx - n)


def gru_cell_gradient(gi, gh, hx, dy, out) -> None:
    """out = [d gi | d gh | d hx] of :func:`gru_cell` from dy (N, H)."""
    h = _cell_check("gru_cell_gradient", gi, hx, 3, [("gh", gh, 3), ("dy", dy, 1), ("out", out, 7)])
    r = _sig(gi[:, :h] + gh[:, :h])
    z = _sig(gi[:, h : 2 * h] + gh[:, h : 2 * h])
    n = np.tanh(gi[:, 2 * h :] + r * gh[:, 2 * h :])
    dn = dy * (1 - z) * (1 - n * n)
    dz = dy * (hx - n) * z * (1 - z)
    dr = dn * gh[:, 2 * h :] * r * (1 - r)
    out[...] = np.concatenate([dr, dz, dn, dr, dz, dn * r, dy * z], axis=1)


# --------------------------------------------------------------------------------------------------
# Random numbers: counter-based, bit for bit the devices' draws
# --------------------------------------------------------------------------------------------------


def _splitmix64(x):
    # SplitMix64 (Steele, Lea & Flood, OOPSLA 2014), as extensions/src/random.h; uint64 wraps.
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def uniform01(seed: int, n: int, start: int = 0) -> np.ndarray:
    """float32 (n,): uniform01(seed, i) of extensions/src/random.h for i in [start, start + n):
    the top 24 bits of SplitMix64(seed ^ SplitMix64(i)), times 2^-24 (the devices' dropout and
    uniform draws, bit for bit)."""
    with np.errstate(over="ignore"):
        counters = np.arange(start, start + n, dtype=np.uint64)
        bits = _splitmix64(np.uint64(seed) ^ _splitmix64(counters))
    return (bits >> np.uint64(40)).astype(np.float32) * np.float32(1.0 / 16777216.0)


def uniform(out, low: float = 0.0, high: float = 1.0, seed: int = 0) -> None:
    """Fills out with low + (high - low) * uniform01(seed, i), element i in row-major order."""
    if not (np.isfinite(low) and np.isfinite(high)) or low > high:
        raise ValueError(f"uniform: need finite low <= high, got {low!r}, {high!r}")
    u = uniform01(as_seed(seed, "uniform"), out.size)
    lo, hi = np.float32(low), np.float32(high)
    v = lo + (hi - lo) * u
    # NOTE: rounding can land on `high`; the devices keep the interval half-open the same way.
    out[...] = np.where(v < hi, v, lo).reshape(out.shape)


def normal(out, mean: float = 0.0, std: float = 1.0, seed: int = 0) -> None:
    """Fills out with mean + std * z_i, z_i = Box-Muller of uniform01(seed, 2i) and
    uniform01(seed, 2i + 1) (the devices' formula; equal to float32 rounding of log and cos)."""
    if not (np.isfinite(mean) and np.isfinite(std)) or std < 0:
        raise ValueError(f"normal: need finite mean and std >= 0, got {mean!r}, {std!r}")
    u = uniform01(as_seed(seed, "normal"), 2 * out.size)
    u1 = np.float32(1.0) - u[0::2]  # in (0, 1]: log(u1) is finite
    u2 = u[1::2]
    z = np.sqrt(np.float32(-2.0) * np.log(u1)) * np.cos(np.float32(6.283185307179586) * u2)
    out[...] = (np.float32(mean) + np.float32(std) * z).reshape(out.shape)


def randint(out, low: int, high: int, seed: int = 0) -> None:
    """Fills out with low + SplitMix64(seed ^ SplitMix64(i)) mod (high - low), the devices'
    integers in [low, high), bit for bit."""
    lo, hi = as_int(low, "low", "randint"), as_int(high, "high", "randint")
    if not lo < hi or lo < -(2**24) or hi - 1 > 2**24:
        raise ValueError(f"randint: need low < high within 2**24 in magnitude, got {lo}, {hi}")
    with np.errstate(over="ignore"):
        counters = np.arange(out.size, dtype=np.uint64)
        bits = _splitmix64(np.uint64(as_seed(seed, "randint")) ^ _splitmix64(counters))
    vals = np.int64(lo) + (bits % np.uint64(hi - lo)).astype(np.int64)
    out[...] = vals.reshape(out.shape)


# --------------------------------------------------------------------------------------------------
# Sorting: the stable order, a NaN the largest value (PyTorch's rules)
# --------------------------------------------------------------------------------------------------


def argsort(a, indices, dim: int = -1, descending: bool = False) -> None:
    """indices = the first k (indices' length along dim) positions of each slice of a in the
    stable sorted order, NaN the largest (numpy's stable argsort; descending by a lexsort on
    (NaN first, -a), also stable)."""
    d = as_int(dim, "dim", "argsort") % max(a.ndim, 1)
    x = np.moveaxis(np.asarray(a), d, -1)
    if descending:
        order = np.lexsort((-np.nan_to_num(x, nan=0.0), ~np.isnan(x)), axis=-1)
    else:
        order = np.argsort(x, axis=-1, kind="stable")
    k = indices.shape[d]
    indices[...] = np.moveaxis(order[..., :k], -1, d)


def gather(a, index, out, dim: int) -> None:
    """out[..., r, ...] = a[..., index[..., r, ...], ...] along dim (NaN for an invalid index)."""
    d = as_int(dim, "dim", "gather") % max(a.ndim, 1)
    valid, where = _valid_positions(index, a.shape[d], d)
    out[...] = np.nan
    out[tuple(p[valid] for p in where)] = a[tuple(p[valid] for p in _at_positions(where, index, d))]


def gather_gradient(index, dy, out, dim: int) -> None:
    """out = zeros of out's shape with dy added at the positions index names along dim
    (repeated ones summed; invalid ones add nothing)."""
    d = as_int(dim, "dim", "gather_gradient") % max(out.ndim, 1)
    valid, where = _valid_positions(index, out.shape[d], d)
    acc = np.zeros(out.shape, dtype=np.float64)
    at = tuple(p[valid] for p in _at_positions(where, index, d))
    np.add.at(acc, at, np.asarray(dy, np.float64)[tuple(p[valid] for p in where)])
    out[...] = acc


def _valid_positions(index, n: int, d: int):
    """(mask of index's elements naming an integer in [0, n), index's dense coordinates)."""
    valid = (index >= 0) & (index < n) & (np.floor(index) == index)
    return valid, np.indices(index.shape)


def _at_positions(where, index, d: int):
    """index's coordinates with dim d replaced by the index values: the positions they name."""
    at = list(where)
    at[d] = np.where(np.isfinite(index), index, 0).astype(np.int64)
    return at


# --------------------------------------------------------------------------------------------------
# Optimizers (in place, in the parameters' dtype)
# --------------------------------------------------------------------------------------------------


def sgd_update(params, grads, lr: float, weight_decay: float = 0.0) -> None:
    """params[i] -= lr * (grads[i] + weight_decay * params[i]) for every i."""
    for p, g in zip(params, grads, strict=True):
        p -= lr * (g + weight_decay * p if weight_decay else g)


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
    """g = grads[i] + weight_decay * params[i]; velocities[i] = momentum * velocities[i] +
    (1 - dampening) * g; params[i] -= lr * (g + momentum * velocities[i] if nesterov else
    velocities[i]) (torch.optim.SGD's formula)."""
    for p, g, v in zip(params, grads, velocities, strict=True):
        g = g + weight_decay * p if weight_decay else g
        v *= momentum
        v += (1.0 - dampening) * g
        p -= lr * (g + momentum * v if nesterov else v)


def adam_update(param, grad, m, v, lr, beta1, beta2, eps, step: int) -> None:
    """One Adam step in place (Kingma & Ba, ICLR 2015, Algorithm 1; eps added to the corrected
    sqrt(v), as PyTorch does)."""
    t = as_int(step, "step", "adam_update")
    m *= beta1
    m += (1.0 - beta1) * grad
    v *= beta2
    v += (1.0 - beta2) * grad * grad
    m_hat = m / (1.0 - beta1**t)
    v_hat = v / (1.0 - beta2**t)
    param -= lr * m_hat / (np.sqrt(v_hat) + eps)


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
    """:func:`adam_update` for every tensor i at one step, with weight decay (coupled, or
    decoupled as AdamW: ``params[i] *= 1 - lr * weight_decay`` first) and AMSGrad when max_v holds
    one array per tensor (max_v[i] = max(max_v[i], v[i]) in the denominator)."""
    t = as_int(step, "step", "adam_update_multi")
    max_v = list(max_v) or [None] * len(params)
    for p, g, mi, vi, vmax in zip(params, grads, m, v, max_v, strict=True):
        if weight_decay and decoupled:
            p *= 1.0 - lr * weight_decay
        elif weight_decay:
            g = g + weight_decay * p
        mi *= beta1
        mi += (1.0 - beta1) * g
        vi *= beta2
        vi += (1.0 - beta2) * g * g
        vd = vi
        if vmax is not None:
            np.maximum(vmax, vi, out=vmax)
            vd = vmax
        p -= lr * (mi / (1.0 - beta1**t)) / (np.sqrt(vd / (1.0 - beta2**t)) + eps)


def total_norm_multi(arrays, norm_type: float, out) -> None:
    """out[...] = the norm_type-norm of all the elements of arrays together (max |x| for inf; 0
    for no element), accumulated in float64."""
    flat = np.concatenate([np.abs(np.asarray(a, np.float64)).ravel() for a in arrays] + [[]])
    if flat.size == 0:
        out[...] = 0.0
    elif norm_type == np.inf:
        out[...] = np.nan if np.isnan(flat).any() else flat.max()
    else:
        out[...] = np.sum(flat**norm_type) ** (1.0 / norm_type)


def clip_scale_multi(arrays, total_norm, max_norm: float) -> None:
    """``arrays[i] *= min(1, max_norm / (total_norm + 1e-6))`` in place (NaN norm: NaN)."""
    c = np.float32(max_norm) / (
        np.float32(np.asarray(total_norm).reshape(-1)[0]) + np.float32(1e-6)
    )
    coef = c if np.isnan(c) or c < 1 else np.float32(1.0)
    for a in arrays:
        a *= coef


def adadelta_update_multi(params, grads, square_avgs, acc_deltas, lr, rho, eps) -> None:
    """One Adadelta step in place for every tensor i (Zeiler 2012, Algorithm 1, with PyTorch's lr
    factor): square_avg = rho sq + (1 - rho) g^2; d = sqrt(acc + eps) / sqrt(sq + eps) * g;
    acc = rho acc + (1 - rho) d^2; param -= lr d."""
    for p, g, sq, acc in zip(params, grads, square_avgs, acc_deltas, strict=True):
        sq *= rho
        sq += (1.0 - rho) * g * g
        d = np.sqrt(acc + eps) / np.sqrt(sq + eps) * g
        acc *= rho
        acc += (1.0 - rho) * d * d
        p -= lr * d


# --------------------------------------------------------------------------------------------------
# Index
# --------------------------------------------------------------------------------------------------


def _index_rows(index, n: int):
    """(rows, valid): index values as rows of an axis of n (negative from the end), and which name
    one (in [-n, n) and whole; the devices skip or NaN the others)."""
    index = np.asarray(index, dtype=np.float64).reshape(-1)
    with np.errstate(invalid="ignore"):
        valid = (index >= -n) & (index < n) & (np.floor(index) == index)
    rows = np.where(valid, index, 0).astype(np.int64)
    return np.where(rows < 0, rows + n, rows), valid


def index_select(a, dim: int, index, out) -> None:
    """out = a's rows index[j] along dim (NaN where an index names no row)."""
    dim = dim % a.ndim
    rows, valid = _index_rows(index, a.shape[dim])
    picked = np.take(a, rows, axis=dim) if a.shape[dim] else np.zeros(out.shape, a.dtype)
    shape = [1] * a.ndim
    shape[dim] = -1
    out[...] = np.where(valid.reshape(shape), picked, np.nan)


def index_add(out, dim: int, index, src, alpha: float = 1.0) -> None:
    """out[..., index[j], ...] += alpha * src[..., j, ...], in increasing j (indices naming no
    row skipped)."""
    dim = dim % out.ndim
    rows, valid = _index_rows(index, out.shape[dim])
    o, s = np.moveaxis(out, dim, 0), np.moveaxis(src, dim, 0)
    for j in np.flatnonzero(valid):
        o[rows[j]] += alpha * s[j]


def index_copy(out, dim: int, index, src) -> None:
    """out[..., index[j], ...] = src[..., j, ...]; the last j naming a row wins."""
    dim = dim % out.ndim
    rows, valid = _index_rows(index, out.shape[dim])
    o, s = np.moveaxis(out, dim, 0), np.moveaxis(src, dim, 0)
    for j in np.flatnonzero(valid):
        o[rows[j]] = s[j]


# --------------------------------------------------------------------------------------------------
# Norm
# --------------------------------------------------------------------------------------------------


def _rows(x, d: int):
    """x (any shape whose trailing dims hold d values) as float64 (rows, d)."""
    return np.asarray(x, np.float64).reshape(-1, d)


def _row_mean_rstd(x, eps: float, rms: bool):
    """Each row's mean (0 for RMS) and 1 / sqrt(var + eps), two-pass, (rows, 1) each."""
    mean = np.zeros((x.shape[0], 1)) if rms else x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    return mean, 1.0 / np.sqrt(var + eps)


def layer_norm(x, weight, bias, out, eps: float = 1e-5, rms: bool = False) -> None:
    """out = (x - mean) * rstd * weight + bias over rows of weight.size values (RMS: mean 0)."""
    d = weight.size
    xr = _rows(x, d)
    if xr.size:
        mean, rstd = _row_mean_rstd(xr, eps, rms)
        y = (xr - mean) * rstd * np.reshape(weight, -1) + np.reshape(bias, -1)
        out[...] = y.reshape(out.shape)


def layer_norm_stats(x, stats, eps: float = 1e-5, rms: bool = False) -> None:
    """stats (rows, 2) = [mean, rstd] of each row of x."""
    rows = stats.shape[0]
    if rows:
        mean, rstd = _row_mean_rstd(_rows(x, x.size // rows), eps, rms)
        stats[...] = np.concatenate([mean, rstd], axis=1)


def layer_norm_gradient(x, stats, weight, dy, dx, rms: bool = False) -> None:
    """dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy weight (RMS: no mean(g))."""
    d = weight.size
    xr, g = _rows(x, d), _rows(dy, d) * np.reshape(weight, -1)
    if xr.size:
        st = np.asarray(stats, np.float64)
        mean, rstd = st[:, :1], st[:, 1:]
        xhat = (xr - mean) * rstd
        mg = 0.0 if rms else g.mean(axis=1, keepdims=True)
        dx[...] = (rstd * (g - mg - xhat * (g * xhat).mean(axis=1, keepdims=True))).reshape(
            dx.shape
        )


def layer_norm_weight_gradient(x, stats, dy, dweight) -> None:
    """dweight = the sum over rows of dy * (x - mean) * rstd."""
    d = dweight.size
    st = np.asarray(stats, np.float64)
    xhat = (_rows(x, d) - st[:, :1]) * st[:, 1:]
    dweight[...] = (_rows(dy, d) * xhat).sum(axis=0).reshape(dweight.shape)


def layer_norm_backward(x, weight, dy, dx, dweight, dbias, eps: float = 1e-5, rms: bool = False):
    """dx, dweight and dbias (dy summed over rows) of layer_norm; the statistics computed here."""
    d = weight.size
    rows = x.size // d
    stats = np.zeros((rows, 2))
    layer_norm_stats(x, stats, eps, rms)
    layer_norm_gradient(x, stats, weight, dy, dx, rms)
    layer_norm_weight_gradient(x, stats, dy, dweight)
    dbias[...] = _rows(dy, d).sum(axis=0).reshape(dbias.shape)


def _channels(x):
    """x (N, C, ...) as float64 (N, C, inner)."""
    return np.asarray(x, np.float64).reshape(x.shape[0], x.shape[1], math.prod(x.shape[2:]))


def batch_norm_stats(x, stats) -> None:
    """stats (C, 2) = [mean, biased var] per channel of x (N, C, ...), two-pass."""
    xc = _channels(x)
    with np.errstate(invalid="ignore", divide="ignore"):
        count = xc.shape[0] * xc.shape[2]
        mean = xc.sum(axis=(0, 2)) / count
        var = ((xc - mean[None, :, None]) ** 2).sum(axis=(0, 2)) / count
    stats[...] = np.stack([mean, var], axis=1)


def _channel_terms(x, stats, eps):
    st = np.asarray(stats, np.float64)
    mean, rstd = st[:, 0][None, :, None], 1.0 / np.sqrt(st[:, 1] + eps)[None, :, None]
    return (_channels(x) - mean) * rstd, rstd


def batch_norm(x, stats, weight, bias, out, eps: float = 1e-5) -> None:
    """out = (x - mean[c]) / sqrt(var[c] + eps) * weight[c] + bias[c]."""
    xhat, _ = _channel_terms(x, stats, eps)
    w = np.reshape(weight, -1)[None, :, None]
    out[...] = (xhat * w + np.reshape(bias, -1)[None, :, None]).reshape(out.shape)


def batch_norm_gradient(x, stats, weight, dy, dx, eps: float = 1e-5, training: bool = True) -> None:
    """dx = w rstd (dy - mean(dy) - xhat mean(dy xhat)) per channel (training), w rstd dy (eval)."""
    xhat, rstd = _channel_terms(x, stats, eps)
    g = _channels(dy)
    w = np.reshape(weight, -1)[None, :, None]
    if training and g.size:
        g = (
            g
            - g.mean(axis=(0, 2), keepdims=True)
            - xhat * (g * xhat).mean(axis=(0, 2), keepdims=True)
        )
    dx[...] = (w * rstd * g).reshape(dx.shape)


def batch_norm_weight_gradient(x, stats, dy, dweight, eps: float = 1e-5) -> None:
    """dweight[c] = the sum over channel c of dy * xhat."""
    xhat, _ = _channel_terms(x, stats, eps)
    dweight[...] = (_channels(dy) * xhat).sum(axis=(0, 2)).reshape(dweight.shape)
