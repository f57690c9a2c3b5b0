"""``gpumat.compile``: a training step traced once into one graph and replayed by the executor.

``step = gpumat.compile(fn)``; ``step(x, y)`` calls ``fn(x, y)`` the first time with each input
signature as a trace (:class:`Trace`): the tensor ops build graph nodes over
placeholders (one per tensor argument, one per parameter or other tensor the step reads),
``loss.backward()`` adds :func:`gpumat.graph.gradients`, and ``optimizer.step()`` records which
gradients update which parameters. The graph goes to one :class:`gpumat.runtime.Executor`
(fusion, a memory plan, the step compiled into one native call, one CUDA graph launch on a CUDA
or emulated device), and every call, the first included, runs it and then the optimizer's
multi-tensor update (one native call). Parameters are fed in place (no copies); tensor
arguments are copied into the step's own buffers on CUDA and emulated devices, so a CUDA graph's
addresses never change.

A call whose signature differs (tensor shapes, dtypes, devices, ``requires_grad``; other
arguments by value, objects by identity; grad mode) traces again and keeps both. A trace also
records the train/eval mode of every module it called, and the ``requires_grad`` of every tensor
it read; a call that finds one changed traces again.

What a compiled step returns: its tensors as new tensors (copies of the step's buffers), and
the parameters' ``.grad`` set to the step's gradient buffers (overwritten by the next call, as
the next eager step would replace them; the next call reuses those ``.grad`` tensors and
advances their version counters, so a graph that read an earlier gradient refuses to
backward). Returned tensors never require a gradient: a compiled function is a whole step
(forward, backward, update), or runs under ``no_grad``.

Equal to eager execution: with ``fusion=False`` a compiled step runs the very kernels, in the
same order and on the same values, that the eager step runs (the same ops; gradients summed in
the same order; the optimizer's same multi-tensor kernel), so its results are equal bit for bit.
With fusion (the default) the fused dense and loss kernels add the bias and reduce in another
order: the results agree to float32 rounding. Dropout draws its masks from the executor's step
counter (``seed + step``), so a compiled step with dropout in training mode does not draw the
eager step's masks: both are fresh each step, with the same distribution.

What cannot be traced is an error at the first call, never a silently wrong replay: reading a
value (``item()``, ``numpy()``, ``if loss > 0``), in-place ops, random tensors made inside the
step, a step that adds to ``.grad`` computed outside it, reading a parameter after
``optimizer.step()``, or returning Python numbers (they would be constants of the first call).
"""

from __future__ import annotations

import functools
import numbers

from gpumat import ops
from gpumat.arrays import empty
from gpumat.autograd import is_grad_enabled, set_trace
from gpumat.creation import tensor
from gpumat.device import Context
from gpumat.dtypes import float32
from gpumat.graph.elementwise import add_op, detach_op, zeroslike_op
from gpumat.graph.node import Node, PlaceholderOp, Variable, shape_str
from gpumat.graph.reverse_mode import find_topo_sort, gradients
from gpumat.runtime import Executor
from gpumat.tensor import Tensor, check_backward

__all__ = ["CompiledFunction", "Trace", "compile"]


class Trace:
    """The record of one traced call of a step compiled by :func:`gpumat.compile`.

    While a trace is active (:func:`gpumat.autograd.set_trace`), tensor ops build graph nodes
    over placeholders instead of running: each concrete tensor the step reads (parameters,
    constants) becomes a placeholder fed with its storage on every call (``feeds``), each tensor
    argument a placeholder of its own (``inputs``), and the results are symbolic tensors (shape,
    dtype and device, no value). ``backward`` adds :func:`gpumat.graph.gradients` for the leaves
    that require a gradient, ``optimizer.step()`` records which gradients update which
    parameters (``steps``), and the checks a replay must repeat are kept (``module_guards``: the
    train/eval mode of every module called; ``range_guards``: class-index ranges of int64
    arguments).
    """

    def __init__(self) -> None:
        self.ctx = None
        self.feeds: dict = {}  # id(tensor) -> (tensor, placeholder)
        self.leaves: dict = {}  # placeholder -> tensor that requires a gradient
        self.inputs: list = []  # (argument position, placeholder)
        self.touched: dict = {}  # id(tensor) -> (tensor, its grad before the trace)
        # .grad as eagerly: which gradients the step replaced (grad = ..., zero_grad()), which it
        # set in any way, which it read as they were before the call (each call checks whether
        # those are None), and placeholders fed with a .grad's value at each call.
        self.replaced: set = set()
        self.changed: set = set()
        self.read: set = set()
        self.grad_inputs: dict = {}  # id(tensor) -> (tensor, placeholder of its .grad)
        self.steps: list = []  # (optimizer, [(parameter index, gradient node)])
        self.updated: set = set()
        self.module_guards: dict = {}
        self.range_guards: list = []  # (input position, lo, hi, op, error class)
        self.freed: set = set()

    def _use(self, ctx: Context, op: str) -> None:
        if self.ctx is None:
            self.ctx = ctx
        elif ctx != self.ctx:
            raise ValueError(
                f"{op}: a compiled step runs on one device; it uses {self.ctx} and {ctx}"
            )

    def input(self, position: int, arg: Tensor) -> Tensor:
        """A symbolic tensor standing for tensor argument ``arg`` (at ``position``)."""
        arg._concrete("gpumat.compile")
        self._use(arg._ctx, "gpumat.compile")
        node = Variable(f"input{position}")
        self.inputs.append((position, node))
        t = Tensor._symbolic(self, node, arg._shape, arg._dtype, arg._ctx, arg._range)
        t._range_src = len(self.inputs) - 1
        if arg._requires_grad:
            t._requires_grad = True
            self.leaves[node] = arg
        return t

    def node_of(self, t: Tensor, op: str) -> Node:
        """The trace's node for ``t``: its symbolic node, or a placeholder fed with its storage."""
        if t._trace is self:
            return t._tnode
        if t._trace is not None:
            raise RuntimeError(f"{op}: a tensor of another gpumat.compile trace")
        if id(t) in self.updated:
            raise RuntimeError(
                f"{op}: the step reads a parameter after optimizer.step() updated it; a compiled "
                "step runs the update after its graph, so read parameters before the step"
            )
        if t._requires_grad and not t.is_leaf:
            raise RuntimeError(
                f"{op}: the step uses a tensor that was computed outside it with a gradient "
                "history; compute it inside the step, or detach() it"
            )
        self._use(t._ctx, op)
        entry = self.feeds.get(id(t))
        if entry is None:
            node = Variable(getattr(t, "_name", "tensor"))
            entry = self.feeds[id(t)] = (t, node)
            if t._requires_grad:
                self.leaves[node] = t
        return entry[1]

    def apply(self, op, make, inputs, out_dtype, bounds, differentiable) -> Tensor:
        """The symbolic result of one op (see :func:`apply_op`)."""
        nodes = [self.node_of(t, op) for t in inputs]
        node = make(*nodes)
        try:
            shape = node.op.infer_shape(node, [t._shape for t in inputs])
        except ValueError as exc:
            raise ValueError(f"{op}: {exc}") from None
        wants_grad = any(t._requires_grad for t in inputs)
        grad = differentiable and is_grad_enabled() and wants_grad
        if wants_grad and not grad and node.op is not detach_op:
            node = detach_op(node)  # no gradient through this value, as eagerly
        out = Tensor._symbolic(self, node, shape, out_dtype, inputs[0]._ctx, bounds)
        out._requires_grad = grad
        return out

    def guard_range(self, source: int, lo: int, hi: int, op: str, error) -> None:
        """Each call must check that int64 argument number ``source`` lies in [lo, hi]."""
        self.range_guards.append((source, lo, hi, op, error))

    def guard_module(self, module) -> None:
        """Each call must find ``module`` in the train/eval mode it had when traced."""
        self.module_guards[id(module)] = (module, module.training)

    def touch_grad(self, t: Tensor) -> None:
        """``t.grad`` is assigned inside the step (``t.grad = g``, ``zero_grad()``): remember its
        value before the trace (put back after it) and that the step replaced it."""
        if t._trace is None:
            self._touch(t)
            self.replaced.add(id(t))
            self.changed.add(id(t))

    def _touch(self, t: Tensor) -> None:
        if id(t) not in self.touched:
            self.touched[id(t)] = (t, t._grad)

    def grad_node(self, t: Tensor, op: str):
        """The node of ``t.grad`` as the step sees it, or None when it has none.

        A gradient ``t`` had before the call (one the step has not set) is read at each call: a
        placeholder fed with its value, and each call checks that it is None, or not, as now.

        Raises:
            RuntimeError: ``t.grad`` is a tensor from outside the step that the step assigned, or
                a tensor of another trace.
        """
        self._touch(t)
        k = id(t)
        if k not in self.changed:
            self.read.add(k)
        g = t._grad
        if g is None:
            return None
        if g._trace is self:
            return g._tnode
        if g._trace is not None or k in self.replaced:
            raise RuntimeError(
                f"{op}: the step assigns a .grad computed outside it; gradients inside a compiled "
                "step come from its backward()"
            )
        entry = self.grad_inputs.get(k)
        if entry is None:
            self._use(t._ctx, op)
            entry = self.grad_inputs[k] = (t, Variable(f"{getattr(t, '_name', 'tensor')}.grad"))
        return entry[1]

    def backward(self, root: Tensor, gradient, retain_graph: bool) -> None:
        """Add the gradient graph of ``root`` and accumulate symbolic gradients in ``.grad``."""
        check_backward(root, gradient)
        seed = None
        if gradient is not None:
            g = gradient if isinstance(gradient, Tensor) else tensor(gradient, device=root._ctx)
            if g._shape != root._shape or g._dtype is not float32:
                raise ValueError(
                    f"backward: gradient must be a float32 tensor of shape {shape_str(root._shape)}"
                )
            seed = self.node_of(g, "backward")
        topo = find_topo_sort([root._tnode])
        leaves = [n for n in topo if n in self.leaves]
        path = {n for n in topo if not isinstance(n.op, PlaceholderOp)}
        if path & self.freed:
            raise RuntimeError(
                "Trying to backward through the graph a second time; call "
                "backward(retain_graph=True) the first time"
            )
        grads = gradients(root._tnode, leaves, output_grad=seed) if leaves else []
        for leaf, g in zip(leaves, grads, strict=True):
            t = self.leaves[leaf]
            previous = self.grad_node(t, "backward")  # accumulate, as eagerly
            node = g if previous is None else add_op(previous, g)
            t._grad = Tensor._symbolic(self, node, t._shape, float32, t._ctx)
            self.changed.add(id(t))
        if not retain_graph:
            self.freed |= path

    def zeros_grad(self, t: Tensor) -> None:
        """``t.grad`` (not None) = zeros inside the step (``zero_grad(set_to_none=False)``): in
        place, as eagerly, so the tensor stays ``t.grad``."""
        self._touch(t)
        if id(t) not in self.changed:
            self.read.add(id(t))  # zero_grad found a gradient: each call checks there is one
        node = zeroslike_op(self.node_of(t, "zero_grad"))
        t._grad = Tensor._symbolic(self, node, t._shape, float32, t._ctx)
        self.changed.add(id(t))

    def record_step(self, optimizer, params: list) -> None:
        """``optimizer.step()`` inside the step: the update of each parameter with a gradient."""
        pairs = []
        for i, p in enumerate(params):
            g = self.grad_node(p, "optimizer.step")
            if g is None:
                continue
            self.node_of(p, "optimizer.step")
            pairs.append((i, g))
        self.steps.append((optimizer, pairs))
        self.updated |= {id(params[i]) for i, _ in pairs}


def _signature(value, tensors: list, objects: list):
    """A hashable key of an argument structure; collects its tensors (in order) and the objects
    keyed by identity (kept alive, so their ids are not reused)."""
    if isinstance(value, Tensor):
        if value._data is None:
            value._concrete("gpumat.compile")
        tensors.append(value)
        ctx = value._ctx  # by its fields, which hash and compare in C (a Context does in Python)
        return ("T", value._shape, value._dtype.name, ctx._kind, ctx.index, value._requires_grad)
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple([_signature(v, tensors, objects) for v in value]))
    if isinstance(value, dict):
        return ("dict", tuple([(k, _signature(v, tensors, objects)) for k, v in value.items()]))
    if value is None or isinstance(value, (bool, numbers.Number, str, bytes, Context)):
        return ("=", type(value).__name__, value)
    objects.append(value)
    return ("id", id(value))


_NO_KWARGS = _signature({}, [], [])


def _aliasing(tensors: list):
    """Which tensor arguments are the same tensor: None when all differ, else the position of
    each one's first occurrence. A trace makes one input of a tensor passed twice, so ``f(x, x)``
    and ``f(x, y)`` are different traces."""
    ids = [id(t) for t in tensors]
    if len(set(ids)) == len(ids):
        return None
    first: dict = {}
    return tuple([first.setdefault(i, k) for k, i in enumerate(ids)])


def _replace(value, fn):
    """``value`` with every tensor replaced by ``fn(tensor)`` (tuples, lists, dicts walked)."""
    if isinstance(value, Tensor):
        return fn(value)
    if isinstance(value, (tuple, list)):
        return type(value)(_replace(v, fn) for v in value)
    if isinstance(value, dict):
        return {k: _replace(v, fn) for k, v in value.items()}
    return value


class _Entry:
    """One traced signature: its executor, feeds, updates and checks."""

    def __init__(
        self,
        trace: Trace,
        final: dict,
        outputs,
        executor: Executor,
        slots: dict,
        args: list,
        objects: list,
    ) -> None:
        self.trace = trace
        self.executor = executor
        self.outputs = outputs  # the step's result, with symbolic tensors in it
        self.slots = slots  # eval node -> its index among the executor's values
        self.objects = objects  # kept alive: the signature holds their ids
        self.feeds = [(t, node, t.requires_grad) for t, node in trace.feeds.values()]
        # Which arguments were tensors the step also reads directly (f(w) reading the parameter
        # w too): the two uses are separate inputs, so the pattern is part of the guard.
        self._fed_ids = {id(t) for t, _ in trace.feeds.values()}
        self._arg_is_fed = [id(a) in self._fed_ids for a in args]
        ctx = trace.ctx
        # On CUDA and emulated devices the arguments are copied into the step's own buffers, so
        # a captured CUDA graph's addresses stay valid; on the host they are fed in place.
        staged = ctx.device_type != "cpu"
        self.inputs = [
            (pos, node, empty(args[pos].shape, ctx) if staged else None)
            for pos, node in trace.inputs
        ]
        self.steps = [
            (opt, [i for i, _ in pairs], [slots[g] for _, g in pairs]) for opt, pairs in trace.steps
        ]
        # A gradient's owner: a tensor, or the position of a tensor argument (int).
        position = {id(args[pos]): pos for pos, _ in trace.inputs}
        # What each call does to each .grad the step touched, as the eager step would:
        # (owner, None) set it to None; (owner, slot) replace it with a tensor over the
        # executor's buffer; self.grads_in_place: (owner, slot) write the buffer into the
        # .grad tensor the owner has (the step accumulated into it, or zeroed it, in place).
        self.grads = []
        self.grads_in_place = []
        for k, (t, before) in trace.touched.items():
            g = final[k]
            owner = position.get(id(t), t)
            if g is None:
                if k in trace.changed:
                    self.grads.append((owner, None))
            elif g._trace is trace:
                in_place = before is not None and k not in trace.replaced
                (self.grads_in_place if in_place else self.grads).append((owner, slots[g._tnode]))
        # The .grad values read as they were before the call, and whether each was None.
        self.grad_inputs = [
            (position.get(k, t), node) for k, (t, node) in trace.grad_inputs.items()
        ]
        self.grad_guards = [
            (position.get(k, t), t._grad is None)
            for k, (t, _) in trace.touched.items()
            if k in trace.read
        ]
        self.modules = list(trace.module_guards.values())
        self._grad_cache = None  # the .grad tensors of the last call (see _grad_tensors)
        # The trace-time arguments are not kept (only the parameters and constants it reads).
        trace.touched.clear()
        trace.leaves.clear()

    def _grad_tensors(self, vals: list, ctx) -> list:
        """The ``.grad`` tensors of this call, over the executor's gradient buffers ``vals``.

        The tensors of the last call are reused when they wrap the same buffers (the executor
        hands a thread the same buffers every run) and still require no gradient and have none:
        their version counters advance, as this call wrote their values in place, so a graph
        that read an earlier ``.grad`` refuses to backward instead of using the new values.
        """
        cached = self._grad_cache
        if cached is not None:
            for (_, k), g in zip(self.grads, cached, strict=True):  # a plain loop: per step
                if g is None:
                    if k is not None:
                        break
                elif k is None or g._data is not vals[k] or g._requires_grad or g._grad is not None:
                    break
            else:
                for g in cached:
                    if g is not None:
                        g._vc.value += 1
                return cached
        made = [None if k is None else Tensor._make(vals[k], float32, ctx) for _, k in self.grads]
        self._grad_cache = made
        return made

    def holds(self, args: list) -> bool:
        """Whether the modules' modes, the fed tensors' requires_grad, the gradients the step
        reads (None or not) and which tensor arguments are tensors the step reads directly are
        as traced."""
        for module, training in self.modules:
            if module.training != training:
                return False
        for t, _, rg in self.feeds:
            if t._requires_grad != rg:
                return False
        for owner, none in self.grad_guards:
            t = args[owner] if owner.__class__ is int else owner
            if (t._grad is None) != none:
                return False
        fed = self._fed_ids
        return [id(a) in fed for a in args] == self._arg_is_fed

    def run(self, args: list):
        """One call: check, feed, run the graph, update, set the gradients, return results."""
        for src, lo, hi, op, error in self.trace.range_guards:
            a_lo, a_hi = args[src]._range
            if a_lo < lo or a_hi > hi:
                bad = a_lo if a_lo < lo else a_hi
                if error is IndexError:
                    raise IndexError(f"{op}: Target {bad} is out of bounds (classes {lo}..{hi}).")
                raise error(
                    f"{op}: value {bad} of a compiled step's argument is outside [{lo}, {hi}]"
                )
        feed = {node: t._data for t, node, _ in self.feeds}
        for owner, node in self.grad_inputs:
            t = args[owner] if owner.__class__ is int else owner
            feed[node] = t._grad._data
        for pos, node, staging in self.inputs:
            data = args[pos]._data
            if staging is not None:
                ops.copy(data, staging)
                data = staging
            feed[node] = data
        vals = self.executor.run(feed)
        for opt, idx, slots in self.steps:
            opt._apply_compiled(idx, [vals[k] for k in slots])
        ctx = self.trace.ctx
        grads = self._grad_tensors(vals, ctx)
        for (owner, _), g in zip(self.grads, grads, strict=True):
            t = args[owner] if owner.__class__ is int else owner
            t._grad = g
        for owner, k in self.grads_in_place:
            g = (args[owner] if owner.__class__ is int else owner)._grad
            ops.copy(vals[k], g._data)
            g._vc.value += 1

        def result(sym: Tensor):
            if sym._trace is not self.trace:
                return sym
            out = vals[self.slots[sym._tnode]]._clone()  # a copy: the buffer is rewritten
            return Tensor._make(out, sym.dtype, ctx, sym._range)

        return _replace(self.outputs, result)


class CompiledFunction:
    """A function compiled by :func:`gpumat.compile` (callable like it).

    Attributes:
        traces: how many signatures have been traced.
        executor: the executor of the most recent call's trace (its ``schedule_report``,
            ``fusion_report`` and ``memory_plan`` say how the step runs); None before a call.
    """

    def __init__(self, fn, fusion: bool, cuda_graph: bool) -> None:
        self._fn = fn
        self._fusion = fusion
        self._cuda_graph = cuda_graph
        self._cache: dict = {}
        self.traces = 0
        self.executor = None
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        tensors: list = []
        objects: list = []
        key = (
            _signature(args, tensors, objects),
            _signature(kwargs, tensors, objects) if kwargs else _NO_KWARGS,
            is_grad_enabled(),
            _aliasing(tensors),
        )
        for entry in self._cache.get(key, ()):
            if entry.holds(tensors):
                self.executor = entry.executor
                return entry.run(tensors)
        entry = self._trace(args, kwargs, tensors, objects)
        # The first run may fail (a full device): then nothing is kept or changed, and the next
        # call traces again. The trace left every .grad as it was; the optimizers' state made for
        # the trace is dropped.
        fresh = [opt for opt, _ in entry.trace.steps if opt._state is None]
        try:
            for opt in fresh:
                opt._ensure_state()
            out = entry.run(tensors)
        except BaseException:
            for opt in fresh:
                opt._state = None
            raise
        self._cache.setdefault(key, []).append(entry)
        self.traces += 1
        self.executor = entry.executor
        return out

    def _trace(self, args, kwargs, tensors: list, objects: list) -> _Entry:
        trace = Trace()
        index: dict = {}
        for i, t in enumerate(tensors):  # a tensor passed twice is one input, at its first place
            index.setdefault(id(t), i)
        symbolic = {}

        def to_symbolic(t: Tensor) -> Tensor:
            i = index[id(t)]
            if i not in symbolic:
                symbolic[i] = trace.input(i, t)
            return symbolic[i]

        sym_args = _replace(args, to_symbolic)
        sym_kwargs = _replace(kwargs, to_symbolic)
        previous = set_trace(trace)
        try:
            outputs = self._fn(*sym_args, **sym_kwargs)
            _check_outputs(outputs, trace)
            for k, (t, _) in trace.touched.items():
                if k in trace.replaced and t._grad is not None and t._grad._trace is not trace:
                    raise RuntimeError(
                        "gpumat.compile: the step assigns a .grad computed outside it; gradients "
                        "inside a compiled step come from its backward()"
                    )
        finally:
            set_trace(previous)
            # Every .grad goes back to its value before the trace: each call, the first
            # included, sets them from its own run (a failed run leaves no placeholder behind).
            final = {}
            for k, (t, grad) in trace.touched.items():
                final[k] = t._grad
                t._grad = grad
        if trace.ctx is None:
            raise TypeError("gpumat.compile: the step uses no tensors; there is nothing to compile")
        nodes: list = []
        slots: dict = {}

        def want(node) -> None:
            if node not in slots:
                slots[node] = len(nodes)
                nodes.append(node)

        _replace(outputs, lambda t: want(t._tnode) if t._trace is trace else None)
        for g in final.values():
            if g is not None and g._trace is trace:
                want(g._tnode)
        for _, pairs in trace.steps:
            for _, g in pairs:
                want(g)
        executor = Executor(
            nodes, ctx=trace.ctx, fusion=self._fusion, compiled=True, cuda_graph=self._cuda_graph
        )
        return _Entry(trace, final, outputs, executor, slots, tensors, objects)

    @property
    def schedule_report(self):
        """The most recent executor's schedule report (how a call runs), or None."""
        return None if self.executor is None else self.executor.schedule_report

    @property
    def fusion_report(self):
        """The most recent executor's fusion report, or None."""
        return None if self.executor is None else self.executor.fusion_report


def _check_outputs(value, trace: Trace) -> None:
    if isinstance(value, Tensor) or value is None or isinstance(value, str):
        return
    if isinstance(value, (tuple, list)):
        for v in value:
            _check_outputs(v, trace)
        return
    if isinstance(value, dict):
        for v in value.values():
            _check_outputs(v, trace)
        return
    raise TypeError(
        f"gpumat.compile: a compiled step returns tensors (or tuples, lists, dicts of them), got "
        f"a {type(value).__name__}: it would be a constant of the first call"
    )


def compile(fn=None, *, fusion: bool = True, cuda_graph: bool = True):  # noqa: A001
    """Compile a training step (or any tensor function) into one traced, replayed graph.

    Usable as ``step = gpumat.compile(fn)``, ``@gpumat.compile`` or
    ``@gpumat.compile(fusion=False)``. See the module docstring for what is traced, when it
    traces again, what equal to eager means and what cannot be traced.

    Args:
        fn: the function; its tensor arguments (also inside tuples, lists and dicts) become the
            step's inputs.
        fusion: run the executor's fusion pass (default True; False keeps the eager kernels, so
            results equal eager execution's bit for bit).
        cuda_graph: on a CUDA or emulated device, replay the compiled step as one CUDA graph
            launch (default True).

    Returns:
        A :class:`CompiledFunction`.

    Raises:
        TypeError: ``fn`` is not callable, or a flag is not a bool.
    """
    for what, flag in (("fusion", fusion), ("cuda_graph", cuda_graph)):
        if not isinstance(flag, bool):
            raise TypeError(f"gpumat.compile: {what} must be a bool, got {flag!r}")
    if fn is None:
        return lambda f: compile(f, fusion=fusion, cuda_graph=cuda_graph)
    if not callable(fn):
        raise TypeError(f"gpumat.compile: expected a function, got {type(fn).__name__}")
    return CompiledFunction(fn, fusion, cuda_graph)
