"""The matrix product as graph ops: ``matmul_op`` and the fused dense layer ``matmul_bias_op``.

Kernels: :func:`gpumat.ops.matrix_multiply` (BLAS sgemm on the host, the tiled kernel of
``extensions/src/cuda/matmul.cu`` on CUDA) and :func:`gpumat.ops.matmul_bias` (the same with a
bias and ReLU epilogue). The derivatives are the standard ones (Goodfellow, Bengio & Courville,
*Deep Learning*, 6.5.4): each case is one matmul with transpose flags.
"""

from __future__ import annotations

from gpumat._checks import as_flag
from gpumat.graph.node import Node, Op, Undefined, kernels_for, shape_str, short_name

__all__ = [
    "MatMulBiasOp",
    "MatMulOp",
    "matmul_bias_op",
    "matmul_op",
]


class MatMulOp(Op):
    """``op(A) @ op(B)`` for 2-D A, B, with op(X) = X^T when the matching flag is set.

    Shapes: A is (M, K), or (K, M) with trans_A; B is (K, N), or (N, K) with trans_B; out (M, N).
    """

    name = "matmul_op"

    def __call__(
        self, node_A: Node, node_B: Node, trans_A: bool = False, trans_B: bool = False
    ) -> Node:
        trans_A = as_flag(trans_A, "trans_A", self.name)  # noqa: N806 (the dlsys course's names)
        trans_B = as_flag(trans_B, "trans_B", self.name)  # noqa: N806
        new_node = Op.__call__(self)
        new_node.matmul_attr_trans_A = trans_A
        new_node.matmul_attr_trans_B = trans_B
        new_node.inputs = [node_A, node_B]
        args = f"{short_name(node_A)},{short_name(node_B)},{trans_A},{trans_B}"
        new_node.name = f"MatMul({args})"
        return new_node

    def compute(self, node, input_vals, output_val, ctx=None):
        a, b = input_vals
        ta, tb = node.matmul_attr_trans_A, node.matmul_attr_trans_B
        kernels_for(ctx).matrix_multiply(a, ta, b, tb, output_val)

    def gradient(self, node, output_grad):
        # With C = op(A) op(B) and G = dL/dC: dL/dop(A) = G op(B)^T and dL/dop(B) = op(A)^T G; a
        # transposed operand takes the transpose of that. Each case is one matmul with flags.
        a, b = node.inputs
        g = output_grad
        ta, tb = node.matmul_attr_trans_A, node.matmul_attr_trans_B
        if not ta and not tb:  # C = A B
            return [matmul_op(g, b, False, True), matmul_op(a, g, True, False)]
        if ta and not tb:  # C = A^T B
            return [matmul_op(b, g, False, True), matmul_op(a, g, False, False)]
        if not ta and tb:  # C = A B^T
            return [matmul_op(g, b, False, False), matmul_op(g, a, True, False)]
        return [matmul_op(b, g, True, True), matmul_op(g, a, True, True)]  # C = A^T B^T

    def infer_shape(self, node, input_shapes):
        sa, sb = (tuple(s) for s in input_shapes)
        ta, tb = node.matmul_attr_trans_A, node.matmul_attr_trans_B
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

    def __call__(
        self,
        node_A: Node,
        node_B: Node,
        bias: Node,
        trans_A: bool = False,
        trans_B: bool = False,
        relu: bool = False,
    ) -> Node:
        new_node = Op.__call__(self)
        new_node.inputs = [node_A, node_B, bias]
        new_node.matmul_attr_trans_A = bool(trans_A)
        new_node.matmul_attr_trans_B = bool(trans_B)
        new_node.relu = bool(relu)
        kind = "DenseRelu" if relu else "Dense"
        new_node.name = f"{kind}({short_name(node_A)},{short_name(node_B)},{short_name(bias)})"
        return new_node

    def compute(self, node, input_vals, output_val, ctx=None):
        a, b, bias = input_vals
        ta, tb = node.matmul_attr_trans_A, node.matmul_attr_trans_B
        kernels_for(ctx).matmul_bias(a, ta, b, tb, bias, output_val, node.relu)

    def gradient(self, node, output_grad):
        reason = "matmul_bias_op: made by the fusion pass, after gradients"
        return [Undefined(reason)] * 3

    def infer_shape(self, node, input_shapes):
        sa, sb, sbias = (tuple(s) for s in input_shapes)
        m, n = MatMulOp.infer_shape(self, node, [sa, sb])
        if sbias != (n,):
            raise self._error(node, f"bias {shape_str(sbias)} must be ({n},)")
        return (m, n)


matmul_op = MatMulOp()
matmul_bias_op = MatMulBiasOp()
