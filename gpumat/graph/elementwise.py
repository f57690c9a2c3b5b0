"""Elementwise graph ops: ``+``, ``*``, ``/`` with nodes or constants, ``exp``, ``log``, equality
tests, and arrays of zeros or ones.

``add_op(a, b)``, ``mul_op(a, b)``, ``div_op(a, b)`` and ``eq_op(a, b)`` need equal shapes
(broadcasting is explicit: add a bias with ``z + broadcastto_op(b, z)``); ``add_byconst_op`` /
``mul_byconst_op`` take a real constant. This module also defines the node operators (``x + y``,
``2 * x``, ``x - y``, ``-x``) on :class:`gpumat.graph.Node`, beside the ops they build. Kernels:
:func:`gpumat.ops.matrix_elementwise_add` and the rest of the elementwise family.
"""

from __future__ import annotations

from gpumat.graph.node import Node, Op, as_const, kernels_for, short_name

__all__ = [
    "AddByConstOp",
    "AddOp",
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
    "div_op",
    "eq_op",
    "exp_op",
    "log_op",
    "mul_byconst_op",
    "mul_op",
    "oneslike_op",
    "zeroslike_op",
]


class AddOp(Op):
    """``a + b`` elementwise; a and b have equal shapes."""

    name = "add_op"

    def __call__(self, node_A: Node, node_B: Node) -> Node:
        new_node = Op.__call__(self)
        new_node.inputs = [node_A, node_B]
        new_node.name = f"({short_name(node_A)}+{short_name(node_B)})"
        return new_node

    def compute(self, node, input_vals, output_val, ctx=None):
        kernels_for(ctx).matrix_elementwise_add(input_vals[0], input_vals[1], output_val)

    def gradient(self, node, output_grad):
        return [output_grad, output_grad]

    def infer_shape(self, node, input_shapes):
        return self._same_shapes(node, input_shapes[0], input_shapes[1])


class AddByConstOp(Op):
    """``a + c`` for a real constant c (``node.const_attr``)."""

    name = "add_byconst_op"

    def __call__(self, node_A: Node, const_val) -> Node:
        new_node = Op.__call__(self)
        new_node.const_attr = as_const(const_val, "+")
        new_node.inputs = [node_A]
        new_node.name = f"({short_name(node_A)}+{new_node.const_attr!r})"
        return new_node

    def compute(self, node, input_vals, output_val, ctx=None):
        kernels_for(ctx).matrix_elementwise_add_by_const(input_vals[0], node.const_attr, output_val)

    def gradient(self, node, output_grad):
        return [output_grad]

    def infer_shape(self, node, input_shapes):
        return tuple(input_shapes[0])


class MulOp(Op):
    """``a * b`` elementwise; a and b have equal shapes."""

    name = "mul_op"

    def __call__(self, node_A: Node, node_B: Node) -> Node:
        new_node = Op.__call__(self)
        new_node.inputs = [node_A, node_B]
        new_node.name = f"({short_name(node_A)}*{short_name(node_B)})"
        return new_node

    def compute(self, node, input_vals, output_val, ctx=None):
        kernels_for(ctx).matrix_elementwise_multiply(input_vals[0], input_vals[1], output_val)

    def gradient(self, node, output_grad):
        a, b = node.inputs
        return [output_grad * b, output_grad * a]

    def infer_shape(self, node, input_shapes):
        return self._same_shapes(node, input_shapes[0], input_shapes[1])


class MulByConstOp(Op):
    """``a * c`` for a real constant c (``node.const_attr``)."""

    name = "mul_byconst_op"

    def __call__(self, node_A: Node, const_val) -> Node:
        new_node = Op.__call__(self)
        new_node.const_attr = as_const(const_val, "*")
        new_node.inputs = [node_A]
        new_node.name = f"({short_name(node_A)}*{new_node.const_attr!r})"
        return new_node

    def compute(self, node, input_vals, output_val, ctx=None):
        kernels_for(ctx).matrix_elementwise_multiply_by_const(
            input_vals[0], node.const_attr, output_val
        )

    def gradient(self, node, output_grad):
        return [output_grad * node.const_attr]

    def infer_shape(self, node, input_shapes):
        return tuple(input_shapes[0])


class DivOp(Op):
    """``div_op(a, b)``: ``a / b`` elementwise (IEEE: x / 0 = +-inf, 0 / 0 = NaN); a and b have
    equal shapes. Gradients: ``g / b`` for a and ``-g * a / b**2`` for b, computed as
    ``-(g * y) / b`` from the output y = a / b (no b**2, which over- or underflows in float32 for
    |b| past 1.8e19 or below 1e-19 where the gradient itself is finite)."""

    name = "div_op"

    def __call__(self, node_A: Node, node_B: Node) -> Node:
        new_node = Op.__call__(self)
        new_node.inputs = [node_A, node_B]
        new_node.name = f"({short_name(node_A)}/{short_name(node_B)})"
        return new_node

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

    def __call__(self, node_A: Node, node_B: Node) -> Node:
        new_node = Op.__call__(self)
        new_node.inputs = [node_A, node_B]
        new_node.name = f"Eq({short_name(node_A)},{short_name(node_B)})"
        return new_node

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

    def __call__(self, node_x: Node) -> Node:
        new_node = Op.__call__(self)
        new_node.inputs = [node_x]
        new_node.name = f"Exp({short_name(node_x)})"
        return new_node

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

    def __call__(self, node_x: Node) -> Node:
        new_node = Op.__call__(self)
        new_node.inputs = [node_x]
        new_node.name = f"Log({short_name(node_x)})"
        return new_node

    def compute(self, node, input_vals, output_val, ctx=None):
        kernels_for(ctx).log(input_vals[0], output_val)

    def gradient(self, node, output_grad):
        return [div_op(output_grad, node.inputs[0])]

    def infer_shape(self, node, input_shapes):
        return tuple(input_shapes[0])


class ZerosLikeOp(Op):
    """An array of zeros with the input's shape; depends only on that shape."""

    name = "zeroslike_op"
    shape_only_inputs = (0,)

    def __call__(self, node_A: Node) -> Node:
        new_node = Op.__call__(self)
        new_node.inputs = [node_A]
        new_node.name = f"Zeroslike({short_name(node_A)})"
        return new_node

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

    def __call__(self, node_A: Node) -> Node:
        new_node = Op.__call__(self)
        new_node.inputs = [node_A]
        new_node.name = f"Oneslike({short_name(node_A)})"
        return new_node

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
