"""Elementwise graph ops: ``+``, ``*``, ``/`` with nodes or constants, ``exp``, ``log``, ``sqrt``,
equality tests, arrays of zeros or ones, and ``detach_op`` (a copy with no gradient: the front end's
cut in a traced step).

``add_op(a, b)``, ``mul_op(a, b)``, ``div_op(a, b)`` and ``eq_op(a, b)`` need equal shapes
(broadcasting is explicit: add a bias with ``z + broadcastto_op(b, z)``); ``add_byconst_op`` /
``mul_byconst_op`` take a real constant. This module also defines the node operators (``x + y``,
``2 * x``, ``x - y``, ``-x``) on :class:`gpumat.graph.Node`, beside the ops they build. Kernels:
:func:`gpumat.ops.add` and the rest of the elementwise family.
"""

from __future__ import annotations

from gpumat.graph.node import (
    Attr,
    Node,
    Op,
    UnaryGradientOp,
    UnaryOp,
    as_const,
    kernels_for,
    short_name,
)

__all__ = [
    "AddByConstOp",
    "AddOp",
    "DetachOp",
    "DivOp",
    "EqOp",
    "ExpOp",
    "LogOp",
    "MulByConstOp",
    "MulOp",
    "OnesLikeOp",
    "PowZeroOp",
    "SqrtGradientOp",
    "SqrtOp",
    "ZerosLikeOp",
    "add_byconst_op",
    "add_op",
    "detach_op",
    "div_op",
    "eq_op",
    "exp_op",
    "log_op",
    "mul_byconst_op",
    "mul_op",
    "oneslike_op",
    "pow_zero_op",
    "sqrt_gradient_op",
    "sqrt_op",
    "zeroslike_op",
]


def _constant(symbol: str):
    """The check of a by-constant op's constant: a real number, as a Python float."""
    return lambda value, _name, _op: as_const(value, symbol)


class _InfixOp(Op):
    """A two-operand op named as its expression: ``(a+b)``, ``(a*2.0)``; two nodes of one shape,
    or a node and a constant (``const_attr``, its kernel's middle argument)."""

    symbol = "+"

    def node_name(self, node):
        right = repr(node.const_attr) if self.attrs else short_name(node.inputs[1])
        return f"({short_name(node.inputs[0])}{self.symbol}{right})"

    def compute(self, node, input_vals, output_val, device=None):
        if not self.attrs:
            return Op.compute(self, node, input_vals, output_val, device)
        getattr(kernels_for(device), self.kernel)(input_vals[0], node.const_attr, output_val)

    def infer_shape(self, node, input_shapes):
        if len(input_shapes) == 1:  # a node and a constant
            return tuple(input_shapes[0])
        return self._same_shapes(node, input_shapes[0], input_shapes[1])


class AddOp(_InfixOp):
    """``a + b`` elementwise; a and b have equal shapes."""

    name = "add_op"
    kernel = "add"
    inputs = ("node_A", "node_B")

    def gradient(self, node, output_grad):
        return [output_grad, output_grad]


class AddByConstOp(_InfixOp):
    """``a + c`` for a real constant c (``node.const_attr``)."""

    name, kernel = "add_byconst_op", "add_scalar"
    symbol = "+"
    inputs = ("node_A",)
    attrs = (Attr("const_attr", _constant("+"), type=float),)

    def gradient(self, node, output_grad):
        return [output_grad]


class MulOp(_InfixOp):
    """``a * b`` elementwise; a and b have equal shapes."""

    name = "mul_op"
    kernel = "mul"
    symbol = "*"
    inputs = ("node_A", "node_B")

    def gradient(self, node, output_grad):
        a, b = node.inputs
        return [output_grad * b, output_grad * a]


class MulByConstOp(_InfixOp):
    """``a * c`` for a real constant c (``node.const_attr``)."""

    name, kernel = "mul_byconst_op", "mul_scalar"
    symbol = "*"
    inputs = ("node_A",)
    attrs = (Attr("const_attr", _constant("*"), type=float),)

    def gradient(self, node, output_grad):
        return [output_grad * node.const_attr]


class DivOp(_InfixOp):
    """``div_op(a, b)``: ``a / b`` elementwise (IEEE: x / 0 = +-inf, 0 / 0 = NaN); a and b have
    equal shapes. Gradients: ``g / b`` for a and ``-g * a / b**2`` for b, computed as
    ``-(g * y) / b`` from the output y = a / b (no b**2, which over- or underflows in float32 for
    |b| past 1.8e19 or below 1e-19 where the gradient itself is finite)."""

    name = "div_op"
    kernel = "div"
    symbol = "/"
    inputs = ("node_A", "node_B")

    def gradient(self, node, output_grad):
        b = node.inputs[1]
        return [div_op(output_grad, b), mul_byconst_op(div_op(mul_op(output_grad, node), b), -1.0)]


class EqOp(Op):
    """``eq_op(a, b)``: 1.0 where a == b, else 0.0, elementwise (IEEE equality: NaN equals
    nothing); a and b have equal shapes. Piecewise constant, so it has no gradient: ``None`` for
    both inputs (like ``zeroslike_op``); a loss that reaches a node only through it gets zeros."""

    name = "eq_op"
    kernel = "eq"
    inputs = ("node_A", "node_B")
    label = "Eq"

    def gradient(self, node, output_grad):
        return [None, None]

    def infer_shape(self, node, input_shapes):
        return self._same_shapes(node, input_shapes[0], input_shapes[1])


class ExpOp(UnaryOp):
    """``exp_op(x)``: exp elementwise, any shape (overflows to inf past ~88.7, as numpy).
    Gradient: ``y * g`` from the output y = exp(x) (no second exp)."""

    name, label, kernel = "exp_op", "Exp", "exp"
    tensor_method, tensor_doc = "exp", "exp elementwise."

    def gradient(self, node, output_grad):
        return [mul_op(node, output_grad)]


class LogOp(UnaryOp):
    """``log_op(x)``: the natural logarithm elementwise, any shape (log(0) = -inf, log(x < 0) =
    NaN, as numpy). Gradient: ``g / x``."""

    name, label, kernel = "log_op", "Log", "log"
    tensor_method, tensor_doc = (
        "log",
        "The natural log elementwise (log 0 = -inf, log of a negative number NaN).",
    )

    def gradient(self, node, output_grad):
        return [div_op(output_grad, node.inputs[0])]


class SqrtOp(UnaryOp):
    """``sqrt_op(x)``: the square root elementwise, any shape (sqrt(x < 0) = NaN, as numpy).
    Gradient: ``sqrt_gradient_op(y, dy)`` = dy / (2 y) from the output y (dy / 0 at y = 0, as
    PyTorch's)."""

    name, label, kernel = "sqrt_op", "Sqrt", "sqrt"
    tensor_method, tensor_doc = (
        "sqrt",
        "The square root elementwise (sqrt of a negative number NaN).",
    )

    def gradient(self, node, output_grad):
        return [sqrt_gradient_op(node, output_grad)]


class SqrtGradientOp(UnaryGradientOp):
    """``sqrt_gradient_op(y, dy)``: dy / (2 y), y = sqrt(x) the forward output (one shape)."""

    name, label, kernel = "sqrt_gradient_op", "SqrtGrad", "sqrt_gradient"


class DetachOp(UnaryOp):
    """``detach_op(x)``: x's values with no gradient to x (a copy in a traced step; eagerly,
    ``Tensor.detach`` shares the storage instead). Used where a traced step of the front end cuts
    the graph: ``detach()`` and ops under ``no_grad``."""

    name, kernel = "detach_op", "copy"
    compilable = True

    def node_name(self, node):
        x = node.inputs[0].name
        return f"Detach({x})" if len(x) < 40 else "Detach"

    def gradient(self, node, output_grad):
        return [None]


class ZerosLikeOp(Op):
    """An array of zeros with the input's shape; depends only on that shape."""

    name, label, value = "zeroslike_op", "Zeroslike", 0.0
    inputs = ("node_A",)
    shape_only_inputs = (0,)

    def compute(self, node, input_vals, output_val, device=None):
        kernels_for(device).fill(output_val, self.value)

    def gradient(self, node, output_grad):
        return [None]

    def infer_shape(self, node, input_shapes):
        return tuple(input_shapes[0])


class OnesLikeOp(ZerosLikeOp):
    """An array of ones with the input's shape; depends only on that shape."""

    name, label, value = "oneslike_op", "Oneslike", 1.0


class PowZeroOp(OnesLikeOp):
    """``x ** 0``: ones of x's shape (for inf and NaN too), whose gradient is zeros of x's shape
    (PyTorch's pow backward for exponent 0), so x gets a zero gradient, not none."""

    name, label = "pow_zero_op", "PowZero"

    def gradient(self, node, output_grad):
        return [zeroslike_op(node.inputs[0])]


add_op = AddOp()
add_byconst_op = AddByConstOp()
mul_op = MulOp()
mul_byconst_op = MulByConstOp()
div_op = DivOp()
eq_op = EqOp()
detach_op = DetachOp()
exp_op = ExpOp()
log_op = LogOp()
sqrt_op = SqrtOp()
sqrt_gradient_op = SqrtGradientOp()
zeroslike_op = ZerosLikeOp()
oneslike_op = OnesLikeOp()
pow_zero_op = PowZeroOp()


# The node operators. Both + and * are commutative, so the reflected forms are the same operation
# (the dlsys course's convention).


def _node_add(self: Node, other) -> Node:
    if isinstance(other, Node):
        return add_op(self, other)
    return add_byconst_op(self, other)


def _node_mul(self: Node, other) -> Node:
    if isinstance(other, Node):
        return mul_op(self, other)
    return mul_byconst_op(self, other)


def _node_neg(self: Node) -> Node:
    return mul_byconst_op(self, -1.0)


def _node_sub(self: Node, other) -> Node:
    if isinstance(other, Node):
        return add_op(self, mul_byconst_op(other, -1.0))
    return add_byconst_op(self, -as_const(other, "-"))


def _node_rsub(self: Node, other) -> Node:
    return add_byconst_op(mul_byconst_op(self, -1.0), other)


Node.__add__ = Node.__radd__ = _node_add
Node.__mul__ = Node.__rmul__ = _node_mul
Node.__neg__ = _node_neg
Node.__sub__ = _node_sub
Node.__rsub__ = _node_rsub
