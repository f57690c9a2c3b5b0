"""Elementwise graph ops: ``+``, ``*``, ``/`` with nodes or constants, ``exp``, ``log``, ``sqrt``,
``abs``, ``sign``, ``sin``, ``cos``, ``erf``, ``log1p``, ``rsqrt``, comparisons (``eq``, ``lt``,
``le``, ``gt``, ``ge``) and logic (``logical_not/and/or``) giving 1.0 / 0.0, ``minimum``,
``maximum``, ``where``, ``clamp``, powers (``pow_scalar_op`` x ** c, ``scalar_pow_op`` c ** x,
``pow_op`` a ** b), arrays of zeros or ones, and ``detach_op`` (a copy with no
gradient: the front end's cut in a traced step).

``add_op(a, b)``, ``mul_op(a, b)``, ``div_op(a, b)``, the comparisons, ``minimum_op``,
``maximum_op`` and ``where_op(cond, a, b)`` need equal shapes
(broadcasting is explicit: add a bias with ``z + broadcastto_op(b, z)``); ``add_byconst_op`` /
``mul_byconst_op`` take a real constant. This module also defines the node operators (``x + y``,
``2 * x``, ``x - y``, ``-x``) on :class:`gpumat.graph.Node`, beside the ops they build. Kernels:
:func:`gpumat.ops.add` and the rest of the elementwise family.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

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
    "AbsOp",
    "AddByConstOp",
    "AddOp",
    "ClampGradientOp",
    "ClampOp",
    "CosOp",
    "DetachOp",
    "DivOp",
    "EqOp",
    "ErfOp",
    "ExpOp",
    "GeOp",
    "GtOp",
    "LeOp",
    "Log1pOp",
    "LogOp",
    "LogicalAndOp",
    "LogicalNotOp",
    "LogicalOrOp",
    "LtOp",
    "MaximumOp",
    "MinimumOp",
    "MulByConstOp",
    "MulOp",
    "OnesLikeOp",
    "PowZeroOp",
    "RsqrtGradientOp",
    "RsqrtOp",
    "SignOp",
    "SinOp",
    "SqrtGradientOp",
    "SqrtOp",
    "WhereOp",
    "ZerosLikeOp",
    "abs_op",
    "add_byconst_op",
    "add_op",
    "clamp_gradient_op",
    "clamp_op",
    "cos_op",
    "detach_op",
    "div_op",
    "eq_op",
    "erf_op",
    "exp_op",
    "ge_op",
    "gt_op",
    "le_op",
    "log1p_op",
    "log_op",
    "logical_and_op",
    "logical_not_op",
    "logical_or_op",
    "lt_op",
    "maximum_op",
    "minimum_op",
    "mul_byconst_op",
    "mul_op",
    "oneslike_op",
    "pow_zero_op",
    "rsqrt_gradient_op",
    "rsqrt_op",
    "sign_op",
    "sin_op",
    "sqrt_gradient_op",
    "sqrt_op",
    "where_op",
    "zeroslike_op",
    "PowOp",
    "PowScalarGradientOp",
    "PowScalarOp",
    "ScalarPowGradientOp",
    "ScalarPowOp",
    "pow_op",
    "pow_scalar_gradient_op",
    "pow_scalar_op",
    "scalar_pow_gradient_op",
    "scalar_pow_op",
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


class AbsOp(UnaryOp):
    """``abs_op(x)``: |x| elementwise, any shape. Gradient: ``sign(x) * g`` (0 at x = 0 and at a
    NaN, PyTorch's subgradient)."""

    name, label, kernel = "abs_op", "Abs", "abs"
    tensor_method, tensor_doc = "abs", "The absolute value elementwise."

    def gradient(self, node, output_grad):
        return [mul_op(sign_op(node.inputs[0]), output_grad)]


class SignOp(UnaryOp):
    """``sign_op(x)``: 1 where x > 0, -1 where x < 0, else 0 (for +-0 and NaN, as PyTorch),
    elementwise. Piecewise constant: its gradient is zeros of x's shape (PyTorch's)."""

    name, label, kernel = "sign_op", "Sign", "sign"
    tensor_method, tensor_doc = (
        "sign",
        "1, -1 or 0 by the sign of each element (0 for +-0 and NaN, as PyTorch).",
    )

    def gradient(self, node, output_grad):
        return [zeroslike_op(node.inputs[0])]


class SinOp(UnaryOp):
    """``sin_op(x)``: sin elementwise, any shape (NaN at +-inf). Gradient: ``cos(x) * g``."""

    name, label, kernel = "sin_op", "Sin", "sin"
    tensor_method, tensor_doc = "sin", "The sine elementwise (radians)."

    def gradient(self, node, output_grad):
        return [mul_op(cos_op(node.inputs[0]), output_grad)]


class CosOp(UnaryOp):
    """``cos_op(x)``: cos elementwise, any shape (NaN at +-inf). Gradient: ``-(sin(x) * g)``."""

    name, label, kernel = "cos_op", "Cos", "cos"
    tensor_method, tensor_doc = "cos", "The cosine elementwise (radians)."

    def gradient(self, node, output_grad):
        return [mul_byconst_op(mul_op(sin_op(node.inputs[0]), output_grad), -1.0)]


_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


class ErfOp(UnaryOp):
    """``erf_op(x)``: the error function elementwise, any shape (erf(+-inf) = +-1). Gradient:
    ``2/sqrt(pi) * exp(-x**2) * g``, PyTorch's formula (exp(-x**2) underflows to 0 past |x| ~
    10, where the true value is below float32's smallest number anyway)."""

    name, label, kernel = "erf_op", "Erf", "erf"
    tensor_method, tensor_doc = "erf", "The Gauss error function elementwise."

    def gradient(self, node, output_grad):
        x = node.inputs[0]
        density = mul_byconst_op(exp_op(mul_byconst_op(mul_op(x, x), -1.0)), _TWO_OVER_SQRT_PI)
        return [mul_op(density, output_grad)]


class Log1pOp(UnaryOp):
    """``log1p_op(x)``: log(1 + x) elementwise, accurate for small |x| (-inf at -1, NaN below).
    Gradient: ``g / (x + 1)``, PyTorch's."""

    name, label, kernel = "log1p_op", "Log1p", "log1p"
    tensor_method, tensor_doc = (
        "log1p",
        "log(1 + x) elementwise, accurate for small |x| (-inf at -1, NaN below).",
    )

    def gradient(self, node, output_grad):
        return [div_op(output_grad, add_byconst_op(node.inputs[0], 1.0))]


class RsqrtOp(UnaryOp):
    """``rsqrt_op(x)``: 1 / sqrt(x) elementwise (+-inf at +-0, NaN for x < 0, 0 at inf).
    Gradient: ``rsqrt_gradient_op(y, dy)`` = -0.5 dy y**3 from the output y, PyTorch's."""

    name, label, kernel = "rsqrt_op", "Rsqrt", "rsqrt"
    tensor_method, tensor_doc = (
        "rsqrt",
        "1 / sqrt(x) elementwise (inf at 0, NaN for a negative number).",
    )

    def gradient(self, node, output_grad):
        return [rsqrt_gradient_op(node, output_grad)]


class RsqrtGradientOp(UnaryGradientOp):
    """``rsqrt_gradient_op(y, dy)``: -0.5 dy y**3, y = rsqrt(x) the forward output (one shape)."""

    name, label, kernel = "rsqrt_gradient_op", "RsqrtGrad", "rsqrt_gradient"


class LogicalNotOp(UnaryOp):
    """``logical_not_op(x)``: 1.0 where x == 0, else 0.0 (NaN is true), any shape. No gradient
    (``None``). The front end's ``Tensor.logical_not`` gives a bool tensor."""

    name, label, kernel = "logical_not_op", "LogicalNot", "logical_not"

    def gradient(self, node, output_grad):
        return [None]


class _PointwiseBinaryOp(Op):
    """An op of two nodes of one shape computed by one pointwise kernel, ``kernel(a, b, out)``."""

    inputs = ("node_A", "node_B")

    def infer_shape(self, node, input_shapes):
        return self._same_shapes(node, input_shapes[0], input_shapes[1])


class _PredicateOp(_PointwiseBinaryOp):
    """A comparison or logical op: 1.0 or 0.0, piecewise constant, so no gradient (``None`` for
    both inputs, as ``eq_op``)."""

    def gradient(self, node, output_grad):
        return [None, None]


class LtOp(_PredicateOp):
    """``lt_op(a, b)``: 1.0 where a < b, else 0.0 (a NaN compares false); one shape."""

    name, label, kernel = "lt_op", "Lt", "lt"


class LeOp(_PredicateOp):
    """``le_op(a, b)``: 1.0 where a <= b, else 0.0 (a NaN compares false); one shape."""

    name, label, kernel = "le_op", "Le", "le"


class GtOp(_PredicateOp):
    """``gt_op(a, b)``: 1.0 where a > b, else 0.0 (a NaN compares false); one shape."""

    name, label, kernel = "gt_op", "Gt", "gt"


class GeOp(_PredicateOp):
    """``ge_op(a, b)``: 1.0 where a >= b, else 0.0 (a NaN compares false); one shape."""

    name, label, kernel = "ge_op", "Ge", "ge"


class LogicalAndOp(_PredicateOp):
    """``logical_and_op(a, b)``: 1.0 where a != 0 and b != 0, else 0.0 (NaN is true)."""

    name, label, kernel = "logical_and_op", "LogicalAnd", "logical_and"


class LogicalOrOp(_PredicateOp):
    """``logical_or_op(a, b)``: 1.0 where a != 0 or b != 0, else 0.0 (NaN is true)."""

    name, label, kernel = "logical_or_op", "LogicalOr", "logical_or"


class MaximumOp(_PointwiseBinaryOp):
    """``maximum_op(a, b)``: the larger of a and b elementwise (NaN if either is NaN); one shape.
    Gradient, PyTorch's rule: g to the larger, g / 2 to each where a == b, and g to both where
    they are unordered (a NaN): ``where(a < b, 0, where(a == b, g/2, g))`` for a, the mirror
    for b (``where_op``: a 0 is never a 0 * g, so an inf or NaN in g does not leak)."""

    name, label, kernel = "maximum_op", "Maximum", "maximum"

    def losing(self):
        """The comparisons where a, then b, gets no gradient: a < b and a > b for maximum."""
        return lt_op, gt_op

    def gradient(self, node, output_grad):
        a, b = node.inputs
        zeros = zeroslike_op(output_grad)
        split = where_op(eq_op(a, b), mul_byconst_op(output_grad, 0.5), output_grad)
        loses_a, loses_b = self.losing()
        return [where_op(loses_a(a, b), zeros, split), where_op(loses_b(a, b), zeros, split)]


class MinimumOp(MaximumOp):
    """``minimum_op(a, b)``: the smaller of a and b elementwise (NaN if either is NaN); one
    shape. Gradient, PyTorch's rule: g to the smaller, g / 2 to each where a == b, g to both
    where they are unordered (a NaN)."""

    name, label, kernel = "minimum_op", "Minimum", "minimum"

    def losing(self):
        return gt_op, lt_op


class WhereOp(Op):
    """``where_op(cond, a, b)``: a where cond != 0, else b, elementwise; cond, a and b have one
    shape (the front end broadcasts first). Gradients: none for cond (a selector),
    ``where(cond, g, 0)`` for a and ``where(cond, 0, g)`` for b (PyTorch's)."""

    name, label, kernel = "where_op", "Where", "where"
    inputs = ("node_cond", "node_A", "node_B")

    def gradient(self, node, output_grad):
        cond = node.inputs[0]
        zeros = zeroslike_op(output_grad)
        return [None, where_op(cond, output_grad, zeros), where_op(cond, zeros, output_grad)]

    def infer_shape(self, node, input_shapes):
        self._same_shapes(node, input_shapes[0], input_shapes[1])
        return self._same_shapes(node, input_shapes[0], input_shapes[2])


def _bound(value, name: str, op: str) -> float:
    """A clamp bound: a real number as a Python float, +-inf for an open side; not NaN."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{op}: {name} must be a real number, got {type(value).__name__}")
    value = float(value)
    if math.isnan(value):
        raise ValueError(f"{op}: {name} is NaN (clamp bounds must be numbers or +-inf)")
    return value


class ClampOp(Op):
    """``clamp_op(x, lo, hi)``: min(max(x, lo), hi) elementwise, as torch.clamp (hi where
    lo > hi; a NaN in x stays NaN); lo = -inf or hi = inf leaves that side open. Gradient:
    ``clamp_gradient_op(x, g, lo, hi)``, g where lo <= x <= hi, else 0 (PyTorch's)."""

    name, label, kernel = "clamp_op", "Clamp", "clamp"
    inputs = ("node_x",)
    attrs = (Attr("lo", _bound, type=float), Attr("hi", _bound, type=float))

    def node_name(self, node):
        return f"Clamp({short_name(node.inputs[0])},{node.lo!r},{node.hi!r})"

    def compute(self, node, input_vals, output_val, device=None):
        kernels_for(device).clamp(input_vals[0], node.lo, node.hi, output_val)

    def gradient(self, node, output_grad):
        return [clamp_gradient_op(node.inputs[0], output_grad, node.lo, node.hi)]

    def infer_shape(self, node, input_shapes):
        return tuple(input_shapes[0])


class ClampGradientOp(Op):
    """``clamp_gradient_op(x, dy, lo, hi)``: dy where lo <= x <= hi, else 0; x the forward
    input, x and dy of one shape. Its own gradient (a second derivative) is not implemented."""

    name, label, kernel = "clamp_gradient_op", "ClampGrad", "clamp_gradient"
    inputs = ("node_x", "node_dy")
    attrs = ClampOp.attrs
    no_gradient = "second derivatives of clamp"

    def compute(self, node, input_vals, output_val, device=None):
        kernels_for(device).clamp_gradient(*input_vals, node.lo, node.hi, output_val)

    def infer_shape(self, node, input_shapes):
        return self._same_shapes(node, input_shapes[0], input_shapes[1])


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


def _real(value, name: str, op: str) -> float:
    """A power's scalar: a real number (NaN and +-inf too, as torch.pow takes them)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{op}: {name} must be a real number, got {type(value).__name__}")
    return float(value)


class PowScalarOp(Op):
    """``pow_scalar_op(x, exponent)``: x ** exponent elementwise (powf; a negative x to a
    non-integer exponent is NaN, as torch.pow). Gradient: ``pow_scalar_gradient_op(x, g,
    exponent)`` = g * (c * x ** (c - 1)), 0 when c == 0 (PyTorch's)."""

    name, label, kernel = "pow_scalar_op", "PowScalar", "pow_scalar"
    inputs = ("node_x",)
    attrs = (Attr("exponent", _real, type=float),)

    def node_name(self, node):
        return f"{self.label}({short_name(node.inputs[0])},{node.exponent!r})"

    def compute(self, node, input_vals, output_val, device=None):
        getattr(kernels_for(device), self.kernel)(input_vals[0], node.exponent, output_val)

    def gradient(self, node, output_grad):
        return [pow_scalar_gradient_op(node.inputs[0], output_grad, node.exponent)]

    def infer_shape(self, node, input_shapes):
        return tuple(input_shapes[0])


class PowScalarGradientOp(Op):
    """``pow_scalar_gradient_op(x, dy, exponent)``: dy * (c * x ** (c - 1)) (0 when c == 0),
    x the forward input; x and dy of one shape. No second derivative."""

    name, label, kernel = "pow_scalar_gradient_op", "PowScalarGrad", "pow_scalar_gradient"
    inputs = ("node_x", "node_dy")
    attrs = PowScalarOp.attrs
    no_gradient = "second derivatives of pow"

    def compute(self, node, input_vals, output_val, device=None):
        getattr(kernels_for(device), self.kernel)(*input_vals, node.exponent, output_val)

    def infer_shape(self, node, input_shapes):
        return self._same_shapes(node, input_shapes[0], input_shapes[1])


class ScalarPowOp(PowScalarOp):
    """``scalar_pow_op(x, base)``: base ** x elementwise (a float base, a tensor exponent:
    ``number ** tensor``). Gradient: ``scalar_pow_gradient_op(x, g, base)`` = g * (base ** x *
    log(base)), 0 where base == 0 and x >= 0 (PyTorch's)."""

    name, label, kernel = "scalar_pow_op", "ScalarPow", "scalar_pow"
    attrs = (Attr("base", _real, type=float),)

    def node_name(self, node):
        return f"{self.label}({node.base!r},{short_name(node.inputs[0])})"

    def compute(self, node, input_vals, output_val, device=None):
        kernels_for(device).scalar_pow(input_vals[0], node.base, output_val)

    def gradient(self, node, output_grad):
        return [scalar_pow_gradient_op(node.inputs[0], output_grad, node.base)]


class ScalarPowGradientOp(PowScalarGradientOp):
    """``scalar_pow_gradient_op(x, dy, base)``: dy * (base ** x * log(base)), 0 where base == 0
    and x >= 0; x the forward exponent. No second derivative."""

    name, label, kernel = "scalar_pow_gradient_op", "ScalarPowGrad", "scalar_pow_gradient"
    attrs = ScalarPowOp.attrs

    def compute(self, node, input_vals, output_val, device=None):
        kernels_for(device).scalar_pow_gradient(*input_vals, node.base, output_val)


class PowOp(_PointwiseBinaryOp):
    """``pow_op(a, b)``: a ** b elementwise, one shape (powf). Gradients, PyTorch's formulas
    from graph ops: g * (b * a ** (b - 1)) for a, 0 where b == 0; g * (a ** b * log(a)) for b,
    0 where a == 0 and b >= 0 (``where_op``: the masked values never leak)."""

    name, label, kernel = "pow_op", "Pow", "pow"

    def gradient(self, node, output_grad):
        a, b = node.inputs
        zeros = zeroslike_op(output_grad)
        da = mul_op(output_grad, mul_op(b, pow_op(a, add_byconst_op(b, -1.0))))
        da = where_op(eq_op(b, zeros), zeros, da)
        db = mul_op(output_grad, mul_op(node, log_op(a)))
        db = where_op(logical_and_op(eq_op(a, zeros), ge_op(b, zeros)), zeros, db)
        return [da, db]


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
abs_op = AbsOp()
sign_op = SignOp()
sin_op = SinOp()
cos_op = CosOp()
erf_op = ErfOp()
log1p_op = Log1pOp()
rsqrt_op = RsqrtOp()
rsqrt_gradient_op = RsqrtGradientOp()
logical_not_op = LogicalNotOp()
lt_op = LtOp()
le_op = LeOp()
gt_op = GtOp()
ge_op = GeOp()
logical_and_op = LogicalAndOp()
logical_or_op = LogicalOrOp()
maximum_op = MaximumOp()
minimum_op = MinimumOp()
where_op = WhereOp()
clamp_op = ClampOp()
clamp_gradient_op = ClampGradientOp()
zeroslike_op = ZerosLikeOp()
oneslike_op = OnesLikeOp()
pow_zero_op = PowZeroOp()
pow_scalar_op = PowScalarOp()
pow_scalar_gradient_op = PowScalarGradientOp()
scalar_pow_op = ScalarPowOp()
scalar_pow_gradient_op = ScalarPowGradientOp()
pow_op = PowOp()


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
