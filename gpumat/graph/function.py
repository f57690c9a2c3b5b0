"""The graph nodes of a custom differentiable function (:class:`gpumat.autograd.Function`).

A function applied to tensors records two kinds of node:

- one :class:`FunctionOp` node, whose inputs are the nodes of the function's tensor arguments. It
  has no value of its own (its shape is ``()``, its compute writes a 0 and reads no input): it
  stands for the function in the graph, so that its gradient is taken once, after the gradients
  of all its outputs are known;
- one :class:`FunctionOutputOp` node per differentiable output, whose first input is that
  function node. In a graph the executor runs (a step traced by :func:`gpumat.compile`) its
  second input is the node computing the output's value, which it copies; eagerly it has no
  second input (the value was computed by the function's forward and kept by autograd).

The reverse-mode engines (:func:`gpumat.graph.gradients` and the eager ``backward`` of
:mod:`gpumat.autograd`) treat them together: an output node hands its summed gradient to its
function node instead of calling ``gradient``, and the function node, reached after all its
outputs (they depend on it), calls its ``vjp`` once with the gradients of the outputs that got one
(``{output index: gradient}``), which returns one gradient per input, or None. The gradients are
graph nodes in :func:`~gpumat.graph.gradients` and device arrays eagerly; ``vjp`` answers in the
same kind. The value of an output never flows back into the forward nodes that computed it: the
function's gradient is its ``vjp``, not the derivative of those nodes (PyTorch's
``torch.autograd.Function``).
"""

from __future__ import annotations

from collections.abc import Callable

from gpumat._checks import as_int
from gpumat.graph.node import Attr, Node, Op, kernels_for, short_name

__all__ = ["FunctionOp", "FunctionOutputOp", "function_output_op"]


class FunctionOp(Op):
    """The node of one application of a custom function: one op object per application, holding
    the function's ``vjp`` (see the module docstring).

    Args:
        name: the function's name (``"MyExp"``), used in node names and messages.
        vjp: ``vjp(grads) -> list``: ``grads`` maps the index of each output that received a
            gradient to it (a graph node or a device array); returns one entry per input of the
            node: a gradient of the input's shape, of the same kind, or None.
        num_inputs: the number of inputs of the node (all read for their shapes only).
        release: called when eager backward releases the graph (without ``retain_graph``), so the
            function drops the tensors it saved; None for nothing to release.

    Build its node with :meth:`node`. Its ``gradient`` is not called: the engines call ``vjp``.
    """

    name = "function_op"

    def __init__(
        self, name: str, vjp: Callable, num_inputs: int, release: Callable | None = None
    ) -> None:
        self.name = str(name)
        self.vjp = vjp
        self.release = release
        self.shape_only_inputs = tuple(range(num_inputs))

    def node(self, inputs: list) -> Node:
        """The function's node over ``inputs`` (graph nodes, one per tensor argument)."""
        for i in inputs:
            if not isinstance(i, Node):
                raise TypeError(f"{self.name}: inputs must be graph Nodes, got {type(i).__name__}")
        node = Node(self, inputs)
        node.name = f"{self.name}({','.join(short_name(i) for i in inputs)})"
        return node

    def compute(self, node, input_vals, output_val, device=None) -> None:
        """Writes 0 into the node's ``()`` value, which nothing reads (its outputs' nodes hold the
        function's values); a compiled program replays one call per node."""
        kernels_for(device).fill(output_val, 0.0)

    def gradient(self, node, output_grad):
        raise RuntimeError(
            f"{self.name}: the gradient of a function node is its vjp, called by gradients() and "
            "backward() with its outputs' gradients"
        )

    def infer_shape(self, node, input_shapes):
        return ()


class FunctionOutputOp(Op):
    """``function_output_op(function_node, value_node=None, index=0)``: output ``index`` of a
    custom function (see the module docstring): a copy of ``value_node`` (any shape), or, with no
    ``value_node``, a node whose value autograd keeps (never computed).

    Raises:
        TypeError: ``function_node`` is not a :class:`FunctionOp` node, or ``index`` not an int.
        ValueError: ``index`` is negative; the shape of a node with no ``value_node`` is asked.
    """

    name = "function_output_op"
    inputs = ("function_node", "value_node")
    optional_inputs = ("value_node",)
    attrs = (Attr("index", as_int, default=0, type=int),)
    shape_only_inputs = (0,)
    kernel = "copy"

    def __call__(self, function_node, value_node=None, index: int = 0) -> Node:
        if not isinstance(function_node, Node) or not isinstance(function_node.op, FunctionOp):
            raise TypeError(
                f"{self.name}: function_node must be a FunctionOp node, got {function_node!r}"
            )
        node = super().__call__(function_node, value_node, index)
        if node.index < 0:
            raise ValueError(f"{self.name}: index must be >= 0, got {node.index}")
        return node

    def node_name(self, node):
        return f"{short_name(node.inputs[0])}[{node.index}]"

    def gradient(self, node, output_grad):
        raise RuntimeError(
            f"{self.name}: an output's gradient goes to its function node, whose vjp gives the "
            "inputs' gradients (gradients() and backward() do this)"
        )

    def infer_shape(self, node, input_shapes):
        if len(input_shapes) < 2:
            raise self._error(node, "an eager function output has no value node to copy")
        return tuple(input_shapes[1])


function_output_op = FunctionOutputOp()
