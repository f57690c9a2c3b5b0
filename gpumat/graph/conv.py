"""Convolution as graph ops (NCHW, cross-correlation, zero padding), with the channel bias.

- ``conv2d_op(x, w, stride=1, padding=0)``: x (N, C, H, W), w (F, C, KH, KW) -> (N, F, OH, OW),
  OH = (H + 2*ph - KH) // sh + 1; ``conv1d_op(x, w, stride=1, padding=0)``: x (N, C, W),
  w (F, C, K) -> (N, F, OW).
- Their gradients, ``conv2d_gradient_input_op`` and ``conv2d_gradient_filter_op`` (and conv1d's),
  are graph ops too: linear in each argument, so they have gradients themselves.
- ``add_channel_bias_op(x, b)``: x (N, C, ...) + b (C,) along axis 1 (a convolution's bias);
  its gradient with respect to b is ``reduce_sum_channels_op``.

Kernels: :func:`gpumat.ops.conv2d` and family: im2col + our matmul over chunks of the batch (see
its docstring for why). Sources: convolution as im2col + GEMM follows Chellapilla, Puri & Simard,
"High Performance Convolutional Neural Networks for Document Processing" (2006) and Caffe's
``im2col``; the gradient formulas are the standard ones (Goodfellow, Bengio & Courville, *Deep
Learning*, 9.5).
"""

from __future__ import annotations

from gpumat._checks import as_int, as_pair
from gpumat.graph.elementwise import zeroslike_op
from gpumat.graph.node import Attr, Node, Op, shape_str, short_name

__all__ = [
    "AddChannelBiasOp",
    "Conv1dGradientFilterOp",
    "Conv1dGradientInputOp",
    "Conv1dOp",
    "Conv2dGradientFilterOp",
    "Conv2dGradientInputOp",
    "Conv2dOp",
    "ReduceSumChannelsOp",
    "add_channel_bias_op",
    "conv1d_gradient_filter_op",
    "conv1d_gradient_input_op",
    "conv1d_op",
    "conv2d_gradient_filter_op",
    "conv2d_gradient_input_op",
    "conv2d_op",
    "conv_output_size",
    "reduce_sum_channels_op",
]


def conv_output_size(size: int, kernel: int, stride: int = 1, padding: int = 0) -> int:
    """(size + 2*padding - kernel) // stride + 1, or 0 when the padded input is shorter than the
    kernel: the output length of a convolution or pooling window along one axis."""
    span = size + 2 * padding - kernel
    return span // stride + 1 if span >= 0 else 0


class _ConvBase(Op):
    """Shared by the conv ops: ``spatial`` is 2 (conv2d) or 1 (conv1d, seen as H = KH = 1).

    Nodes carry ``stride`` and ``padding`` as (h, w) pairs; conv1d's are (1, s) and (0, p):
    ``check_attrs`` converts what the call gives (ints, or pairs for conv2d).
    """

    spatial = 2
    label = "Conv2d"
    suffix = ""  # conv2d; "_gradient_input", "_gradient_filter"
    attrs = (Attr("stride", default=1, type=tuple), Attr("padding", default=0, type=tuple))

    def check_attrs(self, attrs: dict) -> None:
        stride, padding = attrs["stride"], attrs["padding"]
        if self.spatial == 2:
            s = as_pair(stride, "stride", self.name)
            p = as_pair(padding, "padding", self.name)
        else:
            s = (1, as_int(stride, "stride", self.name))
            p = (0, as_int(padding, "padding", self.name))
        if min(s) < 1:
            raise ValueError(
                f"{self.name}: stride must be >= 1, got {s if self.spatial == 2 else s[1]}"
            )
        if min(p) < 0:
            raise ValueError(
                f"{self.name}: padding must be >= 0, got {p if self.spatial == 2 else p[1]}"
            )
        attrs.update(stride=s, padding=p)

    def _attr_str(self, node: Node) -> str:
        if self.spatial == 2:
            return f"s={node.stride[0]}x{node.stride[1]},p={node.padding[0]}x{node.padding[1]}"
        return f"s={node.stride[1]},p={node.padding[1]}"

    @property
    def kernel(self) -> str:
        return f"conv{self.spatial}d{self.suffix}"  # conv2d, conv1d_gradient_input, ...

    def kernel_args(self, node: Node) -> tuple:
        return self._public(node)

    def _check_dy(self, node, dy: tuple, expected: tuple, context: str) -> None:
        if dy != expected:
            raise self._error(
                node, f"dy has shape {shape_str(dy)}, expected {shape_str(expected)} for {context}"
            )

    def node_name(self, node):
        # The first two inputs only: the third of a gradient op gives just its shape.
        args = ",".join(short_name(i) for i in node.inputs[:2])
        return f"{self.label}({args},{self._attr_str(node)})"

    def _family(self) -> tuple:
        """(conv, gradient with respect to the input, to the filter) of this op's rank."""
        return _CONV_OPS[self.spatial], *_GRAD_OPS[self.spatial]

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
            raise self._error(node, f"{x_name} must be {rank}-D {layout}, got {shape_str(xs)}")
        if len(ws) != rank:
            raise self._error(node, f"{w_name} must be {rank}-D {flayout}, got {shape_str(ws)}")
        desc = f"{x_name} {shape_str(xs)}, {w_name} {shape_str(ws)}, {self._attr_str(node)}"
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


class Conv2dOp(_ConvBase):
    """``conv2d_op(x, w, stride=1, padding=0)``: x (N, C, H, W), w (F, C, KH, KW) -> (N, F, OH, OW).

    Cross-correlation (the filter is not flipped) with zero padding; ``stride`` and ``padding`` are
    ints or (h, w) pairs; OH = (H + 2*ph - KH) // sh + 1. Gradients: ``conv2d_gradient_input_op``
    and ``conv2d_gradient_filter_op``. Add a bias with ``add_channel_bias_op``.
    """

    name = "conv2d_op"
    inputs = ("node_x", "node_w")

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
    suffix = "_gradient_input"
    shape_only_inputs = (2,)  # x
    inputs = ("node_dy", "node_w", "node_x")
    label = "Conv2dGradInput"

    def gradient(self, node, output_grad):
        # dx = T_w(dy), the adjoint of y = C_w(x): <T_w(dy), h> = <dy, C_w(h)>, so
        # d/d dy = conv(h, w) and d/dw = grad_filter(h, dy).
        dy, w, _ = node.inputs
        conv, _, grad_filter, p = *self._family(), self._public(node)
        return [conv(output_grad, w, *p), grad_filter(output_grad, dy, w, *p), None]

    def infer_shape(self, node, input_shapes):
        dy, w, x = (tuple(s) for s in input_shapes)
        self._check_dy(node, dy, self._geometry(node, x, w), f"x {shape_str(x)}")
        return x


class Conv1dGradientInputOp(Conv2dGradientInputOp):
    """``conv1d_gradient_input_op(dy, w, x, stride, padding)``: dL/dx of ``conv1d_op``."""

    name = "conv1d_gradient_input_op"
    spatial = 1
    label = "Conv1dGradInput"


class Conv2dGradientFilterOp(_ConvBase):
    """``conv2d_gradient_filter_op(x, dy, w, stride, padding)``: dL/dw of ``conv2d_op(x, w)``
    given dy = dL/dy; only w's shape is used. Linear in x and in dy."""

    name = "conv2d_gradient_filter_op"
    suffix = "_gradient_filter"
    shape_only_inputs = (2,)  # w
    inputs = ("node_x", "node_dy", "node_w")
    label = "Conv2dGradFilter"

    def gradient(self, node, output_grad):
        # dw = G(x, dy) with <G(x, dy), h> = <dy, conv(x, h)>: d/dx = grad_input(dy, h),
        # d/d dy = conv(x, h).
        x, dy, _ = node.inputs
        conv, grad_input, _, p = *self._family(), self._public(node)
        return [grad_input(dy, output_grad, x, *p), conv(x, output_grad, *p), None]

    def infer_shape(self, node, input_shapes):
        x, dy, w = (tuple(s) for s in input_shapes)
        context = f"x {shape_str(x)} and w {shape_str(w)}"
        self._check_dy(node, dy, self._geometry(node, x, w), context)
        return w


class Conv1dGradientFilterOp(Conv2dGradientFilterOp):
    """``conv1d_gradient_filter_op(x, dy, w, stride, padding)``: dL/dw of ``conv1d_op``."""

    name = "conv1d_gradient_filter_op"
    spatial = 1
    label = "Conv1dGradFilter"


class AddChannelBiasOp(Op):
    """``add_channel_bias_op(x, b)``: x (N, C, ...) + b (C,) along axis 1, for x of rank >= 2.

    The bias of a convolution (broadcastto_op only repeats over leading axes, and the channel axis
    is not last). The gradient with respect to b sums over every axis but 1.
    """

    name = "add_channel_bias_op"
    kernel = "add_channel_bias"
    inputs = ("node_x", "node_b")
    label = "AddChannelBias"

    def gradient(self, node, output_grad):
        return [output_grad, reduce_sum_channels_op(output_grad)]

    def infer_shape(self, node, input_shapes):
        x, b = (tuple(s) for s in input_shapes)
        if len(x) < 2:
            raise self._error(node, f"x must be (N, C, ...) with rank >= 2, got {shape_str(x)}")
        if b != (x[1],):
            raise self._error(
                node, f"bias has shape {shape_str(b)}, expected ({x[1]},) for x {shape_str(x)}"
            )
        return x


class ReduceSumChannelsOp(Op):
    """``reduce_sum_channels_op(x)``: x (N, C, ...) summed over every axis but 1 -> (C,)."""

    name = "reduce_sum_channels_op"
    kernel = "reduce_sum_channels"
    inputs = ("node_x",)
    label = "ReduceSumChannels"

    def gradient(self, node, output_grad):
        # Each input element receives its channel's output gradient: a broadcast along axis 1.
        x = node.inputs[0]
        return [add_channel_bias_op(zeroslike_op(x), output_grad)]

    def infer_shape(self, node, input_shapes):
        x = tuple(input_shapes[0])
        if len(x) < 2:
            raise self._error(node, f"x must be (N, C, ...) with rank >= 2, got {shape_str(x)}")
        return (x[1],)


conv2d_op = Conv2dOp()
conv1d_op = Conv1dOp()
conv2d_gradient_input_op = Conv2dGradientInputOp()
conv2d_gradient_filter_op = Conv2dGradientFilterOp()
conv1d_gradient_input_op = Conv1dGradientInputOp()
conv1d_gradient_filter_op = Conv1dGradientFilterOp()
add_channel_bias_op = AddChannelBiasOp()
reduce_sum_channels_op = ReduceSumChannelsOp()

_CONV_OPS = {2: conv2d_op, 1: conv1d_op}
_GRAD_OPS = {
    2: (conv2d_gradient_input_op, conv2d_gradient_filter_op),
    1: (conv1d_gradient_input_op, conv1d_gradient_filter_op),
}
