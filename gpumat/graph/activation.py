"""Activations as graph ops: ReLU, tanh, sigmoid (each with its gradient op), the fused ReLU and
bias gradient, and dropout.

Kernels: :func:`gpumat.ops.relu`, :func:`gpumat.ops.tanh`, :func:`gpumat.ops.sigmoid`, their
gradients, :func:`gpumat.ops.relu_bias_gradient`, :func:`gpumat.ops.dropout`. The tanh and sigmoid
gradients are computed from the forward output y (dy * (1 - y**2), dy * y * (1 - y)), so the
backward pass does not read x again.
"""

from __future__ import annotations

import itertools

from gpumat._checks import as_probability, as_seed
from gpumat.graph.node import (
    Attr,
    Op,
    UnaryGradientOp,
    UnaryOp,
    kernels_for,
    shape_str,
    short_name,
)

__all__ = [
    "DropoutOp",
    "ReluBiasGradientOp",
    "ReluGradientOp",
    "ReluOp",
    "SigmoidGradientOp",
    "SigmoidOp",
    "TanhGradientOp",
    "TanhOp",
    "dropout_op",
    "relu_bias_gradient_op",
    "relu_gradient_op",
    "relu_op",
    "sigmoid_gradient_op",
    "sigmoid_op",
    "tanh_gradient_op",
    "tanh_op",
]


class ReluOp(UnaryOp):
    """max(a, 0) elementwise."""

    name, label, kernel = "relu_op", "Relu", "relu"
    tensor_method, tensor_doc = (
        "relu",
        "max(x, 0) elementwise (the gradient at 0 is 0, as PyTorch's).",
    )
    inputs = ("node_A",)

    def gradient(self, node, output_grad):
        return [relu_gradient_op(node.inputs[0], output_grad)]


class ReluGradientOp(Op):
    """``relu_gradient_op(a, g)``: g where a > 0, else 0 (equal shapes).

    NOTE: the subgradient at a == 0 is taken as 0, as in the kernel (and PyTorch).
    """

    name = "relu_gradient_op"
    kernel = "relu_gradient"
    inputs = ("node_A", "node_G")
    label = "ReluGradient"

    def gradient(self, node, output_grad):
        # Piecewise constant in a (zero derivative almost everywhere); linear in g, same mask.
        return [None, relu_gradient_op(node.inputs[0], output_grad)]

    def infer_shape(self, node, input_shapes):
        return self._same_shapes(node, input_shapes[0], input_shapes[1])


class ReluBiasGradientOp(Op):
    """``relu_bias_gradient_op(y, g)``: two outputs, dz = g where y > 0 else 0 (rows, cols), the
    node's value, and dbias = column sums of dz (cols,), the value of its :class:`FusedOutputOp`
    node (index 1). y is the ReLU's output or input (same mask)."""

    name, kernel = "relu_bias_gradient_op", "relu_bias_gradient"
    no_gradient = "made by the fusion pass, after gradients"
    num_outputs = 2
    inputs = ("node_A", "node_G")
    label = "ReluBiasGradient"

    def infer_shape(self, node, input_shapes):
        sy, sg = (tuple(s) for s in input_shapes)
        if len(sy) != 2:
            raise self._error(node, f"y must be 2-D (rows, cols), got {shape_str(sy)}")
        return self._same_shapes(node, sy, sg)


class TanhOp(UnaryOp):
    """``tanh_op(x)``: tanh elementwise, any shape. Gradient: ``tanh_gradient_op(y, dy)`` =
    dy * (1 - y**2) from the output y (no second pass over x)."""

    name, label, kernel = "tanh_op", "Tanh", "tanh"
    tensor_method, tensor_doc = "tanh", "tanh elementwise."

    def gradient(self, node, output_grad):
        return [tanh_gradient_op(node, output_grad)]


class SigmoidOp(UnaryOp):
    """``sigmoid_op(x)``: 1 / (1 + exp(-x)) elementwise, computed through exp(-|x|) so that large
    |x| neither overflows nor loses the result (it saturates to 0 or 1). Gradient:
    ``sigmoid_gradient_op(y, dy)`` = dy * y * (1 - y)."""

    name, label, kernel = "sigmoid_op", "Sigmoid", "sigmoid"
    tensor_method, tensor_doc = (
        "sigmoid",
        "1 / (1 + exp(-x)) elementwise (no overflow for large |x|).",
    )

    def gradient(self, node, output_grad):
        return [sigmoid_gradient_op(node, output_grad)]


class TanhGradientOp(UnaryGradientOp):
    """``tanh_gradient_op(y, dy)``: dy * (1 - y**2), y = tanh(x) the forward output (one shape)."""

    name, label, kernel = "tanh_gradient_op", "TanhGrad", "tanh_gradient"


class SigmoidGradientOp(UnaryGradientOp):
    """``sigmoid_gradient_op(y, dy)``: dy * y * (1 - y), y = sigmoid(x) the forward output."""

    name, label, kernel = "sigmoid_gradient_op", "SigmoidGrad", "sigmoid_gradient"


_dropout_seeds = itertools.count(1)


def _seed(seed, _name, op) -> int:
    """A dropout node's seed: as given, or the next of the process-wide counter for None."""
    return next(_dropout_seeds) if seed is None else as_seed(seed, op)


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
    inputs = ("node_x",)
    attrs = (
        Attr("p", lambda p, _name, op: as_probability(p, op), type=float),
        Attr("seed", _seed, None, type=int),
    )

    def node_name(self, node):
        return f"Dropout({short_name(node.inputs[0])},p={node.p:g},seed={node.seed})"

    def compute(self, node, input_vals, output_val, device=None, training=True, step=0):
        k = kernels_for(device)
        if not training or node.p == 0.0:
            k.copy(input_vals[0], output_val)
        else:
            k.dropout(input_vals[0], output_val, node.p, (node.seed + int(step)) % 2**64)

    def gradient(self, node, output_grad):
        return [dropout_op(output_grad, node.p, node.seed)]

    def infer_shape(self, node, input_shapes):
        return tuple(input_shapes[0])


relu_op = ReluOp()
relu_gradient_op = ReluGradientOp()
relu_bias_gradient_op = ReluBiasGradientOp()
tanh_op = TanhOp()
sigmoid_op = SigmoidOp()
tanh_gradient_op = TanhGradientOp()
sigmoid_gradient_op = SigmoidGradientOp()
dropout_op = DropoutOp()
