"""Reverse-mode differentiation over a graph: :func:`gradients` and :func:`find_topo_sort`.

:func:`gradients` walks the graph in reverse topological order from the output, asks each node's
``Op.gradient`` for its inputs' gradient nodes, and sums the contributions that reach a node along
several paths (micrograd's ``engine.py``: gradients summed, never overwritten). The result is more
graph: the same executor evaluates, fuses and plans it. A custom function's nodes
(:mod:`gpumat.graph.function`) are differentiated together: its outputs hand their gradients to
its function node, whose ``vjp`` gives its inputs' gradients in one call. The topological order is
iterative, so a 10,000-deep chain needs no recursion limit.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gpumat.graph.elementwise import add_op, oneslike_op, zeroslike_op
from gpumat.graph.function import FunctionOp, FunctionOutputOp
from gpumat.graph.node import Node, Undefined

__all__ = [
    "find_topo_sort",
    "gradients",
]


def find_topo_sort(node_list: Iterable[Node], stop_at: Iterable[Node] = ()) -> list[Node]:
    """All nodes that ``node_list`` depends on, inputs before the nodes that use them.

    Iterative depth-first post-order (an explicit stack: no recursion limit, so a 10,000-deep chain
    is fine); inputs are visited in order, so the result is deterministic. Nodes in ``stop_at`` are
    treated as leaves (their inputs are not visited), as fed nodes are by the executor.
    """
    stop = set(stop_at)
    visited: set[Node] = set()
    order: list[Node] = []
    for root in node_list:
        if root in visited:
            continue
        visited.add(root)
        stack = [(root, iter(() if root in stop else root.inputs))]
        while stack:
            node, it = stack[-1]
            for child in it:
                if child not in visited:
                    visited.add(child)
                    stack.append((child, iter(() if child in stop else child.inputs)))
                    break
            else:
                stack.pop()
                order.append(node)
    return order


def _sum_node_list(nodes: list[Node]) -> Node:
    total = nodes[0]
    for n in nodes[1:]:
        total = add_op(total, n)
    return total


def gradients(
    output_node: Node, node_list: Sequence[Node], output_grad: Node | None = None
) -> list[Node]:
    """Gradient graph nodes of ``output_node`` with respect to each node in ``node_list``.

    Reverse-mode differentiation started from ``output_grad``, a node of ``output_node``'s shape
    (the vector of a vector-Jacobian product), or by default from ``oneslike_op(output_node)``:
    for a non-scalar output this is the gradient of the sum of its elements. Contributions
    reaching a node along several paths are summed with ``add_op`` (micrograd ``engine.py``),
    over the reverse of an iterative topological order, so depth is unlimited. Only paths that
    lead to a requested node are differentiated. A requested node that the output does not depend
    on gets ``zeroslike_op(node)``.

    Returns:
        A list of nodes, one per entry of ``node_list``, each with that node's shape.

    Raises:
        NotImplementedError: a needed gradient is :class:`Undefined` (e.g. softmax cross-entropy
            with respect to its labels).
        TypeError: ``output_node``, ``output_grad`` or an entry of ``node_list`` is not a graph
            node.
    """
    if not isinstance(output_node, Node):
        raise TypeError(
            f"gradients: output_node must be a graph Node, got {type(output_node).__name__}"
        )
    try:
        node_list = list(node_list)
    except TypeError as exc:
        raise TypeError(
            f"gradients: node_list must be a sequence of Nodes, got {type(node_list).__name__}"
        ) from exc
    for node in node_list:
        if not isinstance(node, Node):
            raise TypeError(
                f"gradients: node_list must hold graph Nodes, got a {type(node).__name__}"
            )
    if output_grad is not None and not isinstance(output_grad, Node):
        raise TypeError(
            f"gradients: output_grad must be a graph Node or None, got {type(output_grad).__name__}"
        )
    topo = find_topo_sort([output_node])
    wanted = set(node_list)
    # A node is relevant if some requested node is it or one of its ancestors.
    relevant: set[Node] = set()
    for node in topo:
        if node in wanted or any(i in relevant for i in node.inputs):
            relevant.add(node)

    seed = oneslike_op(output_node) if output_grad is None else output_grad
    contributions: dict[Node, list[Node]] = {output_node: [seed]}
    node_to_grad: dict[Node, Node] = {}
    for node in reversed(topo):
        grads = contributions.pop(node, None)
        if not grads:
            continue
        if isinstance(node.op, FunctionOp):
            # Reached after all its outputs, which handed it their gradients: (index, node).
            input_grads = node.op.vjp(dict(grads))
        else:
            grad = _sum_node_list(grads)
            node_to_grad[node] = grad
            if not any(i in relevant for i in node.inputs):
                continue
            if isinstance(node.op, FunctionOutputOp):
                function_node = node.inputs[0]
                if function_node in relevant:
                    contributions.setdefault(function_node, []).append((node.index, grad))
                continue
            input_grads = node.op.gradient(node, grad)
        if input_grads is None or len(input_grads) != len(node.inputs):
            raise RuntimeError(
                f"{node.op.name}.gradient returned {input_grads!r} for {len(node.inputs)} inputs"
            )
        for inp, g in zip(node.inputs, input_grads, strict=True):
            if g is None or inp not in relevant:
                continue
            if isinstance(g, Undefined):
                raise NotImplementedError(
                    f"{g.reason} (needed for the gradient of {output_node.name!r})"
                )
            contributions.setdefault(inp, []).append(g)
    return [node_to_grad[n] if n in node_to_grad else zeroslike_op(n) for n in node_list]
