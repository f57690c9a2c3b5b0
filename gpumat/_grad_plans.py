"""Replayable gradient steps for eager backward: what one node's ``op.gradient`` made and how its
nodes were evaluated, kept so the next step with the same structure skips both.

An eager training step records new graph nodes every iteration, and backward used to ask each
node's op for its gradient nodes (``op.gradient``: symbolic, new ``Node`` objects) and then to
evaluate them one by one (``op.infer_shape``, allocation, ``op.compute``). For the same op, the
same attributes, the same input shapes and the same set of inputs that need a gradient, both give
the same nodes and the same shapes every time: gpumat's gradient rules are pure functions of those
(they read the node's attributes, its input nodes and the gradient node, never values). A
:class:`GradPlan` is that evaluation written down once: for each gradient node, in the order
backward computed it, the op and attributes (a template node), where its inputs come from (the
gradient, the node's saved output, one of its inputs' saved values, or an earlier step) and its
shape. Replaying it runs the same kernels on the same values in the same order as the first
evaluation, so the results are the same bits; only the Python work of building and shaping nodes
is skipped.

A plan is made only when everything in it is known to be a function of its key (:func:`plan_key`):
gpumat's own ops (user ``Op`` subclasses may read anything), no op with run state (dropout's
seeds change every step), no view gradient (those wait for their base: ``_Scatter``), and leaves
that are the node itself or its inputs. Anything else is evaluated as before, every time.
"""

from __future__ import annotations

import threading

from gpumat._core import PyGpuMatrix
from gpumat.graph.elementwise import oneslike_op

__all__ = [
    "GradPlan",
    "PlanRecorder",
    "clear",
    "count",
    "lookup",
    "plan_key",
    "plans",
    "REFUSED",
    "store",
]

# Step kinds: a kernel into a new array, a reshape (a view of its input, no kernel), or the first
# input handed on unchanged (a sum to the same shape, a product by 1.0: autograd._passes_through).
COMPUTE, VIEW, PASS = 0, 1, 2

_MAX_PLANS = 4096  # keys seen; cleared when full (a model has a few dozen kinds of node)
# key -> GradPlan, or REFUSED for a key whose evaluation could not be written down
_plans: dict = {}
_lock = threading.Lock()
REFUSED = object()


_cacheable_types: dict = {}


def _cacheable_op(op) -> bool:
    kind = type(op)
    ok = _cacheable_types.get(kind)
    if ok is None:
        ok = _cacheable_types[kind] = (
            kind.__module__.startswith("gpumat.") and not kind.takes_run_state
        )
    return ok


def plan_key(node, grad_node, grad_value, relevant: set, grad_fresh: bool):
    """The structure that decides ``node``'s gradient evaluation, or None when it cannot be named
    (a value released or not yet made, an attribute that is not hashable): the op and its
    attributes, the shapes of the output gradient and of the saved input values, which inputs are
    the same node, which need a gradient, whether the gradient is backward's seed for this node
    (``softmaxcrossentropy_op`` skips the product by those ones) and whether it is a fresh array."""
    op = node.op
    if not _cacheable_op(op):
        return None
    inputs = node.inputs
    shapes = []
    for i in inputs:
        saved = i.saved
        if saved is None or saved.value is None:
            return None
        shapes.append(saved.value.shape)
    aliases = None
    if len(inputs) > 1 and len(set(inputs)) != len(inputs):
        aliases = tuple([inputs.index(i) for i in inputs])
    seed = grad_node.op is oneslike_op and grad_node.inputs[0] is node
    # (hashed by the lookup: an attribute that is not hashable makes lookup answer None)
    return (
        op,
        node.attrs,
        tuple(shapes),
        grad_value.shape,
        tuple([i in relevant for i in inputs]),
        aliases,
        seed,
        grad_fresh,
    )


def lookup(key):
    """The plan stored for ``key``; :data:`REFUSED` when its evaluation cannot be replayed (also
    for a key that cannot be hashed: an attribute value that is not); None when none is known."""
    try:
        return _plans.get(key)
    except TypeError:  # an unhashable attribute value
        return REFUSED


def store(key, plan) -> None:
    """Keep ``plan`` for ``key`` (None: remember that the key is not replayable)."""
    with _lock:
        if len(_plans) >= _MAX_PLANS:
            _plans.clear()
        _plans[key] = REFUSED if plan is None else plan


def clear() -> None:
    """Forget every plan (tests; a long-lived process that changed models needs no call: the
    store is bounded)."""
    with _lock:
        _plans.clear()


def plans() -> list:
    """The stored plans (a new list; refused keys left out)."""
    return [p for p in list(_plans.values()) if p is not REFUSED]


def count() -> int:
    """The number of stored plans."""
    return len(plans())


class PlanRecorder:
    """Writes down one node's gradient evaluation as :func:`gpumat.autograd._evaluate` runs it.

    Slots number the values a step can read: 0 the output gradient, 1 the node's saved output,
    2 + k its input k's saved value (the first position of a node given twice), then one per step
    in order. ``ok`` turns False at anything a plan cannot replay."""

    def __init__(self, node, grad_node) -> None:
        self.node = node
        self.slot_of = {grad_node: 0, node: 1}
        for k, i in enumerate(node.inputs):
            self.slot_of.setdefault(i, 2 + k)
        self.n_leaves = 2 + len(node.inputs)
        self.steps: list = []
        self.outputs: list = []
        self.ok = True

    def step(self, gnode, kind: int, shape, offset: int = 0) -> None:
        """Gradient node ``gnode`` was evaluated (``kind``: COMPUTE, VIEW or PASS) to ``shape``
        (a VIEW from element ``offset`` of its first input on)."""
        op = gnode.op
        if not _cacheable_op(op):
            self.ok = False
            return
        refs = []
        for i in gnode.inputs:
            slot = self.slot_of.get(i)
            if slot is None:  # a forward node deeper than the inputs
                self.ok = False
                return
            refs.append(slot)
        # The plan keeps a copy without inputs: compute reads only the op's attributes, and a
        # plan must not keep this step's tensors (the forward nodes hold their values) alive.
        template = gnode.with_inputs([])
        template.name = gnode.name  # named now: naming reads the inputs
        shape_only = op.shape_only_inputs
        self.steps.append((template, op, tuple(refs), shape_only, tuple(shape), kind, offset))
        self.slot_of[gnode] = self.n_leaves + len(self.steps) - 1

    def output(self, position: int, gnode, owned: bool) -> None:
        """Input ``position`` of the node receives gradient node ``gnode``'s value."""
        slot = self.slot_of.get(gnode)
        if slot is None:
            self.ok = False
            return
        self.outputs.append((position, slot, owned))

    def plan(self):
        """The :class:`GradPlan`, or None when the evaluation could not be written down."""
        if not self.ok:
            return None
        return GradPlan(self.n_leaves, self.steps, self.outputs)


class GradPlan:
    """One node's gradient evaluation, replayable (see the module docstring)."""

    __slots__ = ("n_leaves", "steps", "outputs", "reads", "checks")

    def __init__(self, n_leaves: int, steps: list, outputs: list) -> None:
        self.n_leaves = n_leaves
        self.steps = tuple(steps)
        self.outputs = tuple(outputs)
        reads, checks = set(), set()
        for _, _, refs, shape_only, _, _, _ in steps:
            for k, slot in enumerate(refs):
                if 1 <= slot < n_leaves:
                    reads.add(slot)
                    if k not in shape_only:
                        checks.add(slot)
        self.reads = tuple(sorted(reads))
        self.checks = tuple(sorted(checks))

    def run(self, node, grad_value, device):
        """[(input position, value, owned)] as the recorded evaluation made them, or None when a
        saved value it reads was released or changed in place since it was recorded (the caller
        then evaluates as before, which raises the error that names it)."""
        saved = node.saved
        inputs = node.inputs
        slots = [grad_value, saved.value]
        slots += [i.saved.value for i in inputs]
        for slot in self.reads:
            if slots[slot] is None:
                return None
        for slot in self.checks:
            if slot == 1:
                if saved.vc.value != saved.ver:
                    return None
            elif inputs[slot - 2].saved.vc.value != saved.in_vers[slot - 2]:
                return None
        kind_index = None
        for gnode, op, refs, _, shape, kind, offset in self.steps:
            vals = [slots[r] for r in refs]
            if kind == PASS:
                out = vals[0]
            elif kind == VIEW:
                out = vals[0]._view(shape, offset)
            else:
                if kind_index is None:
                    kind_index = device._native
                out = PyGpuMatrix._empty(shape, device, kind_index[0], kind_index[1])
                op.compute(gnode, vals, out, device)
            slots.append(out)
        return [(position, slots[slot], owned) for position, slot, owned in self.outputs]
