"""Pooling as graph ops over the (H, W) planes of x (N, C, H, W): ``max_pool2d_op``,
``avg_pool2d_op``, ``adaptive_avg_pool2d_op`` and their gradient ops.

``kernel_size``, ``stride`` (default: the kernel size) and ``padding`` are ints or (h, w) pairs,
0 <= padding <= kernel_size // 2. Max pooling routes each window's gradient to its argmax, the
first maximum in row-major window order (the device kernels recompute it from x rather than
store indices); average pooling counts padding as zeros (PyTorch's ``count_include_pad=True``).
Kernels: :func:`gpumat.ops.max_pool2d` and family.
"""

from __future__ import annotations

from gpumat._checks import as_pair
from gpumat.graph.conv import conv_output_size
from gpumat.graph.node import Attr, Node, Op, Undefined, shape_str, short_name

__all__ = [
    "AdaptiveAvgPool2dGradientOp",
    "AdaptiveAvgPool2dOp",
    "AvgPool2dGradientOp",
    "AvgPool2dOp",
    "MaxPool2dGradientOp",
    "MaxPool2dOp",
    "adaptive_avg_pool2d_gradient_op",
    "adaptive_avg_pool2d_op",
    "avg_pool2d_gradient_op",
    "avg_pool2d_op",
    "max_pool2d_gradient_op",
    "max_pool2d_op",
]


class _PoolBase(Op):
    """Nodes carry ``kernel_size``, ``stride`` and ``padding`` as (h, w) pairs."""

    label = "Pool"
    takes_max = False  # max pooling: a window must hold an element of x
    attrs = (
        Attr("kernel_size", as_pair, type=tuple),
        Attr("stride", lambda s, name, op: s if s is None else as_pair(s, name, op), None, tuple),
        Attr("padding", as_pair, 0, tuple),
    )

    def check_attrs(self, attrs: dict) -> None:
        k, s, p = attrs["kernel_size"], attrs["stride"], attrs["padding"]
        s = attrs["stride"] = k if s is None else s  # the stride defaults to the kernel size
        if min(k) < 1 or min(s) < 1:
            raise ValueError(f"{self.name}: kernel_size and stride must be >= 1, got {k} and {s}")
        if min(p) < 0 or p[0] > k[0] // 2 or p[1] > k[1] // 2:
            raise ValueError(
                f"{self.name}: padding must be between 0 and half the kernel size, "
                f"got {p} for kernel {k}"
            )

    def _attr_str(self, node: Node) -> str:
        (kh, kw), (sh, sw), (ph, pw) = node.kernel_size, node.stride, node.padding
        return f"k={kh}x{kw},s={sh}x{sw},p={ph}x{pw}"

    def _args(self, node: Node) -> tuple:
        return node.kernel_size, node.stride, node.padding

    kernel_args = _args

    def _gradient_shape(self, node: Node, x: tuple, dy: tuple) -> tuple:
        """x's shape, the gradient op's output, once dy has the forward output's shape."""
        expected = self._geometry(node, x)
        if dy != expected:
            raise self._error(node, f"dy has shape {shape_str(dy)}, expected {shape_str(expected)}")
        return x

    def _geometry(self, node: Node, x_shape, x_name="x") -> tuple:
        xs = tuple(x_shape)
        if len(xs) != 4:
            raise self._error(node, f"{x_name} must be 4-D (N, C, H, W), got {shape_str(xs)}")
        oh = conv_output_size(xs[2], node.kernel_size[0], node.stride[0], node.padding[0])
        ow = conv_output_size(xs[3], node.kernel_size[1], node.stride[1], node.padding[1])
        if oh < 1 or ow < 1:
            raise self._error(
                node,
                f"the output would be empty: the padded input is smaller than the kernel "
                f"({x_name} {shape_str(xs)}, {self._attr_str(node)})",
            )
        if self.takes_max and xs[0] * xs[1] > 0 and (xs[2] == 0 or xs[3] == 0):
            raise self._error(
                node,
                f"{x_name} {shape_str(xs)} has an empty spatial dimension: every window would hold "
                "only padding, whose maximum is undefined",
            )
        return (xs[0], xs[1], oh, ow)

    def node_name(self, node):
        names = ",".join(short_name(i) for i in node.inputs)
        return f"{self.label}({names},{self._attr_str(node)})"


class MaxPool2dOp(_PoolBase):
    """``max_pool2d_op(x, kernel_size, stride=None, padding=0)``: the max over each window of the
    (H, W) planes of x (N, C, H, W) -> (N, C, OH, OW).

    ``kernel_size``, ``stride`` (default: the kernel size) and ``padding`` are ints or (h, w)
    pairs, 0 <= padding <= kernel_size // 2 (padding never wins). The gradient routes each window's
    gradient to its argmax, the first maximum in row-major window order, so ties send it to exactly
    one element; the device kernels recompute the argmax from x instead of storing indices.
    """

    name = "max_pool2d_op"
    kernel = "max_pool2d"
    takes_max = True
    label = "MaxPool2d"
    inputs = ("node_x",)

    def gradient(self, node, output_grad):
        return [max_pool2d_gradient_op(node.inputs[0], output_grad, *self._args(node))]

    def infer_shape(self, node, input_shapes):
        return self._geometry(node, input_shapes[0])


class MaxPool2dGradientOp(_PoolBase):
    """``max_pool2d_gradient_op(x, dy, kernel_size, stride, padding)``: dL/dx of
    ``max_pool2d_op(x, ...)`` given dy = dL/dy (N, C, OH, OW)."""

    name = "max_pool2d_gradient_op"
    kernel = "max_pool2d_gradient"
    takes_max = True
    label = "MaxPool2dGrad"
    inputs = ("node_x", "node_dy")

    def gradient(self, node, output_grad):
        # Piecewise constant in x (zero almost everywhere); linear in dy (a gather at the argmax,
        # which has no kernel yet).
        return [None, Undefined("max_pool2d_gradient_op: second derivatives of max pooling")]

    def infer_shape(self, node, input_shapes):
        x, dy = (tuple(s) for s in input_shapes)
        return self._gradient_shape(node, x, dy)


class AvgPool2dOp(_PoolBase):
    """``avg_pool2d_op(x, kernel_size, stride=None, padding=0)``: the mean over each window of the
    (H, W) planes of x (N, C, H, W) -> (N, C, OH, OW); padding counts as zeros (the divisor is
    always KH*KW, PyTorch's ``count_include_pad=True``). Arguments as for ``max_pool2d_op``."""

    name = "avg_pool2d_op"
    kernel = "avg_pool2d"
    label = "AvgPool2d"
    inputs = ("node_x",)

    def gradient(self, node, output_grad):
        return [avg_pool2d_gradient_op(output_grad, node.inputs[0], *self._args(node))]

    def infer_shape(self, node, input_shapes):
        return self._geometry(node, input_shapes[0])


class AvgPool2dGradientOp(_PoolBase):
    """``avg_pool2d_gradient_op(dy, x, kernel_size, stride, padding)``: dL/dx of
    ``avg_pool2d_op(x, ...)`` given dy; only x's shape is used. Linear: its gradient is average
    pooling again."""

    name = "avg_pool2d_gradient_op"
    kernel = "avg_pool2d_gradient"
    shape_only_inputs = (1,)  # x
    label = "AvgPool2dGrad"
    inputs = ("node_dy", "node_x")

    def gradient(self, node, output_grad):
        return [avg_pool2d_op(output_grad, *self._args(node)), None]

    def infer_shape(self, node, input_shapes):
        dy, x = (tuple(s) for s in input_shapes)
        return self._gradient_shape(node, x, dy)


max_pool2d_op = MaxPool2dOp()
max_pool2d_gradient_op = MaxPool2dGradientOp()
avg_pool2d_op = AvgPool2dOp()
avg_pool2d_gradient_op = AvgPool2dGradientOp()


def _output_size(value, name: str, op: str) -> tuple:
    size = as_pair(value, name, op)
    if min(size) < 1:
        raise ValueError(f"{op}: {name} must be >= 1, got {size}")
    return size


class AdaptiveAvgPool2dOp(Op):
    """``adaptive_avg_pool2d_op(x, output_size)``: x (N, C, H, W) -> (N, C, OH, OW), output_size
    (OH, OW) (an int or a pair, >= 1; OH > H allowed), each output the mean of x's rows
    [floor(oh H / OH), ceil((oh + 1) H / OH)) and columns likewise (PyTorch's adaptive windows;
    H, W >= 1). Gradient: ``adaptive_avg_pool2d_gradient_op(dy, x, output_size)``."""

    name, label, kernel = "adaptive_avg_pool2d_op", "AdaptiveAvgPool2d", "adaptive_avg_pool2d"
    inputs = ("node_x",)
    attrs = (Attr("output_size", _output_size, type=tuple),)

    def node_name(self, node):
        return f"AdaptiveAvgPool2d({short_name(node.inputs[0])},{node.output_size})"

    def gradient(self, node, output_grad):
        return [adaptive_avg_pool2d_gradient_op(output_grad, node.inputs[0], node.output_size)]

    def infer_shape(self, node, input_shapes):
        x = tuple(input_shapes[0])
        if len(x) != 4 or min(x[2:], default=0) < 1:
            raise self._error(
                node, f"x must be 4-D (N, C, H, W) with H, W >= 1, got {shape_str(x)}"
            )
        return x[:2] + tuple(node.output_size)


class AdaptiveAvgPool2dGradientOp(Op):
    """``adaptive_avg_pool2d_gradient_op(dy, x, output_size)``: dL/dx of
    ``adaptive_avg_pool2d_op(x, output_size)`` given dy (N, C, OH, OW); only x's shape is used.
    Linear: its gradient is adaptive average pooling again."""

    name = "adaptive_avg_pool2d_gradient_op"
    label, kernel = "AdaptiveAvgPool2dGrad", "adaptive_avg_pool2d_gradient"
    inputs = ("node_dy", "node_x")
    shape_only_inputs = (1,)  # x
    attrs = AdaptiveAvgPool2dOp.attrs

    def gradient(self, node, output_grad):
        return [adaptive_avg_pool2d_op(output_grad, node.output_size), None]

    def infer_shape(self, node, input_shapes):
        dy, x = (tuple(s) for s in input_shapes)
        want = AdaptiveAvgPool2dOp.infer_shape(adaptive_avg_pool2d_op, node, [x])
        if dy != want:
            raise self._error(node, f"dy has shape {shape_str(dy)}, expected {shape_str(want)}")
        return x


adaptive_avg_pool2d_op = AdaptiveAvgPool2dOp()
adaptive_avg_pool2d_gradient_op = AdaptiveAvgPool2dGradientOp()
