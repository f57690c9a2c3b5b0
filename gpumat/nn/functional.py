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

import math
import numbers
import warnings

import numpy as np

from gpumat._checks import as_pair, as_probability, as_real
from gpumat.autograd import current_trace, is_grad_enabled, no_grad
from gpumat.creation import arange, ones, tensor, zeros
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
from gpumat.graph.attention import MAX_HEAD_DIM, attention_op, attention_strided_op
from gpumat.graph.conv import add_channel_bias_op, conv2d_op
from gpumat.graph.elementwise import mul_byconst_op
from gpumat.graph.index import embedding_op
from gpumat.graph.layout import one_hot_op, reshape_op
from gpumat.graph.loss import mae_loss_op, mse_loss_op, nll_loss_op, softmaxcrossentropy_op
from gpumat.graph.matmul import matmul_bias_op, matmul_op
from gpumat.graph.node import shape_str
from gpumat.graph.norm import batch_norm_op, batch_norm_stats_op, layer_norm_op
from gpumat.graph.pool import adaptive_avg_pool2d_op, avg_pool2d_op, max_pool2d_op
from gpumat.graph.strided import constant_pad_op, contiguous_strides
from gpumat.random import draw_seed
from gpumat.reference import attention_strided_regions, attention_strided_written_once
from gpumat.tensor import Tensor, apply_op, stack
from gpumat.tensor import where as _where
from gpumat.tensor._advanced_indexing import check_bounds
from gpumat.tensor._views import _make_view, layout

__all__ = [
    "adaptive_avg_pool2d",
    "avg_pool2d",
    "batch_norm",
    "conv2d",
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "cross_entropy",
    "huber_loss",
    "kl_div",
    "dropout",
    "dropout1d",
    "dropout2d",
    "elu",
    "embedding",
    "gelu",
    "hardtanh",
    "l1_loss",
    "leaky_relu",
    "layer_norm",
    "linear",
    "log_softmax",
    "max_pool2d",
    "mse_loss",
    "nll_loss",
    "one_hot",
    "pad",
    "relu",
    "relu6",
    "rms_norm",
    "sigmoid",
    "silu",
    "smooth_l1_loss",
    "scaled_dot_product_attention",
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


def _batch_shape(op: str, *shapes) -> tuple:
    """The broadcast of the batch dims (all but the last two) of ``shapes``."""
    try:
        return tuple(np.broadcast_shapes(*[tuple(s[:-2]) for s in shapes]))
    except ValueError:
        given = ", ".join(shape_str(s) for s in shapes)
        raise ValueError(f"{op}: batch dims do not broadcast: {given}") from None


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
) -> Tensor:
    """softmax(query key^T * scale + mask) value, PyTorch's ``F.scaled_dot_product_attention``.

    Shapes: query (..., L, E), key (..., S, E), value (..., S, Ev), float32, the batch dims
    (``...``, any number, also none) broadcast; the result is (..., L, Ev). ``attn_mask``
    broadcastable to (..., L, S): bool (True: the key takes part) or float32 (added to the
    scores). ``is_causal``: key j > query i masked (``ones(L, S).tril()``, top-left aligned, as
    PyTorch). ``scale``: default 1 / sqrt(E). ``dropout_p`` > 0 drops attention weights (inverted
    dropout) on every call, as PyTorch's function does (modules pass 0 in eval mode).

    Paths: with no ``attn_mask``, ``dropout_p`` = 0 and E, Ev <= 128 (causal or not) one fused
    kernel each way, :func:`gpumat.ops.attention` (FlashAttention-2's tiling, Dao 2023: the (L, S)
    weights never stored; the backward recomputes them from the saved logsumexp). Otherwise the
    composition matmul, masked_fill / add, softmax, dropout, matmul (the (L, S) weights
    stored). A row whose keys are all masked gives NaN on the composed path, as PyTorch's.

    Raises:
        TypeError: tensors not float32, attn_mask neither bool nor float32, a non-bool
            is_causal, a non-number scale or dropout_p.
        ValueError: both attn_mask and is_causal; E of query and key differ, S of key and value
            differ; batch dims or the mask do not broadcast; fewer than 2 dims.
    """
    op = "scaled_dot_product_attention"
    q = _float(query, op, "query")
    k = _float(key, op, "key")
    v = _float(value, op, "value")
    if not isinstance(is_causal, bool):
        raise TypeError(f"{op}: is_causal must be a bool, got {is_causal!r}")
    p = as_probability(dropout_p, op)
    for name, t in (("query", q), ("key", k), ("value", v)):
        if t.ndim < 2:
            raise ValueError(f"{op}: {name} must have at least 2 dims, got {shape_str(t.shape)}")
    given = f"query {shape_str(q.shape)}, key {shape_str(k.shape)}, value {shape_str(v.shape)}"
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"{op}: expected query (..., L, E), key (..., S, E), value (..., S, Ev), got {given}"
        )
    if attn_mask is not None:
        if is_causal:
            raise ValueError(f"{op}: give either attn_mask or is_causal, not both")
        _tensor(attn_mask, op, "attn_mask")
        if attn_mask.dtype not in (bool_, float32):
            raise TypeError(f"{op}: attn_mask must be bool or float32, got {attn_mask.dtype}")
    e, (lq, ls, ev) = q.shape[-1], (q.shape[-2], k.shape[-2], v.shape[-1])
    if scale is None:
        scale = 1.0 / math.sqrt(e) if e > 0 else math.inf
    elif isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"{op}: scale must be a number or None, got {scale!r}")
    scale = float(scale)
    batch = _batch_shape(op, q.shape, k.shape, v.shape)
    if attn_mask is None and p == 0.0 and max(e, ev) <= MAX_HEAD_DIM and math.isfinite(scale):
        n = math.prod(batch)
        heads = _heads_in_place(q, k, v, batch, (lq, ls, e, ev), op)
        if heads is not None:  # q, k, v read where they lie in one tensor: no copies
            base, args = heads
            packed = apply_op(
                op, lambda x: attention_strided_op(x, *args, scale, is_causal), [base]
            )
        else:
            q3, k3, v3 = (
                _stacked(t, batch, rows, d, n, op)
                for t, rows, d in ((q, lq, e), (k, ls, e), (v, ls, ev))
            )
            packed = apply_op(
                op, lambda a, b, c: attention_op(a, b, c, scale, is_causal), [q3, k3, v3]
            )
        # O is a view of packed, the first ev of each (ev + 1)-wide row (as PyTorch's CPU flash
        # attention returns a strided view): copied once, when first read, so the usual
        # out.transpose(1, 2).contiguous() is the only copy, and its gradient one scatter. While
        # O is recorded for backward an in-place change of it is refused, as of any such tensor.
        strides = contiguous_strides((*batch, lq, ev + 1))  # packed's, seen with its batch dims
        return _make_view(packed, (*batch, lq, ev), strides, 0, op)
    scores = q.matmul(k.transpose(-2, -1)) * scale
    if is_causal:
        keep = tensor(np.tri(lq, ls, dtype=bool), device=q.device)
        scores = scores.masked_fill(keep.logical_not(), -math.inf)
    elif attn_mask is not None and attn_mask.dtype is bool_:
        mask_shape = _batch_shape(op, scores.shape, attn_mask.shape) + (lq, ls)
        scores = scores.expand(*mask_shape) if mask_shape != scores.shape else scores
        scores = scores.masked_fill(attn_mask.logical_not(), -math.inf)
    elif attn_mask is not None:
        scores = scores + attn_mask
    weights = scores.softmax(-1)
    if p > 0.0:
        weights = dropout(weights, p)
    return weights.matmul(v)


def _heads_in_place(q: Tensor, k: Tensor, v: Tensor, batch: tuple, lengths: tuple, op: str):
    """``(base, (batch, heads, lengths, offsets, strides))`` for ``attention_strided_op`` when q,
    k and v (batch dims ``batch``, at most two: (B, H)) are views of one float32 tensor with the
    same batch and row strides and contiguous rows, as the heads of a fused projection
    (``qkv.split(C, 2)``, then ``view(B, T, H, D).transpose(1, 2)``) are; else None (the copying
    path). Where the base will take a gradient, the three regions must also be ones
    ``attention_strided_gradient`` writes once each (side by side in the base's rows). Views whose
    rows overlap (an expand's stride 0) take the copying path too."""
    if len(batch) > 2:
        return None
    lays = [layout(t) for t in (q, k, v)]
    base = lays[0][0]
    lead = lays[0][1][:-1]
    for t, (b, stride, _) in zip((q, k, v), lays, strict=True):
        if (
            b is not base
            or t.shape[:-2] != batch
            or stride[-1] != 1
            or stride[:-1] != lead
            or t._requires_grad != base._requires_grad
        ):
            return None
    if base._dtype is not float32 or min(lead, default=0) < 0:
        return None
    if len(batch) == 2:  # (B, H)
        (nb, nh), (bs, hs, row) = batch, lead
    elif len(batch) == 1:  # (B,): one head
        (nb, nh), (bs, hs, row) = (batch[0], 1), (lead[0], 0, lead[1])
    else:
        (nb, nh), (bs, hs, row) = (1, 1), (0, 0, lead[0])
    args = (nb, nh, lengths, tuple(o for _, _, o in lays), (bs, hs, row))
    try:  # rows that overlap (an as_strided view's), which the kernels do not take
        attention_strided_regions(op, base.numel(), *args)
    except ValueError:
        return None
    if base._requires_grad and is_grad_enabled() and not attention_strided_written_once(*args):
        return None
    return base, args


def _stacked(t: Tensor, batch: tuple, rows: int, d: int, n: int, op: str) -> Tensor:
    """``t`` (..., rows, d), broadcast to ``batch``, as the fused attention's (n, rows, d) input.

    A view (the heads of ``q.view(b, t, h, d).transpose(1, 2)``, an expand) holds a row-major copy
    of its region, so its storage is reshaped as it is: ``t.reshape`` would copy it once more,
    since a reshape of permuted strides must not alias the view; this one is internal."""
    if tuple(t.shape) != (*batch, rows, d):
        t = t.expand(*batch, rows, d)
    if t._view is None:
        return t.reshape(n, rows, d)
    return apply_op(op, lambda x: reshape_op(x, (n, rows, d)), [t], t.dtype)


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


def _feature_dropout(op: str, spatial: int, input, p, training) -> Tensor:  # noqa: A002
    """Channel dropout of (N, C, *spatial) or (C, *spatial) input: one draw per (sample,
    channel), the whole feature map zeroed or scaled by 1 / (1 - p) (Tompson et al., CVPR 2015,
    "Efficient Object Localization Using Convolutional Networks"). The mask is the dropout kernel
    run over ones of shape (N, C, 1, ...) (so it is seeded as :func:`dropout` is, also in a
    compiled step) and multiplied in by broadcasting."""
    _float(input, op)
    p = as_probability(p, op)
    if not isinstance(training, bool):
        raise TypeError(f"{op}: training must be a bool, got {training!r}")
    if input.ndim not in (spatial + 1, spatial + 2):
        raise ValueError(
            f"{op}: expected a {spatial + 1}-D (unbatched) or {spatial + 2}-D input, got "
            f"{shape_str(input.shape)}"
        )
    if not training or p == 0.0:
        return input
    lead = input.ndim - spatial
    unit = input.new_ones(input.shape[:lead] + (1,) * spatial)
    seed = draw_seed()
    mask = apply_op(op, lambda x: dropout_op(x, p, seed), [unit], float32, None, False)
    return input * mask


def dropout1d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False):  # noqa: A002
    """Channel dropout of (N, C, L) or (C, L) input (see :func:`dropout2d`); ``inplace`` is
    accepted and ignored.

    Raises:
        TypeError / ValueError: p not in [0, 1]; input not 2-D or 3-D float32.
    """
    return _feature_dropout("dropout1d", 1, input, p, training)


def dropout2d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False):  # noqa: A002
    """Channel dropout of (N, C, H, W) or (C, H, W) input: each channel of each sample zeroed
    with probability ``p``, the others scaled by 1 / (1 - p), when ``training``; ``inplace`` is
    accepted and ignored. PyTorch's deprecated forms too, with its warnings: a 3-D input is
    taken as (N, C, L) (channel dropout of each sample's rows) and a 2-D one gets elementwise
    :func:`dropout`.

    Raises:
        TypeError / ValueError: p not in [0, 1]; input not 2-D to 4-D float32.
    """
    _float(input, "dropout2d")
    if input.ndim == 2:
        warnings.warn(
            "dropout2d: Received a 2-D input to dropout2d, which is deprecated (PyTorch): use "
            "dropout instead; applying elementwise dropout",
            UserWarning,
            stacklevel=2,
        )
        return dropout(input, p, training)
    if input.ndim == 3:
        warnings.warn(
            "dropout2d: Received a 3D input to dropout2d and assuming that channel-wise 1D "
            "dropout behavior is desired - input is interpreted as shape (N, C, L), as PyTorch",
            UserWarning,
            stacklevel=2,
        )
        return _feature_dropout("dropout2d", 1, input, p, training)
    return _feature_dropout("dropout2d", 2, input, p, training)


# --------------------------------------------------------------------------------------------------
# Normalisation
# --------------------------------------------------------------------------------------------------

#: RMSNorm's default eps (``eps=None``): torch.finfo(torch.float32).eps, as PyTorch's.
_FLOAT32_EPS = 2.0**-23


def _normalized_shape(normalized_shape, op: str) -> tuple:
    """``normalized_shape`` (an int or a sequence of ints >= 1) as a tuple; TypeError or
    ValueError naming ``op``."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape
    try:
        shape = tuple(shape)
    except TypeError:
        raise TypeError(
            f"{op}: normalized_shape must be an int or a sequence of ints, got {normalized_shape!r}"
        ) from None
    if not shape or any(isinstance(d, bool) or not isinstance(d, int) for d in shape):
        raise TypeError(
            f"{op}: normalized_shape must be an int or a non-empty sequence of ints, "
            f"got {normalized_shape!r}"
        )
    if any(d < 1 for d in shape):
        raise ValueError(f"{op}: normalized_shape must hold sizes >= 1, got {shape_str(shape)}")
    return shape


def _affine(t, shape: tuple, x: Tensor, op: str, what: str, fill: float) -> Tensor:
    """``t`` checked to be a float32 tensor of ``shape`` on x's device, or (None) a constant."""
    if t is None:
        return (ones if fill == 1.0 else zeros)(shape, device=x.device)
    _float(t, op, what)
    if tuple(t.shape) != tuple(shape):
        raise ValueError(
            f"{op}: {what} has shape {shape_str(t.shape)}, expected {shape_str(shape)} "
            f"(input {shape_str(x.shape)})"
        )
    return t


def _norm_rows(op: str, input: Tensor, normalized_shape, weight, bias, eps, rms: bool):  # noqa: A002
    x = _float(input, op)
    shape = _normalized_shape(normalized_shape, op)
    if tuple(x.shape[len(x.shape) - len(shape) :]) != shape or len(shape) > len(x.shape):
        raise ValueError(
            f"{op}: given normalized_shape={shape_str(shape)}, expected input with shape "
            f"(*, {', '.join(map(str, shape))}), but got input of size {shape_str(x.shape)}"
        )
    eps = as_real(eps, "eps", op)
    w = _affine(weight, shape, x, op, "weight", 1.0)
    b = _affine(bias, shape, x, op, "bias", 0.0)
    return apply_op(op, lambda a, ww, bb: layer_norm_op(a, ww, bb, eps, rms), [x, w, b])


def layer_norm(
    input: Tensor,  # noqa: A002
    normalized_shape,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """Layer normalisation (Ba, Kiros & Hinton 2016) over the trailing dims ``normalized_shape``:
    (x - mean) / sqrt(var + eps) * weight + bias, mean and biased var of each of the
    numel / prod(normalized_shape) rows; PyTorch's ``F.layer_norm``.

    input float32 ``(*, *normalized_shape)`` (any layout: views are read as their values); weight
    and bias None or of shape normalized_shape. Output input's shape. One fused kernel
    (:func:`gpumat.ops.layer_norm`); statistics two-pass (the mean, then the mean of the squared
    deviations), sums in a fixed order. Gradients for input (through the mean and variance),
    weight and bias.

    Raises:
        TypeError: input not a float32 Tensor, normalized_shape not an int or ints, eps not a
            number. ValueError: input not ending with normalized_shape, weight or bias of another
            shape, a size < 1 in normalized_shape, devices that differ.
    """
    return _norm_rows("layer_norm", input, normalized_shape, weight, bias, eps, False)


def rms_norm(
    input: Tensor,  # noqa: A002
    normalized_shape,
    weight: Tensor | None = None,
    eps: float | None = None,
) -> Tensor:
    """RMS normalisation (Zhang & Sennrich 2019) over the trailing dims ``normalized_shape``:
    x / sqrt(mean(x**2) + eps) * weight; PyTorch's ``F.rms_norm`` (2.4+): ``eps=None`` is
    torch.finfo(float32).eps = 2**-23. Shapes and errors as :func:`layer_norm` (no bias); the
    same kernels with the centring left out."""
    eps = _FLOAT32_EPS if eps is None else eps
    return _norm_rows("rms_norm", input, normalized_shape, weight, None, eps, True)


def _refuse_running_update_in_trace(op: str) -> None:
    """RuntimeError naming ``op`` when a :func:`gpumat.compile` trace is active: batch norm's
    running statistics change in place, which a replayed step would not repeat."""
    if current_trace() is not None:
        raise RuntimeError(
            f"{op}: training mode updates running_mean / running_var in place, which "
            "gpumat.compile does not trace; compile the step with the module in eval mode or "
            "with track_running_stats=False, or run it eagerly"
        )


def batch_norm(
    input: Tensor,  # noqa: A002
    running_mean: Tensor | None,
    running_var: Tensor | None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """Batch normalisation (Ioffe & Szegedy 2015) of input (N, C, ...) per channel; PyTorch's
    ``F.batch_norm``.

    ``training``: each channel is normalised by its batch mean and biased variance over every
    axis but 1 (two-pass, :func:`gpumat.ops.batch_norm_stats`), and running_mean / running_var
    (C,), when given, are updated in place: (1 - momentum) * running + momentum * batch, the
    variance unbiased (times n / (n - 1), n values per channel), as PyTorch; an empty batch leaves
    them as they are. The input gradient is the full one, through the batch mean and variance.
    Eval (``training=False``): the running statistics are used and must be given. Output
    (x - mean) / sqrt(var + eps) * weight + bias, input's shape; weight and bias (C,) or None.
    The running update is an in-place change, which :func:`gpumat.compile` does not trace: trace
    batch norm in eval mode or without running statistics.

    Raises:
        TypeError: input not a float32 Tensor, training not a bool, momentum or eps not numbers.
        ValueError: input of rank < 2, running statistics, weight or bias not (C,), eval without
            running statistics, or training with one value per channel ("Expected more than 1
            value per channel when training", as PyTorch).
    """
    op = "batch_norm"
    x = _float(input, op)
    if len(x.shape) < 2:
        raise ValueError(f"{op}: input must be (N, C, ...) of rank >= 2, got {shape_str(x.shape)}")
    if not isinstance(training, bool):
        raise TypeError(f"{op}: training must be a bool, got {training!r}")
    momentum = as_real(momentum, "momentum", op)
    eps = as_real(eps, "eps", op)
    c = x.shape[1]
    running = [
        None if t is None else _affine(t, (c,), x, op, what, 0.0)
        for t, what in ((running_mean, "running_mean"), (running_var, "running_var"))
    ]
    if (running[0] is None) != (running[1] is None):
        raise ValueError(f"{op}: running_mean and running_var must both be given or both None")
    w = _affine(weight, (c,), x, op, "weight", 1.0)
    b = _affine(bias, (c,), x, op, "bias", 0.0)
    count = x.numel() // c if c else 0
    if training and running[0] is not None:
        _refuse_running_update_in_trace(op)
    if training:
        if count == 1:
            raise ValueError(
                "Expected more than 1 value per channel when training, got input size "
                f"{shape_str(x.shape)}"
            )
        stats = apply_op(op, batch_norm_stats_op, [x], differentiable=False)
        if running[0] is not None and count > 0:
            with no_grad():
                mean, var = stats[:, 0], stats[:, 1]
                running[0].mul_(1.0 - momentum).add_(mean * momentum)
                running[1].mul_(1.0 - momentum).add_(var * (momentum * count / (count - 1)))
    elif running[0] is None:
        raise ValueError(f"{op}: running_mean and running_var must be given when not training")
    else:
        stats = stack(running, dim=1)
    return apply_op(
        op, lambda a, s, ww, bb: batch_norm_op(a, s, ww, bb, eps, training), [x, stats, w, b]
    )


# --------------------------------------------------------------------------------------------------
# Layers
# --------------------------------------------------------------------------------------------------


def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:  # noqa: A002
    """``input @ weight.T + bias``: input (*, in), weight (out, in), bias (out,) -> (*, out).

    One kernel: ``matmul_bias_op`` with the transposed-B flag (no transpose is made; on the host
    the bias rows are sgemm's C, as BLAS's addmm), or ``matmul_op`` without a bias. In a compiled
    step the executor's fusion pass folds a following ReLU into it.

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
    if bias is not None:
        _float(bias, "linear", "bias")
        if bias.shape != (weight.shape[0],):
            raise ValueError(
                f"linear: bias must have shape ({weight.shape[0]},), got {shape_str(bias.shape)}"
            )
    lead = input.shape[:-1]
    x = input if input.ndim == 2 else input.reshape(-1, weight.shape[1])
    if bias is None:
        out = apply_op("linear", lambda a, w: matmul_op(a, w, False, True), [x, weight])
    else:
        out = apply_op(
            "linear",
            lambda a, w, b: matmul_bias_op(a, w, b, False, True, False),
            [x, weight, bias],
        )
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


def _legacy_reduction(size_average, reduce, reduction: str, op: str) -> str:
    """PyTorch's deprecated ``size_average`` / ``reduce`` flags folded into ``reduction`` (as
    ``torch.nn._reduction.legacy_get_string``)."""
    if size_average is None and reduce is None:
        return _reduction(reduction, op)
    size_average = True if size_average is None else bool(size_average)
    reduce = True if reduce is None else bool(reduce)
    return ("mean" if size_average else "sum") if reduce else "none"


def _class_weight(weight, c: int, input: Tensor, op: str):  # noqa: A002
    """The per-class ``weight`` (float32, shape (C,), on input's device), or None."""
    if weight is None:
        return None
    _float(weight, op, "weight")
    if weight.shape != (c,):
        raise ValueError(
            f"{op}: weight must have shape ({c},) for {c} classes, got {shape_str(weight.shape)}"
        )
    if weight.device != input.device:
        raise ValueError(f"{op}: weight is on {weight.device}, input on {input.device}")
    return weight


def _as_rows(input: Tensor, target: Tensor, op: str):  # noqa: A002
    """(input as (M, C) rows with the class dim last, target (M,) or (M, C), the shape of a
    "none" result, the class count): input (C,), (N, C) or (N, C, d1, ...) with class indices
    () / (N,) / (N, d1, ...) or probabilities of input's shape (PyTorch's shapes)."""
    _tensor(target, op, "target")
    if input.ndim == 0:
        raise ValueError(
            f"{op}: input must have a class dim (C,), (N, C) or (N, C, d1, ...), got ()"
        )
    c = input.shape[0] if input.ndim == 1 else input.shape[1]
    if target.dtype is bool_:
        raise TypeError(
            f"{op}: target must be int64 class indices or float32 probabilities, got bool"
        )
    if target.dtype is int64:
        want = () if input.ndim == 1 else input.shape[:1] + input.shape[2:]
        if target.shape != want:
            raise ValueError(
                f"{op}: class indices of shape {shape_str(want)} expected for input "
                f"{shape_str(input.shape)}, got {shape_str(target.shape)}"
            )
        out_shape = target.shape
        target = target.reshape(-1)
    else:
        _float(target, op, "target")
        if target.shape != input.shape:
            raise ValueError(
                f"{op}: probability targets must have input's shape {shape_str(input.shape)}, "
                f"got {shape_str(target.shape)}"
            )
        out_shape = () if input.ndim == 1 else input.shape[:1] + input.shape[2:]
        target = target.reshape(1, c) if input.ndim == 1 else target.movedim(1, -1).reshape(-1, c)
    rows = input.reshape(1, c) if input.ndim == 1 else input.movedim(1, -1).reshape(-1, c)
    return rows, target, out_shape, c


def _valid_classes(target: Tensor, c: int, ignore_index: int, op: str) -> Tensor:
    """One-hot float (M, C) rows of class indices ``target`` (M,), all zero where the target is
    ``ignore_index``; checks the others lie in [0, C).

    Eagerly, targets whose range is not within [0, C) are read from the device to check them
    exactly (IndexError); inside gpumat.compile the argument's range is guarded to [min(0,
    ignore_index), max(C - 1, ignore_index)] and the caller makes a stray value's loss NaN.
    """
    lo, hi = target._range if target._range is not None else (None, None)
    if lo is None or lo < 0 or hi >= c:
        if target._trace is None and current_trace() is None:
            values = target.numpy()
            stray = values[((values < 0) | (values >= c)) & (values != ignore_index)]
            if stray.size:
                raise IndexError(
                    f"{op}: Target {int(stray[0])} is out of bounds (classes 0..{c - 1}, "
                    f"ignore_index {ignore_index})."
                )
        else:
            low, high = min(0, ignore_index), max(c - 1, ignore_index)
            if target._range_src is not None:
                target._trace.guard_range(target._range_src, low, high, op, IndexError)
            elif lo is not None and (lo < low or hi > high):
                raise IndexError(f"{op}: Target {lo if lo < low else hi} is out of bounds.")
    rows = (target.unsqueeze(1) == arange(c, device=target.device)).float()
    if 0 <= ignore_index < c:  # an ignored class of its own: its one-hot rows cleared
        rows = rows * (target != ignore_index).float().unsqueeze(1)
    return rows


def _weighted_class_loss(
    logp: Tensor,
    target: Tensor,
    weight,
    ignore_index: int,
    reduction: str,
    label_smoothing: float,
    op: str,
) -> Tensor:
    """PyTorch's nll_loss / cross_entropy beyond the fused kernel's case, composed of graph ops
    (each with its kernels and gradient): log-probabilities ``logp`` (M, C), class indices
    ``target`` (M,) or probabilities (M, C), per-class ``weight``, ``ignore_index``, label
    smoothing; returns per-row losses (M,) for "none", else the 0-d sum or weighted mean.

    The formulas are ATen's (aten/src/ATen/native/LossNLL.cpp): loss_i = -w[t_i] logp[i, t_i]
    (0 for an ignored target), mean = sum_i loss_i / sum_i w[t_i]; smoothing ε mixes
    (1 - ε) loss + ε / C smooth, smooth_i = -sum_c w[c] logp[i, c] (0 where ignored, normalised
    as the loss); probability targets: loss_i = -sum_c w[c] p[i, c] logp[i, c] (smoothed
    p (1 - ε) + ε / C), mean over the M rows.
    """
    m, c = logp.shape
    if target.dtype is float32:
        p = target if not label_smoothing else target * (1 - label_smoothing) + label_smoothing / c
        if weight is not None:
            p = p * weight
        per_row = -(logp * p).sum(1)
        if reduction == "none":
            return per_row
        return per_row.sum() if reduction == "sum" else per_row.sum() / m
    rows = _valid_classes(target, c, ignore_index, op)
    picked = rows if weight is None else rows * weight
    per_row = -(logp * picked).sum(1)
    if label_smoothing:
        smooth = -(logp.sum(1) if weight is None else (logp * weight).sum(1)) * rows.sum(1)
    if reduction == "none":
        loss = per_row
        if label_smoothing:
            loss = loss * (1 - label_smoothing) + smooth * (label_smoothing / c)
        return _nan_for_stray(loss, rows, target, ignore_index)
    total = per_row.sum()
    if label_smoothing:
        total = total * (1 - label_smoothing) + smooth.sum() * (label_smoothing / c)
    if reduction == "mean":  # all targets ignored: 0 / 0 = NaN, as PyTorch
        total = total / picked.sum()
    return _nan_for_stray(total, rows, target, ignore_index)


def _nan_for_stray(loss: Tensor, rows: Tensor, target: Tensor, ignore_index: int) -> Tensor:
    """Inside gpumat.compile (no device read to check targets): NaN where a target is neither a
    class nor ignore_index, so a bad target is never a silently wrong loss. Eagerly as it is."""
    if target._trace is None and current_trace() is None:
        return loss
    matched = rows.sum(1) + (target == ignore_index).float()
    bad = (matched < 0.5) if loss.ndim else (matched < 0.5).any()
    return loss.masked_fill(bad, float("nan"))


def _class_loss(
    op: str,
    input: Tensor,  # noqa: A002
    target: Tensor,
    weight,
    size_average,
    ignore_index,
    reduce,
    reduction: str,
    label_smoothing: float,
) -> Tensor:
    """nll_loss (``op`` "nll_loss": input are log-probabilities) and cross_entropy (logits)."""
    _float(input, op)
    _tensor(target, op, "target")
    reduction = _legacy_reduction(size_average, reduce, reduction, op)
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, numbers.Integral):
        raise TypeError(f"{op}: ignore_index must be an int, got {ignore_index!r}")
    ignore_index = int(ignore_index)
    if isinstance(label_smoothing, bool) or not isinstance(label_smoothing, numbers.Real):
        raise TypeError(f"{op}: label_smoothing must be a float, got {label_smoothing!r}")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(
            f"{op}: label_smoothing must be between 0.0 and 1.0, got {label_smoothing}"
        )
    label_smoothing = float(label_smoothing)
    if input.ndim == 2 and input.shape[0] and target.dtype is not bool_:
        c = input.shape[1]
        bounds = target._range if target.dtype is int64 else None
        plain = weight is None and not label_smoothing
        if plain and (bounds is None or not bounds[0] <= ignore_index <= bounds[1]):
            return _fused_class_loss(op, input, target, reduction)
    rows, target, out_shape, c = _as_rows(input, target, op)
    weight = _class_weight(weight, c, input, op)
    logp = rows.log_softmax(1) if op == "cross_entropy" else rows
    loss = _weighted_class_loss(logp, target, weight, ignore_index, reduction, label_smoothing, op)
    return loss.reshape(out_shape) if reduction == "none" else loss


def _fused_class_loss(op: str, input: Tensor, target: Tensor, reduction: str) -> Tensor:  # noqa: A002
    """(N, C) input, no weight, smoothing or ignored target: the fused loss kernels."""
    rows = _class_rows(input, target, op)
    n = input.shape[0]
    if op == "nll_loss":
        if reduction == "none":
            return -(input * rows).sum(1)
        if rows.requires_grad:  # nll_loss_op has no gradient for its target: the composite has
            per_row = -(input * rows).sum(1)
            return per_row.mean() if reduction == "mean" else per_row.sum()
        return _reduce(apply_op("nll_loss", nll_loss_op, [input, rows]), n, reduction)
    if reduction == "none" or rows.requires_grad:
        # softmaxcrossentropy_op has no gradient for its labels: the composite form has.
        per_row = -(input.log_softmax(1) * rows).sum(1)
        if reduction == "none":
            return per_row
        return per_row.mean() if reduction == "mean" else per_row.sum()
    mean = apply_op("cross_entropy", softmaxcrossentropy_op, [input, rows])
    return _reduce(mean, n, reduction)


def nll_loss(
    input: Tensor,  # noqa: A002
    target: Tensor,
    weight: Tensor | None = None,
    size_average=None,
    ignore_index: int = -100,
    reduce=None,
    reduction: str = "mean",
) -> Tensor:
    """The negative log-likelihood loss of log-probabilities ``input`` (e.g. ``log_softmax``),
    PyTorch's ``F.nll_loss``: input (N, C), (C,) or (N, C, d1, ...); ``target`` class indices
    (int64, (N,), () or (N, d1, ...)) or, as gpumat also takes, float rows of input's shape.
    loss_i = -weight[t_i] input[i, t_i], 0 where t_i == ``ignore_index``; "mean" (default) is
    sum_i loss_i / sum_i weight[t_i] (NaN when every target is ignored, as PyTorch), "sum" the
    sum, "none" the per-sample losses (target's shape). ``size_average`` / ``reduce`` are
    PyTorch's deprecated flags. (N, C) input with no weight and no ignored target runs the fused
    kernel; the rest is composed of graph ops (formulas of ATen's LossNLL.cpp).

    Raises:
        TypeError: wrong dtypes or argument types. ValueError: shapes that do not fit (naming
            them), a bad reduction. IndexError: a class index outside [0, C) that is not
            ignore_index.
    """
    return _class_loss(
        "nll_loss", input, target, weight, size_average, ignore_index, reduce, reduction, 0.0
    )


def cross_entropy(
    input: Tensor,  # noqa: A002
    target: Tensor,
    weight: Tensor | None = None,
    size_average=None,
    ignore_index: int = -100,
    reduce=None,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """Softmax cross-entropy of logits ``input``, PyTorch's ``F.cross_entropy``:
    ``nll_loss(log_softmax(input, 1), target, ...)`` for class indices, or -sum_c weight[c]
    p[i, c] log_softmax(input)[i, c] for probabilities ``target`` of input's shape (mean over
    the samples). Shapes, ``weight``, ``ignore_index``, reductions as :func:`nll_loss`;
    ``label_smoothing`` ε in [0, 1] mixes the loss with the uniform distribution's:
    (1 - ε) loss + ε / C * smooth (Szegedy et al. 2016, "Rethinking the Inception
    Architecture"; normalised as ATen's LossNLL.cpp). The plain (N, C) case is one fused op
    (``softmaxcrossentropy_op``; with its gradient, one kernel in a compiled step).

    Raises:
        TypeError / ValueError / IndexError: as for :func:`nll_loss`; ValueError:
            label_smoothing outside [0, 1].
    """
    return _class_loss(
        "cross_entropy",
        input,
        target,
        weight,
        size_average,
        ignore_index,
        reduce,
        reduction,
        label_smoothing,
    )


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


def _pointwise_loss(op: str, input: Tensor, target: Tensor, reduction: str) -> str:  # noqa: A002
    """The checks of an elementwise loss: float32 input and target of one shape; the reduction."""
    _float(input, op)
    _float(target, op, "target")
    if input.shape != target.shape:
        raise ValueError(
            f"{op}: input {shape_str(input.shape)} and target {shape_str(target.shape)} differ "
            "in shape"
        )
    return _reduction(reduction, op)


def _reduced(loss: Tensor, reduction: str) -> Tensor:
    """Elementwise losses reduced: the mean (NaN for no element, as PyTorch), the sum, or as
    they are."""
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / loss.numel() if loss.numel() else loss.sum() * float("nan")


def _elementwise_weight(weight, loss: Tensor, op: str, what: str = "weight") -> Tensor:
    """``loss * weight`` with ``weight`` (a float32 tensor broadcastable to loss's shape)."""
    if weight is None:
        return loss
    _float(weight, op, what)
    return loss * weight


def binary_cross_entropy(
    input: Tensor,  # noqa: A002
    target: Tensor,
    weight: Tensor | None = None,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
) -> Tensor:
    """Binary cross-entropy of probabilities ``input`` (in [0, 1]) against ``target`` of the same
    shape (any shape): -w (t log x + (1 - t) log(1 - x)), each log clamped to >= -100 as PyTorch
    does (so x = 0 or 1 gives a finite loss); ``weight`` broadcasts to input's shape. Reductions
    as :func:`mse_loss`.

    Raises:
        TypeError: not float32. ValueError: shapes differ; an input outside [0, 1] (checked
            eagerly from the values, as PyTorch's CPU kernel; inside gpumat.compile such an
            input gives NaN, the log of a negative number).
    """
    reduction = _legacy_reduction(size_average, reduce, reduction, "binary_cross_entropy")
    reduction = _pointwise_loss("binary_cross_entropy", input, target, reduction)
    if input._trace is None and current_trace() is None and input.numel():
        lo, hi = float(input.detach().min().item()), float(input.detach().max().item())
        if not (0.0 <= lo and hi <= 1.0):  # also NaN
            raise ValueError(
                "binary_cross_entropy: all elements of input should be between 0 and 1, got "
                f"values in [{lo}, {hi}]"
            )
    log_x = input.log().clamp(min=-100.0)
    log_1mx = (1 - input).log().clamp(min=-100.0)
    loss = -(target * log_x + (1 - target) * log_1mx)
    return _reduced(_elementwise_weight(weight, loss, "binary_cross_entropy"), reduction)


def binary_cross_entropy_with_logits(
    input: Tensor,  # noqa: A002
    target: Tensor,
    weight: Tensor | None = None,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
    pos_weight: Tensor | None = None,
) -> Tensor:
    """Binary cross-entropy of logits ``input`` (``sigmoid`` inside, stably): with
    l = log(1 + exp(-|x|)) + max(-x, 0), loss = (1 - t) x + (1 + (pw - 1) t) l, the
    log-sum-exp form of -w (pw t log σ(x) + (1 - t) log(1 - σ(x))) that never overflows (as
    ATen's binary_cross_entropy_with_logits). ``pos_weight`` (broadcast along the last dim, one
    per class) weighs the positive term; ``weight`` broadcasts to input's shape.

    Raises:
        TypeError: not float32. ValueError: shapes differ or do not broadcast.
    """
    op = "binary_cross_entropy_with_logits"
    reduction = _legacy_reduction(size_average, reduce, reduction, op)
    reduction = _pointwise_loss(op, input, target, reduction)
    softplus_neg = (-input.abs()).exp().log1p() + (-input).relu()  # log(1 + exp(-x))
    if pos_weight is None:
        loss = (1 - target) * input + softplus_neg
    else:
        _float(pos_weight, op, "pos_weight")
        loss = (1 - target) * input + (1 + (pos_weight - 1) * target) * softplus_neg
    return _reduced(_elementwise_weight(weight, loss, op), reduction)


def _beta_loss(op: str, input, target, reduction, beta, what: str):  # noqa: A002
    reduction = _pointwise_loss(op, input, target, reduction)
    if isinstance(beta, bool) or not isinstance(beta, numbers.Real):
        raise TypeError(f"{op}: {what} must be a float, got {beta!r}")
    beta = float(beta)
    if not beta >= 0:
        raise ValueError(f"{op}: {what} must be non-negative, got {beta}")
    return reduction, beta, (input - target).abs()


def smooth_l1_loss(
    input: Tensor,  # noqa: A002
    target: Tensor,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
    beta: float = 1.0,
) -> Tensor:
    """Smooth L1 loss (Girshick 2015, Fast R-CNN): with d = |input - target|, 0.5 d**2 / beta
    where d < beta, else d - 0.5 beta; beta = 0 is the L1 loss. Shapes and reductions as
    :func:`mse_loss`.

    Raises:
        TypeError: not float32, beta not a number. ValueError: shapes differ; beta < 0.
    """
    reduction = _legacy_reduction(size_average, reduce, reduction, "smooth_l1_loss")
    reduction, beta, d = _beta_loss("smooth_l1_loss", input, target, reduction, beta, "beta")
    if beta == 0.0:
        return _reduced(d, reduction)
    loss = _where(d < beta, d * d * (0.5 / beta), d - 0.5 * beta)
    return _reduced(loss, reduction)


def huber_loss(
    input: Tensor,  # noqa: A002
    target: Tensor,
    reduction: str = "mean",
    delta: float = 1.0,
) -> Tensor:
    """Huber loss (Huber 1964): with d = |input - target|, 0.5 d**2 where d < delta, else
    delta (d - 0.5 delta) (``smooth_l1_loss`` times delta, for delta > 0).

    Raises:
        TypeError: not float32, delta not a number. ValueError: shapes differ; delta <= 0.
    """
    reduction, delta, d = _beta_loss("huber_loss", input, target, reduction, delta, "delta")
    if delta == 0.0:
        raise ValueError("huber_loss: delta must be positive, got 0.0")
    loss = _where(d < delta, d * d * 0.5, (d - 0.5 * delta) * delta)
    return _reduced(loss, reduction)


def kl_div(
    input: Tensor,  # noqa: A002
    target: Tensor,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
    log_target: bool = False,
) -> Tensor:
    """The Kullback-Leibler divergence loss of log-probabilities ``input`` against probabilities
    ``target`` (log-probabilities with ``log_target``), elementwise t (log t - input), 0 where
    t = 0 (PyTorch's ``xlogy`` convention), or exp(t) (t - input). ``reduction``: "mean" (over
    every element, PyTorch's default), "batchmean" (the sum over the batch size, the
    mathematical KL divergence), "sum" or "none".

    Raises:
        TypeError: not float32. ValueError: shapes differ; a bad reduction.
    """
    if size_average is not None or reduce is not None:
        reduction = _legacy_reduction(size_average, reduce, "mean", "kl_div")
    batchmean = reduction == "batchmean"
    reduction = _pointwise_loss("kl_div", input, target, "sum" if batchmean else reduction)
    if log_target:
        loss = target.exp() * (target - input)
    else:
        positive = target > 0
        safe = _where(positive, target, target.new_ones(()).expand(target.shape))
        # t = 0 contributes 0 (xlogy's convention), t < 0 NaN (the log of a negative number)
        other = (target * 0.0).masked_fill(target < 0, float("nan"))
        loss = _where(positive, target * (safe.log() - input), other)
    if batchmean:
        batch = input.shape[0] if input.ndim else 1
        return loss.sum() / batch
    return _reduced(loss, reduction)
