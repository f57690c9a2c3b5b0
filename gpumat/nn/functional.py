"""``gpumat.nn.functional`` (``import gpumat.nn.functional as F``): PyTorch's functional layers on
gpumat tensors.

Each function builds the graph ops of :mod:`gpumat.graph` through :func:`gpumat.tensor.apply_op`
(eager, recorded for backward, or traced by :func:`gpumat.compile`), with PyTorch's names,
argument orders and conventions: NCHW images, weights (out, in) and (out, in, kh, kw), losses
averaged over the batch by default (``reduction="mean"``, or ``"sum"``, ``"none"``).

Class targets (``nll_loss``, ``cross_entropy``) are int64 class indices of shape (N,), as in
PyTorch, checked against the C classes without reading the device (the tensor knows its range):
an index outside [0, C) is an IndexError ("Target 12 is out of bounds"). Float targets of shape
(N, C) are accepted too: one-hot rows or class probabilities (the loss is then
-sum(target * log p) / N); targets that require a gradient take the composite form (log_softmax,
products and sums), which has gradients for both arguments.
"""

from __future__ import annotations

import numbers

import numpy as np

from gpumat._checks import as_pair, as_probability
from gpumat.autograd import current_trace
from gpumat.creation import tensor
from gpumat.dtypes import bool_, float32, int64
from gpumat.graph.activation import (
    dropout_op,
    elu_op,
    gelu_op,
    hardtanh_op,
    leaky_relu_op,
    silu_op,
    softplus_op,
)
from gpumat.graph.conv import add_channel_bias_op, conv2d_op
from gpumat.graph.elementwise import mul_byconst_op
from gpumat.graph.index import embedding_op
from gpumat.graph.layout import one_hot_op
from gpumat.graph.loss import mae_loss_op, mse_loss_op, nll_loss_op, softmaxcrossentropy_op
from gpumat.graph.matmul import matmul_op
from gpumat.graph.node import shape_str
from gpumat.graph.pool import adaptive_avg_pool2d_op, avg_pool2d_op, max_pool2d_op
from gpumat.graph.strided import constant_pad_op
from gpumat.random import draw_seed
from gpumat.tensor import Tensor, apply_op
from gpumat.tensor._advanced_indexing import check_bounds

__all__ = [
    "adaptive_avg_pool2d",
    "avg_pool2d",
    "conv2d",
    "cross_entropy",
    "dropout",
    "elu",
    "embedding",
    "gelu",
    "hardtanh",
    "l1_loss",
    "leaky_relu",
    "linear",
    "log_softmax",
    "max_pool2d",
    "mse_loss",
    "nll_loss",
    "one_hot",
    "pad",
    "relu",
    "relu6",
    "sigmoid",
    "silu",
    "softmax",
    "softplus",
    "tanh",
]


def _tensor(x, op: str, what: str = "input") -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: {what} must be a Tensor, got {type(x).__name__}")
    return x


def _float(x, op: str, what: str = "input") -> Tensor:
    _tensor(x, op, what)
    if x.dtype is not float32:
        raise TypeError(
            f"{op}: {what} must be a float32 tensor, got {x.dtype} (shape {shape_str(x.shape)})"
        )
    return x


def _reduction(reduction, op: str) -> str:
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{op}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    return reduction


def _scalar(loss: Tensor) -> Tensor:
    """A (1,) loss as PyTorch's 0-d tensor (a view)."""
    return loss.reshape(())


# --------------------------------------------------------------------------------------------------
# Activations
# --------------------------------------------------------------------------------------------------


def relu(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002 (PyTorch's name)
    """max(x, 0) elementwise. ``inplace`` is accepted and ignored (the result is a new tensor)."""
    return _float(input, "relu").relu()


def tanh(input: Tensor) -> Tensor:  # noqa: A002
    """tanh elementwise."""
    return _float(input, "tanh").tanh()


def sigmoid(input: Tensor) -> Tensor:  # noqa: A002
    """1 / (1 + exp(-x)) elementwise."""
    return _float(input, "sigmoid").sigmoid()


def gelu(input: Tensor, approximate: str = "none") -> Tensor:  # noqa: A002
    """GELU (Hendrycks & Gimpel, "Gaussian Error Linear Units", 2016) elementwise, any shape:
    x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)) for ``approximate='none'``, or the tanh
    approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) for ``'tanh'`` (PyTorch's
    formulas; one kernel each, with their exact gradients).

    Raises:
        TypeError: not a float32 tensor. ValueError: ``approximate`` not 'none' or 'tanh'.
    """
    _float(input, "gelu")
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return apply_op("gelu", lambda x: gelu_op(x, approximate), [input])


def silu(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    """SiLU (swish) x * sigmoid(x) elementwise (Elfwing et al. 2018), the sigmoid through
    exp(-|x|) so large |x| neither overflows nor loses the result. ``inplace`` is accepted and
    ignored.

    Raises:
        TypeError: not a float32 tensor.
    """
    return apply_op("silu", silu_op, [_float(input, "silu")])


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:  # noqa: A002
    """log(1 + exp(beta x)) / beta elementwise, and x itself where beta x > threshold (PyTorch's
    rule, for numerical stability); computed as (max(z, 0) + log1p(exp(-|z|))) / beta with
    z = beta x, finite for any finite x. Gradient sigmoid(beta x) (1 above the threshold).

    Raises:
        TypeError: not a float32 tensor, or beta / threshold not numbers. ValueError: beta 0 or
            not finite, threshold NaN.
    """
    _float(input, "softplus")
    return apply_op("softplus", lambda x: softplus_op(x, beta, threshold), [input])


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:  # noqa: A002
    """x where x > 0, else negative_slope * x, elementwise (Maas et al. 2013); the gradient at 0
    is negative_slope, as PyTorch's. ``inplace`` is accepted and ignored.

    Raises:
        TypeError: not a float32 tensor, or the slope not a number. ValueError: a slope not finite.
    """
    _float(input, "leaky_relu")
    return apply_op("leaky_relu", lambda x: leaky_relu_op(x, negative_slope), [input])


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:  # noqa: A002
    """x where x > 0, else alpha (exp(x) - 1), elementwise (Clevert et al. 2016). ``inplace``
    is accepted and ignored.

    Raises:
        TypeError: not a float32 tensor, or alpha not a number. ValueError: alpha not finite.
    """
    _float(input, "elu")
    return apply_op("elu", lambda x: elu_op(x, alpha), [input])


def hardtanh(
    input: Tensor,  # noqa: A002
    min_val: float = -1.0,
    max_val: float = 1.0,
    inplace: bool = False,
) -> Tensor:
    """min(max(x, min_val), max_val) elementwise (the clamp kernel); the gradient is 1 strictly
    between the bounds and 0 at and beyond them (PyTorch's hardtanh_backward). ``inplace`` is
    accepted and ignored.

    Raises:
        TypeError: not a float32 tensor. ValueError: min_val > max_val, or a NaN bound.
    """
    _float(input, "hardtanh")
    return apply_op("hardtanh", lambda x: hardtanh_op(x, min_val, max_val), [input])


def relu6(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    """min(max(x, 0), 6) elementwise: ``hardtanh(input, 0, 6)``."""
    _float(input, "relu6")
    return apply_op("relu6", lambda x: hardtanh_op(x, 0.0, 6.0), [input])


def softmax(input: Tensor, dim: int) -> Tensor:  # noqa: A002
    """exp(x) / sum exp(x) along ``dim`` (max-subtracted)."""
    return _float(input, "softmax").softmax(dim)


def log_softmax(input: Tensor, dim: int) -> Tensor:  # noqa: A002
    """x - log(sum exp(x)) along ``dim`` (log-sum-exp: finite for finite x)."""
    return _float(input, "log_softmax").log_softmax(dim)


def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:  # noqa: A002
    """Inverted dropout (Srivastava et al., JMLR 2014): each element of ``input`` (any shape) is
    zeroed with probability ``p`` and the rest scaled by 1 / (1 - p) when ``training``; the
    identity otherwise (and for p = 0: the input itself). p = 1 drops every element (zeros, and
    a zero gradient), as PyTorch's.

    The mask comes from gpumat's counter-based generator with a seed drawn from
    :func:`gpumat.manual_seed`'s generator (a fresh mask per call; in a compiled step, per
    replay, as ``seed + step``). ``inplace`` is accepted and ignored.

    Raises:
        TypeError / ValueError: ``p`` not a number in [0, 1]; ``training`` not a bool.
    """
    _float(input, "dropout")
    p = as_probability(p, "dropout")
    if not isinstance(training, bool):
        raise TypeError(f"dropout: training must be a bool, got {training!r}")
    if not training or p == 0.0:
        return input
    seed = draw_seed()
    return apply_op("dropout", lambda x: dropout_op(x, p, seed), [input])


# --------------------------------------------------------------------------------------------------
# Layers
# --------------------------------------------------------------------------------------------------


def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:  # noqa: A002
    """``input @ weight.T + bias``: input (*, in), weight (out, in), bias (out,) -> (*, out).

    One ``matmul_op`` with the transposed-B flag (no transpose is made) and the bias added with
    ``broadcastto_op``: the pattern the executor's fusion pass turns into one dense kernel in a
    compiled step.

    Raises:
        TypeError: not float32 tensors. ValueError: shapes that do not fit (naming them).
    """
    _float(input, "linear")
    _float(weight, "linear", "weight")
    if weight.ndim != 2:
        raise ValueError(f"linear: weight must be 2-D (out, in), got {shape_str(weight.shape)}")
    if input.ndim == 0 or input.shape[-1] != weight.shape[1]:
        raise ValueError(
            f"linear: input {shape_str(input.shape)} does not end with in_features = "
            f"{weight.shape[1]} of weight {shape_str(weight.shape)}"
        )
    lead = input.shape[:-1]
    x = input if input.ndim == 2 else input.reshape(-1, weight.shape[1])
    out = apply_op("linear", lambda a, w: matmul_op(a, w, False, True), [x, weight])
    if bias is not None:
        _float(bias, "linear", "bias")
        if bias.shape != (weight.shape[0],):
            raise ValueError(
                f"linear: bias must have shape ({weight.shape[0]},), got {shape_str(bias.shape)}"
            )
        out = out + bias
    return out if input.ndim == 2 else out.reshape(*lead, weight.shape[0])


def conv2d(
    input: Tensor,  # noqa: A002
    weight: Tensor,
    bias: Tensor | None = None,
    stride=1,
    padding=0,
    dilation=1,
    groups: int = 1,
) -> Tensor:
    """2-D convolution (cross-correlation, zero padding): input (N, C, H, W), weight
    (F, C, KH, KW), bias (F,) -> (N, F, OH, OW), OH = (H + 2*ph - KH) // sh + 1.

    ``stride`` and ``padding`` are ints or (h, w) pairs (or ``padding="valid"``, 0, and
    ``"same"`` for stride 1 and odd kernels). gpumat's kernels have no dilation or groups: other
    values than 1 are a ValueError.

    Raises:
        TypeError: not float32 tensors. ValueError: shapes that do not fit, dilation or groups.
    """
    _float(input, "conv2d")
    _float(weight, "conv2d", "weight")
    if as_pair(dilation, "dilation", "conv2d") != (1, 1) or groups != 1:
        raise ValueError("conv2d: gpumat's convolution has no dilation or groups (use 1)")
    if padding == "valid":
        padding = 0
    elif padding == "same":
        if weight.ndim != 4 or as_pair(stride, "stride", "conv2d") != (1, 1):
            raise ValueError("conv2d: padding='same' needs stride 1 and a 4-D weight")
        kh, kw = weight.shape[2:]
        if kh % 2 == 0 or kw % 2 == 0:
            raise ValueError(f"conv2d: padding='same' needs odd kernel sizes, got {(kh, kw)}")
        padding = (kh // 2, kw // 2)
    out = apply_op("conv2d", lambda x, w: conv2d_op(x, w, stride, padding), [input, weight])
    if bias is not None:
        _float(bias, "conv2d", "bias")
        out = apply_op("conv2d", add_channel_bias_op, [out, bias])
    return out


def embedding(
    input: Tensor,  # noqa: A002
    weight: Tensor,
    padding_idx: int | None = None,
    max_norm=None,
    norm_type: float = 2.0,
    scale_grad_by_freq: bool = False,
    sparse: bool = False,
) -> Tensor:
    """The rows of ``weight`` (num_embeddings, D) named by the int64 indices ``input`` (any
    shape) -> input.shape + (D,), PyTorch's ``embedding``: one ``index_select`` kernel. The
    gradient of weight is a deterministic scatter-add (``index_add``: rows summed in index order,
    the same bits every run); the row ``padding_idx`` (negative counts from the end) receives no
    gradient. ``max_norm``, ``scale_grad_by_freq`` and ``sparse`` are not supported (their
    defaults only).

    Raises:
        TypeError: input not int64, weight not float32, a bad padding_idx type. ValueError:
            weight not 2-D, padding_idx outside it, an unsupported option. IndexError: an index
            outside [0, num_embeddings) (no negative indices, as PyTorch).
    """
    _tensor(input, "embedding")
    _float(weight, "embedding", "weight")
    if input.dtype is not int64:
        raise TypeError(
            f"embedding: input must be an int64 tensor of indices, got {input.dtype} "
            f"(shape {shape_str(input.shape)})"
        )
    if weight.ndim != 2:
        raise ValueError(
            f"embedding: weight must be 2-D (num_embeddings, embedding_dim), got "
            f"{shape_str(weight.shape)}"
        )
    if max_norm is not None or scale_grad_by_freq or sparse:
        raise ValueError(
            "embedding: max_norm, scale_grad_by_freq and sparse are not supported (use their "
            "defaults)"
        )
    n, d = weight.shape
    padding_idx = _padding_index(padding_idx, n, "embedding")
    check_bounds(input, n, 0, "embedding", negative=False)
    flat = input.reshape(-1)
    rows = apply_op("embedding", lambda w, i: embedding_op(w, i, padding_idx), [weight, flat])
    return rows.reshape(*input.shape, d)


def _padding_index(padding_idx, n: int, op: str):
    """padding_idx as a row in [0, n) (negative counts from the end), or None."""
    if padding_idx is None:
        return None
    if isinstance(padding_idx, bool) or not isinstance(padding_idx, numbers.Integral):
        raise TypeError(f"{op}: padding_idx must be an int or None, got {padding_idx!r}")
    if not -n <= padding_idx < n:
        raise ValueError(
            f"{op}: padding_idx {padding_idx} must be within num_embeddings ({n}) (-{n}..{n - 1})"
        )
    return int(padding_idx) % n


def _pool_args(op: str, dilation, ceil_mode, return_indices) -> None:
    if as_pair(dilation, "dilation", op) != (1, 1) or ceil_mode or return_indices:
        raise ValueError(f"{op}: dilation, ceil_mode and return_indices are not supported")


def max_pool2d(
    input: Tensor,  # noqa: A002
    kernel_size,
    stride=None,
    padding=0,
    dilation=1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> Tensor:
    """The max over each window of the (H, W) planes of input (N, C, H, W) -> (N, C, OH, OW).

    ``kernel_size``, ``stride`` (default: the kernel size) and ``padding`` (at most half the
    kernel) are ints or pairs. The gradient goes to the first maximum of each window.

    Raises:
        TypeError: not a float32 tensor. ValueError: bad geometry, or an unsupported option.
    """
    _float(input, "max_pool2d")
    _pool_args("max_pool2d", dilation, ceil_mode, return_indices)
    return apply_op("max_pool2d", lambda x: max_pool2d_op(x, kernel_size, stride, padding), [input])


def avg_pool2d(
    input: Tensor,  # noqa: A002
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
) -> Tensor:
    """The mean over each window (padding counts as zeros: ``count_include_pad=True``, the only
    mode gpumat's kernel has).

    Raises:
        TypeError: not a float32 tensor. ValueError: bad geometry, or an unsupported option.
    """
    _float(input, "avg_pool2d")
    if ceil_mode or not count_include_pad:
        raise ValueError("avg_pool2d: ceil_mode=True and count_include_pad=False are not supported")
    return apply_op("avg_pool2d", lambda x: avg_pool2d_op(x, kernel_size, stride, padding), [input])


def _adaptive_size(output_size, shape: tuple, op: str) -> tuple:
    """output_size (an int, or a pair whose None entries keep the input's size) as (OH, OW)."""
    if isinstance(output_size, (list, tuple)):
        if len(output_size) != 2:
            raise ValueError(f"{op}: output_size must be an int or a pair, got {output_size!r}")
        pair = tuple(shape[-2 + k] if v is None else v for k, v in enumerate(output_size))
    elif output_size is None:
        pair = tuple(shape[-2:])
    else:
        pair = (output_size, output_size)
    for v in pair:
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
            raise ValueError(f"{op}: output_size entries must be ints >= 1, got {output_size!r}")
    return tuple(int(v) for v in pair)


def adaptive_avg_pool2d(input: Tensor, output_size) -> Tensor:  # noqa: A002
    """Adaptive average pooling of input (N, C, H, W) or (C, H, W) to output_size (OH, OW): an
    int, or a pair whose None entries keep the input's size. Output (oh, ow) is the mean of rows
    [floor(oh*H/OH), ceil((oh+1)*H/OH)) and columns likewise (PyTorch's windows; OH > H
    allowed), one kernel with a gather for its gradient.

    Raises:
        TypeError: not a float32 tensor. ValueError: not 3-D or 4-D, an empty spatial size (H or
            W of 0), a bad output_size.
    """
    _float(input, "adaptive_avg_pool2d")
    if input.ndim not in (3, 4):
        raise ValueError(
            f"adaptive_avg_pool2d: input must be (N, C, H, W) or (C, H, W), got "
            f"{shape_str(input.shape)}"
        )
    if min(input.shape[-2:]) < 1:
        raise ValueError(
            f"adaptive_avg_pool2d: the spatial sizes must be >= 1, got {shape_str(input.shape)}"
        )
    size = _adaptive_size(output_size, input.shape, "adaptive_avg_pool2d")
    x = input if input.ndim == 4 else input.reshape(1, *input.shape)
    out = apply_op("adaptive_avg_pool2d", lambda v: adaptive_avg_pool2d_op(v, size), [x])
    return out if input.ndim == 4 else out.reshape(*out.shape[1:])


_PAD_MODES = ("constant", "reflect", "replicate", "circular")


def _pad_pairs(pad, ndim: int, op: str) -> list:
    """F.pad's flat tuple (last dim first) as one (before, after) pair per dim, in dim order."""
    if not isinstance(pad, (tuple, list)):
        raise TypeError(f"{op}: pad must be a tuple of ints, got {type(pad).__name__}")
    for v in pad:
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise TypeError(f"{op}: pad must be a tuple of ints, got {tuple(pad)!r}")
    if len(pad) % 2:
        raise ValueError(f"{op}: pad must have an even length (pairs), got {len(pad)}: {pad!r}")
    if len(pad) > 2 * ndim:
        raise ValueError(
            f"{op}: pad {tuple(pad)!r} has {len(pad) // 2} pairs, more than the input's {ndim} dims"
        )
    pairs = [(0, 0)] * ndim
    for k in range(len(pad) // 2):
        pairs[ndim - 1 - k] = (int(pad[2 * k]), int(pad[2 * k + 1]))
    return pairs


def _source_rows(n: int, lo: int, hi: int, mode: str, op: str, dim: int) -> np.ndarray:
    """The input row each output row of dim (n rows padded by lo, hi) copies, for a mode."""
    j = np.arange(-lo, n + hi)
    if mode == "reflect":
        if max(lo, hi) >= n:
            raise ValueError(
                f"{op}: reflect padding ({lo}, {hi}) must be less than the size {n} of dim {dim}"
            )
        return np.where(j < 0, -j, np.where(j >= n, 2 * (n - 1) - j, j))
    if mode == "replicate":
        if n == 0:
            raise ValueError(f"{op}: replicate padding of dim {dim}, which is empty")
        return np.clip(j, 0, n - 1)
    if max(lo, hi) > n:  # circular
        raise ValueError(
            f"{op}: circular padding ({lo}, {hi}) must be at most the size {n} of dim {dim}"
        )
    return j % n


def pad(input: Tensor, pad, mode: str = "constant", value: float | None = None) -> Tensor:  # noqa: A002
    """``input`` padded (or, for negative pads, cropped) as PyTorch's ``F.pad``.

    ``pad`` is a flat tuple of ints, pairs from the LAST dim backwards: ``(left, right)`` pads the
    last dim, ``(left, right, top, bottom)`` the last two, and so on (at most 2 * input.ndim
    ints). ``mode``:

    - ``"constant"`` (any rank up to 8): a border of ``value`` (default 0). Negative pads crop
      first (a view); the padding is one graph op, a fill and one ``as_strided_scatter``, whose
      gradient is one ``as_strided`` gather of the interior.
    - ``"reflect"`` (mirror without repeating the edge, pads < the dim's size), ``"replicate"``
      (repeat the edge) and ``"circular"`` (wrap around, pads <= the size), on the last 1 to 3
      dims: one ``index_select`` per padded dim, whose gradient is the deterministic
      ``index_add``.

    Raises:
        TypeError: not a float32 tensor, pad not a tuple of ints. ValueError: an odd-length pad,
            more pairs than dims, an unknown mode, a value with a mode other than constant, pads
            too large for reflect / circular, a crop past a dim's size, more than 3 padded dims
            for the non-constant modes.
    """
    _float(input, "pad")
    if mode not in _PAD_MODES:
        raise ValueError(f"pad: mode must be one of {_PAD_MODES}, got {mode!r}")
    pairs = _pad_pairs(pad, input.ndim, "pad")
    for d, (lo, hi) in enumerate(pairs):
        if input.shape[d] + lo + hi < 0:
            raise ValueError(
                f"pad: pads {(lo, hi)} leave a negative size for dim {d} of input "
                f"{shape_str(input.shape)}"
            )
    if mode != "constant":
        if value is not None and value != 0:
            raise ValueError(f"pad: a value is only for mode 'constant', got mode {mode!r}")
        if len(pad) > 6:
            raise ValueError(f"pad: mode {mode!r} pads the last 1 to 3 dims, got pad {pad!r}")
        x = input
        for d, (lo, hi) in enumerate(pairs):
            if (lo, hi) != (0, 0):
                rows = _source_rows(input.shape[d], lo, hi, mode, "pad", d)
                x = x.index_select(d, tensor(rows.astype(np.int64), device=input.device))
        return x
    fill = 0.0 if value is None else value
    crops = tuple(
        slice(max(0, -lo), n - max(0, -hi)) for n, (lo, hi) in zip(input.shape, pairs, strict=True)
    )
    x = input[crops] if any(lo < 0 or hi < 0 for lo, hi in pairs) else input
    grow = tuple((max(0, lo), max(0, hi)) for lo, hi in pairs)
    if all(p == (0, 0) for p in grow):
        return x
    return apply_op("pad", lambda v: constant_pad_op(v, grow, fill), [x])


# --------------------------------------------------------------------------------------------------
# Classes and losses
# --------------------------------------------------------------------------------------------------


def _check_classes(target: Tensor, num_classes: int, op: str) -> None:
    """IndexError unless every class index of ``target`` lies in [0, num_classes)."""
    lo, hi = target._range
    if lo < 0:
        raise IndexError(f"{op}: Target {lo} is out of bounds (classes 0..{num_classes - 1}).")
    if hi >= num_classes:
        raise IndexError(f"{op}: Target {hi} is out of bounds (classes 0..{num_classes - 1}).")
    if target._range_src is not None:  # an argument of a compiled step: checked on every call
        target._trace.guard_range(target._range_src, 0, num_classes - 1, op, IndexError)
    elif target._trace is None and (trace := current_trace()) is not None:  # read by the step
        trace.guard_range(target, 0, num_classes - 1, op, IndexError)


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """Class indices (int64, any shape) as one-hot rows (int64, shape + (num_classes,)).

    ``num_classes`` -1 takes the largest index + 1 (known from the tensor's range: no device
    read).

    Raises:
        TypeError: not an int64 tensor. IndexError: an index outside [0, num_classes).
    """
    _tensor(tensor, "one_hot")
    if tensor.dtype is not int64:
        raise TypeError(f"one_hot: expected an int64 tensor of class indices, got {tensor.dtype}")
    if isinstance(num_classes, bool) or not isinstance(num_classes, numbers.Integral):
        raise TypeError(f"one_hot: num_classes must be an int, got {num_classes!r}")
    c = int(num_classes) if num_classes != -1 else tensor._range[1] + 1
    if c < 1:
        raise ValueError(f"one_hot: num_classes must be >= 1 or -1, got {num_classes}")
    _check_classes(tensor, c, "one_hot")
    flat = tensor.reshape(-1)
    rows = apply_op("one_hot", lambda t: one_hot_op(t, c), [flat], int64, (0, 1), False)
    return rows.reshape(*tensor.shape, c)


def _class_rows(input: Tensor, target: Tensor, op: str) -> Tensor:  # noqa: A002
    """target as float (N, C) rows: one-hot rows of int64 class indices, or float rows as
    given."""
    _tensor(target, op, "target")
    if input.ndim != 2:
        raise ValueError(f"{op}: input must be 2-D (N, C), got {shape_str(input.shape)}")
    n, c = input.shape
    if target.dtype is int64:
        if target.shape != (n,):
            raise ValueError(
                f"{op}: int64 class indices must have shape ({n},) for input "
                f"{shape_str(input.shape)}, got {shape_str(target.shape)}"
            )
        _check_classes(target, c, op)
        return apply_op(op, lambda t: one_hot_op(t, c), [target], float32, None, False)
    if target.dtype is bool_:
        raise TypeError(f"{op}: target must be int64 class indices or float32 rows, got bool")
    if target.shape != input.shape:
        raise ValueError(
            f"{op}: float targets must be (N, C) rows of input's shape {shape_str(input.shape)}, "
            f"got {shape_str(target.shape)}"
        )
    return target


def _reduce(loss_mean: Tensor, count: int, reduction: str) -> Tensor:
    """A (1,) batch-mean loss as PyTorch's 0-d "mean" or "sum" (the mean times ``count``)."""
    if reduction == "mean":
        return _scalar(loss_mean)
    return _scalar(apply_op("loss", lambda x: mul_byconst_op(x, float(count)), [loss_mean]))


def nll_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:  # noqa: A002
    """The negative log-likelihood of log-probabilities ``input`` (N, C) (e.g. ``log_softmax``)
    for class indices ``target`` (int64, (N,)) or float rows (N, C): mean (default), sum or
    per-sample ("none", shape (N,)) of -input[i, target[i]].

    Raises:
        TypeError: wrong dtypes. ValueError: shapes that do not fit. IndexError: a class index
            outside [0, C).
    """
    _float(input, "nll_loss")
    reduction = _reduction(reduction, "nll_loss")
    rows = _class_rows(input, target, "nll_loss")
    n = input.shape[0]
    if reduction == "none":
        return -(input * rows).sum(1)
    if rows.requires_grad:  # nll_loss_op has no gradient for its target: the composite has
        per_row = -(input * rows).sum(1)
        return per_row.mean() if reduction == "mean" else per_row.sum()
    mean = apply_op("nll_loss", nll_loss_op, [input, rows])
    return _reduce(mean, n, reduction)


def cross_entropy(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:  # noqa: A002
    """Softmax cross-entropy of logits ``input`` (N, C) with class indices ``target`` (int64,
    (N,)) or probability rows (N, C): ``nll_loss(log_softmax(input, 1), target)``. The mean is
    one fused op (``softmaxcrossentropy_op``; with its gradient, one kernel in a compiled step).

    Raises:
        TypeError / ValueError / IndexError: as for :func:`nll_loss`.
    """
    _float(input, "cross_entropy")
    reduction = _reduction(reduction, "cross_entropy")
    rows = _class_rows(input, target, "cross_entropy")
    if reduction == "none" or rows.requires_grad:
        # softmaxcrossentropy_op has no gradient for its labels: the composite form has.
        per_row = -(input.log_softmax(1) * rows).sum(1)
        if reduction == "none":
            return per_row
        return per_row.mean() if reduction == "mean" else per_row.sum()
    mean = apply_op("cross_entropy", softmaxcrossentropy_op, [input, rows])
    return _reduce(mean, input.shape[0], reduction)


def _regression(op: str, graph_op, input: Tensor, target: Tensor, reduction: str, per_element):  # noqa: A002
    _float(input, op)
    _float(target, op, "target")
    reduction = _reduction(reduction, op)
    if input.shape != target.shape:
        raise ValueError(
            f"{op}: input {shape_str(input.shape)} and target {shape_str(target.shape)} differ "
            "in shape"
        )
    if reduction == "none":
        return per_element(input - target)
    mean = apply_op(op, graph_op, [input, target])
    return _reduce(mean, input.numel(), reduction)


def mse_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:  # noqa: A002
    """The mean (default), sum or elementwise ("none") squared error (input - target)**2; input
    and target of one shape.

    Raises:
        TypeError: not float32. ValueError: shapes differ, or no element for the mean.
    """
    return _regression("mse_loss", mse_loss_op, input, target, reduction, lambda d: d * d)


def l1_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:  # noqa: A002
    """The mean (default), sum or elementwise ("none") absolute error |input - target| (its
    gradient at 0 is 0, as PyTorch's).

    Raises:
        TypeError: not float32. ValueError: shapes differ, or no element for the mean.
    """
    return _regression(
        "l1_loss", mae_loss_op, input, target, reduction, lambda d: d.relu() + (-d).relu()
    )
