"""Activations as graph ops: ReLU, tanh, sigmoid (each with its gradient op), the fused ReLU and
bias gradient, dropout, and the activations of modern networks: GELU (exact and tanh
approximation), SiLU, softplus, leaky ReLU, ELU and hardtanh, whose gradients take the forward
input x (:func:`gpumat.ops.gelu_gradient` and the others).

Kernels: :func:`gpumat.ops.relu`, :func:`gpumat.ops.tanh`, :func:`gpumat.ops.sigmoid`, their
gradients, :func:`gpumat.ops.relu_bias_gradient`, :func:`gpumat.ops.dropout`. The tanh and sigmoid
gradients are computed from the forward output y (dy * (1 - y**2), dy * y * (1 - y)), so the
backward pass does not read x again.
"""

from __future__ import annotations

import itertools
import math

from gpumat._checks import as_probability, as_real, as_seed
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
    "EluGradientOp",
    "EluOp",
    "GeluGradientOp",
    "GeluOp",
    "HardtanhGradientOp",
    "HardtanhOp",
    "LeakyReluGradientOp",
    "LeakyReluOp",
    "SiluGradientOp",
    "SiluOp",
    "SoftplusGradientOp",
    "SoftplusOp",
    "ReluBiasGradientOp",
    "ReluGradientOp",
    "ReluOp",
    "SigmoidGradientOp",
    "SigmoidOp",
    "TanhGradientOp",
    "TanhOp",
    "dropout_op",
    "elu_gradient_op",
    "elu_op",
    "gelu_gradient_op",
    "gelu_op",
    "hardtanh_gradient_op",
    "hardtanh_op",
    "leaky_relu_gradient_op",
    "leaky_relu_op",
    "relu_bias_gradient_op",
    "relu_gradient_op",
    "relu_op",
    "sigmoid_gradient_op",
    "sigmoid_op",
    "silu_gradient_op",
    "silu_op",
    "softplus_gradient_op",
    "softplus_op",
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


# --------------------------------------------------------------------------------------------------
# GELU, SiLU, softplus, leaky ReLU, ELU, hardtanh: pointwise kernels whose gradients read x
# --------------------------------------------------------------------------------------------------


def _approximate(value, name: str, op: str) -> str:
    if value not in ("none", "tanh"):
        raise ValueError(f"{op}: {name} must be 'none' or 'tanh', got {value!r}")
    return value


def _finite(value, name: str, op: str) -> float:
    value = as_real(value, name, op)
    if not math.isfinite(value):
        raise ValueError(f"{op}: {name} must be finite, got {value!r}")
    return value


def _nonzero(value, name: str, op: str) -> float:
    value = _finite(value, name, op)
    if value == 0.0:
        raise ValueError(f"{op}: {name} must be nonzero")
    return value


def _bound(value, name: str, op: str) -> float:
    value = as_real(value, name, op)
    if math.isnan(value):
        raise ValueError(f"{op}: {name} is NaN")
    return value


class _PointwiseOp(Op):
    """A pointwise op of x (a forward) or of (x, dy) (its gradient) computed by one kernel called
    ``kernel(*values, *scalars(node), out)``, as the scalar shapes of kernels.def are."""

    inputs = ("node_x",)

    def scalars(self, node) -> tuple:
        """The kernel's scalar arguments after the inputs: the node's attributes, in order."""
        return tuple(getattr(node, a.name) for a in self.attrs)

    def kernel_of(self, node) -> str:
        """The name of the kernel that computes ``node``."""
        return self.kernel

    def compute(self, node, input_vals, output_val, device=None):
        getattr(kernels_for(device), self.kernel_of(node))(
            *input_vals, *self.scalars(node), output_val
        )

    def node_name(self, node):
        args = [short_name(n) for n in node.inputs] + [repr(v) for v in self.scalars(node)]
        return f"{self.label}({','.join(args)})"

    def infer_shape(self, node, input_shapes):
        if len(input_shapes) == 2:
            return self._same_shapes(node, input_shapes[0], input_shapes[1])
        return tuple(input_shapes[0])


class _PointwiseGradientOp(_PointwiseOp):
    inputs = ("node_x", "node_dy")

    @property
    def no_gradient(self) -> str:
        return f"second derivatives of {self.name.removesuffix('_gradient_op')}"


class GeluOp(_PointwiseOp):
    """``gelu_op(x, approximate='none')``: GELU (Hendrycks & Gimpel, "Gaussian Error Linear Units",
    2016), x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)) (``'none'``, :func:`gpumat.ops.gelu`) or its
    tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (``'tanh'``,
    :func:`gpumat.ops.gelu_tanh`), any shape. Gradient: ``gelu_gradient_op(x, dy, approximate)``."""

    name, label = "gelu_op", "Gelu"
    attrs = (Attr("approximate", _approximate, "none", str),)

    def scalars(self, node) -> tuple:
        """No scalar argument: ``approximate`` picks the kernel instead."""
        return ()

    def kernel_of(self, node) -> str:
        """``gelu`` (the erf form) or ``gelu_tanh``."""
        return "gelu" if node.approximate == "none" else "gelu_tanh"

    def node_name(self, node):
        return f"Gelu({short_name(node.inputs[0])},{node.approximate})"

    def gradient(self, node, output_grad):
        return [gelu_gradient_op(node.inputs[0], output_grad, node.approximate)]


class GeluGradientOp(_PointwiseGradientOp):
    """``gelu_gradient_op(x, dy, approximate='none')``: dy * gelu'(x), x the forward input
    (:func:`gpumat.ops.gelu_gradient`, :func:`gpumat.ops.gelu_tanh_gradient`)."""

    name, label = "gelu_gradient_op", "GeluGrad"
    attrs = GeluOp.attrs
    scalars = GeluOp.scalars

    def kernel_of(self, node) -> str:
        """``gelu_gradient`` or ``gelu_tanh_gradient``, by ``approximate``."""
        return "gelu_gradient" if node.approximate == "none" else "gelu_tanh_gradient"


class SiluOp(_PointwiseOp):
    """``silu_op(x)``: x * sigmoid(x) (SiLU, Elfwing et al. 2018; swish), the sigmoid through
    exp(-|x|) so no intermediate overflows. Gradient: ``silu_gradient_op(x, dy)`` =
    dy s (1 + x (1 - s)), s = sigmoid(x)."""

    name, label, kernel = "silu_op", "Silu", "silu"

    def gradient(self, node, output_grad):
        return [silu_gradient_op(node.inputs[0], output_grad)]


class SiluGradientOp(_PointwiseGradientOp):
    """``silu_gradient_op(x, dy)``: dy s (1 + x (1 - s)), s = sigmoid(x), x the forward input."""

    name, label, kernel = "silu_gradient_op", "SiluGrad", "silu_gradient"


class SoftplusOp(_PointwiseOp):
    """``softplus_op(x, beta=1.0, threshold=20.0)``: log(1 + exp(beta x)) / beta, and x where
    beta x > threshold (PyTorch's rule), computed as (max(z, 0) + log1p(exp(-|z|))) / beta so it
    is finite for any finite x. beta nonzero and finite. Gradient: ``softplus_gradient_op(x, dy,
    beta, threshold)`` = dy sigmoid(beta x) (dy where beta x > threshold)."""

    name, label, kernel = "softplus_op", "Softplus", "softplus"
    attrs = (Attr("beta", _nonzero, 1.0, float), Attr("threshold", _bound, 20.0, float))

    def gradient(self, node, output_grad):
        return [softplus_gradient_op(node.inputs[0], output_grad, node.beta, node.threshold)]


class SoftplusGradientOp(_PointwiseGradientOp):
    """``softplus_gradient_op(x, dy, beta, threshold)``: dy sigmoid(beta x), dy where
    beta x > threshold; x the forward input."""

    name, label, kernel = "softplus_gradient_op", "SoftplusGrad", "softplus_gradient"
    attrs = SoftplusOp.attrs


class LeakyReluOp(_PointwiseOp):
    """``leaky_relu_op(x, negative_slope=0.01)``: x where x > 0, else negative_slope * x (NaN
    passes through). Gradient: ``leaky_relu_gradient_op(x, dy, negative_slope)`` (the slope at
    x = 0, as PyTorch)."""

    name, label, kernel = "leaky_relu_op", "LeakyRelu", "leaky_relu"
    attrs = (Attr("negative_slope", _finite, 0.01, float),)

    def gradient(self, node, output_grad):
        return [leaky_relu_gradient_op(node.inputs[0], output_grad, node.negative_slope)]


class LeakyReluGradientOp(_PointwiseGradientOp):
    """``leaky_relu_gradient_op(x, dy, negative_slope)``: dy where x > 0, else slope * dy."""

    name, label, kernel = "leaky_relu_gradient_op", "LeakyReluGrad", "leaky_relu_gradient"
    attrs = LeakyReluOp.attrs


class EluOp(_PointwiseOp):
    """``elu_op(x, alpha=1.0)``: x where x > 0, else alpha (exp(x) - 1) (Clevert et al., "Fast
    and Accurate Deep Network Learning by Exponential Linear Units", 2016). Gradient:
    ``elu_gradient_op(x, dy, alpha)`` = dy, or dy alpha exp(x) where x <= 0."""

    name, label, kernel = "elu_op", "Elu", "elu"
    attrs = (Attr("alpha", _finite, 1.0, float),)

    def gradient(self, node, output_grad):
        return [elu_gradient_op(node.inputs[0], output_grad, node.alpha)]


class EluGradientOp(_PointwiseGradientOp):
    """``elu_gradient_op(x, dy, alpha)``: dy where x > 0, else dy alpha exp(x)."""

    name, label, kernel = "elu_gradient_op", "EluGrad", "elu_gradient"
    attrs = EluOp.attrs


class HardtanhOp(_PointwiseOp):
    """``hardtanh_op(x, min_val=-1.0, max_val=1.0)``: min(max(x, min_val), max_val) (the clamp
    kernel; min_val <= max_val). Gradient: ``hardtanh_gradient_op(x, dy, min_val, max_val)``,
    dy strictly inside (min_val, max_val), 0 at and beyond the bounds (PyTorch's
    hardtanh_backward; clamp's gradient passes dy at the bounds)."""

    name, label, kernel = "hardtanh_op", "Hardtanh", "clamp"
    attrs = (Attr("min_val", _bound, -1.0, float), Attr("max_val", _bound, 1.0, float))

    def check_attrs(self, attrs: dict) -> None:
        if attrs["min_val"] > attrs["max_val"]:
            raise ValueError(
                f"{self.name}: min_val {attrs['min_val']} is greater than max_val "
                f"{attrs['max_val']}"
            )

    def gradient(self, node, output_grad):
        return [hardtanh_gradient_op(node.inputs[0], output_grad, node.min_val, node.max_val)]


class HardtanhGradientOp(_PointwiseGradientOp):
    """``hardtanh_gradient_op(x, dy, min_val, max_val)``: 0 where x <= min_val or x >= max_val,
    else dy."""

    name, label, kernel = "hardtanh_gradient_op", "HardtanhGrad", "hardtanh_gradient"
    attrs = HardtanhOp.attrs


gelu_op = GeluOp()
gelu_gradient_op = GeluGradientOp()
silu_op = SiluOp()
silu_gradient_op = SiluGradientOp()
softplus_op = SoftplusOp()
softplus_gradient_op = SoftplusGradientOp()
leaky_relu_op = LeakyReluOp()
leaky_relu_gradient_op = LeakyReluGradientOp()
elu_op = EluOp()
elu_gradient_op = EluGradientOp()
hardtanh_op = HardtanhOp()
hardtanh_gradient_op = HardtanhGradientOp()
relu_op = ReluOp()
relu_gradient_op = ReluGradientOp()
relu_bias_gradient_op = ReluBiasGradientOp()
tanh_op = TanhOp()
sigmoid_op = SigmoidOp()
tanh_gradient_op = TanhGradientOp()
sigmoid_gradient_op = SigmoidGradientOp()
dropout_op = DropoutOp()
