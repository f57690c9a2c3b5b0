"""Static memory planning: which values may share a buffer.

A liveness analysis over the schedule (a topological order) gives each value the interval from
the step that writes it to the last step that reads it (the evaluated nodes live to the end;
inputs an op reads only for their shape do not count; fed values live from step 0, since a
compiled step copies every feed in before its first op). Values whose intervals do not overlap
share a buffer: values are placed largest first, each in the smallest planned buffer that is free
for its whole interval (best fit), else in a new buffer. A node's inputs are live at its step, so
its output buffer is never one of its inputs' (matmul, softmax, transpose and broadcast cannot
work in place).

This is static memory planning as in MXNet/NNVM's ``PlanMemory`` pass (Chen et al., "Training Deep
Nets with Sublinear Memory Cost", 2016, section 3), with the greedy-by-size placement of Pisarchyk
and Lee, "Efficient Memory Management for Deep Neural Net Inference" (2020), on whole buffers.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from gpumat.graph.node import Node

__all__ = [
    "MemoryPlan",
    "nbytes_of",
    "plan_buffers",
    "value_lifetimes",
]


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
    """What the executor's memory plan holds (all sizes in bytes).

    Attributes:
        num_values: values held in executor-owned buffers (every node of the schedule except feeds
            passed as device arrays, which are used in place).
        num_buffers: buffers allocated for them.
        planned_bytes: total size of those buffers.
        naive_bytes: total size if every value had its own buffer.
        itemsize: bytes per element (4 for float32, 8 for a float64 numpy run).
    """

    num_values: int
    num_buffers: int
    planned_bytes: int
    naive_bytes: int
    itemsize: int

    @property
    def saved_fraction(self) -> float:
        """1 - planned_bytes / naive_bytes (0 for an empty plan)."""
        return 1.0 - self.planned_bytes / self.naive_bytes if self.naive_bytes else 0.0

    def __str__(self) -> str:
        return (
            f"{self.num_values} values in {self.num_buffers} buffers: "
            f"{self.planned_bytes} bytes planned vs {self.naive_bytes} naive "
            f"({100 * self.saved_fraction:.1f}% saved)"
        )


def nbytes_of(shape: tuple, itemsize: int) -> int:
    """Bytes of an array of ``shape`` with ``itemsize``-byte elements."""
    return int(np.prod(shape, dtype=np.int64)) * itemsize


def value_lifetimes(
    order: Sequence[Node], computed: set[Node], eval_nodes: Sequence[Node]
) -> dict[Node, tuple[int, int]]:
    """Each node's live interval ``(first, last)``, as steps of ``order`` (inclusive).

    A value is written at its own step and read up to the last step whose op reads it; inputs an
    op uses only for their shape (``Op.shape_only_inputs``) do not count, nor do the inputs of fed
    nodes (not in ``computed``). Fed values live from step 0, since a compiled run copies every
    feed in before its first op. Eval nodes live to ``len(order)``, past the last step. The extra
    outputs of a fused node (``node.extra_outputs``, see ``gpumat.runtime.fusion``) are written at
    the fused node's step, so they live from there.
    """
    # Fed values live from step 0: the compiled step copies every feed in before its first op.
    first = {node: 0 if node not in computed else step for step, node in enumerate(order)}
    for step, node in enumerate(order):
        if node in computed:
            for extra in getattr(node, "extra_outputs", ()):
                if extra in first:
                    first[extra] = step
    last = dict(first)
    for step, node in enumerate(order):
        if node in computed:
            skip = node.op.shape_only_inputs
            for k, inp in enumerate(node.inputs):
                if k not in skip:
                    last[inp] = step
    for node in eval_nodes:
        last[node] = len(order)
    return {node: (first[node], last[node]) for node in order}


def plan_buffers(
    order: Sequence[Node],
    shapes: Mapping[Node, tuple],
    planned: set[Node],
    eval_nodes: Sequence[Node],
    computed: set[Node],
    itemsize: int,
    aliases: Mapping[Node, Node] | None = None,
):
    """Assign executor buffers to values so that values live at the same time never share one.

    Args:
        order: nodes in topological order (the schedule).
        shapes: every node's shape.
        planned: nodes that need an executor-owned buffer.
        eval_nodes: nodes whose values are returned (live to the end).
        computed: nodes whose inputs are read at their step (all but fed nodes).
        itemsize: bytes per element.
        aliases: planned node -> the planned node whose buffer it shares, of the same size (a
            reshape of a contiguous value is the same bytes: the executor runs nothing for it).
            A node and its aliases are placed as one value, live from the first one's write to
            the last one's last read.

    Returns:
        (assignment, buffer_bytes): node -> buffer index, and each buffer's size in bytes.

    Greedy by size (the "greedy by size" strategy of Pisarchyk & Lee, "Efficient Memory Management
    for Deep Neural Net Inference", 2020, as in TFLite's arena planner, on whole buffers): values
    are taken largest first, and each goes to the smallest existing buffer that is free for the
    value's whole lifetime, else to a new buffer. Since a node's inputs are live at its step, a
    value never shares a buffer with one of its inputs, so ops that cannot work in place are safe.
    """
    lifetimes = value_lifetimes(order, computed, eval_nodes)
    step_of = {node: step for step, node in enumerate(order)}
    aliases = aliases or {}

    def root(node):
        while node in aliases:
            node = aliases[node]
        return node

    for node in sorted(aliases, key=step_of.__getitem__):  # a group's lifetime: its members'
        r = root(node)
        (f0, l0), (f1, l1) = lifetimes[r], lifetimes[node]
        lifetimes[r] = (min(f0, f1), max(l0, l1))
    nbytes = {node: nbytes_of(shapes[node], itemsize) for node in planned}
    values = sorted(
        (n for n in planned if n not in aliases), key=lambda n: (-nbytes[n], step_of[n])
    )

    buffer_bytes: list[int] = []
    # Per buffer, the disjoint lifetimes it holds, sorted: starts and ends in parallel lists.
    starts: list[list[int]] = []
    ends: list[list[int]] = []
    assignment: dict[Node, int] = {}
    for node in values:
        first, last = lifetimes[node]
        choice = None
        # Buffers were added largest first, so the last free one is the best fit.
        for b in reversed(range(len(buffer_bytes))):
            k = bisect.bisect_left(starts[b], first)
            if (k == 0 or ends[b][k - 1] < first) and (k == len(starts[b]) or starts[b][k] > last):
                choice = b
                break
        if choice is None:
            choice = len(buffer_bytes)
            buffer_bytes.append(nbytes[node])
            starts.append([])
            ends.append([])
        k = bisect.bisect_left(starts[choice], first)
        starts[choice].insert(k, first)
        ends[choice].insert(k, last)
        assignment[node] = choice
    for node in aliases:
        assignment[node] = assignment[root(node)]
    return assignment, buffer_bytes
