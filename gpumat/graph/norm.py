"""Normalisation layers as graph ops: layer norm, RMS norm and batch norm, with their gradients.

``layer_norm_op(x, weight, bias, eps, rms)`` normalises each row of the trailing dims of x that
have weight's shape (the normalized shape; Ba, Kiros & Hinton 2016, "Layer Normalization"; with
``rms`` Zhang & Sennrich 2019's RMSNorm: no centring, bias zeros), in one fused kernel that
computes the row statistics itself. A graph node has one output, so the gradient recomputes the
statistics, ``layer_norm_stats_op(x, ndim, eps, rms)`` (rows, 2) = [mean, rstd], once for
``layer_norm_gradient_op`` (dx, through the row mean and variance) and
``layer_norm_weight_gradient_op`` (dweight); dbias is ``sum_to_op(dy, bias)``.

Batch norm (Ioffe & Szegedy 2015, "Batch Normalization") over x (N, C, ...), per channel:
``batch_norm_op(x, stats, weight, bias, eps, training)`` with stats (C, 2) = [mean, biased var]
either ``batch_norm_stats_op(x)`` (training: the batch's own statistics) or the running mean and
variance stacked (eval). In training the x gradient ``batch_norm_gradient_op`` is the full one,
through the batch mean and variance, so the stats input gets no gradient of its own (None): its
dependence on x is in the x gradient, which is right only when stats is
``batch_norm_stats_op(x)`` of the same x, as :func:`gpumat.nn.functional.batch_norm` builds it.
dweight is ``batch_norm_weight_gradient_op``, dbias ``reduce_sum_channels_op(dy)``.

Statistics are two-pass (the mean, then the mean of squared deviations; Chan, Golub & LeVeque
1983), so inputs of large mean keep their precision; sums run in a fixed order on every device
(deterministic). Kernels:
:func:`gpumat.ops.layer_norm`, :func:`gpumat.ops.batch_norm` and their statistics and gradients.
"""

from __future__ import annotations

import math

from gpumat._checks import as_flag, as_real
from gpumat.graph.conv import reduce_sum_channels_op
from gpumat.graph.node import Attr, Op, shape_str
from gpumat.graph.strided import sum_to_op

__all__ = [
    "BatchNormGradientOp",
    "BatchNormOp",
    "BatchNormStatsOp",
    "BatchNormWeightGradientOp",
    "LayerNormBackwardOp",
    "LayerNormGradientOp",
    "LayerNormOp",
    "LayerNormStatsOp",
    "LayerNormWeightGradientOp",
    "batch_norm_gradient_op",
    "batch_norm_op",
    "batch_norm_stats_op",
    "batch_norm_weight_gradient_op",
    "layer_norm_backward_op",
    "layer_norm_gradient_op",
    "layer_norm_op",
    "layer_norm_stats_op",
    "layer_norm_weight_gradient_op",
]

_EPS = Attr("eps", as_real, 1e-5, float)
_RMS = Attr("rms", as_flag, False, bool)
_TRAINING = Attr("training", as_flag, True, bool)
_NO_SECOND = "second derivatives of a normalisation"


def _normalized(op: Op, node, x: tuple, w: tuple, what: str = "weight") -> tuple:
    """Checks that x's trailing dims are w's shape (the normalized shape, >= 1 value); returns
    (rows, d)."""
    if len(w) > len(x) or tuple(x[len(x) - len(w) :]) != tuple(w):
        raise op._error(
            node,
            f"input {shape_str(x)} does not end with the normalized shape {shape_str(w)} "
            f"(the {what}'s shape)",
        )
    d = math.prod(w)
    if d < 1:
        raise op._error(node, f"the normalized shape {shape_str(w)} holds no values")
    return math.prod(x[: len(x) - len(w)]), d


# --------------------------------------------------------------------------------------------------
# Layer norm and RMS norm
# --------------------------------------------------------------------------------------------------


class LayerNormOp(Op):
    """``layer_norm_op(x, weight, bias, eps=1e-5, rms=False)``: (x - mean) * rstd * weight + bias
    over the trailing dims of x that have weight's shape (bias the same shape), rstd =
    1 / sqrt(biased var + eps); RMS norm with ``rms`` (mean 0, var = mean(x**2)). Output x's
    shape. Gradients: ``layer_norm_gradient_op`` (x), ``layer_norm_weight_gradient_op`` (weight),
    ``sum_to_op(dy, bias)`` (bias), all from ``layer_norm_stats_op(x)``."""

    name, label, kernel = "layer_norm_op", "LayerNorm", "layer_norm"
    inputs = ("node_x", "node_weight", "node_bias")
    attrs = (_EPS, _RMS)

    def kernel_args(self, node):
        return (node.eps, node.rms)

    def gradient(self, node, output_grad):
        x, w, b = node.inputs
        stats = layer_norm_stats_op(x, w, node.eps, node.rms)
        return [
            layer_norm_gradient_op(x, stats, w, output_grad, node.rms),
            layer_norm_weight_gradient_op(x, stats, output_grad, w),
            sum_to_op(output_grad, b),
        ]

    def infer_shape(self, node, input_shapes):
        x, w, b = (tuple(s) for s in input_shapes)
        _normalized(self, node, x, w)
        if b != w:
            raise self._error(
                node, f"bias {shape_str(b)} and weight {shape_str(w)} differ in shape"
            )
        return x


class LayerNormStatsOp(Op):
    """``layer_norm_stats_op(x, like, eps=1e-5, rms=False)``: (rows, 2) = [mean, rstd] of each
    row of x's trailing dims of like's shape (only like's shape is read)."""

    name, label, kernel = "layer_norm_stats_op", "LayerNormStats", "layer_norm_stats"
    no_gradient = _NO_SECOND
    inputs = ("node_x", "node_like")
    shape_only_inputs = (1,)
    attrs = (_EPS, _RMS)

    def kernel_args(self, node):
        return (node.eps, node.rms)

    def infer_shape(self, node, input_shapes):
        rows, _ = _normalized(self, node, tuple(input_shapes[0]), tuple(input_shapes[1]), "like")
        return (rows, 2)


class LayerNormGradientOp(Op):
    """``layer_norm_gradient_op(x, stats, weight, dy, rms=False)``: dx = rstd * (g - mean(g) -
    xhat * mean(g * xhat)) per row, g = dy * weight, xhat = (x - mean) * rstd (RMS: without
    mean(g)); the gradient of ``layer_norm_op`` through the row statistics. Output x's shape."""

    name, label, kernel = "layer_norm_gradient_op", "LayerNormGrad", "layer_norm_gradient"
    no_gradient = _NO_SECOND
    inputs = ("node_x", "node_stats", "node_weight", "node_dy")
    attrs = (_RMS,)

    def kernel_args(self, node):
        return (node.rms,)

    def infer_shape(self, node, input_shapes):
        x, stats, w, dy = (tuple(s) for s in input_shapes)
        rows, _ = _normalized(self, node, x, w)
        if stats != (rows, 2):
            raise self._error(node, f"stats {shape_str(stats)}: expected ({rows}, 2)")
        return self._same_shapes(node, x, dy)


class LayerNormWeightGradientOp(Op):
    """``layer_norm_weight_gradient_op(x, stats, dy, like)``: the sum over rows of dy * xhat, of
    like's shape (the weight's; only its shape is read)."""

    name, label, kernel = (
        "layer_norm_weight_gradient_op",
        "LayerNormWeightGrad",
        "layer_norm_weight_gradient",
    )
    no_gradient = _NO_SECOND
    inputs = ("node_x", "node_stats", "node_dy", "node_like")
    shape_only_inputs = (3,)

    def infer_shape(self, node, input_shapes):
        x, stats, dy, like = (tuple(s) for s in input_shapes)
        rows, _ = _normalized(self, node, x, like)
        if stats != (rows, 2):
            raise self._error(node, f"stats {shape_str(stats)}: expected ({rows}, 2)")
        self._same_shapes(node, x, dy)
        return like


class LayerNormBackwardOp(Op):
    """``layer_norm_backward_op(x, weight, dy, eps=1e-5, rms=False)``: three outputs, dx (x's
    shape, the node's value), dweight and dbias (weight's shape, the values of its
    :class:`~gpumat.runtime.fusion.FusedOutputOp` nodes 1 and 2; dbias the sum of dy over the
    rows), the row statistics computed inside (:func:`gpumat.ops.layer_norm_backward`). Made by
    the fusion pass from ``layer_norm_gradient_op``, ``layer_norm_weight_gradient_op`` (over one
    ``layer_norm_stats_op``) and the bias's ``sum_to_op``, after gradients."""

    name, label, kernel = "layer_norm_backward_op", "LayerNormBackward", "layer_norm_backward"
    no_gradient = "made by the fusion pass, after gradients"
    num_outputs = 3
    inputs = ("node_x", "node_weight", "node_dy")
    attrs = (_EPS, _RMS)

    def kernel_args(self, node):
        return (node.eps, node.rms)

    def infer_shape(self, node, input_shapes):
        x, w, dy = (tuple(s) for s in input_shapes)
        _normalized(self, node, x, w)
        return self._same_shapes(node, x, dy)


# --------------------------------------------------------------------------------------------------
# Batch norm
# --------------------------------------------------------------------------------------------------


def _channels(op: Op, node, x: tuple) -> int:
    if len(x) < 2:
        raise op._error(node, f"input must be (N, C, ...) of rank >= 2, got {shape_str(x)}")
    return x[1]


def _channel_shapes(op: Op, node, x: tuple, stats: tuple, *per_channel) -> None:
    c = _channels(op, node, x)
    if stats != (c, 2):
        raise op._error(
            node, f"stats {shape_str(stats)}: expected ({c}, 2) for input {shape_str(x)}"
        )
    for what, s in per_channel:
        if tuple(s) != (c,):
            raise op._error(
                node, f"{what} {shape_str(s)}: expected ({c},), one per channel of {shape_str(x)}"
            )


class BatchNormStatsOp(Op):
    """``batch_norm_stats_op(x)``: (C, 2) = [mean, biased var] of each channel of x (N, C, ...)
    over every axis but 1. Its gradient is folded into ``batch_norm_gradient_op``'s."""

    name, label, kernel = "batch_norm_stats_op", "BatchNormStats", "batch_norm_stats"
    no_gradient = "batch statistics: their gradient is part of batch_norm_op's x gradient"
    inputs = ("node_x",)

    def infer_shape(self, node, input_shapes):
        return (_channels(self, node, tuple(input_shapes[0])), 2)


class BatchNormOp(Op):
    """``batch_norm_op(x, stats, weight, bias, eps=1e-5, training=True)``: (x - mean[c]) /
    sqrt(var[c] + eps) * weight[c] + bias[c] for x (N, C, ...), stats (C, 2) = [mean, var],
    weight and bias (C,). ``training``: stats is ``batch_norm_stats_op(x)``, and the x gradient is
    the full one (through the batch statistics; stats itself gets None); eval: stats are fixed
    (the running statistics) and the x gradient is w * rstd * dy."""

    name, label, kernel = "batch_norm_op", "BatchNorm", "batch_norm"
    inputs = ("node_x", "node_stats", "node_weight", "node_bias")
    attrs = (_EPS, _TRAINING)

    def kernel_args(self, node):
        return (node.eps,)

    def gradient(self, node, output_grad):
        x, stats, w, _ = node.inputs
        return [
            batch_norm_gradient_op(x, stats, w, output_grad, node.eps, node.training),
            None,
            batch_norm_weight_gradient_op(x, stats, output_grad, node.eps),
            reduce_sum_channels_op(output_grad),
        ]

    def infer_shape(self, node, input_shapes):
        x, stats, w, b = (tuple(s) for s in input_shapes)
        _channel_shapes(self, node, x, stats, ("weight", w), ("bias", b))
        return x


class BatchNormGradientOp(Op):
    """``batch_norm_gradient_op(x, stats, weight, dy, eps=1e-5, training=True)``: dx of
    ``batch_norm_op``: training w * rstd * (dy - mean(dy) - xhat * mean(dy * xhat)) per channel,
    eval w * rstd * dy."""

    name, label, kernel = "batch_norm_gradient_op", "BatchNormGrad", "batch_norm_gradient"
    no_gradient = _NO_SECOND
    inputs = ("node_x", "node_stats", "node_weight", "node_dy")
    attrs = (_EPS, _TRAINING)

    def kernel_args(self, node):
        return (node.eps, node.training)

    def infer_shape(self, node, input_shapes):
        x, stats, w, dy = (tuple(s) for s in input_shapes)
        _channel_shapes(self, node, x, stats, ("weight", w))
        return self._same_shapes(node, x, dy)


class BatchNormWeightGradientOp(Op):
    """``batch_norm_weight_gradient_op(x, stats, dy, eps=1e-5)``: (C,) the sum over each channel
    of dy * xhat, the weight gradient of ``batch_norm_op``."""

    name, label, kernel = (
        "batch_norm_weight_gradient_op",
        "BatchNormWeightGrad",
        "batch_norm_weight_gradient",
    )
    no_gradient = _NO_SECOND
    inputs = ("node_x", "node_stats", "node_dy")
    attrs = (_EPS,)

    def kernel_args(self, node):
        return (node.eps,)

    def infer_shape(self, node, input_shapes):
        x, stats, dy = (tuple(s) for s in input_shapes)
        _channel_shapes(self, node, x, stats)
        self._same_shapes(node, x, dy)
        return (x[1],)


layer_norm_op = LayerNormOp()
layer_norm_stats_op = LayerNormStatsOp()
layer_norm_gradient_op = LayerNormGradientOp()
layer_norm_weight_gradient_op = LayerNormWeightGradientOp()
layer_norm_backward_op = LayerNormBackwardOp()
batch_norm_stats_op = BatchNormStatsOp()
batch_norm_op = BatchNormOp()
batch_norm_gradient_op = BatchNormGradientOp()
batch_norm_weight_gradient_op = BatchNormWeightGradientOp()
