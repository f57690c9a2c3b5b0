"""The matrix product as graph ops: ``matmul_op``, the batched ``bmm_op`` and the fused dense
layer ``matmul_bias_op``.

Kernels: :func:`gpumat.ops.matmul` (BLAS sgemm on the host, the tiled kernel of
``extensions/src/cuda/matmul.cu`` on CUDA), :func:`gpumat.ops.bmm` (the same over a batch, one
launch) and :func:`gpumat.ops.matmul_bias` (the same with a bias and ReLU epilogue). The
derivatives are the standard ones (Goodfellow, Bengio & Courville, *Deep Learning*, 6.5.4): each
case is one matmul (or bmm) with transpose flags.
"""

from __future__ import annotations

from gpumat._checks import as_flag
from gpumat.graph.node import Attr, Op, Undefined, kernels_for, shape_str, short_name
from gpumat.graph.strided import sum_to_op

__all__ = [
    "BmmOp",
    "MatMulBiasOp",
    "MatMulOp",
    "bmm_op",
    "matmul_bias_op",
    "matmul_op",
]


def _product_gradients(a, b, g, ta: bool, tb: bool) -> list:
    """[dL/dA, dL/dB] of C = op(A) op(B) with G = dL/dC: dL/dop(A) = G op(B)^T and
    dL/dop(B) = op(A)^T G; a transposed operand takes the transpose of that. Each case is one
    matmul with flags."""
    if not ta and not tb:  # C = A B
        return [matmul_op(g, b, False, True), matmul_op(a, g, True, False)]
    if ta and not tb:  # C = A^T B
        return [matmul_op(b, g, False, True), matmul_op(a, g, False, False)]
    if not ta and tb:  # C = A B^T
        return [matmul_op(g, b, False, False), matmul_op(g, a, True, False)]
    return [matmul_op(b, g, True, True), matmul_op(g, a, True, True)]  # C = A^T B^T


# The dlsys course's flag names; as_flag refuses anything but a bool.
TRANS_A = Attr("trans_A", as_flag, False, bool)
TRANS_B = Attr("trans_B", as_flag, False, bool)


def _bool(value, _name, _op) -> bool:
    return bool(value)


def _product(ta: bool, tb: bool, sa: tuple, sb: tuple) -> str:
    """The product named in shape errors: ``A^T (3, 2) @ B (3, 4)``."""
    return f"{'A^T' if ta else 'A'} {shape_str(sa)} @ {'B^T' if tb else 'B'} {shape_str(sb)}"


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
        a, b = node.inputs
        return _product_gradients(a, b, output_grad, node.trans_A, node.trans_B)

    def infer_shape(self, node, input_shapes):
        sa, sb = (tuple(s) for s in input_shapes)
        ta, tb = node.trans_A, node.trans_B
        desc = lambda: _product(ta, tb, sa, sb)  # noqa: E731 (made only for an error)
        if len(sa) != 2 or len(sb) != 2:
            raise self._error(node, f"both operands must be 2-D: {desc()}")
        m, k = (sa[1], sa[0]) if ta else sa
        kb, n = (sb[1], sb[0]) if tb else sb
        if k != kb:
            raise self._error(node, f"inner dimensions differ ({k} != {kb}): {desc()}")
        return (m, n)


class BmmOp(Op):
    """``bmm_op(A, B, trans_A, trans_B, like=None)``: op(A[i]) @ op(B[i]) over a batch of products
    (:func:`gpumat.ops.bmm`), op(X) = X^T when the matching flag is set.

    Shapes: A is (Ba, M, K), or (Ba, K, M) with trans_A; B is (Bb, K, N), or (Bb, N, K) with
    trans_B; Ba and Bb are each the batch B or 1 (1: that matrix in every product); out (B, M, N).
    With ``like`` (a node of shape (L, M, N), only its shape used) the output has like's shape:
    L = 1 under B > 1 sums the products over the batch, L = B > 1 over a batch of 1 repeats the
    one product; this is how the gradient reaches an operand repeated over the batch
    without a separate sum.
    """

    name = "bmm_op"
    kernel = "bmm"
    inputs = ("node_A", "node_B", "like")
    optional_inputs = ("like",)
    shape_only_inputs = (2,)  # like
    attrs = (TRANS_A, TRANS_B)

    def __call__(self, node_A, node_B, trans_A=False, trans_B=False, like=None):  # noqa: N803
        return super().__call__(node_A, node_B, like, trans_A, trans_B)

    def node_name(self, node):
        a, b = (short_name(i) for i in node.inputs[:2])
        return f"Bmm({a},{b},{node.trans_A},{node.trans_B})"

    def kernel_args(self, node):
        return (node.trans_A, node.trans_B)

    def gradient(self, node, output_grad):
        # MatMulOp's formulas for each product; each gradient takes its operand's shape (like), so
        # an operand repeated over the batch gets the sum of its products' gradients.
        a, b = node.inputs[:2]
        g = output_grad
        ta, tb = node.trans_A, node.trans_B
        if not ta and not tb:  # C = A B
            grads = [bmm_op(g, b, False, True, like=a), bmm_op(a, g, True, False, like=b)]
        elif ta and not tb:  # C = A^T B
            grads = [bmm_op(b, g, False, True, like=a), bmm_op(a, g, False, False, like=b)]
        elif not ta and tb:  # C = A B^T
            grads = [bmm_op(g, b, False, False, like=a), bmm_op(g, a, True, False, like=b)]
        else:  # C = A^T B^T
            grads = [bmm_op(b, g, True, True, like=a), bmm_op(g, a, True, True, like=b)]
        return grads + [None] * (len(node.inputs) - 2)

    def infer_shape(self, node, input_shapes):
        sa, sb = (tuple(s) for s in input_shapes[:2])
        ta, tb = node.trans_A, node.trans_B
        desc = lambda: _product(ta, tb, sa, sb)  # noqa: E731 (made only for an error)
        if len(sa) != 3 or len(sb) != 3:
            raise self._error(node, f"both operands must be 3-D: {desc()}")
        m, k = (sa[2], sa[1]) if ta else sa[1:]
        kb, n = (sb[2], sb[1]) if tb else sb[1:]
        if k != kb:
            raise self._error(node, f"inner dimensions differ ({k} != {kb}): {desc()}")
        batch = sb[0] if sa[0] == 1 else sa[0]
        if sb[0] not in (batch, 1):
            raise self._error(
                node, f"batch sizes differ ({sa[0]} != {sb[0]}; 1 repeats a matrix): {desc()}"
            )
        if len(input_shapes) == 2:
            return (batch, m, n)
        like = tuple(input_shapes[2])
        if len(like) != 3 or like[1:] != (m, n) or not (like[0] in (batch, 1) or batch == 1):
            raise self._error(
                node, f"like has shape {shape_str(like)}, expected ({batch}, {m}, {n}): {desc()}"
            )
        return like


class MatMulBiasOp(Op):
    """``matmul_bias_op(A, B, bias, trans_A, trans_B, relu)``: op(A) @ op(B) + bias, then max(., 0)
    when ``relu``. Shapes as ``matmul_op``; bias is (N,); out (M, N). ``F.linear`` makes it with
    ``relu=False`` (one kernel: on the host the bias rows are sgemm's C, as BLAS's addmm); its
    gradient is ``matmul_op``'s for A and B and ``sum_to_op(G, bias)`` for the bias. The fusion
    pass (``gpumat.runtime.fusion``) makes the ``relu=True`` form after
    :func:`gpumat.graph.gradients`, so that form has no gradient."""

    name = "matmul_bias_op"
    inputs = ("node_A", "node_B", "bias")
    attrs = (
        Attr("trans_A", _bool, False, bool),
        Attr("trans_B", _bool, False, bool),
        Attr("relu", _bool, False, bool),
    )

    def node_name(self, node):
        kind = "DenseRelu" if node.relu else "Dense"
        return f"{kind}({','.join(short_name(i) for i in node.inputs)})"

    def gradient(self, node, output_grad):
        if node.relu:
            reason = "matmul_bias_op(relu=True): made by the fusion pass, after gradients"
            return [Undefined(reason)] * 3
        a, b, bias = node.inputs
        grads = _product_gradients(a, b, output_grad, node.trans_A, node.trans_B)
        return [*grads, sum_to_op(output_grad, bias)]

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
bmm_op = BmmOp()
