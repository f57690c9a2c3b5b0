"""Fused recurrent cells as graph ops: ``lstm_cell_op``, ``gru_cell_op`` and their gradient ops
(formulas in ``extensions/src/rnn_cell.h``; PyTorch's gate orders LSTM i, f, g, o and GRU r, z, n).

Each op has one output: the LSTM cell's is ``[h' | c']`` (N, 2H) and its gradient op's
``[d gates | dc]`` (N, 5H), the GRU cell's gradient op's ``[d gi | d gh | d hx]`` (N, 7H); the
gradient of each input is its slab of that block (:func:`~gpumat.graph.strided.cat_slice_op`).
Kernels: :func:`gpumat.ops.lstm_cell` and family.
"""

from __future__ import annotations

from gpumat.graph.node import Op, shape_str, short_name
from gpumat.graph.strided import cat_slice_op

__all__ = [
    "GruCellGradientOp",
    "GruCellOp",
    "LstmCellGradientOp",
    "LstmCellOp",
    "gru_cell_gradient_op",
    "gru_cell_op",
    "lstm_cell_gradient_op",
    "lstm_cell_op",
]


def _hidden(op: Op, node, gates, state, k: int, gname: str, sname: str) -> int:
    """H from a gate block (N, k H) and a state (N, H); ValueError naming both otherwise."""
    gates, state = tuple(gates), tuple(state)
    if len(gates) != 2 or len(state) != 2 or gates != (state[0], k * state[1]):
        raise op._error(
            node,
            f"{gname} {shape_str(gates)} must be (N, {k} * H) for {sname} {shape_str(state)} "
            "(N, H)",
        )
    return state[1]


def _want(op: Op, node, what: str, got, want) -> None:
    if tuple(got) != tuple(want):
        raise op._error(node, f"{what} has shape {shape_str(got)}, expected {shape_str(want)}")


class LstmCellOp(Op):
    """``lstm_cell_op(gates, c)``: gates (N, 4H) (i, f, g, o pre-activations), c (N, H) ->
    [h' | c'] (N, 2H), c' = sigmoid(f) c + sigmoid(i) tanh(g), h' = sigmoid(o) tanh(c')
    (``torch.nn.LSTMCell``). Gradient: ``lstm_cell_gradient_op(gates, c, y, dy)``'s slabs."""

    name, label, kernel = "lstm_cell_op", "LstmCell", "lstm_cell"
    inputs = ("node_gates", "node_c")

    def node_name(self, node):
        return f"LstmCell({short_name(node.inputs[0])},{short_name(node.inputs[1])})"

    def infer_shape(self, node, input_shapes):
        gates, c = input_shapes
        h = _hidden(self, node, gates, c, 4, "gates", "c")
        return (c[0], 2 * h)

    def gradient(self, node, output_grad):
        gates, c = node.inputs
        g = lstm_cell_gradient_op(gates, c, node, output_grad)
        return [cat_slice_op(g, [gates, c], k, 1) for k in range(2)]


class LstmCellGradientOp(Op):
    """``lstm_cell_gradient_op(gates, c, y, dy)``: [d gates | dc] (N, 5H) of ``lstm_cell_op``
    given its output y and dy (N, 2H) = [dh' | dc']. No second derivative."""

    name, label, kernel = "lstm_cell_gradient_op", "LstmCellGrad", "lstm_cell_gradient"
    inputs = ("node_gates", "node_c", "node_y", "node_dy")

    def infer_shape(self, node, input_shapes):
        gates, c, y, dy = input_shapes
        h = _hidden(self, node, gates, c, 4, "gates", "c")
        _want(self, node, "y", y, (c[0], 2 * h))
        _want(self, node, "dy", dy, (c[0], 2 * h))
        return (c[0], 5 * h)

    no_gradient = "second derivatives of the LSTM cell"


class GruCellOp(Op):
    """``gru_cell_op(gi, gh, hx)``: gi = x W_ih^T + b_ih, gh = hx W_hh^T + b_hh (N, 3H) (r, z, n),
    hx (N, H) -> h' (N, H) = n + z (hx - n), r = sigmoid(gi_r + gh_r), z = sigmoid(gi_z + gh_z),
    n = tanh(gi_n + r gh_n) (``torch.nn.GRUCell``). Gradient: ``gru_cell_gradient_op``'s slabs."""

    name, label, kernel = "gru_cell_op", "GruCell", "gru_cell"
    inputs = ("node_gi", "node_gh", "node_hx")

    def node_name(self, node):
        return f"GruCell({','.join(short_name(n) for n in node.inputs)})"

    def infer_shape(self, node, input_shapes):
        gi, gh, hx = input_shapes
        h = _hidden(self, node, gi, hx, 3, "gi", "hx")
        _want(self, node, "gh", gh, gi)
        return (hx[0], h)

    def gradient(self, node, output_grad):
        g = gru_cell_gradient_op(*node.inputs, output_grad)
        return [cat_slice_op(g, list(node.inputs), k, 1) for k in range(3)]


class GruCellGradientOp(Op):
    """``gru_cell_gradient_op(gi, gh, hx, dy)``: [d gi | d gh | d hx] (N, 7H) of
    ``gru_cell_op`` given dy (N, H). No second derivative."""

    name, label, kernel = "gru_cell_gradient_op", "GruCellGrad", "gru_cell_gradient"
    inputs = ("node_gi", "node_gh", "node_hx", "node_dy")

    def infer_shape(self, node, input_shapes):
        gi, gh, hx, dy = input_shapes
        h = _hidden(self, node, gi, hx, 3, "gi", "hx")
        _want(self, node, "gh", gh, gi)
        _want(self, node, "dy", dy, hx)
        return (hx[0], 7 * h)

    no_gradient = "second derivatives of the GRU cell"


lstm_cell_op = LstmCellOp()
lstm_cell_gradient_op = LstmCellGradientOp()
gru_cell_op = GruCellOp()
gru_cell_gradient_op = GruCellGradientOp()
