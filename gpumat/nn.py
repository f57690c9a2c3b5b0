"""Graph ops for convolutional networks and regression, on top of :mod:`gpumat.autodiff`.

Forward ops (each with ``compute`` on numpy and on gpumat devices, ``gradient`` and ``infer_shape``,
like the ops of :mod:`gpumat.autodiff`; they are re-exported there):

- ``conv2d_op(x, w, stride=1, padding=0)``: x (N, C, H, W), w (F, C, KH, KW) -> (N, F, OH, OW),
  cross-correlation with zero padding, OH = (H + 2*ph - KH) // sh + 1.
- ``conv1d_op(x, w, stride=1, padding=0)``: x (N, C, W), w (F, C, K) -> (N, F, OW).
- ``add_channel_bias_op(x, b)``: x (N, C, ...) + b (C,) along axis 1 (a convolution's bias).
- ``max_pool2d_op(x, kernel_size, stride=None, padding=0)`` and ``avg_pool2d_op(...)``: pooling
  over the (H, W) planes of x (N, C, H, W); the stride defaults to the kernel size.
- ``reshape_op(x, shape)`` (one entry may be -1), ``flatten_op(x)``: (N, ...) -> (N, prod(...)).
- ``mse_loss_op(pred, target)``, ``mae_loss_op(pred, target)``: mean over all elements, shape (1,).
- Layers (issue 11): ``log_softmax_op(x, axis=-1)`` (and ``autodiff.softmax_op(x, axis=-1)``) along
  any axis of any rank; ``nll_loss_op(log_probs, target)`` with one-hot targets; ``tanh_op``,
  ``sigmoid_op``; ``dropout_op(x, p, seed=None)`` (inverted, on only when the executor trains);
  ``reduce_sum_op``, ``reduce_mean_op``, ``reduce_max_op`` ``(x, axis, keepdims=False)``.

Their gradients are graph ops too (``conv2d_gradient_input_op``, ``max_pool2d_gradient_op``, ...),
so gradient graphs can be printed, evaluated and, for the linear ones (convolution, its two
gradients, average pooling, bias, reshape), differentiated again.

How each runs on a device: convolutions are im2col + our matmul over chunks of the batch (see
:func:`gpumat.ops.conv2d` for why), max-pool gradients recompute the argmax from the input (no
index array: each op keeps one output), reshape is a copy into the planned buffer of the new shape.

The numpy backend (``Executor(..., ctx=None)``) computes the same maths with numpy in the feeds'
dtype (float64 feeds give a float64 run, which the finite-difference tests use): convolutions
through ``sliding_window_view`` and ``tensordot``, max pooling through ``argmax`` (first maximum
wins, as on the devices).

Sources: convolution as im2col + GEMM follows Chellapilla, Puri & Simard, "High Performance
Convolutional Neural Networks for Document Processing" (2006) and Caffe's ``im2col``; the gradient
formulas are the standard ones (Goodfellow, Bengio & Courville, *Deep Learning*, 9.5).
"""

from __future__ import annotations

import itertools
import numbers
from collections.abc import Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from gpumat import ops
from gpumat.autodiff import Node, Op, Undefined, _shape_str, _short, zeroslike_op
from gpumat.ops import _int, _pair  # the argument checks shared with gpumat.ops

__all__ = [
    "add_channel_bias_op",
    "avg_pool2d_gradient_op",
    "avg_pool2d_op",
    "broadcast_axis_op",
    "conv1d_gradient_filter_op",
    "conv1d_gradient_input_op",
    "conv1d_op",
    "conv2d_gradient_filter_op",
    "conv2d_gradient_input_op",
    "conv2d_op",
    "conv_output_size",
    "dropout_op",
    "flatten_op",
    "log_softmax_gradient_op",
    "log_softmax_op",
    "mae_loss_gradient_op",
    "mae_loss_op",
    "max_pool2d_gradient_op",
    "max_pool2d_op",
    "mse_loss_gradient_op",
    "mse_loss_op",
    "nll_loss_gradient_op",
    "nll_loss_op",
    "np_dropout",
    "np_log_softmax",
    "np_sigmoid",
    "np_softmax",
    "np_uniform01",
    "reduce_max_gradient_op",
    "reduce_max_op",
    "reduce_mean_op",
    "reduce_sum_channels_op",
    "reduce_sum_op",
    "reshape_op",
    "sigmoid_gradient_op",
    "sigmoid_op",
    "softmax_gradient_op",
    "tanh_gradient_op",
    "tanh_op",
]


def conv_output_size(size: int, kernel: int, stride: int = 1, padding: int = 0) -> int:
    """(size + 2*padding - kernel) // stride + 1, or 0 when the padded input is shorter than the
    kernel: the output length of a convolution or pooling window along one axis."""
    span = size + 2 * padding - kernel
    return span // stride + 1 if span >= 0 else 0


# --------------------------------------------------------------------------------------------------
# numpy references (any float dtype; the result has the input's dtype)
# --------------------------------------------------------------------------------------------------


def _windows(xp: np.ndarray, k: tuple, stride: tuple) -> np.ndarray:
    """(N, C, OH, OW, KH, KW) read-only view of the windows of the padded xp (N, C, Hp, Wp)."""
    return sliding_window_view(xp, k, axis=(2, 3))[:, :, :: stride[0], :: stride[1]]


def _pad(x: np.ndarray, padding: tuple, value=0.0) -> np.ndarray:
    ph, pw = padding
    if ph == 0 and pw == 0:
        return x
    return np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=value)


def np_conv2d(x, w, stride=(1, 1), padding=(0, 0)) -> np.ndarray:
    """y (N, F, OH, OW) = conv2d(x (N, C, H, W), w (F, C, KH, KW)), cross-correlation."""
    win = _windows(_pad(x, padding), w.shape[2:], stride)
    return np.tensordot(win, w, axes=([1, 4, 5], [1, 2, 3])).transpose(0, 3, 1, 2)


def np_conv2d_gradient_input(dy, w, x_shape, stride=(1, 1), padding=(0, 0)) -> np.ndarray:
    """dx (x_shape) of conv2d: each filter tap (i, j) scatters w[:, :, i, j]^T dy onto the input
    positions it read."""
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


def np_conv2d_gradient_filter(x, dy, w_shape, stride=(1, 1), padding=(0, 0)) -> np.ndarray:
    """dw (w_shape) of conv2d: sum over the batch and positions of dy times the windows."""
    win = _windows(_pad(x, padding), tuple(w_shape[2:]), stride)
    return np.tensordot(dy, win, axes=([0, 2, 3], [0, 2, 3]))


def _pool_windows_flat(x, kernel, stride, padding, fill):
    win = _windows(_pad(x, padding, fill), kernel, stride)
    # NOTE: the window size is explicit, not -1: numpy cannot infer -1 for an empty batch.
    return win.reshape(win.shape[:4] + (kernel[0] * kernel[1],))


def np_max_pool2d(x, kernel, stride, padding) -> np.ndarray:
    """Max over each window; padding is -inf, so it never wins. NaN wins (numpy's max)."""
    flat = _pool_windows_flat(x, kernel, stride, padding, -np.inf)
    idx = np.argmax(flat, axis=-1)[..., None]
    return np.take_along_axis(flat, idx, axis=-1)[..., 0]


def np_max_pool2d_gradient(x, dy, kernel, stride, padding) -> np.ndarray:
    """Each window's dy to its argmax, the first maximum in row-major window order (argmax's
    rule, the kernels' too); overlapping windows add up."""
    kw = kernel[1]
    (sh, sw), (ph, pw) = stride, padding
    n, c, h, w = x.shape
    flat = _pool_windows_flat(x, kernel, stride, padding, -np.inf)
    arg = np.argmax(flat, axis=-1)  # (N, C, OH, OW)
    oh, ow = arg.shape[2:]
    rows = np.arange(oh)[:, None] * sh + arg // kw
    cols = np.arange(ow)[None, :] * sw + arg % kw
    nn_, cc = np.meshgrid(np.arange(n), np.arange(c), indexing="ij")
    dxp = np.zeros((n, c, h + 2 * ph, w + 2 * pw), dtype=dy.dtype)
    np.add.at(dxp, (nn_[:, :, None, None], cc[:, :, None, None], rows, cols), dy)
    return dxp[:, :, ph : ph + h, pw : pw + w]


def np_avg_pool2d(x, kernel, stride, padding) -> np.ndarray:
    """Mean over each window, padding counted as zeros (divisor KH*KW)."""
    return _pool_windows_flat(x, kernel, stride, padding, 0.0).mean(axis=-1)


def np_avg_pool2d_gradient(dy, x_shape, kernel, stride, padding) -> np.ndarray:
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding
    n, c, h, w = x_shape
    oh, ow = dy.shape[2:]
    dxp = np.zeros((n, c, h + 2 * ph, w + 2 * pw), dtype=dy.dtype)
    share = dy / (kh * kw)
    for i in range(kh):
        for j in range(kw):
            dxp[:, :, i : i + sh * oh : sh, j : j + sw * ow : sw] += share
    return dxp[:, :, ph : ph + h, pw : pw + w]


# --------------------------------------------------------------------------------------------------
# Convolution
# --------------------------------------------------------------------------------------------------


class _ConvBase(Op):
    """Shared by the conv ops: ``spatial`` is 2 (conv2d) or 1 (conv1d, seen as H = KH = 1).

    Nodes carry ``stride`` and ``padding`` as (h, w) pairs; conv1d's are (1, s) and (0, p).
    """

    spatial = 2
    label = "Conv2d"

    def _attrs(self, node: Node, stride, padding) -> None:
        if self.spatial == 2:
            node.stride = _pair(stride, "stride", self.name)
            node.padding = _pair(padding, "padding", self.name)
        else:
            node.stride = (1, _int(stride, "stride", self.name))
            node.padding = (0, _int(padding, "padding", self.name))
        s, p = node.stride, node.padding
        if min(s) < 1:
            raise ValueError(
                f"{self.name}: stride must be >= 1, got {s if self.spatial == 2 else s[1]}"
            )
        if min(p) < 0:
            raise ValueError(
                f"{self.name}: padding must be >= 0, got {p if self.spatial == 2 else p[1]}"
            )

    def _attr_str(self, node: Node) -> str:
        if self.spatial == 2:
            return f"s={node.stride[0]}x{node.stride[1]},p={node.padding[0]}x{node.padding[1]}"
        return f"s={node.stride[1]},p={node.padding[1]}"

    def _public(self, node: Node) -> tuple:
        """(stride, padding) as the helpers take them: pairs for conv2d, ints for conv1d."""
        if self.spatial == 2:
            return node.stride, node.padding
        return node.stride[1], node.padding[1]

    def _geometry(self, node: Node, x_shape, w_shape, x_name="x", w_name="w") -> tuple:
        """The output shape for inputs of x_shape and w_shape; ValueError naming the problem."""
        rank = 2 + self.spatial
        layout = "(N, C, H, W)" if self.spatial == 2 else "(N, C, W)"
        flayout = "(F, C, KH, KW)" if self.spatial == 2 else "(F, C, K)"
        xs, ws = tuple(x_shape), tuple(w_shape)
        if len(xs) != rank:
            raise self._error(node, f"{x_name} must be {rank}-D {layout}, got {_shape_str(xs)}")
        if len(ws) != rank:
            raise self._error(node, f"{w_name} must be {rank}-D {flayout}, got {_shape_str(ws)}")
        desc = f"{x_name} {_shape_str(xs)}, {w_name} {_shape_str(ws)}, {self._attr_str(node)}"
        if xs[1] != ws[1]:
            raise self._error(
                node,
                f"channel mismatch: {x_name} has {xs[1]} channels but {w_name} expects "
                f"{ws[1]} ({desc})",
            )
        kh, kw = (ws[2], ws[3]) if self.spatial == 2 else (1, ws[2])
        h, w = (xs[2], xs[3]) if self.spatial == 2 else (1, xs[2])
        if kh < 1 or kw < 1:
            raise self._error(node, f"the filter's spatial size must be >= 1 ({desc})")
        oh = conv_output_size(h, kh, node.stride[0], node.padding[0])
        ow = conv_output_size(w, kw, node.stride[1], node.padding[1])
        if oh < 1 or ow < 1:
            raise self._error(
                node,
                f"the output would be empty: the padded input is smaller than the filter ({desc})",
            )
        return (xs[0], ws[0], oh, ow) if self.spatial == 2 else (xs[0], ws[0], ow)

    @staticmethod
    def _as4d(a: np.ndarray) -> np.ndarray:
        return a if a.ndim == 4 else a.reshape(a.shape[0], a.shape[1], 1, a.shape[2])


class Conv2dOp(_ConvBase):
    """``conv2d_op(x, w, stride=1, padding=0)``: x (N, C, H, W), w (F, C, KH, KW) -> (N, F, OH, OW).

    Cross-correlation (the filter is not flipped) with zero padding; ``stride`` and ``padding`` are
    ints or (h, w) pairs; OH = (H + 2*ph - KH) // sh + 1. Gradients: ``conv2d_gradient_input_op``
    and ``conv2d_gradient_filter_op``. Add a bias with ``add_channel_bias_op``.
    """

    name = "conv2d_op"

    def __call__(self, node_x: Node, node_w: Node, stride=1, padding=0) -> Node:
        new_node = Op.__call__(self)
        self._attrs(new_node, stride, padding)
        new_node.inputs = [node_x, node_w]
        new_node.name = (
            f"{self.label}({_short(node_x)},{_short(node_w)},{self._attr_str(new_node)})"
        )
        return new_node

    def compute(self, node, input_vals, output_val, ctx=None):
        x, w = input_vals
        if ctx is None:
            y = np_conv2d(self._as4d(x), self._as4d(w), node.stride, node.padding)
            output_val[...] = y.reshape(output_val.shape)
        elif self.spatial == 2:
            ops.conv2d(x, w, output_val, *self._public(node))
        else:
            ops.conv1d(x, w, output_val, *self._public(node))

    def gradient(self, node, output_grad):
        x, w = node.inputs
        grad_input, grad_filter = _GRAD_OPS[self.spatial]
        return [
            grad_input(output_grad, w, x, *self._public(node)),
            grad_filter(x, output_grad, w, *self._public(node)),
        ]

    def infer_shape(self, node, input_shapes):
        return self._geometry(node, input_shapes[0], input_shapes[1])


class Conv1dOp(Conv2dOp):
    """``conv1d_op(x, w, stride=1, padding=0)``: x (N, C, W), w (F, C, K) -> (N, F, OW), integer
    stride and padding, OW = (W + 2*padding - K) // stride + 1. conv2d with H = KH = 1."""

    name = "conv1d_op"
    spatial = 1
    label = "Conv1d"


class Conv2dGradientInputOp(_ConvBase):
    """``conv2d_gradient_input_op(dy, w, x, stride, padding)``: dL/dx of ``conv2d_op(x, w)`` given
    dy = dL/dy; only x's shape is used. Linear in dy and in w, so it has gradients itself."""

    name = "conv2d_gradient_input_op"
    shape_only_inputs = (2,)  # x

    def __call__(self, node_dy: Node, node_w: Node, node_x: Node, stride=1, padding=0) -> Node:
        new_node = Op.__call__(self)
        self._attrs(new_node, stride, padding)
        new_node.inputs = [node_dy, node_w, node_x]
        new_node.name = (
            f"{self.label}GradInput({_short(node_dy)},{_short(node_w)},{self._attr_str(new_node)})"
        )
        return new_node

    def compute(self, node, input_vals, output_val, ctx=None):
        dy, w, _ = input_vals
        if ctx is None:
            x_shape = self._as4d(output_val).shape
            dx = np_conv2d_gradient_input(
                self._as4d(dy), self._as4d(w), x_shape, node.stride, node.padding
            )
            output_val[...] = dx.reshape(output_val.shape)
        elif self.spatial == 2:
            ops.conv2d_gradient_input(dy, w, output_val, *self._public(node))
        else:
            ops.conv1d_gradient_input(dy, w, output_val, *self._public(node))

    def gradient(self, node, output_grad):
        # dx = T_w(dy), the adjoint of y = C_w(x): <T_w(dy), h> = <dy, C_w(h)>, so
        # d/d dy = conv(h, w) and d/dw = grad_filter(h, dy).
        dy, w, _ = node.inputs
        conv = _CONV_OPS[self.spatial]
        grad_filter = _GRAD_OPS[self.spatial][1]
        return [
            conv(output_grad, w, *self._public(node)),
            grad_filter(output_grad, dy, w, *self._public(node)),
            None,
        ]

    def infer_shape(self, node, input_shapes):
        dy, w, x = (tuple(s) for s in input_shapes)
        expected = self._geometry(node, x, w)
        if dy != expected:
            raise self._error(
                node,
                f"dy has shape {_shape_str(dy)}, expected {_shape_str(expected)} "
                f"for x {_shape_str(x)}",
            )
        return x


class Conv1dGradientInputOp(Conv2dGradientInputOp):
    """``conv1d_gradient_input_op(dy, w, x, stride, padding)``: dL/dx of ``conv1d_op``."""

    name = "conv1d_gradient_input_op"
    spatial = 1
    label = "Conv1d"


class Conv2dGradientFilterOp(_ConvBase):
    """``conv2d_gradient_filter_op(x, dy, w, stride, padding)``: dL/dw of ``conv2d_op(x, w)``
    given dy = dL/dy; only w's shape is used. Linear in x and in dy."""

    name = "conv2d_gradient_filter_op"
    shape_only_inputs = (2,)  # w

    def __call__(self, node_x: Node, node_dy: Node, node_w: Node, stride=1, padding=0) -> Node:
        new_node = Op.__call__(self)
        self._attrs(new_node, stride, padding)
        new_node.inputs = [node_x, node_dy, node_w]
        new_node.name = (
            f"{self.label}GradFilter({_short(node_x)},{_short(node_dy)},{self._attr_str(new_node)})"
        )
        return new_node

    def compute(self, node, input_vals, output_val, ctx=None):
        x, dy, _ = input_vals
        if ctx is None:
            w_shape = self._as4d(output_val).shape
            dw = np_conv2d_gradient_filter(
                self._as4d(x), self._as4d(dy), w_shape, node.stride, node.padding
            )
            output_val[...] = dw.reshape(output_val.shape)
        elif self.spatial == 2:
            ops.conv2d_gradient_filter(x, dy, output_val, *self._public(node))
        else:
            ops.conv1d_gradient_filter(x, dy, output_val, *self._public(node))

    def gradient(self, node, output_grad):
        # dw = G(x, dy) with <G(x, dy), h> = <dy, conv(x, h)>: d/dx = grad_input(dy, h),
        # d/d dy = conv(x, h).
        x, dy, _ = node.inputs
        conv = _CONV_OPS[self.spatial]
        grad_input = _GRAD_OPS[self.spatial][0]
        return [
            grad_input(dy, output_grad, x, *self._public(node)),
            conv(x, output_grad, *self._public(node)),
            None,
        ]

    def infer_shape(self, node, input_shapes):
        x, dy, w = (tuple(s) for s in input_shapes)
        expected = self._geometry(node, x, w)
        if dy != expected:
            raise self._error(
                node,
                f"dy has shape {_shape_str(dy)}, expected {_shape_str(expected)} "
                f"for x {_shape_str(x)} and w {_shape_str(w)}",
            )
        return w


class Conv1dGradientFilterOp(Conv2dGradientFilterOp):
    """``conv1d_gradient_filter_op(x, dy, w, stride, padding)``: dL/dw of ``conv1d_op``."""

    name = "conv1d_gradient_filter_op"
    spatial = 1
    label = "Conv1d"


# --------------------------------------------------------------------------------------------------
# Bias
# --------------------------------------------------------------------------------------------------


def _channel_view(b: np.ndarray, ndim: int) -> np.ndarray:
    return b.reshape((1, b.shape[0]) + (1,) * (ndim - 2))


class AddChannelBiasOp(Op):
    """``add_channel_bias_op(x, b)``: x (N, C, ...) + b (C,) along axis 1, for x of rank >= 2.

    The bias of a convolution (broadcastto_op only repeats over leading axes, and the channel axis
    is not last). The gradient with respect to b sums over every axis but 1.
    """

    name = "add_channel_bias_op"

    def __call__(self, node_x: Node, node_b: Node) -> Node:
        new_node = Op.__call__(self)
        new_node.inputs = [node_x, node_b]
        new_node.name = f"AddChannelBias({_short(node_x)},{_short(node_b)})"
        return new_node

    def compute(self, node, input_vals, output_val, ctx=None):
        x, b = input_vals
        if ctx is None:
            np.add(x, _channel_view(b, x.ndim), out=output_val)
        else:
            ops.add_channel_bias(x, b, output_val)

    def gradient(self, node, output_grad):
        return [output_grad, reduce_sum_channels_op(output_grad)]

    def infer_shape(self, node, input_shapes):
        x, b = (tuple(s) for s in input_shapes)
        if len(x) < 2:
            raise self._error(node, f"x must be (N, C, ...) with rank >= 2, got {_shape_str(x)}")
        if b != (x[1],):
            raise self._error(
                node, f"bias has shape {_shape_str(b)}, expected ({x[1]},) for x {_shape_str(x)}"
            )
        return x


class ReduceSumChannelsOp(Op):
    """``reduce_sum_channels_op(x)``: x (N, C, ...) summed over every axis but 1 -> (C,)."""

    name = "reduce_sum_channels_op"

    def __call__(self, node_x: Node) -> Node:
        new_node = Op.__call__(self)
        new_node.inputs = [node_x]
        new_node.name = f"ReduceSumChannels({_short(node_x)})"
        return new_node

    def compute(self, node, input_vals, output_val, ctx=None):
        x = input_vals[0]
        if ctx is None:
            axes = (0,) + tuple(range(2, x.ndim))
            output_val[...] = np.sum(x, axis=axes)
        else:
            ops.reduce_sum_channels(x, output_val)

    def gradient(self, node, output_grad):
        # Each input element receives its channel's output gradient: a broadcast along axis 1.
        x = node.inputs[0]
        return [add_channel_bias_op(zeroslike_op(x), output_grad)]

    def infer_shape(self, node, input_shapes):
        x = tuple(input_shapes[0])
        if len(x) < 2:
            raise self._error(node, f"x must be (N, C, ...) with rank >= 2, got {_shape_str(x)}")
        return (x[1],)


# --------------------------------------------------------------------------------------------------
# Pooling
# --------------------------------------------------------------------------------------------------


class _PoolBase(Op):
    """Nodes carry ``kernel``, ``stride`` and ``padding`` as (h, w) pairs."""

    label = "Pool"

    def _attrs(self, node: Node, kernel_size, stride, padding) -> None:
        node.kernel = _pair(kernel_size, "kernel_size", self.name)
        node.stride = node.kernel if stride is None else _pair(stride, "stride", self.name)
        node.padding = _pair(padding, "padding", self.name)
        k, s, p = node.kernel, node.stride, node.padding
        if min(k) < 1 or min(s) < 1:
            raise ValueError(f"{self.name}: kernel_size and stride must be >= 1, got {k} and {s}")
        if min(p) < 0 or p[0] > k[0] // 2 or p[1] > k[1] // 2:
            raise ValueError(
                f"{self.name}: padding must be between 0 and half the kernel size, "
                f"got {p} for kernel {k}"
            )

    def _attr_str(self, node: Node) -> str:
        (kh, kw), (sh, sw), (ph, pw) = node.kernel, node.stride, node.padding
        return f"k={kh}x{kw},s={sh}x{sw},p={ph}x{pw}"

    def _args(self, node: Node) -> tuple:
        return node.kernel, node.stride, node.padding

    def _geometry(self, node: Node, x_shape, x_name="x") -> tuple:
        xs = tuple(x_shape)
        if len(xs) != 4:
            raise self._error(node, f"{x_name} must be 4-D (N, C, H, W), got {_shape_str(xs)}")
        oh = conv_output_size(xs[2], node.kernel[0], node.stride[0], node.padding[0])
        ow = conv_output_size(xs[3], node.kernel[1], node.stride[1], node.padding[1])
        if oh < 1 or ow < 1:
            raise self._error(
                node,
                f"the output would be empty: the padded input is smaller than the kernel "
                f"({x_name} {_shape_str(xs)}, {self._attr_str(node)})",
            )
        return (xs[0], xs[1], oh, ow)

    def _new(self, inputs: list, label: str, kernel_size, stride, padding) -> Node:
        new_node = Op.__call__(self)
        self._attrs(new_node, kernel_size, stride, padding)
        new_node.inputs = inputs
        names = ",".join(_short(i) for i in inputs)
        new_node.name = f"{label}({names},{self._attr_str(new_node)})"
        return new_node


class MaxPool2dOp(_PoolBase):
    """``max_pool2d_op(x, kernel_size, stride=None, padding=0)``: the max over each window of the
    (H, W) planes of x (N, C, H, W) -> (N, C, OH, OW).

    ``kernel_size``, ``stride`` (default: the kernel size) and ``padding`` are ints or (h, w)
    pairs, 0 <= padding <= kernel_size // 2 (padding never wins). The gradient routes each window's
    gradient to its argmax, the first maximum in row-major window order, so ties send it to exactly
    one element; the device kernels recompute the argmax from x instead of storing indices.
    """

    name = "max_pool2d_op"

    def __call__(self, node_x: Node, kernel_size, stride=None, padding=0) -> Node:
        return self._new([node_x], "MaxPool2d", kernel_size, stride, padding)

    def compute(self, node, input_vals, output_val, ctx=None):
        x = input_vals[0]
        if ctx is None:
            output_val[...] = np_max_pool2d(x, *self._args(node))
        else:
            ops.max_pool2d(x, output_val, *self._args(node))

    def gradient(self, node, output_grad):
        return [max_pool2d_gradient_op(node.inputs[0], output_grad, *self._args(node))]

    def infer_shape(self, node, input_shapes):
        return self._geometry(node, input_shapes[0])


class MaxPool2dGradientOp(_PoolBase):
    """``max_pool2d_gradient_op(x, dy, kernel_size, stride, padding)``: dL/dx of
    ``max_pool2d_op(x, ...)`` given dy = dL/dy (N, C, OH, OW)."""

    name = "max_pool2d_gradient_op"

    def __call__(self, node_x: Node, node_dy: Node, kernel_size, stride=None, padding=0) -> Node:
        return self._new([node_x, node_dy], "MaxPool2dGrad", kernel_size, stride, padding)

    def compute(self, node, input_vals, output_val, ctx=None):
        x, dy = input_vals
        if ctx is None:
            output_val[...] = np_max_pool2d_gradient(x, dy, *self._args(node))
        else:
            ops.max_pool2d_gradient(x, dy, output_val, *self._args(node))

    def gradient(self, node, output_grad):
        # Piecewise constant in x (zero almost everywhere); linear in dy (a gather at the argmax,
        # which has no kernel yet).
        return [None, Undefined("max_pool2d_gradient_op: second derivatives of max pooling")]

    def infer_shape(self, node, input_shapes):
        x, dy = (tuple(s) for s in input_shapes)
        expected = self._geometry(node, x)
        if dy != expected:
            raise self._error(
                node, f"dy has shape {_shape_str(dy)}, expected {_shape_str(expected)}"
            )
        return x


class AvgPool2dOp(_PoolBase):
    """``avg_pool2d_op(x, kernel_size, stride=None, padding=0)``: the mean over each window of the
    (H, W) planes of x (N, C, H, W) -> (N, C, OH, OW); padding counts as zeros (the divisor is
    always KH*KW, PyTorch's ``count_include_pad=True``). Arguments as for ``max_pool2d_op``."""

    name = "avg_pool2d_op"

    def __call__(self, node_x: Node, kernel_size, stride=None, padding=0) -> Node:
        return self._new([node_x], "AvgPool2d", kernel_size, stride, padding)

    def compute(self, node, input_vals, output_val, ctx=None):
        x = input_vals[0]
        if ctx is None:
            output_val[...] = np_avg_pool2d(x, *self._args(node))
        else:
            ops.avg_pool2d(x, output_val, *self._args(node))

    def gradient(self, node, output_grad):
        return [avg_pool2d_gradient_op(output_grad, node.inputs[0], *self._args(node))]

    def infer_shape(self, node, input_shapes):
        return self._geometry(node, input_shapes[0])


class AvgPool2dGradientOp(_PoolBase):
    """``avg_pool2d_gradient_op(dy, x, kernel_size, stride, padding)``: dL/dx of
    ``avg_pool2d_op(x, ...)`` given dy; only x's shape is used. Linear: its gradient is average
    pooling again."""

    name = "avg_pool2d_gradient_op"
    shape_only_inputs = (1,)  # x

    def __call__(self, node_dy: Node, node_x: Node, kernel_size, stride=None, padding=0) -> Node:
        return self._new([node_dy, node_x], "AvgPool2dGrad", kernel_size, stride, padding)

    def compute(self, node, input_vals, output_val, ctx=None):
        dy = input_vals[0]
        if ctx is None:
            output_val[...] = np_avg_pool2d_gradient(dy, output_val.shape, *self._args(node))
        else:
            ops.avg_pool2d_gradient(dy, output_val, *self._args(node))

    def gradient(self, node, output_grad):
        return [avg_pool2d_op(output_grad, *self._args(node)), None]

    def infer_shape(self, node, input_shapes):
        dy, x = (tuple(s) for s in input_shapes)
        expected = self._geometry(node, x)
        if dy != expected:
            raise self._error(
                node, f"dy has shape {_shape_str(dy)}, expected {_shape_str(expected)}"
            )
        return x


# --------------------------------------------------------------------------------------------------
# Reshape
# --------------------------------------------------------------------------------------------------


class ReshapeOp(Op):
    """``reshape_op(x, shape)``: x's values in row-major order with a new shape of the same size;
    one entry of ``shape`` may be -1 (inferred). ``reshape_op(x, like)`` with a node takes
    ``like``'s shape (the gradient's form). On a device this is a copy into the planned buffer of
    the new shape (the executor plans buffers by shape)."""

    name = "reshape_op"
    shape_only_inputs = (1,)  # like

    def __call__(self, node_x: Node, shape) -> Node:
        new_node = Op.__call__(self)
        if isinstance(shape, Node):
            new_node.inputs = [node_x, shape]
            new_node.shape_attr = None
            new_node.name = f"ReshapeLike({_short(node_x)},{_short(shape)})"
            return new_node
        if isinstance(shape, (numbers.Integral, np.integer)):
            shape = (shape,)
        if not isinstance(shape, Sequence) or not all(
            isinstance(d, (numbers.Integral, np.integer)) and not isinstance(d, bool) for d in shape
        ):
            raise TypeError(
                f"reshape_op: shape must be a sequence of ints or a node, got {shape!r}"
            )
        shape = tuple(int(d) for d in shape)
        if sum(d == -1 for d in shape) > 1 or any(d < -1 for d in shape):
            raise ValueError(f"reshape_op: at most one -1 and no other negative entry, got {shape}")
        new_node.inputs = [node_x]
        new_node.shape_attr = shape
        new_node.name = f"Reshape({_short(node_x)},{_shape_str(shape)})"
        return new_node

    def compute(self, node, input_vals, output_val, ctx=None):
        x = input_vals[0]
        if ctx is None:
            np.copyto(output_val, x.reshape(output_val.shape))
        else:
            ops.reshape(x, output_val)

    def gradient(self, node, output_grad):
        grads = [reshape_op(output_grad, node.inputs[0])]
        if len(node.inputs) == 2:
            grads.append(None)
        return grads

    def _target(self, node, x: tuple, input_shapes) -> tuple:
        if node.shape_attr is None:
            return tuple(input_shapes[1])
        return node.shape_attr

    def infer_shape(self, node, input_shapes):
        x = tuple(input_shapes[0])
        target = self._target(node, x, input_shapes)
        size = int(np.prod(x, dtype=np.int64))
        if -1 in target:
            known = int(np.prod([d for d in target if d != -1], dtype=np.int64))
            if known == 0 or size % known != 0:
                raise self._error(node, f"cannot reshape {_shape_str(x)} to {_shape_str(target)}")
            target = tuple(size // known if d == -1 else d for d in target)
        if int(np.prod(target, dtype=np.int64)) != size:
            raise self._error(
                node,
                f"cannot reshape {_shape_str(x)} ({size} elements) to {_shape_str(target)} "
                f"({int(np.prod(target, dtype=np.int64))} elements)",
            )
        return target


class FlattenOp(ReshapeOp):
    """``flatten_op(x)``: (N, d1, d2, ...) -> (N, d1*d2*...): conv features into a dense layer."""

    name = "flatten_op"

    def __call__(self, node_x: Node) -> Node:
        new_node = Op.__call__(self)
        new_node.inputs = [node_x]
        new_node.shape_attr = None
        new_node.name = f"Flatten({_short(node_x)})"
        return new_node

    def _target(self, node, x, input_shapes):
        if len(x) < 1:
            raise self._error(node, "cannot flatten a 0-d array")
        return (x[0], int(np.prod(x[1:], dtype=np.int64)))


# --------------------------------------------------------------------------------------------------
# Regression losses
# --------------------------------------------------------------------------------------------------


class _LossBase(Op):
    """Mean over all elements of f(pred - target), shape (1,)."""

    kind = "mse"

    def __call__(self, node_pred: Node, node_target: Node) -> Node:
        new_node = Op.__call__(self)
        new_node.inputs = [node_pred, node_target]
        new_node.name = f"{self.kind.upper()}Loss({_short(node_pred)},{_short(node_target)})"
        return new_node

    def compute(self, node, input_vals, output_val, ctx=None):
        p, t = input_vals
        if ctx is None:
            d = p - t
            output_val[...] = np.mean(d * d) if self.kind == "mse" else np.mean(np.abs(d))
        elif self.kind == "mse":
            ops.mse_loss(p, t, output_val)
        else:
            ops.mae_loss(p, t, output_val)

    def gradient(self, node, output_grad):
        p, t = node.inputs
        grad_op = mse_loss_gradient_op if self.kind == "mse" else mae_loss_gradient_op
        g = grad_op(p, t, output_grad)
        return [g, g * -1.0]

    def infer_shape(self, node, input_shapes):
        p, t = (tuple(s) for s in input_shapes)
        if p != t:
            raise self._error(
                node, f"pred {_shape_str(p)} and target {_shape_str(t)} differ in shape"
            )
        if int(np.prod(p, dtype=np.int64)) < 1:
            raise self._error(node, f"the mean needs at least one element, got {_shape_str(p)}")
        return (1,)


class MseLossOp(_LossBase):
    """``mse_loss_op(pred, target)``: mean((pred - target)**2) over all elements, shape (1,).

    Gradient with respect to pred: 2 (pred - target) / n times the output gradient (target: its
    negative). pred and target have one shape with at least one element.
    """

    name = "mse_loss_op"
    kind = "mse"


class MaeLossOp(_LossBase):
    """``mae_loss_op(pred, target)``: mean(|pred - target|) over all elements, shape (1,).

    Gradient with respect to pred: sign(pred - target) / n times the output gradient, with
    sign(0) = 0 (the subgradient PyTorch uses).
    """

    name = "mae_loss_op"
    kind = "mae"


class _LossGradientBase(Op):
    """``<kind>_loss_gradient_op(pred, target, dloss)``: the gradient of the loss with respect to
    pred, times dloss (1,); pred's shape."""

    kind = "mse"

    def __call__(self, node_pred: Node, node_target: Node, node_dloss: Node) -> Node:
        new_node = Op.__call__(self)
        new_node.inputs = [node_pred, node_target, node_dloss]
        args = f"{_short(node_pred)},{_short(node_target)},{_short(node_dloss)}"
        new_node.name = f"{self.kind.upper()}LossGrad({args})"
        return new_node

    def compute(self, node, input_vals, output_val, ctx=None):
        p, t, dl = input_vals
        if ctx is None:
            n = p.size
            if self.kind == "mse":
                output_val[...] = (dl[0] * (2.0 / n)) * (p - t)
            else:
                output_val[...] = (dl[0] / n) * np.sign(p - t)
        elif self.kind == "mse":
            ops.mse_loss_gradient(p, t, dl, output_val)
        else:
            ops.mae_loss_gradient(p, t, dl, output_val)

    def gradient(self, node, output_grad):
        reason = f"{self.name}: second derivatives of the {self.kind} loss"
        return [Undefined(reason)] * 3

    def infer_shape(self, node, input_shapes):
        p, t, dl = (tuple(s) for s in input_shapes)
        _LossBase.infer_shape(self, node, [p, t])
        if dl != (1,):
            raise self._error(node, f"dloss must have shape (1,), got {_shape_str(dl)}")
        return p


class MseLossGradientOp(_LossGradientBase):
    name = "mse_loss_gradient_op"
    kind = "mse"


class MaeLossGradientOp(_LossGradientBase):
    name = "mae_loss_gradient_op"
    kind = "mae"


# --------------------------------------------------------------------------------------------------
# Op instances
# --------------------------------------------------------------------------------------------------

conv2d_op = Conv2dOp()
conv1d_op = Conv1dOp()
conv2d_gradient_input_op = Conv2dGradientInputOp()
conv2d_gradient_filter_op = Conv2dGradientFilterOp()
conv1d_gradient_input_op = Conv1dGradientInputOp()
conv1d_gradient_filter_op = Conv1dGradientFilterOp()
add_channel_bias_op = AddChannelBiasOp()
reduce_sum_channels_op = ReduceSumChannelsOp()
max_pool2d_op = MaxPool2dOp()
max_pool2d_gradient_op = MaxPool2dGradientOp()
avg_pool2d_op = AvgPool2dOp()
avg_pool2d_gradient_op = AvgPool2dGradientOp()
reshape_op = ReshapeOp()
flatten_op = FlattenOp()
mse_loss_op = MseLossOp()
mae_loss_op = MaeLossOp()
mse_loss_gradient_op = MseLossGradientOp()
mae_loss_gradient_op = MaeLossGradientOp()

_CONV_OPS = {2: conv2d_op, 1: conv1d_op}
_GRAD_OPS = {
    2: (conv2d_gradient_input_op, conv2d_gradient_filter_op),
    1: (conv1d_gradient_input_op, conv1d_gradient_filter_op),
}


# --------------------------------------------------------------------------------------------------
# Layers (issue 11): softmax / log-softmax along an axis, NLL, tanh, sigmoid, dropout, reductions
# --------------------------------------------------------------------------------------------------
#
# Axis ops see their input as (outer, n, inner) around the axis, on the devices and here, so any
# axis of any rank works without a transpose. The devices run float32; the numpy references run
# in the feeds' dtype (float64 for the finite-difference checks).


def _axis(op: Op, node: Node, shape: tuple, axis: int) -> int:
    """``axis`` normalised to [0, ndim); ValueError naming the op for an axis out of range."""
    nd = len(shape)
    if not -nd <= axis < nd:
        raise op._error(node, f"axis {axis} is out of range for shape {_shape_str(shape)}")
    return axis % nd


def np_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """softmax along ``axis``, max-subtracted (NOTE: no overflow; softmax is shift-invariant)."""
    z = x - x.max(axis=axis, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


def np_log_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """x - max - log(sum exp(x - max)) along ``axis`` (the log-sum-exp trick)."""
    z = x - x.max(axis=axis, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=axis, keepdims=True))


def np_sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)) through exp(-|x|): no overflow warning for large |x|."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(x.dtype, copy=False)


_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    # SplitMix64 (Steele, Lea & Flood, OOPSLA 2014), as extensions/src/random.h; uint64 wraps.
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def np_uniform01(seed: int, n: int) -> np.ndarray:
    """float32 (n,): uniform01(seed, i) of extensions/src/random.h for i < n (the devices' dropout
    and random_uniform draws, bit for bit)."""
    with np.errstate(over="ignore"):
        bits = _splitmix64(np.uint64(seed) ^ _splitmix64(np.arange(n, dtype=np.uint64)))
    return (bits >> np.uint64(40)).astype(np.float32) * np.float32(1.0 / 16777216.0)


def np_dropout(x: np.ndarray, p: float, seed: int) -> np.ndarray:
    """Inverted dropout with the devices' mask: 0 where uniform01(seed, i) < p (compared in
    float32), else x / (1 - p); x's dtype."""
    drop = np_uniform01(seed, x.size).reshape(x.shape) < np.float32(p)
    if p >= 1.0:
        return np.zeros_like(x)
    scale = (
        np.float32(1.0) / (np.float32(1.0) - np.float32(p))
        if x.dtype == np.float32
        else 1 / (1 - p)
    )
    return np.where(drop, x.dtype.type(0), x * scale).astype(x.dtype, copy=False)


class _AxisOp(Op):
    """An op with an ``axis`` attribute (an int; negative counts from the end)."""

    def _set_axis(self, node: Node, axis) -> None:
        node.axis = _int(axis, "axis", self.name)


class SoftmaxGradientOp(_AxisOp):
    """``softmax_gradient_op(y, dy, axis)``: dL/dx = y * (dy - sum_axis(y * dy)) of
    y = softmax(x) along ``axis``, given the forward output y and dy (one shape). The Jacobian of
    softmax is diag(y) - y y^T (Goodfellow, Bengio & Courville, *Deep Learning*, 6.2.2.3)."""

    name = "softmax_gradient_op"
    log = False

    def __call__(self, node_y: Node, node_dy: Node, axis=-1) -> Node:
        new_node = Op.__call__(self)
        self._set_axis(new_node, axis)
        new_node.inputs = [node_y, node_dy]
        label = "LogSoftmaxGrad" if self.log else "SoftmaxGrad"
        new_node.name = f"{label}({_short(node_y)},{_short(node_dy)},axis={new_node.axis})"
        return new_node

    def compute(self, node, input_vals, output_val, ctx=None):
        y, dy = input_vals
        a = node.axis
        if ctx is None:
            if self.log:
                output_val[...] = dy - np.exp(y) * dy.sum(axis=a, keepdims=True)
            else:
                output_val[...] = y * (dy - (y * dy).sum(axis=a, keepdims=True))
        elif self.log:
            ops.log_softmax_gradient(y, dy, output_val, a)
        else:
            ops.softmax_axis_gradient(y, dy, output_val, a)

    def gradient(self, node, output_grad):
        reason = f"{self.name}: second derivatives of softmax"
        return [Undefined(reason), Undefined(reason)]

    def infer_shape(self, node, input_shapes):
        s = self._same_shapes(node, input_shapes[0], input_shapes[1])
        _axis(self, node, s, node.axis)
        return s


class LogSoftmaxGradientOp(SoftmaxGradientOp):
    """``log_softmax_gradient_op(y, dy, axis)``: dL/dx = dy - exp(y) * sum_axis(dy) of
    y = log_softmax(x) along ``axis`` (exp(y) is the softmax)."""

    name = "log_softmax_gradient_op"
    log = True


class LogSoftmaxOp(_AxisOp):
    """``log_softmax_op(x, axis=-1)``: x - max - log(sum exp(x - max)) along ``axis`` of an
    array of any rank >= 1 (the log-sum-exp trick: finite for finite inputs of any size, where
    log(softmax(x)) underflows to -inf). Gradient: ``log_softmax_gradient_op``."""

    name = "log_softmax_op"

    def __call__(self, node_x: Node, axis=-1) -> Node:
        new_node = Op.__call__(self)
        self._set_axis(new_node, axis)
        new_node.inputs = [node_x]
        new_node.name = f"LogSoftmax({_short(node_x)},axis={new_node.axis})"
        return new_node

    def compute(self, node, input_vals, output_val, ctx=None):
        if ctx is None:
            output_val[...] = np_log_softmax(input_vals[0], node.axis)
        else:
            ops.log_softmax(input_vals[0], output_val, node.axis)

    def gradient(self, node, output_grad):
        return [log_softmax_gradient_op(node, output_grad, node.axis)]

    def infer_shape(self, node, input_shapes):
        s = tuple(input_shapes[0])
        _axis(self, node, s, node.axis)
        return s


class NllLossOp(Op):
    """``nll_loss_op(log_probs, target)``: -sum(target * log_probs) / N, shape (1,).

    log_probs (N, C), e.g. ``log_softmax_op(logits)``, and ``target`` (N, C) **one-hot rows**
    (or any probability rows), N >= 1: the batch mean of -log p[class], so that
    ``nll_loss_op(log_softmax_op(y), y_)`` equals ``softmaxcrossentropy_op(y, y_)``. NOTE: unlike
    PyTorch's ``nll_loss``, which takes integer class indices, targets are one-hot as everywhere
    in gpumat (labels are float32 arrays; one-hot rows need no index checks on the device); turn
    indices into rows with ``np.eye(C, dtype=np.float32)[labels]``. Gradient with respect to
    log_probs: -target / N times the output gradient; with respect to the target it is not
    implemented (never needed to train).
    """

    name = "nll_loss_op"

    def __call__(self, node_log_probs: Node, node_target: Node) -> Node:
        new_node = Op.__call__(self)
        new_node.inputs = [node_log_probs, node_target]
        new_node.name = f"NllLoss({_short(node_log_probs)},{_short(node_target)})"
        return new_node

    def compute(self, node, input_vals, output_val, ctx=None):
        lp, t = input_vals
        if ctx is None:
            output_val[...] = -np.sum(t * lp) / lp.shape[0]
        else:
            ops.nll_loss(lp, t, output_val)

    def gradient(self, node, output_grad):
        return [
            nll_loss_gradient_op(node.inputs[1], output_grad),
            Undefined("nll_loss_op: gradient with respect to the target"),
        ]

    def infer_shape(self, node, input_shapes):
        lp, t = (tuple(s) for s in input_shapes)
        if len(lp) != 2:
            raise self._error(node, f"log_probs must be 2-D (N, C), got {_shape_str(lp)}")
        if lp != t:
            raise self._error(
                node, f"log_probs {_shape_str(lp)} and target {_shape_str(t)} differ in shape"
            )
        if lp[0] < 1 or lp[1] < 1:
            raise self._error(node, f"needs at least one row and one class, got {_shape_str(lp)}")
        return (1,)


class NllLossGradientOp(Op):
    """``nll_loss_gradient_op(target, dloss)``: -dloss[0] * target / N (target's shape), the
    gradient of ``nll_loss_op`` with respect to log_probs."""

    name = "nll_loss_gradient_op"

    def __call__(self, node_target: Node, node_dloss: Node) -> Node:
        new_node = Op.__call__(self)
        new_node.inputs = [node_target, node_dloss]
        new_node.name = f"NllLossGrad({_short(node_target)},{_short(node_dloss)})"
        return new_node

    def compute(self, node, input_vals, output_val, ctx=None):
        t, dl = input_vals
        if ctx is None:
            output_val[...] = (-dl[0] / t.shape[0]) * t
        else:
            ops.nll_loss_gradient(t, dl, output_val)

    def gradient(self, node, output_grad):
        reason = "nll_loss_gradient_op: second derivatives of the loss"
        return [Undefined(reason), Undefined(reason)]

    def infer_shape(self, node, input_shapes):
        t, dl = (tuple(s) for s in input_shapes)
        NllLossOp.infer_shape(self, node, [t, t])
        if dl != (1,):
            raise self._error(node, f"dloss must have shape (1,), got {_shape_str(dl)}")
        return t


class TanhOp(Op):
    """``tanh_op(x)``: tanh elementwise, any shape. Gradient: ``tanh_gradient_op(y, dy)`` =
    dy * (1 - y**2) from the output y (no second pass over x)."""

    name = "tanh_op"
    label = "Tanh"

    def __call__(self, node_x: Node) -> Node:
        new_node = Op.__call__(self)
        new_node.inputs = [node_x]
        new_node.name = f"{self.label}({_short(node_x)})"
        return new_node

    def compute(self, node, input_vals, output_val, ctx=None):
        x = input_vals[0]
        if ctx is None:
            output_val[...] = np.tanh(x) if self.label == "Tanh" else np_sigmoid(x)
        elif self.label == "Tanh":
            ops.tanh(x, output_val)
        else:
            ops.sigmoid(x, output_val)

    def gradient(self, node, output_grad):
        grad_op = tanh_gradient_op if self.label == "Tanh" else sigmoid_gradient_op
        return [grad_op(node, output_grad)]

    def infer_shape(self, node, input_shapes):
        return tuple(input_shapes[0])


class SigmoidOp(TanhOp):
    """``sigmoid_op(x)``: 1 / (1 + exp(-x)) elementwise, computed through exp(-|x|) so that large
    |x| neither overflows nor loses the result (it saturates to 0 or 1). Gradient:
    ``sigmoid_gradient_op(y, dy)`` = dy * y * (1 - y)."""

    name = "sigmoid_op"
    label = "Sigmoid"


class TanhGradientOp(Op):
    """``tanh_gradient_op(y, dy)``: dy * (1 - y**2), y = tanh(x) the forward output (one shape)."""

    name = "tanh_gradient_op"
    label = "Tanh"

    def __call__(self, node_y: Node, node_dy: Node) -> Node:
        new_node = Op.__call__(self)
        new_node.inputs = [node_y, node_dy]
        new_node.name = f"{self.label}Grad({_short(node_y)},{_short(node_dy)})"
        return new_node

    def compute(self, node, input_vals, output_val, ctx=None):
        y, dy = input_vals
        if ctx is None:
            output_val[...] = dy * (1 - y * y) if self.label == "Tanh" else dy * y * (1 - y)
        elif self.label == "Tanh":
            ops.tanh_gradient(y, dy, output_val)
        else:
            ops.sigmoid_gradient(y, dy, output_val)

    def gradient(self, node, output_grad):
        reason = f"{self.name}: second derivatives of {self.label.lower()}"
        return [Undefined(reason), Undefined(reason)]

    def infer_shape(self, node, input_shapes):
        return self._same_shapes(node, input_shapes[0], input_shapes[1])


class SigmoidGradientOp(TanhGradientOp):
    """``sigmoid_gradient_op(y, dy)``: dy * y * (1 - y), y = sigmoid(x) the forward output."""

    name = "sigmoid_gradient_op"
    label = "Sigmoid"


_dropout_seeds = itertools.count(1)


class DropoutOp(Op):
    """``dropout_op(x, p, seed=None)``: inverted dropout (Srivastava et al., "Dropout", JMLR 2014,
    with the 1/(1-p) scaling at training time so that evaluation is the identity).

    Training (``Executor(..., training=True)``, the default): element i of x is zeroed where
    uniform01(s, i) < p and scaled by 1/(1-p) otherwise, with uniform01 the counter-based
    generator of ``extensions/src/random.h`` (so numpy, cpu and CUDA drop the same elements) and
    s = (seed + step) mod 2**64, ``step`` the executor's count of training runs so far: a fresh,
    reproducible mask every step. Evaluation (``Executor(..., training=False)``; the predictor of
    :mod:`gpumat.train` uses it): the identity. 0 <= p <= 1 (a float); ``seed`` an int in
    [0, 2**64), or None for a process-wide counter (1, 2, ... in creation order), so two dropout
    layers never share a mask. The gradient is ``dropout_op(dy, p, seed)``: the same mask and
    scale, since the op is linear in x with the same step.
    """

    name = "dropout_op"
    takes_run_state = True
    seeded_scalars = {"dropout_": 1}  # ops.dropout(x, out, p, seed + step): seed is scalar 1

    def __call__(self, node_x: Node, p, seed=None) -> Node:
        new_node = Op.__call__(self)
        new_node.p = ops._probability(p, self.name)
        new_node.seed = next(_dropout_seeds) if seed is None else ops._seed(seed)
        new_node.inputs = [node_x]
        new_node.name = f"Dropout({_short(node_x)},p={new_node.p:g},seed={new_node.seed})"
        return new_node

    def compute(self, node, input_vals, output_val, ctx=None, training=True, step=0):
        x = input_vals[0]
        if not training or node.p == 0.0:
            if ctx is None:
                np.copyto(output_val, x)
            else:
                ops.copy(x, output_val)
            return
        seed = (node.seed + int(step)) % 2**64
        if ctx is None:
            output_val[...] = np_dropout(x, node.p, seed)
        else:
            ops.dropout(x, output_val, node.p, seed)

    def gradient(self, node, output_grad):
        return [dropout_op(output_grad, node.p, node.seed)]

    def infer_shape(self, node, input_shapes):
        return tuple(input_shapes[0])


class _ReduceOp(_AxisOp):
    """``reduce_<kind>_op(x, axis, keepdims=False)``: the sum, mean or max of x along ``axis``;
    the output drops that axis, or keeps it with length 1 when ``keepdims``."""

    kind = "sum"

    def __call__(self, node_x: Node, axis, keepdims=False) -> Node:
        new_node = Op.__call__(self)
        self._set_axis(new_node, axis)
        if not isinstance(keepdims, (bool, np.bool_)):
            raise TypeError(f"{self.name}: keepdims must be a bool, got {keepdims!r}")
        new_node.keepdims = bool(keepdims)
        new_node.inputs = [node_x]
        kd = ",keepdims" if keepdims else ""
        new_node.name = f"Reduce{self.kind.title()}({_short(node_x)},axis={new_node.axis}{kd})"
        return new_node

    def compute(self, node, input_vals, output_val, ctx=None):
        x = input_vals[0]
        if ctx is None:
            f = {"sum": np.sum, "mean": np.mean, "max": np.max}[self.kind]
            output_val[...] = f(x, axis=node.axis).reshape(output_val.shape)
        else:
            {"sum": ops.reduce_sum, "mean": ops.reduce_mean, "max": ops.reduce_max}[self.kind](
                x, output_val, node.axis
            )

    def gradient(self, node, output_grad):
        x = node.inputs[0]
        if self.kind == "max":
            return [reduce_max_gradient_op(x, node, output_grad, node.axis)]
        return [broadcast_axis_op(output_grad, x, node.axis, mean=self.kind == "mean")]

    def infer_shape(self, node, input_shapes):
        s = tuple(input_shapes[0])
        a = _axis(self, node, s, node.axis)
        if self.kind != "sum" and s[a] == 0 and int(np.prod(s, dtype=np.int64)) == 0:
            others = s[:a] + s[a + 1 :]
            if int(np.prod(others, dtype=np.int64)) > 0:
                raise self._error(
                    node, f"cannot take the {self.kind} of an empty axis {a} of {_shape_str(s)}"
                )
        return s[:a] + (1,) + s[a + 1 :] if node.keepdims else s[:a] + s[a + 1 :]


class ReduceSumOp(_ReduceOp):
    """``reduce_sum_op(x, axis, keepdims=False)``: the sum along ``axis``. Gradient: dy repeated
    along the axis (``broadcast_axis_op``)."""

    name = "reduce_sum_op"
    kind = "sum"


class ReduceMeanOp(_ReduceOp):
    """``reduce_mean_op(x, axis, keepdims=False)``: the mean along a non-empty ``axis``.
    Gradient: dy / n repeated along the axis."""

    name = "reduce_mean_op"
    kind = "mean"


class ReduceMaxOp(_ReduceOp):
    """``reduce_max_op(x, axis, keepdims=False)``: the max along a non-empty ``axis`` (NaN wins).

    Gradient (``reduce_max_gradient_op``): each slice's dy is **split equally among its tied
    maxima**, as TensorFlow's ``reduce_max`` and PyTorch's ``amax`` do (PyTorch's ``max(dim)``
    instead routes it to one index). Splitting is the symmetric choice: it does not depend on the
    order of the elements along the axis (so it commutes with permutations of that axis), it is
    the average of the one-hot subgradients, and it keeps the gradient of max(x, x) = x equal to
    1 in total. (``max_pool2d_op`` routes to the first maximum instead: its kernel recomputes one
    argmax per window.)
    """

    name = "reduce_max_op"
    kind = "max"


class BroadcastAxisOp(_AxisOp):
    """``broadcast_axis_op(g, like, axis, mean=False)``: g (like's shape reduced along ``axis``,
    the axis dropped or kept as 1) repeated along ``axis`` to like's shape, times 1/n when
    ``mean`` (n = like's length along the axis): the gradient of reduce_sum / reduce_mean. Only
    ``like``'s shape is used. Linear in g: its gradient is reduce_sum / reduce_mean again."""

    name = "broadcast_axis_op"
    shape_only_inputs = (1,)

    def __call__(self, node_g: Node, node_like: Node, axis, mean=False) -> Node:
        new_node = Op.__call__(self)
        self._set_axis(new_node, axis)
        new_node.mean = bool(mean)
        new_node.inputs = [node_g, node_like]
        new_node.name = (
            f"BroadcastAxis({_short(node_g)},{_short(node_like)},axis={new_node.axis}"
            f"{',mean' if mean else ''})"
        )
        return new_node

    def compute(self, node, input_vals, output_val, ctx=None):
        g = input_vals[0]
        a = node.axis % output_val.ndim
        n = output_val.shape[a]
        scale = 1.0 / n if node.mean and n > 0 else 1.0
        if ctx is None:
            output_val[...] = (
                np.expand_dims(g.reshape(output_val.shape[:a] + output_val.shape[a + 1 :]), a)
                * scale
            )
        else:
            ops.broadcast_axis(g, output_val, a, scale)

    def gradient(self, node, output_grad):
        g = node.inputs[0]
        op = reduce_mean_op if node.mean else reduce_sum_op
        return [reshape_op(op(output_grad, node.axis), g), None]

    def infer_shape(self, node, input_shapes):
        g, like = (tuple(s) for s in input_shapes)
        a = _axis(self, node, like, node.axis)
        if g not in (like[:a] + like[a + 1 :], like[:a] + (1,) + like[a + 1 :]):
            raise self._error(
                node,
                f"g has shape {_shape_str(g)}, expected {_shape_str(like)} reduced along axis {a}",
            )
        return like


class ReduceMaxGradientOp(_AxisOp):
    """``reduce_max_gradient_op(x, y, dy, axis)``: dL/dx of y = reduce_max(x, axis) given y and
    dy: dy / t at the t tied maxima of each slice, 0 elsewhere (see ``reduce_max_op``)."""

    name = "reduce_max_gradient_op"

    def __call__(self, node_x: Node, node_y: Node, node_dy: Node, axis) -> Node:
        new_node = Op.__call__(self)
        self._set_axis(new_node, axis)
        new_node.inputs = [node_x, node_y, node_dy]
        args = f"{_short(node_x)},{_short(node_y)},{_short(node_dy)}"
        new_node.name = f"ReduceMaxGrad({args},axis={new_node.axis})"
        return new_node

    def compute(self, node, input_vals, output_val, ctx=None):
        x, y, dy = input_vals
        if ctx is None:
            a = node.axis % x.ndim
            yk = np.expand_dims(y.reshape(x.shape[:a] + x.shape[a + 1 :]), a)
            dyk = np.expand_dims(dy.reshape(yk.shape[:a] + yk.shape[a + 1 :]), a)
            tie = (x == yk) | (np.isnan(x) & np.isnan(yk))
            output_val[...] = np.where(tie, dyk / np.maximum(tie.sum(axis=a, keepdims=True), 1), 0)
        else:
            ops.reduce_max_gradient(x, y, dy, output_val, node.axis)

    def gradient(self, node, output_grad):
        # Piecewise constant in x and y; linear in dy (a gather at the maxima: no kernel yet).
        return [None, None, Undefined("reduce_max_gradient_op: second derivatives of max")]

    def infer_shape(self, node, input_shapes):
        x, y, dy = (tuple(s) for s in input_shapes)
        a = _axis(self, node, x, node.axis)
        if y != dy or y not in (x[:a] + x[a + 1 :], x[:a] + (1,) + x[a + 1 :]):
            raise self._error(
                node,
                f"y {_shape_str(y)} and dy {_shape_str(dy)} must be x {_shape_str(x)} reduced "
                f"along axis {a}",
            )
        return x


log_softmax_op = LogSoftmaxOp()
softmax_gradient_op = SoftmaxGradientOp()
log_softmax_gradient_op = LogSoftmaxGradientOp()
nll_loss_op = NllLossOp()
nll_loss_gradient_op = NllLossGradientOp()
tanh_op = TanhOp()
sigmoid_op = SigmoidOp()
tanh_gradient_op = TanhGradientOp()
sigmoid_gradient_op = SigmoidGradientOp()
dropout_op = DropoutOp()
reduce_sum_op = ReduceSumOp()
reduce_mean_op = ReduceMeanOp()
reduce_max_op = ReduceMaxOp()
broadcast_axis_op = BroadcastAxisOp()
reduce_max_gradient_op = ReduceMaxGradientOp()
