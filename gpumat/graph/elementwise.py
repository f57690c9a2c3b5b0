"""Elementwise graph ops: ``+``, ``*``, ``/`` with nodes or constants, ``exp``, ``log``, equality
tests, arrays of zeros or ones, and ``detach_op`` (a copy with no gradient: the front end's
cut in a traced step).

``add_op(a, b)``, ``mul_op(a, b)``, ``div_op(a, b)`` and ``eq_op(a, b)`` need equal shapes
(broadcasting is explicit: add a bias with ``z + broadcastto_op(b, z)``); ``add_byconst_op`` /
``mul_byconst_op`` take a real constant. This module also defines the node operators (``x + y``,
``2 * x``, ``x - y``, ``-x``) on :class:`gpumat.graph.Node`, beside the ops they build. Kernels:
:func:`gpumat.ops.matrix_elementwise_add` and the rest of the elementwise family.
"""

from __future__ import annotations

from gpumat.graph.node import Attr, Node, Op, as_const, kernels_for, short_name

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
    "zeroslike_op",
]


def _constant(symbol: str):
    """The check of a by-constant op's constant: a real number, as a Python float."""
    return lambda value, _name, _op: as_const(value, symbol)


class _InfixOp(Op):
    """A two-operand op named as its expression: ``(a+b)``, ``(a*2.0)``."""

    symbol = "+"

    def node_name(self, node):
        right = repr(node.const_attr) if self.attrs else short_name(node.inputs[1])
        return f"({short_name(node.inputs[0])}{self.symbol}{right})"


class AddOp(_InfixOp):
    """``a + b`` elementwise; a and b have equal shapes."""

    name = "add_op"
    inputs = ("node_A", "node_B")

    def compute(self, node, input_vals, output_val, ctx=None):
        kernels_for(ctx).matrix_elementwise_add(input_vals[0], input_vals[1], output_val)

    def gradient(self, node, output_grad):
        return [output_grad, output_grad]

    def infer_shape(self, node, input_shapes):
        return self._same_shapes(node, input_shapes[0], input_shapes[1])


class AddByConstOp(_InfixOp):
    """``a + c`` for a real constant c (``node.const_attr``)."""

    name = "add_byconst_op"
    symbol = "+"
    inputs = ("node_A",)
    attrs = (Attr("const_attr", _constant("+"), type=float),)

    def compute(self, node, input_vals, output_val, ctx=None):
        kernels_for(ctx).matrix_elementwise_add_by_const(input_vals[0], node.const_attr, output_val)

    def gradient(self, node, output_grad):
        return [output_grad]

    def infer_shape(self, node, input_shapes):
        return tuple(input_shapes[0])


class MulOp(_InfixOp):
    """``a * b`` elementwise; a and b have equal shapes."""

    name = "mul_op"
    symbol = "*"
    inputs = ("node_A", "node_B")

    def compute(self, node, input_vals, output_val, ctx=None):
        kernels_for(ctx).matrix_elementwise_multiply(input_vals[0], input_vals[1], output_val)

    def gradient(self, node, output_grad):
        a, b = node.inputs
        return [output_grad * b, output_grad * a]

    def infer_shape(self, node, input_shapes):
        return self._same_shapes(node, input_shapes[0], input_shapes[1])


class MulByConstOp(_InfixOp):
    """``a * c`` for a real constant c (``node.const_attr``)."""

    name = "mul_byconst_op"
    symbol = "*"
    inputs = ("node_A",)
    attrs = (Attr("const_attr", _constant("*"), type=float),)

    def compute(self, node, input_vals, output_val, ctx=None):
        kernels_for(ctx).matrix_elementwise_multiply_by_const(
            input_vals[0], node.const_attr, output_val
        )

    def gradient(self, node, output_grad):
        return [output_grad * node.const_attr]

    def infer_shape(self, node, input_shapes):
        return tuple(input_shapes[0])


class DivOp(_InfixOp):
    """``div_op(a, b)``: ``a / b`` elementwise (IEEE: x / 0 = +-inf, 0 / 0 = NaN); a and b have
    equal shapes. Gradients: ``g / b`` for a and ``-g * a / b**2`` for b, computed as
    ``-(g * y) / b`` from the output y = a / b (no b**2, which over- or underflows in float32 for
    |b| past 1.8e19 or below 1e-19 where the gradient itself is finite)."""

    name = "div_op"
    symbol = "/"
    inputs = ("node_A", "node_B")

    def compute(self, node, input_vals, output_val, ctx=None):
        kernels_for(ctx).matrix_elementwise_divide(input_vals[0], input_vals[1], output_val)

    def gradient(self, node, output_grad):
        b = node.inputs[1]
        return [div_op(output_grad, b), mul_byconst_op(div_op(mul_op(output_grad, node), b), -1.0)]

    def infer_shape(self, node, input_shapes):
        return self._same_shapes(node, input_shapes[0], input_shapes[1])


class EqOp(Op):
    """``eq_op(a, b)``: 1.0 where a == b, else 0.0, elementwise (IEEE equality: NaN equals
    nothing); a and b have equal shapes. Piecewise constant, so it has no gradient: ``None`` for
    both inputs (like ``zeroslike_op``); a loss that reaches a node only through it gets zeros."""

    name = "eq_op"
    inputs = ("node_A", "node_B")
    label = "Eq"

    def compute(self, node, input_vals, output_val, ctx=None):
        kernels_for(ctx).eq(input_vals[0], input_vals[1], output_val)

    def gradient(self, node, output_grad):
        return [None, None]

    def infer_shape(self, node, input_shapes):
        return self._same_shapes(node, input_shapes[0], input_shapes[1])


class ExpOp(Op):
    """``exp_op(x)``: exp elementwise, any shape (overflows to inf past ~88.7, as numpy).
    Gradient: ``y * g`` from the output y = exp(x) (no second exp)."""

    name = "exp_op"
    inputs = ("node_x",)
    label = "Exp"

    def compute(self, node, input_vals, output_val, ctx=None):
        kernels_for(ctx).exp(input_vals[0], output_val)

    def gradient(self, node, output_grad):
        return [mul_op(node, output_grad)]

    def infer_shape(self, node, input_shapes):
        return tuple(input_shapes[0])


class LogOp(Op):
    """``log_op(x)``: the natural logarithm elementwise, any shape (log(0) = -inf, log(x < 0) =
    NaN, as numpy). Gradient: ``g / x``."""

    name = "log_op"
    inputs = ("node_x",)
    label = "Log"

    def compute(self, node, input_vals, output_val, ctx=None):
        kernels_for(ctx).log(input_vals[0], output_val)

    def gradient(self, node, output_grad):
        return [div_op(output_grad, node.inputs[0])]

    def infer_shape(self, node, input_shapes):
        return tuple(input_shapes[0])


class DetachOp(Op):
    """``detach_op(x)``: x's values with no gradient to x (a copy in a traced step; eagerly,
    ``Tensor.detach`` shares the storage instead). Used where a traced step of the front end cuts
    the graph: ``detach()`` and ops under ``no_grad``."""

    name = "detach_op"
    compilable = True
    inputs = ("node_x",)

    def node_name(self, node):
        x = node.inputs[0].name
        return f"Detach({x})" if len(x) < 40 else "Detach"

    def compute(self, node, input_vals, output_val, ctx=None):
        kernels_for(ctx).copy(input_vals[0], output_val)

    def gradient(self, node, output_grad):
        return [None]

    def infer_shape(self, node, input_shapes):
        return tuple(input_shapes[0])


class ZerosLikeOp(Op):
    """An array of zeros with the input's shape; depends only on that shape."""

    name = "zeroslike_op"
    shape_only_inputs = (0,)

    inputs = ("node_A",)
    label = "Zeroslike"

    def compute(self, node, input_vals, output_val, ctx=None):
        kernels_for(ctx).array_set(output_val, 0.0)

    def gradient(self, node, output_grad):
        return [None]

    def infer_shape(self, node, input_shapes):
        return tuple(input_shapes[0])


class OnesLikeOp(Op):
    """An array of ones with the input's shape; depends only on that shape."""

    name = "oneslike_op"
    shape_only_inputs = (0,)

    inputs = ("node_A",)
    label = "Oneslike"

    def compute(self, node, input_vals, output_val, ctx=None):
        kernels_for(ctx).array_set(output_val, 1.0)

    def gradient(self, node, output_grad):
        return [None]

    def infer_shape(self, node, input_shapes):
        return tuple(input_shapes[0])


add_op = AddOp()
add_byconst_op = AddByConstOp()
mul_op = MulOp()
mul_byconst_op = MulByConstOp()
div_op = DivOp()
eq_op = EqOp()
detach_op = DetachOp()
exp_op = ExpOp()
log_op = LogOp()
zeroslike_op = ZerosLikeOp()
oneslike_op = OnesLikeOp()


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
