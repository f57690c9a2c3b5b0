"""The matrix product as graph ops: ``matmul_op`` and the fused dense layer ``matmul_bias_op``.

Kernels: :func:`gpumat.ops.matmul` (BLAS sgemm on the host, the tiled kernel of
``extensions/src/cuda/matmul.cu`` on CUDA) and :func:`gpumat.ops.matmul_bias` (the same with a
bias and ReLU epilogue). The derivatives are the standard ones (Goodfellow, Bengio & Courville,
*Deep Learning*, 6.5.4): each case is one matmul with transpose flags.
"""

from __future__ import annotations

from gpumat._checks import as_flag
from gpumat.graph.node import Attr, Op, kernels_for, shape_str, short_name

__all__ = [
    "MatMulBiasOp",
    "MatMulOp",
    "matmul_bias_op",
    "matmul_op",
]


# The dlsys course's flag names; as_flag refuses anything but a bool.
TRANS_A = Attr("trans_A", as_flag, False, bool)
TRANS_B = Attr("trans_B", as_flag, False, bool)


def _bool(value, _name, _op) -> bool:
    return bool(value)


class MatMulOp(Op):
    """``op(A) @ op(B)`` for 2-D A, B, with op(X) = X^T when the matching flag is set.

    Shapes: A is (M, K), or (K, M) with trans_A; B is (K, N), or (N, K) with trans_B; out (M, N).
    """

    name = "matmul_op"
    inputs = ("node_A", "node_B")
    attrs = (TRANS_A, TRANS_B)

    def node_name(self, node):
        a, b = (short_name(i) for i in node.inputs)
        return f"MatMul({a},{b},{node.trans_A},{node.trans_B})"

    def compute(self, node, input_vals, output_val, device=None):
        a, b = input_vals
        ta, tb = node.trans_A, node.trans_B
        kernels_for(device).matmul(a, b, output_val, ta, tb)

    def gradient(self, node, output_grad):
        # With C = op(A) op(B) and G = dL/dC: dL/dop(A) = G op(B)^T and dL/dop(B) = op(A)^T G; a
        # transposed operand takes the transpose of that. Each case is one matmul with flags.
        a, b = node.inputs
        g = output_grad
        ta, tb = node.trans_A, node.trans_B
        if not ta and not tb:  # C = A B
            return [matmul_op(g, b, False, True), matmul_op(a, g, True, False)]
        if ta and not tb:  # C = A^T B
            return [matmul_op(b, g, False, True), matmul_op(a, g, False, False)]
        if not ta and tb:  # C = A B^T
            return [matmul_op(g, b, False, False), matmul_op(g, a, True, False)]
        return [matmul_op(b, g, True, True), matmul_op(g, a, True, True)]  # C = A^T B^T

    def infer_shape(self, node, input_shapes):
        sa, sb = (tuple(s) for s in input_shapes)
        ta, tb = node.trans_A, node.trans_B
        desc = f"{'A^T' if ta else 'A'} {shape_str(sa)} @ {'B^T' if tb else 'B'} {shape_str(sb)}"
        if len(sa) != 2 or len(sb) != 2:
            raise self._error(node, f"both operands must be 2-D: {desc}")
        m, k = (sa[1], sa[0]) if ta else sa
        kb, n = (sb[1], sb[0]) if tb else sb
        if k != kb:
            raise self._error(node, f"inner dimensions differ ({k} != {kb}): {desc}")
        return (m, n)


class MatMulBiasOp(Op):
    """``matmul_bias_op(A, B, bias, trans_A, trans_B, relu)``: op(A) @ op(B) + bias, then max(., 0)
    when ``relu``. Shapes as ``matmul_op``; bias is (N,); out (M, N). Made by the fusion pass
    (``gpumat.runtime.fusion``; its gradient is not defined: the pass runs after
    :func:`gpumat.graph.gradients`)."""

    name = "matmul_bias_op"
    no_gradient = "made by the fusion pass, after gradients"
    inputs = ("node_A", "node_B", "bias")
    attrs = (
        Attr("trans_A", _bool, False, bool),
        Attr("trans_B", _bool, False, bool),
        Attr("relu", _bool, False, bool),
    )

    def node_name(self, node):
        kind = "DenseRelu" if node.relu else "Dense"
        return f"{kind}({','.join(short_name(i) for i in node.inputs)})"

    def compute(self, node, input_vals, output_val, device=None):
        a, b, bias = input_vals
        ta, tb = node.trans_A, node.trans_B
        kernels_for(device).matmul_bias(a, b, bias, output_val, ta, tb, node.relu)

    def infer_shape(self, node, input_shapes):
        sa, sb, sbias = (tuple(s) for s in input_shapes)
        m, n = MatMulOp.infer_shape(self, node, [sa, sb])
        if sbias != (n,):
            raise self._error(node, f"bias {shape_str(sbias)} must be ({n},)")
        return (m, n)


matmul_op = MatMulOp()
matmul_bias_op = MatMulBiasOp()
