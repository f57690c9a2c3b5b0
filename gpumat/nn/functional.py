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

from gpumat._checks import as_pair, as_probability, as_real
from gpumat.autograd import current_trace, no_grad
from gpumat.creation import ones, zeros
from gpumat.dtypes import bool_, float32, int64
from gpumat.graph.activation import dropout_op
from gpumat.graph.conv import add_channel_bias_op, conv2d_op
from gpumat.graph.elementwise import mul_byconst_op
from gpumat.graph.layout import one_hot_op
from gpumat.graph.loss import mae_loss_op, mse_loss_op, nll_loss_op, softmaxcrossentropy_op
from gpumat.graph.matmul import matmul_op
from gpumat.graph.node import shape_str
from gpumat.graph.norm import batch_norm_op, batch_norm_stats_op, layer_norm_op
from gpumat.graph.pool import avg_pool2d_op, max_pool2d_op
from gpumat.random import draw_seed
from gpumat.tensor import Tensor, apply_op, stack

__all__ = [
    "avg_pool2d",
    "batch_norm",
    "conv2d",
    "cross_entropy",
    "dropout",
    "l1_loss",
    "layer_norm",
    "linear",
    "log_softmax",
    "max_pool2d",
    "mse_loss",
    "nll_loss",
    "one_hot",
    "relu",
    "rms_norm",
    "sigmoid",
    "softmax",
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


def softmax(input: Tensor, dim: int) -> Tensor:  # noqa: A002
    """exp(x) / sum exp(x) along ``dim`` (max-subtracted)."""
    return _float(input, "softmax").softmax(dim)


def log_softmax(input: Tensor, dim: int) -> Tensor:  # noqa: A002
    """x - log(sum exp(x)) along ``dim`` (log-sum-exp: finite for finite x)."""
    return _float(input, "log_softmax").log_softmax(dim)


def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:  # noqa: A002
    """Inverted dropout (Srivastava et al., JMLR 2014): each element is zeroed with probability
    ``p`` and the rest scaled by 1 / (1 - p) when ``training``; the identity otherwise.

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

    input float32 (*, *normalized_shape) (any layout: views are read as their values); weight
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
