"""The front end's autograd engine: grad mode, eager evaluation of graph nodes, and ``backward``.

gpumat has one set of derivative rules: the ``Op.gradient`` methods of :mod:`gpumat.graph`. This
module runs them eagerly, so that :class:`gpumat.Tensor` can record and differentiate as PyTorch
users expect:

- **Recording.** An op on tensors that require a gradient builds the same graph node the graph API
  builds (``matmul_op``, ``relu_op``, ...), runs its kernel at once (:func:`run_node`: the shape
  from ``op.infer_shape``, the output allocated on the device, ``op.compute``) and keeps the node
  with its value: the node's ``saved`` record (:class:`Saved`). Leaf tensors are placeholder
  nodes (``Variable``) whose record's ``leaf`` is the tensor that receives the gradient.
- **backward** (:func:`backward`) walks the recorded nodes in reverse topological order (the order
  :func:`gpumat.graph.gradients` uses), asks each ``op.gradient(node, grad_node)`` for graph nodes
  and evaluates them at once with :func:`run_node` (memoised per node), summing the contributions
  that reach a node along several paths (micrograd's ``engine.py``: summed, never overwritten).
  Leaves accumulate into ``.grad``. Only nodes on a path to a leaf that requires a gradient are
  differentiated.
- **Saved values and versions.** Each tensor has a version counter, shared with its views, that
  in-place operations increase. A recorded node remembers the versions of its inputs and output;
  when a gradient reads one of those values and its version moved, backward raises RuntimeError
  (PyTorch's rule: never a gradient from a changed value). Without ``retain_graph`` the values of
  the nodes backward went through are released, and a second backward through them raises
  RuntimeError.

- **Custom functions** (:class:`Function`, PyTorch's ``torch.autograd.Function``): a user's
  ``forward`` and ``backward``, recorded as the nodes of :mod:`gpumat.graph.function`; backward
  calls the user's ``backward`` once with the gradients of all the function's outputs.

:class:`no_grad`, :class:`enable_grad` and :class:`set_grad_enabled` switch recording off and on
per thread (PyTorch's names; context managers and decorators). The active trace of
:func:`gpumat.compile` is kept here too (:func:`current_trace`), so that tensor ops know whether to
run or to record symbolically.
"""

from __future__ import annotations

import functools
import inspect
import math
import threading

import numpy as np

from gpumat import _grad_plans as grad_plans
from gpumat import ops
from gpumat._core import PyGpuMatrix
from gpumat.arrays import empty
from gpumat.dtypes import float32
from gpumat.graph.elementwise import MulByConstOp, zeroslike_op
from gpumat.graph.function import FunctionOp, FunctionOutputOp, function_output_op
from gpumat.graph.node import Node, PlaceholderOp, Undefined, Variable, placeholder_op, shape_str
from gpumat.graph.reverse_mode import find_topo_sort
from gpumat.graph.strided import AsStridedBackwardOp, SumToOp

__all__ = [
    "Function",
    "FunctionCtx",
    "Saved",
    "VersionCounter",
    "backward",
    "check_backward",
    "current_trace",
    "enable_grad",
    "is_grad_enabled",
    "no_grad",
    "record",
    "reset_grad",
    "run_node",
    "set_grad_enabled",
    "set_trace",
]

_local = threading.local()


# --------------------------------------------------------------------------------------------------
# Grad mode and the active trace (per thread)
# --------------------------------------------------------------------------------------------------


def is_grad_enabled() -> bool:
    """True when tensor ops record the graph for backward (the default, per thread)."""
    return getattr(_local, "grad_enabled", True)


def _set_enabled(mode: bool) -> bool:
    previous = is_grad_enabled()
    _local.grad_enabled = bool(mode)
    return previous


class _GradMode:
    """A context manager and decorator that sets grad mode for its block (or call) and restores
    the previous mode after, also when the block raises. A decorated generator function runs its
    body in the mode each time it resumes, as PyTorch's do."""

    mode = False

    def __enter__(self):
        self._previous = _set_enabled(self.mode)
        return self

    def __exit__(self, *exc) -> None:
        _set_enabled(self._previous)

    def __call__(self, fn):
        if not callable(fn):
            raise TypeError(f"{type(self).__name__}: decorates a function, got {fn!r}")
        mode = self.mode
        if inspect.isgeneratorfunction(fn):
            return _generator_in_mode(fn, mode)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            previous = _set_enabled(mode)
            try:
                return fn(*args, **kwargs)
            finally:
                _set_enabled(previous)

        return wrapper


class _Mode(_GradMode):
    """Grad mode ``mode`` for a block (what a decorated generator's resumptions run in)."""

    def __init__(self, mode: bool) -> None:
        self.mode = mode


def _generator_in_mode(fn, mode: bool):
    """A generator function whose body runs in ``mode`` each time it resumes, and whose caller's
    mode is back between resumptions (PyTorch's decorated generators)."""

    @functools.wraps(fn)
    def generator(*args, **kwargs):
        gen = fn(*args, **kwargs)
        try:
            with _Mode(mode):
                response = gen.send(None)
            while True:
                try:
                    request = yield response
                except GeneratorExit:
                    with _Mode(mode):
                        gen.close()
                    raise
                except BaseException as exc:  # thrown into the generator: pass it on
                    with _Mode(mode):
                        response = gen.throw(exc)
                else:
                    with _Mode(mode):
                        response = gen.send(request)
        except StopIteration as stop:
            return stop.value

    return generator


class no_grad(_GradMode):  # noqa: N801 (PyTorch's name)
    """``with gpumat.no_grad():`` (or ``@gpumat.no_grad()``): ops in the block record nothing, so
    their results do not require a gradient and no graph values are kept (evaluation, parameter
    updates by hand). Per thread; the previous mode is restored on exit."""

    mode = False


class enable_grad(_GradMode):  # noqa: N801 (PyTorch's name)
    """``with gpumat.enable_grad():``: recording on inside a ``no_grad`` block."""

    mode = True


class set_grad_enabled(_GradMode):  # noqa: N801 (PyTorch's name)
    """``with gpumat.set_grad_enabled(mode):``: recording on or off (``mode`` a bool). Calling it
    outside a ``with`` sets the mode at once, as PyTorch's does; as a decorator
    (``@set_grad_enabled(False)``) it sets the mode for the decorated calls only.

    Raises:
        TypeError: ``mode`` is not a bool.
    """

    def __init__(self, mode: bool) -> None:
        if not isinstance(mode, bool):
            raise TypeError(f"set_grad_enabled: mode must be a bool, got {mode!r}")
        self.mode = mode
        self._previous = _set_enabled(mode)

    def __enter__(self):
        return self

    def __call__(self, fn):
        # As a decorator it sets the mode for the decorated calls only: undo the change that
        # constructing it made (defining such a function used to turn autograd off).
        _set_enabled(self._previous)
        return super().__call__(fn)


# The number of threads with a trace set: while none has, current_trace answers without the
# thread-local lookup (it runs for every eager op and module call).
_threads_tracing = 0
_tracing_lock = threading.Lock()


def current_trace():
    """The trace that :func:`gpumat.compile` is recording on this thread, or None."""
    if not _threads_tracing:
        return None
    return getattr(_local, "trace", None)


def set_trace(trace):
    """Make ``trace`` (or None) this thread's active trace; returns the previous one."""
    global _threads_tracing
    previous = getattr(_local, "trace", None)
    with _tracing_lock:
        _threads_tracing += (trace is not None) - (previous is not None)
        _local.trace = trace
    return previous


# --------------------------------------------------------------------------------------------------
# Eager evaluation and recording
# --------------------------------------------------------------------------------------------------


class VersionCounter:
    """How many in-place changes a tensor's storage has seen, and what is known of its values:
    one object per storage, shared by every tensor over it (views, ``detach()``, ``.data``,
    ``Parameter``).

    Attributes:
        value: the version, increased by every in-place change.
        bounds: ``(lo, hi)`` bounds of the values of an int64 or bool storage, or None; valid
            only while ``value == bounds_version``, so that a change which does not declare the
            new bounds makes them unknown rather than stale (:attr:`gpumat.Tensor._range`).
        bounds_version: the version ``bounds`` describe.
    """

    __slots__ = ("value", "bounds", "bounds_version")

    def __init__(self) -> None:
        self.value = 0
        self.bounds = None
        self.bounds_version = 0


def run_node(node: Node, input_vals: list, device):
    """Evaluate one graph node now: its value as a new array on ``device``.

    The output shape comes from ``node.op.infer_shape`` (whose ValueError names the op, the node
    and the shapes) and the value from ``node.op.compute`` into a fresh array, so the output never
    shares storage with an input, as the executor guarantees. A reshape (``reshape_op``,
    ``flatten_op``) is a view of its input instead: no kernel. Ops with run state (dropout) run
    in training mode at step 0 (their masks come from the node's seed).

    Returns:
        A ``PyGpuMatrix`` of the inferred shape on ``device``.
    """
    op = node.op
    shapes = [v.shape for v in input_vals]
    shape = op.infer_shape(node, shapes)
    if op.view_of_input:
        return input_vals[0]._view(tuple(shape), op.view_offset(node, shapes))
    if device is None:
        out = empty(tuple(shape), device)
    else:  # gpumat.arrays.empty's checks, known to hold for a shape from infer_shape
        kind, index = device._native
        out = PyGpuMatrix._empty(shape, device, kind, index)  # any sequence of integers
    if op.takes_run_state:
        op.compute(node, input_vals, out, device, training=True, step=0)
    else:
        op.compute(node, input_vals, out, device)
    return out


class Saved:
    """What backward keeps of an eagerly run node (``node.saved``): its ``value``, the version
    counter ``vc`` of that value and the version ``ver`` it had when recorded, its inputs'
    versions then (``in_vers``), the ``leaf`` tensor that receives a placeholder's gradient, and
    whether backward has released the value (``freed``)."""

    __slots__ = ("value", "vc", "ver", "in_vers", "leaf", "freed")

    def __init__(self, value, vc: VersionCounter, in_vers: tuple = (), leaf=None) -> None:
        self.value = value
        self.vc = vc
        self.ver = vc.value
        self.in_vers = in_vers
        self.leaf = leaf
        self.freed = False


def record(node: Node, value, version: VersionCounter, input_versions: tuple) -> None:
    """Keep ``node`` in the graph for backward: its value, its output's version counter, and the
    versions its inputs had when it ran."""
    node.saved = Saved(value, version, input_versions)


def leaf_node(tensor, name: str) -> Node:
    """A placeholder node standing for ``tensor`` in recorded graphs (a leaf: its value is the
    tensor's storage; its record's ``leaf`` is the tensor when it requires a gradient)."""
    node = Node(placeholder_op)  # Variable(name) without the op call's argument checks
    node._name = str(name)
    node.saved = Saved(tensor._data, tensor._vc, leaf=tensor if tensor._requires_grad else None)
    return node


_FREED = (
    "Trying to backward through the graph a second time (or to read values that backward has "
    "already released). The values kept for the gradient are released by backward(); call "
    "backward(retain_graph=True) the first time to backward through the graph again"
)


def _forward_value(node: Node, expected: dict, shape_only: bool):
    """A recorded node's value for a gradient, checked against in-place changes."""
    saved = node.saved
    value = saved.value
    if value is None:
        raise RuntimeError(_FREED)
    if not shape_only:
        want = expected.get(node)
        if want is None and not isinstance(node.op, PlaceholderOp):
            want = saved.ver
        if want is not None and saved.vc.value != want:
            raise RuntimeError(
                "one of the tensors needed for the gradient has been modified by an in-place "
                f"operation: the {shape_str(value.shape)} value of {node.op.name} node "
                f"{node.name!r} is at version {saved.vc.value}; expected version {want}. Make "
                "the change out of place, or after backward()"
            )
    return value


def _evaluate(target: Node, memo: dict, fresh: set, expected: dict, device, rec=None):
    """The value of gradient node ``target``: its inputs are recorded forward nodes (values kept
    by the graph) or nodes in ``memo``; new nodes are computed inputs first and memoised. Arrays
    allocated here are added to ``fresh`` (by id; views are not fresh). ``rec`` (a
    :class:`gpumat._grad_plans.PlanRecorder`) is told each node evaluated, in order."""
    if target in memo:
        return memo[target]
    stack = [target]
    while stack:
        node = stack[-1]
        if node in memo:
            stack.pop()
            continue
        pending = [i for i in node.inputs if i.saved is None and i not in memo]  # not recorded
        if pending:
            for i in pending:
                if isinstance(i.op, PlaceholderOp):
                    raise RuntimeError(f"backward: gradient node {i.name!r} has no value (a bug)")
            stack.extend(pending)
            continue
        stack.pop()
        shape_only = node.op.shape_only_inputs
        vals = [
            memo[i] if i in memo else _forward_value(i, expected, k in shape_only)
            for k, i in enumerate(node.inputs)
        ]
        if _passes_through(node, vals):
            out = vals[0]  # not fresh: leaves copy it rather than adopt it
            kind = grad_plans.PASS
        else:
            out = run_node(node, vals, device)
            if node.op.view_of_input:
                kind = grad_plans.VIEW
            else:
                fresh.add(id(out))
                kind = grad_plans.COMPUTE
        if rec is not None:  # a view's offset once, here: the plan's replay reuses it
            offset = 0
            if kind == grad_plans.VIEW:
                offset = node.op.view_offset(node, [v.shape for v in vals])
            rec.step(node, kind, out.shape, offset)
        memo[node] = out
    return memo[target]


def _passes_through(node: Node, vals: list) -> bool:
    """Whether gradient node ``node``'s value is its first input's, unchanged, so that backward
    hands that array on instead of copying it: a sum to the same shape (the gradient of an
    operand that a broadcast did not repeat: every ``x @ W.T + b``'s x) or a product by 1.0 (the
    gradient of ``clone`` and ``contiguous``)."""
    op = node.op
    if isinstance(op, SumToOp):
        return vals[0].shape == vals[1].shape
    return isinstance(op, MulByConstOp) and node.const_attr == 1.0


def _sum(contribs: list, device):
    """(node, value, fresh) for the sum of ``contribs`` [(node, value, fresh), ...]: the only one,
    or a new placeholder node holding a new array (summed in list order)."""
    if len(contribs) == 1:
        return contribs[0]
    # NOTE: the same additions, in the same order, as gpumat.graph.gradients' add_op chain, so a
    # compiled step (which differentiates with gradients()) sums bit for bit as backward does.
    first, second = contribs[0][1], contribs[1][1]
    total = empty(first.shape, device)
    ops.add(first, second, total)
    for _, value, _ in contribs[2:]:
        ops.add(total, value, total)
    return Variable("grad"), total, True


def backward(root: Node, seed, device, retain_graph: bool) -> None:
    """Differentiate the recorded graph that ends at ``root`` and accumulate into the leaves.

    Args:
        root: the recorded node of the tensor backward was called on.
        seed: (node, array, fresh): the gradient of root (``oneslike_op(root)`` evaluated, or the
            ``gradient`` tensor given to backward).
        device: the device of the values.
        retain_graph: keep the values the gradient read, so backward can run through the graph
            again.

    Raises:
        RuntimeError: the graph was released by an earlier backward; a value the gradient reads
            was changed in place since it was recorded; a leaf moved to another device since.
        NotImplementedError: a needed gradient is :class:`gpumat.graph.Undefined`.
    """
    topo = find_topo_sort([root])
    relevant: set[Node] = set()
    for node in topo:
        saved = node.saved
        if saved is not None and saved.leaf is not None:
            leaf = saved.leaf
            if leaf._device is not device and leaf._device != device:
                # Checked before any gradient is accumulated, so a refused backward changes
                # nothing (PyTorch's AccumulateGrad raises too).
                raise RuntimeError(
                    f"backward: a leaf of shape {shape_str(leaf.shape)} is on {leaf.device} but "
                    f"its gradient would be on {device} (was it moved between forward and "
                    "backward? move it before the forward pass)"
                )
            relevant.add(node)
            continue
        for i in node.inputs:
            if i in relevant:
                relevant.add(node)
                break
    contributions: dict[Node, list] = {root: [seed]}
    for node in reversed(topo):
        contribs = contributions.pop(node, None)
        if not contribs:
            continue
        contribs = _scattered(contribs, device)
        if isinstance(node.op, PlaceholderOp):
            if node.saved.leaf is not None:
                node.saved.leaf._accumulate_grad(contribs)
            continue
        if node.saved.freed:
            raise RuntimeError(_FREED)
        if isinstance(node.op, (FunctionOp, FunctionOutputOp)):
            _function_step(node, contribs, contributions, relevant, device, retain_graph)
            continue
        grad_node, grad_value, grad_fresh = _sum(contribs, device)
        key = grad_plans.plan_key(node, grad_node, grad_value, relevant, grad_fresh)
        plan = None if key is None else grad_plans.lookup(key)
        if plan is not None and plan is not grad_plans.REFUSED:
            handed_values = plan.run(node, grad_value, device)
            if handed_values is not None:
                inputs = node.inputs
                for position, value, owned in handed_values:
                    contributions.setdefault(inputs[position], []).append(
                        (_REPLAYED_GRADIENT, value, owned)
                    )
                if not retain_graph:
                    node.saved.value = None
                    node.saved.freed = True
                continue
        # (a plan whose replay found a value changed is recorded again: the path below raises)
        recording = key is not None and plan is not grad_plans.REFUSED
        rec = grad_plans.PlanRecorder(node, grad_node) if recording else None
        expected = dict(zip(node.inputs, node.saved.in_vers, strict=True))
        expected[node] = node.saved.ver
        input_grads = node.op.gradient(node, grad_node)
        if input_grads is None or len(input_grads) != len(node.inputs):
            raise RuntimeError(
                f"{node.op.name}.gradient returned {input_grads!r} for {len(node.inputs)} inputs"
            )
        memo = {grad_node: grad_value}
        fresh: set[int] = {id(grad_value)} if grad_fresh else set()
        handed: list = []
        for position, (inp, g) in enumerate(zip(node.inputs, input_grads, strict=True)):
            if g is None or inp not in relevant:
                continue
            if isinstance(g, Undefined):
                raise NotImplementedError(f"{g.reason} (needed by backward)")
            if type(g.op) is AsStridedBackwardOp and g not in memo:  # a view's gradient: later
                src = _evaluate(g.inputs[0], memo, fresh, expected, device)
                like = _forward_value(g.inputs[1], expected, True)
                handed.append((position, inp, g, _Scatter(g, src, like)))
                rec = None  # waits for its base: not replayable alone
                continue
            handed.append((position, inp, g, _evaluate(g, memo, fresh, expected, device, rec)))
        counts: dict[int, int] = {}
        for _, _, _, value in handed:
            counts[id(value)] = counts.get(id(value), 0) + 1
        for position, inp, g, value in handed:
            owned = id(value) in fresh and counts[id(value)] == 1
            contributions.setdefault(inp, []).append((g, value, owned))
            if rec is not None:
                rec.output(position, g, owned)
        if recording:
            grad_plans.store(key, None if rec is None else rec.plan())
        if not retain_graph:
            node.saved.value = None
            node.saved.freed = True


# The node of every replayed gradient value in later steps (the gradient rules of the nodes it
# reaches take it as their output gradient). One object serves all: each node's evaluation keys
# its own memo by it, and nothing changes it.
_REPLAYED_GRADIENT = Node(placeholder_op)
_REPLAYED_GRADIENT._name = "grad"


class _Scatter:
    """A view's gradient not yet made: ``node`` (an ``as_strided_backward_op``) with its input
    values ``src`` (the gradient of the view) and ``like`` (the base, read for its shape).
    backward makes it when it reaches the view's base, so that the gradients of several views of
    one base (the q, k, v heads of one projection) go into one array (:func:`_scattered`)."""

    __slots__ = ("node", "src", "like")

    def __init__(self, node: Node, src, like) -> None:
        self.node, self.src, self.like = node, src, like

    @property
    def shape(self) -> tuple:
        return tuple(self.like.shape)

    def region(self) -> tuple:
        return tuple(self.src.shape), tuple(self.node.stride), int(self.node.offset)

    def make(self, device):
        """The gradient alone: the node's own compute (zeros, then the region)."""
        return run_node(self.node, [self.src, self.like], device)


@functools.lru_cache(maxsize=256)
def _layout_of(size: int, regions: tuple) -> str | None:
    """How strided ``regions`` ((shape, stride, offset), each of distinct addresses) lie in an
    array of ``size`` elements: ``"tiles"`` (disjoint, covering every element), ``"disjoint"``, or
    None (two overlap). Counted once per layout (an element count per address), then cached."""
    counts = np.zeros(size, np.uint8)
    for shape, stride, offset in regions:
        index = np.full((), offset, np.int64)
        for n, step in zip(shape, stride, strict=True):
            index = index[..., None] + np.arange(n, dtype=np.int64) * step
        counts[index.ravel()] += 1
    if size and counts.max() > 1:
        return None
    return "tiles" if size == 0 or counts.min() == 1 else "disjoint"


_MAX_COUNTED = 1 << 22  # larger arrays (an int64 index per element to count): each view alone


def _scattered(contribs: list, device) -> list:
    """``contribs`` with their deferred view gradients (:class:`_Scatter`) made: when every
    contribution is one, of one shape, in disjoint regions, one array written by a scatter each
    (zero-filled first unless the regions tile it) stands for their sum, which is the same values
    but for the sign of a zero (x + 0 is +0 for x = -0), as the fusion pass's ``split_gradient``;
    else each alone (``as_strided_backward_op``'s compute), and summed in order as before."""
    for c in contribs:
        if len(c) == 3 and type(c[1]) is _Scatter:
            break
    else:
        return contribs  # (a function node's contributions are (index, value) pairs)
    parts = [value for _, value, _ in contribs if isinstance(value, _Scatter)]
    if len(parts) == len(contribs) > 1 and len({p.shape for p in parts}) == 1:
        size = math.prod(parts[0].shape)
        layout = (
            _layout_of(size, tuple(p.region() for p in parts)) if size <= _MAX_COUNTED else None
        )
        if layout is not None:
            out = empty(parts[0].shape, device)
            if layout != "tiles":
                ops.fill(out, 0.0)
            for p in parts:
                ops.as_strided_scatter(p.src, out, p.node.stride, p.node.offset)
            return [(Variable("grad"), out, True)]
    return [
        (g, value.make(device), True) if isinstance(value, _Scatter) else (g, value, owned)
        for g, value, owned in contribs
    ]


def _function_step(node, contribs, contributions, relevant, device, retain_graph) -> None:
    """backward at a node of a custom function (:mod:`gpumat.graph.function`): an output hands
    its summed gradient to its function node; the function node, reached after all its outputs,
    calls its ``vjp`` once with them and hands each input its gradient."""
    if isinstance(node.op, FunctionOutputOp):
        _, value, _ = _sum(contribs, device)
        function_node = node.inputs[0]
        if function_node in relevant:
            contributions.setdefault(function_node, []).append((node.index, value))
    else:
        input_grads = node.op.vjp(dict(contribs))
        for inp, value in zip(node.inputs, input_grads, strict=True):
            if value is not None and inp in relevant:
                contributions.setdefault(inp, []).append((Variable("grad"), value, False))
        if not retain_graph and node.op.release is not None:
            node.op.release()
    if not retain_graph:
        node.saved.value = None
        node.saved.freed = True


def check_backward(root, gradient) -> None:
    """The checks eager and traced ``backward`` share (PyTorch's errors), on a
    :class:`gpumat.Tensor` ``root``: RuntimeError when it does not require a gradient, or has more
    than one element and no ``gradient``."""
    if not root._requires_grad:
        raise RuntimeError("element 0 of tensors does not require grad and does not have a grad_fn")
    if gradient is None and root.numel() != 1:
        raise RuntimeError(
            "grad can be implicitly created only for scalar outputs (this tensor has shape "
            f"{shape_str(root._shape)}: pass gradient=)"
        )


def reset_grad(t, set_to_none: bool = True) -> None:
    """Reset a :class:`gpumat.Tensor`'s ``t.grad`` for ``zero_grad``: to None (``set_to_none``,
    PyTorch's default), else to zeros in place (inside a compiled step, symbolic zeros); a missing
    gradient stays None."""
    if set_to_none or t._grad is None:
        t.grad = None
        return
    trace = current_trace()
    if trace is not None:
        trace.zeros_grad(t)
        return
    g = t._grad
    if g._trace is None:
        g._concrete("zero_grad")
        ops.fill(g._data, 0.0)
        g._vc.value += 1


# --------------------------------------------------------------------------------------------------
# Custom functions: gpumat.autograd.Function
# --------------------------------------------------------------------------------------------------


def _is_tensor(x) -> bool:
    """Whether ``x`` is a :class:`gpumat.Tensor` (or a subclass such as ``nn.Parameter``). This
    module lies below :mod:`gpumat.tensor` and does not import it: a tensor is the object with a
    :class:`VersionCounter`."""
    return isinstance(getattr(x, "_vc", None), VersionCounter)


def _shape_of(t) -> str:
    return shape_str(t._shape)


class FunctionCtx:
    """The ``ctx`` that a :class:`Function`'s ``forward`` and ``backward`` receive (PyTorch's
    ``torch.autograd.function.FunctionCtx``). Any attribute may be set on it in ``forward``
    (``ctx.k = 3``) and read in ``backward``.

    Attributes:
        needs_input_grad: a tuple of bools, one per argument of ``forward`` (after ``ctx``): whether
            backward must compute that argument's gradient (a tensor that requires a gradient,
            with grad mode on); ``backward`` may return None for the others.
    """

    def __init__(self, name: str, needs_input_grad: tuple) -> None:
        self.needs_input_grad = needs_input_grad
        self._fn_name = name
        self._to_save: tuple = ()
        self._saved = None  # [(tensor, version)] from the end of forward on
        self._released = False
        self._non_differentiable: set = set()
        self._materialize = True

    def save_for_backward(self, *tensors) -> None:
        """Keep ``tensors`` (or None) for ``backward``, which reads them from
        :attr:`saved_tensors`. Call it once, in ``forward`` (or ``setup_context``); a second call
        replaces the first.

        Raises:
            TypeError: an argument is neither a tensor nor None.
        """
        for i, t in enumerate(tensors):
            if t is not None and not _is_tensor(t):
                raise TypeError(
                    f"{self._fn_name}: save_for_backward can only save tensors or None, but "
                    f"argument {i} is a {type(t).__name__}"
                )
        self._to_save = tensors

    @property
    def saved_tensors(self) -> tuple:
        """The tensors given to :meth:`save_for_backward`, in order.

        Raises:
            RuntimeError: one of them was changed in place since ``forward`` returned (its
                version counter moved: the gradient would read other values), or backward has
                already released them (a backward without ``retain_graph``).
        """
        if self._released:
            raise RuntimeError(_FREED)
        if self._saved is None:  # still in forward
            return tuple(self._to_save)
        for i, (t, version) in enumerate(self._saved):
            if t is not None and t._vc.value != version:
                raise RuntimeError(
                    "one of the variables needed for gradient computation has been modified by "
                    f"an inplace operation: the {_shape_of(t)} tensor saved by "
                    f"{self._fn_name}.save_for_backward at position {i} is at version "
                    f"{t._vc.value}; expected version {version}. Make the change out of place, "
                    "or after backward()"
                )
        return tuple(t for t, _ in self._saved)

    def mark_non_differentiable(self, *tensors) -> None:
        """Outputs of ``forward`` (given here as the tensors it returns) that are not
        differentiable: they do not require a gradient, and ``backward`` receives zeros for them
        (or None with ``set_materialize_grads(False)``)."""
        self._non_differentiable |= {id(t) for t in tensors}

    def set_materialize_grads(self, value: bool) -> None:
        """Whether ``backward`` receives zeros (True, the default) or None for the gradient of an
        output that got none (a non-tensor output always gets None)."""
        self._materialize = bool(value)

    def mark_dirty(self, *tensors) -> None:
        """Not supported: a gpumat Function's ``forward`` must not change its inputs in place.

        Raises:
            NotImplementedError: always.
        """
        raise NotImplementedError(
            f"{self._fn_name}: mark_dirty (a forward that changes its inputs in place) is not "
            "supported by gpumat; return a new tensor"
        )

    def _finish(self) -> None:
        """End of forward: remember the saved tensors' versions (the ones backward may read)."""
        self._saved = [(t, None if t is None else t._vc.value) for t in self._to_save]

    def _release(self) -> None:
        self._released = True
        self._saved = None
        self._to_save = ()


_LEGACY = (
    "{name}: a Function is not instantiated or called; apply it with {name}.apply(...) "
    "(forward and backward are static methods, as PyTorch's new-style autograd.Function)"
)


class Function:
    """A differentiable function with its own ``forward`` and ``backward``: PyTorch's
    ``torch.autograd.Function``.

    Subclass it with two static methods and apply it with :meth:`apply`::

        class MyExp(gpumat.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                y = x.exp()
                ctx.save_for_backward(y)
                return y

            @staticmethod
            def backward(ctx, grad_out):
                (y,) = ctx.saved_tensors
                return grad_out * y

        y = MyExp.apply(x)

    - ``forward(ctx, *args)`` runs with grad mode off (nothing inside it is recorded). Its
      arguments are :meth:`apply`'s: tensors and anything else (numbers, strings, None...). It
      returns a tensor or a tuple (of tensors, and other values, which get no gradient). It may
      keep tensors for backward with ``ctx.save_for_backward`` and anything as an attribute of
      ``ctx`` (:class:`FunctionCtx`). ``setup_context(ctx, inputs, output)`` may do that instead,
      with a ``forward(*args)`` that takes no ``ctx``, as in PyTorch.
    - ``backward(ctx, *grad_outputs)`` receives one float32 gradient per output of forward, of
      that output's shape (zeros for an output that got none, unless
      ``ctx.set_materialize_grads(False)``; None for a non-tensor output), runs with grad mode
      off, and returns one gradient per argument of forward (a tensor alone for one argument):
      a float32 tensor of the argument's shape, on its device, or None (no gradient).
      ``ctx.needs_input_grad`` says which are needed; a gradient for a tensor argument that does
      not require one is ignored; extra trailing Nones are allowed.

    The outputs of :meth:`apply` are new tensors (over forward's results: the same storage and
    version counter) that require a gradient when an argument does and grad mode is on; their
    ``grad_fn`` is a graph node of the function (:mod:`gpumat.graph.function`). ``backward()``
    through them calls the Function's ``backward`` once, with the gradients of all its outputs,
    and sums what it returns into the arguments' gradients like any other op's.

    **Under** :func:`gpumat.compile` the function is traced through: ``forward``'s tensor ops are
    recorded into the step's graph like the rest of the step (with no gradient through them),
    and at the step's ``backward()`` the Function's ``backward`` is called once on the symbolic
    gradients, so that its tensor ops become the step's gradient graph. A compiled step thus
    runs the very kernels the eager step runs, and its values and gradients are the eager ones.
    A forward or backward that cannot be traced (one that reads values, ``item()`` or
    ``numpy()``, or launches its own kernel on a tensor's array) fails at the step's first call
    with the tracing error, noted as coming from the Function: apply such a Function outside
    the compiled step. (An opaque graph node running the Python forward on arrays was not chosen:
    the step's graph is planned before any value exists, so the node's output shapes would be
    unknown.)

    Raises:
        TypeError: (from :meth:`apply`) forward returned something other than a tensor or a
            tuple; arguments that do not fit forward's signature; (from backward) a gradient that
            is not a tensor or None, or not float32.
        RuntimeError: ``Function()`` with arguments, or calling an instance (legacy
            functions); (from backward) a wrong number of gradients, a gradient for an argument
            that is not a tensor, of another shape or device; ``ctx.saved_tensors`` after an
            in-place change of a saved tensor or after backward released them.
        NotImplementedError: ``forward`` or ``backward`` is not defined.
        Whatever ``forward`` or ``backward`` raises propagates.
    """

    def __init__(self, *args, **kwargs) -> None:
        if args or kwargs:
            raise RuntimeError(_LEGACY.format(name=type(self).__name__))

    def __call__(self, *args, **kwargs):
        raise RuntimeError(_LEGACY.format(name=type(self).__name__))

    @staticmethod
    def forward(ctx, *args, **kwargs):
        """The function's value (override it as a static method, see :class:`Function`).

        Raises:
            NotImplementedError: not overridden.
        """
        raise NotImplementedError("You must implement the forward function for custom Function.")

    @staticmethod
    def setup_context(ctx, inputs: tuple, output) -> None:
        """Optional: save what backward needs from forward's ``inputs`` and ``output``, for a
        ``forward(*args)`` that takes no ``ctx`` (PyTorch's split style)."""
        raise NotImplementedError("setup_context is not implemented.")

    @staticmethod
    def backward(ctx, *grad_outputs):
        """The gradients of the arguments from those of the outputs (override it as a static
        method, see :class:`Function`).

        Raises:
            NotImplementedError: not overridden.
        """
        raise NotImplementedError(
            "You must implement the backward method for your custom Function to use it with "
            "backward()."
        )

    @classmethod
    def apply(cls, *args, **kwargs):
        """Run ``forward`` on ``args`` (and ``kwargs``, bound to forward's parameters) and record
        the function for backward: see :class:`Function`.

        Returns:
            What forward returned: a tensor, or a tuple whose tensors are new tensors over
            forward's results, requiring a gradient when an argument does and grad mode is on.
        """
        return _apply(cls, args, kwargs)


def _trace_note(exc: BaseException, name: str, method: str) -> None:
    exc.add_note(
        f"(raised while gpumat.compile traced {name}.{method}: inside a compiled step a "
        "Function's forward and backward are traced like the rest of the step, so they may use "
        "tensor operations only; apply a Function that reads values or launches its own kernels "
        "outside the compiled step)"
    )


def _apply(cls, args: tuple, kwargs: dict):
    name = cls.__name__
    if cls.forward is Function.forward:
        raise NotImplementedError(
            f"{name}: You must implement the forward function for custom Function."
        )
    separate = cls.setup_context is not Function.setup_context
    keywords: dict = {}
    if kwargs or separate:  # bound to forward's parameters, defaults included (as PyTorch)
        try:
            sig = inspect.signature(cls.forward)
            bound = sig.bind(*args, **kwargs) if separate else sig.bind(None, *args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{name}.apply: {exc}") from None
        bound.apply_defaults()
        args = bound.args if separate else bound.args[1:]
        keywords = bound.kwargs
        for k, v in keywords.items():
            if _is_tensor(v):
                raise TypeError(
                    f"{name}.apply: tensor argument {k!r} is keyword-only in forward; tensors "
                    "are passed positionally (each gets a gradient from backward)"
                )
    tensors = [a for a in args if _is_tensor(a)]
    trace = current_trace()
    if trace is None and any(t._trace is not None for t in tensors):
        raise RuntimeError(f"{name}.apply: a tensor of a finished gpumat.compile trace")
    grad = is_grad_enabled() and any(t._requires_grad for t in tensors)
    needs = tuple(grad and _is_tensor(a) and a._requires_grad for a in args)
    ctx = FunctionCtx(name, needs)
    with no_grad():
        try:
            if separate:
                output = cls.forward(*args, **keywords)
                cls.setup_context(ctx, args, output)
            else:
                output = cls.forward(ctx, *args, **keywords)
        except Exception as exc:
            if trace is not None:
                _trace_note(exc, name, "forward")
            raise
    outs = output if isinstance(output, tuple) else (output,)
    if not isinstance(output, tuple) and not _is_tensor(output):
        raise TypeError(
            f"{name}.forward must return a Tensor or a tuple of Tensors, got "
            f"{type(output).__name__}"
        )
    for o in outs:
        if _is_tensor(o) and o._trace is not None and o._trace is not trace:
            raise RuntimeError(f"{name}.forward returned a tensor of another gpumat.compile trace")
    ctx._finish()
    if not grad:
        return output
    backward_fn = _Backward(cls, ctx, args, outs, trace)
    op = FunctionOp(name, backward_fn.vjp, len(tensors), backward_fn.release)
    results = list(outs)
    if trace is None:
        fn_node = op.node([t._graph_node() for t in tensors])
        fn_node.saved = Saved(ctx, VersionCounter(), tuple(t._vc.value for t in tensors))
    else:
        fn_node = op.node([trace.node_of(t, name) for t in tensors])
    for k, o in enumerate(outs):
        if not backward_fn.differentiable[k]:
            continue
        if trace is None:
            node = function_output_op(fn_node, None, index=k)
            t = o._make(o._data, o._dtype, o._device, None, o._vc)
            t._view = o._view  # one storage, one region of the base (as detach())
            record(node, t._data, t._vc, (0,))
            t._node = node
        else:
            node = function_output_op(fn_node, trace.node_of(o, name), index=k)
            t = o._symbolic(trace, node, o._shape, o._dtype, o._device)
        t._requires_grad = True
        backward_fn.nodes[k] = node
        results[k] = t
    return tuple(results) if isinstance(output, tuple) else results[0]


class _Backward:
    """The ``vjp`` of one application of a Function: calls its ``backward`` and checks what it
    returns (what the function node keeps; the arguments themselves are not kept)."""

    def __init__(self, cls, ctx: FunctionCtx, args: tuple, outs: tuple, trace) -> None:
        self.cls = cls
        self.name = cls.__name__
        self.ctx = ctx
        self.trace = trace
        # Per argument: None for a non-tensor, else (shape, device).
        self.args = [(a._shape, a._device) if _is_tensor(a) else None for a in args]
        # Per output: None for a non-tensor, else (shape, device); and its graph node.
        self.outs = [(o._shape, o._device) if _is_tensor(o) else None for o in outs]
        self.differentiable = [
            _is_tensor(o) and o._dtype.is_floating_point and id(o) not in ctx._non_differentiable
            for o in outs
        ]
        self.nodes: list = [None] * len(outs)
        # The tensor class (gpumat.Tensor: _make and _symbolic make plain tensors), not a tensor:
        # the graph must not keep an output's storage alive after backward released it.
        self.tensor = next((type(o) for o in outs if _is_tensor(o)), None)
        self.values = {}  # non-differentiable outputs' nodes in a trace, for their zeros
        if trace is not None:
            for k, o in enumerate(outs):
                if _is_tensor(o) and not self.differentiable[k]:
                    self.values[k] = trace.node_of(o, self.name)

    def release(self) -> None:
        self.ctx._release()

    def _grad_output(self, k: int, grads: dict):
        meta = self.outs[k]
        if meta is None:
            return None
        shape, device = meta
        g = grads.get(k)
        if g is None and not self.ctx._materialize:
            return None
        if self.trace is not None:
            if g is None:
                g = zeroslike_op(self.nodes[k] if self.nodes[k] is not None else self.values[k])
            return self.tensor._symbolic(self.trace, g, shape, float32, device)
        if g is None:
            g = empty(shape, device)
            ops.fill(g, 0.0)
        return self.tensor._make(g, float32, device)

    def vjp(self, grads: dict) -> list:
        """The tensor arguments' gradients (graph nodes in a trace, else arrays) from the
        outputs' (``{output index: gradient}``, of the same kind), by the Function's backward."""
        name = self.name
        if self.trace is not None and current_trace() is not self.trace:
            raise RuntimeError(
                f"{name}: a Function applied in a step traced by gpumat.compile is differentiated "
                "by that step's backward()"
            )
        grad_outputs = [self._grad_output(k, grads) for k in range(len(self.outs))]
        with no_grad():
            try:
                result = self.cls.backward(self.ctx, *grad_outputs)
            except Exception as exc:
                if self.trace is not None:
                    _trace_note(exc, name, "backward")
                raise
        return [g for g in self._check(result) if g is not _NOT_TENSOR]

    def _check(self, result) -> list:
        """Per argument: the gradient's array or node, None, or _NOT_TENSOR for a non-tensor
        argument; PyTorch's checks (a wrong count, a gradient for a non-tensor, a wrong shape)."""
        name = self.name
        if not isinstance(result, tuple):
            result = (result,)
        n = len(self.args)
        if len(result) < n or any(g is not None for g in result[n:]):
            raise RuntimeError(
                f"function {name}Backward returned an incorrect number of gradients (expected "
                f"{n}, got {len(result)})"
            )
        out: list = []
        for i, (meta, g) in enumerate(zip(self.args, result[:n], strict=True)):
            if meta is None:
                if g is not None:
                    raise RuntimeError(
                        f"function {name}Backward returned a gradient different than None at "
                        f"index {i}, but the corresponding forward input was not a Tensor (a "
                        f"{type(g).__name__})"
                    )
                out.append(_NOT_TENSOR)
                continue
            if g is not None and not _is_tensor(g):
                raise TypeError(
                    f"function {name}Backward returned a {type(g).__name__} as the gradient at "
                    f"index {i}; expected a Tensor or None"
                )
            if g is None or not self.ctx.needs_input_grad[i]:
                out.append(None)  # PyTorch ignores a gradient no input needs, unchecked
                continue
            shape, device = meta
            if g._shape != shape:
                raise RuntimeError(
                    f"Function {name}Backward returned an invalid gradient at index {i} - got "
                    f"{_shape_of(g)} but expected shape {shape_str(shape)}"
                )
            if g._device != device:
                raise RuntimeError(
                    f"Function {name}Backward returned an invalid gradient at index {i} - "
                    f"expected device {device} but got {g._device}"
                )
            if g._dtype is not float32:
                raise TypeError(
                    f"Function {name}Backward returned an invalid gradient at index {i} - "
                    f"expected dtype float32 but got {g._dtype}"
                )
            if self.trace is not None:
                out.append(self.trace.node_of(g, name))
            else:
                g._concrete(f"{name}.backward")
                out.append(g._data)
        return out


_NOT_TENSOR = object()
