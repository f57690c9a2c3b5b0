"""An executor's plan: what one feed signature makes of a graph, made once and reused.

:func:`make_plan` is a straight pipeline, each stage once:

1. **sort**: the schedule is a topological order of what the eval nodes need, fed nodes as leaves
   (:func:`gpumat.graph.find_topo_sort`, iterative);
2. **infer shapes** along it (:func:`infer_shapes`): a missing feed or incompatible shapes raise
   ``ValueError`` naming the node and the shapes, before anything is allocated or run;
3. **fuse** (:func:`gpumat.runtime.fusion.fuse`, optional): the rewritten graph comes back with its
   own schedule and shapes, built as the pass rewrote it;
4. **plan memory** (:func:`gpumat.runtime.memory.plan_buffers`): which values share a buffer;
5. **steps**: per schedule position, what a run does there (copy a feed in, bind a fed device
   array, compute, or nothing: a fused node's second output, or a reshape (or a same-shape
   sum_to / expand) that shares its input's buffer, :func:`reshape_aliases`).

The executor allocates the planned buffers and runs the steps (from Python, or compiled, see
:mod:`gpumat.runtime.compiled`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np

from gpumat.graph.layout import ReshapeOp
from gpumat.graph.node import Node, PlaceholderOp
from gpumat.graph.reverse_mode import find_topo_sort
from gpumat.graph.strided import ExpandLikeOp, ExpandOp, SumToOp
from gpumat.runtime import fusion as fusion_pass
from gpumat.runtime.memory import MemoryPlan, nbytes_of, plan_buffers

__all__ = [
    "COMPUTE",
    "FEED_COPY",
    "FEED_EXTERNAL",
    "WRITTEN",
    "Plan",
    "Step",
    "infer_shapes",
    "make_plan",
]

#: Step kinds: run the node's op; copy a host feed into its buffer; use a fed device array in
#: place; nothing to run (the second output of a fused node, written by that node, or a reshape
#: whose buffer is its input's).
COMPUTE, FEED_COPY, FEED_EXTERNAL, WRITTEN = 0, 1, 2, 3


class Step(NamedTuple):
    """One schedule position of a plan (a named tuple: the run loop unpacks it).

    Attributes:
        kind: :data:`COMPUTE`, :data:`FEED_COPY`, :data:`FEED_EXTERNAL` or :data:`WRITTEN`.
        index: the position in the schedule (and in a run's list of values).
        node: the node computed or fed there.
        inputs: the schedule positions of the node's inputs (COMPUTE only).
        extra: the positions of a fused node's second outputs, which it writes too (or None).
    """

    kind: int
    index: int
    node: Node
    inputs: tuple = ()
    extra: tuple | None = None


@dataclasses.dataclass
class Plan:
    """Everything a run of one feed signature needs, but the buffers themselves.

    Attributes:
        order: the schedule (of the fused graph when fusion is on).
        shapes: node -> shape, every node of ``order`` and of the graph as built.
        steps: one :class:`Step` per schedule position.
        eval_index: the schedule positions of the eval nodes, in the order they were asked for.
        assignment: schedule position -> buffer number, for every value held in a planned buffer.
        buffer_bytes: each planned buffer's size in bytes.
        external_steps: (position, node) of the fed device arrays, used in place.
        copy_steps: (position, node) of the host feeds, copied into planned buffers.
        feed_shapes: fed node -> shape, for the fed nodes the schedule uses.
        dtype: the run's dtype (float32; float64 for a float64 numpy run).
        fusion_report: a :class:`gpumat.runtime.fusion.FusionReport`.
        memory_plan: a :class:`gpumat.runtime.memory.MemoryPlan`.
    """

    order: list
    shapes: dict
    steps: list
    eval_index: list
    assignment: dict
    buffer_bytes: list
    external_steps: list
    copy_steps: list
    feed_shapes: dict
    # numpy.float32 or numpy.float64 (a scalar type; annotated `object`: the docs' cross-reference
    # to the builtin `type` would be ambiguous with the attributes named `type`)
    dtype: object
    fusion_report: fusion_pass.FusionReport
    memory_plan: MemoryPlan


def infer_shapes(
    order: Sequence[Node], feed_shapes: Mapping[Node, tuple], eval_nodes: Sequence[Node]
) -> dict[Node, tuple]:
    """Every node's shape along the schedule ``order``, from the fed nodes' shapes.

    Raises:
        ValueError: a variable the eval nodes need is not fed (naming it), or an op's
            ``infer_shape`` rejects its input shapes (naming the op, node and shapes).
        RuntimeError: an op's ``infer_shape`` returned None (a bug in that op).
    """
    missing = [n for n in order if n not in feed_shapes and isinstance(n.op, PlaceholderOp)]
    if missing:
        names = ", ".join(repr(n.name) for n in missing)
        needs = ", ".join(repr(n.name) for n in eval_nodes[:4])
        raise ValueError(f"no value fed for variable(s) {names}, needed to evaluate {needs}")
    shapes: dict[Node, tuple] = {}
    for node in order:
        if node in feed_shapes:
            shapes[node] = tuple(int(d) for d in feed_shapes[node])
            continue
        out = node.op.infer_shape(node, [shapes[i] for i in node.inputs])
        if out is None:
            raise RuntimeError(f"{node.op.name}.infer_shape returned None for node {node.name!r}")
        shapes[node] = tuple(int(d) for d in out)
    return shapes


def reshape_aliases(order, planned, feeds, eval_nodes, shapes) -> dict:
    """Values that are their input's bytes: node -> its input, for every ``reshape_op`` /
    ``flatten_op`` node, and every ``sum_to_op`` / ``expand_op`` / ``expand_like_op`` node of its
    input's shape (a sum over nothing, a repeat of nothing: the gradients of a same-shape
    broadcast), whose input has a planned buffer (a planned buffer holds a value contiguously, in
    row-major order, so a reshape is the same bytes seen with another shape). The memory plan
    gives them one buffer and the run does nothing for the node (a :data:`WRITTEN` step).
    A fed device array (used in place: its layout is its own) keeps the copy, and so does a node
    that would put two returned values in one buffer.
    """
    returned = set(eval_nodes)
    aliases: dict = {}
    holds_returned: dict = {}  # a buffer's first value -> whether a returned value is in it
    for node in order:
        if node in feeds or not node.inputs or node.inputs[0] not in planned:
            continue
        same_bytes = isinstance(node.op, ReshapeOp) or (
            isinstance(node.op, (SumToOp, ExpandOp, ExpandLikeOp))
            and shapes[node] == shapes[node.inputs[0]]
        )
        if not same_bytes:
            continue
        root = node.inputs[0]
        while root in aliases:
            root = aliases[root]
        held = holds_returned.get(root, root in returned)
        if held and node in returned:
            continue
        aliases[node] = node.inputs[0]
        holds_returned[root] = held or node in returned
    return aliases


def make_plan(
    eval_nodes: Sequence[Node], feeds: Mapping, dtype, on_device: bool, fusion: bool
) -> Plan:
    """Sort, infer shapes, fuse, plan memory and lay out the steps for one feed signature.

    Args:
        eval_nodes: the nodes to evaluate.
        feeds: fed node -> (value, external), ``external`` True for a device array used in place.
        dtype: the run's dtype (float32, or float64 for a float64 numpy run).
        on_device: device buffers (float32, 4-byte elements) rather than numpy ones.
        fusion: run the fusion pass.

    Raises:
        ValueError: from shape inference, before anything is planned.
    """
    feed_shapes = {n: tuple(v.shape) for n, (v, _) in feeds.items()}
    order = find_topo_sort(eval_nodes, stop_at=feed_shapes.keys())
    shapes = infer_shapes(order, feed_shapes, eval_nodes)
    if fusion:
        fused = fusion_pass.fuse(order, eval_nodes, feeds.keys(), shapes)
        # The user's nodes keep their shapes, fused or not.
        eval_nodes, order, report = fused.eval_nodes, fused.order, fused.report
        shapes = {**shapes, **fused.shapes}
    else:
        n_ops = sum(1 for n in order if n not in feeds)
        report = fusion_pass.FusionReport(
            n_ops, n_ops, {k: 0 for k in fusion_pass.RULES}, enabled=False
        )

    itemsize = 4 if on_device else np.dtype(dtype).itemsize
    external = {n for n, (_, ext) in feeds.items() if ext and n in shapes}
    computed = {n for n in order if n not in feeds}
    planned = {n for n in order if n not in external}
    aliases = reshape_aliases(order, planned, feeds, eval_nodes, shapes)
    assignment, buffer_bytes = plan_buffers(
        order, shapes, planned, eval_nodes, computed, itemsize, aliases
    )

    index = {node: i for i, node in enumerate(order)}
    steps = []
    for i, node in enumerate(order):
        if node in external:
            steps.append(Step(FEED_EXTERNAL, i, node))
        elif node in feeds:
            steps.append(Step(FEED_COPY, i, node))
        elif isinstance(node.op, fusion_pass.FusedOutputOp) or node in aliases:
            steps.append(Step(WRITTEN, i, node))
        else:
            extra_nodes = getattr(node, "extra_outputs", ())
            extra = tuple(index[x] for x in extra_nodes if x in index)
            if len(extra) != len(extra_nodes):
                raise RuntimeError(f"fused node {node.name!r}: an output is not scheduled")
            inputs = tuple(index[x] for x in node.inputs)
            steps.append(Step(COMPUTE, i, node, inputs, extra or None))
    return Plan(
        order=order,
        shapes=shapes,
        steps=steps,
        eval_index=[index[n] for n in eval_nodes],
        assignment={index[n]: b for n, b in assignment.items()},
        buffer_bytes=buffer_bytes,
        external_steps=[(s.index, s.node) for s in steps if s.kind == FEED_EXTERNAL],
        copy_steps=[(s.index, s.node) for s in steps if s.kind == FEED_COPY],
        feed_shapes={n: shapes[n] for n in feeds if n in shapes},
        dtype=dtype,
        fusion_report=report,
        memory_plan=MemoryPlan(
            num_values=len(planned),
            num_buffers=len(buffer_bytes),
            planned_bytes=int(sum(buffer_bytes)),
            naive_bytes=int(sum(nbytes_of(shapes[n], itemsize) for n in planned)),
            itemsize=itemsize,
        ),
    )
