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

:class:`no_grad`, :class:`enable_grad` and :class:`set_grad_enabled` switch recording off and on
per thread (PyTorch's names; context managers and decorators). The active trace of
:func:`gpumat.compile` is kept here too (:func:`current_trace`), so that tensor ops know whether to
run or to record symbolically.
"""

from __future__ import annotations

import functools
import inspect
import threading

from gpumat import ops
from gpumat.arrays import empty
from gpumat.graph.layout import ReshapeOp
from gpumat.graph.node import Node, PlaceholderOp, Undefined, Variable, shape_str
from gpumat.graph.reverse_mode import find_topo_sort

__all__ = [
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


def current_trace():
    """The trace that :func:`gpumat.compile` is recording on this thread, or None."""
    return getattr(_local, "trace", None)


def set_trace(trace):
    """Make ``trace`` (or None) this thread's active trace; returns the previous one."""
    previous = getattr(_local, "trace", None)
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
    shape = op.infer_shape(node, [v.shape for v in input_vals])
    if isinstance(op, ReshapeOp):
        return input_vals[0]._view(tuple(shape))
    out = empty(tuple(shape), device)
    if getattr(op, "takes_run_state", False):
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
    node = Variable(name)
    node.saved = Saved(tensor._data, tensor._vc, leaf=tensor if tensor.requires_grad else None)
    return node


_FREED = (
    "Trying to backward through the graph a second time (or to read values that backward has "
    "already released). The values kept for the gradient are released by backward(); call "
    "backward(retain_graph=True) the first time to backward through the graph again"
)


def _is_recorded(node: Node) -> bool:
    return node.saved is not None


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


def _evaluate(target: Node, memo: dict, fresh: set, expected: dict, device):
    """The value of gradient node ``target``: its inputs are recorded forward nodes (values kept
    by the graph) or nodes in ``memo``; new nodes are computed inputs first and memoised. Arrays
    allocated here are added to ``fresh`` (by id; views are not fresh)."""
    if target in memo:
        return memo[target]
    stack = [target]
    while stack:
        node = stack[-1]
        if node in memo:
            stack.pop()
            continue
        pending = [i for i in node.inputs if i not in memo and not _is_recorded(i)]
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
        out = run_node(node, vals, device)
        if not isinstance(node.op, ReshapeOp):
            fresh.add(id(out))
        memo[node] = out
    return memo[target]


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
        leaf = node.saved is not None and node.saved.leaf is not None
        if leaf and node.saved.leaf.device != device:
            # Checked before any gradient is accumulated, so a refused backward changes nothing
            # (PyTorch's AccumulateGrad raises too).
            raise RuntimeError(
                f"backward: a leaf of shape {shape_str(node.saved.leaf.shape)} is on "
                f"{node.saved.leaf.device} but its gradient would be on {device} (was it moved "
                "between forward and backward? move it before the forward pass)"
            )
        if leaf or any(i in relevant for i in node.inputs):
            relevant.add(node)
    contributions: dict[Node, list] = {root: [seed]}
    for node in reversed(topo):
        contribs = contributions.pop(node, None)
        if not contribs:
            continue
        if isinstance(node.op, PlaceholderOp):
            if node.saved.leaf is not None:
                node.saved.leaf._accumulate_grad(contribs)
            continue
        if node.saved.freed:
            raise RuntimeError(_FREED)
        grad_node, grad_value, grad_fresh = _sum(contribs, device)
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
        for inp, g in zip(node.inputs, input_grads, strict=True):
            if g is None or inp not in relevant:
                continue
            if isinstance(g, Undefined):
                raise NotImplementedError(f"{g.reason} (needed by backward)")
            handed.append((inp, g, _evaluate(g, memo, fresh, expected, device)))
        counts: dict[int, int] = {}
        for _, _, value in handed:
            counts[id(value)] = counts.get(id(value), 0) + 1
        for inp, g, value in handed:
            owned = id(value) in fresh and counts[id(value)] == 1
            contributions.setdefault(inp, []).append((g, value, owned))
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
