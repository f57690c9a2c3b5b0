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

A call that no trace's guards accept traces again and keeps the new trace beside the others, up
to ``cache_size_limit`` (8, as ``torch._dynamo.config.cache_size_limit``): past it a warning,
once, and calls that match no trace run the function eagerly. The guards (what a trace
specialised on, checked on every call):

- tensor arguments: shape, dtype, device, ``requires_grad``; which arguments are one tensor
  (``f(x, x)`` is not ``f(x, y)``); which are tensors the step also reads directly (a parameter
  passed as an argument); class indices of int64 arguments (checked: an error, not a trace);
- other arguments: numbers, strings, None and devices by value; numpy arrays of numbers by
  value (a copy is kept); other objects by identity, and what they hold, as below;
- grad mode; the ``.grad`` the step reads from before the call: whether it is None;
- the Python state the step's code can name: the globals named by its code and by the code of
  the user functions it reaches (helpers, closures, methods of user classes such as a module's
  ``forward``), its closure cells and defaults, a bound method's object. Numbers, strings, tuples
  of them and numpy arrays by value; anything else by identity, then the attributes the code
  names (of user objects, classes, Python modules) and the items of lists, tuples, dicts and sets
  (up to 256 items, 4 levels deep); modules (:class:`gpumat.nn.Module`) whole: train/eval mode,
  every attribute, parameters, buffers and submodules by identity; optimizers by identity and
  the parameters they update. Hyper-parameters (``lr`` ...) are not guarded: every call's update
  reads them (a scheduler stepped outside the step needs no new trace);
- the tensors the step reads: their layout and ``requires_grad``; modules the step calls that the
  walk above did not reach: their mode.

A trace whose step changed that state while it ran (a counter, an ``lr_scheduler``'s
``step()``, ``model.train()`` of a module in eval mode) runs for its call and is not kept: a
replay would not repeat the change. Not guarded: state only library code reaches (gpumat, the
standard library, installed packages: their globals), C-level state (random generators, clocks,
files: values drawn from them inside the step are constants of the trace), attributes named only
at run time (``getattr(obj, name)``), items past the limits above, and values the step computes
from hyper-parameters (``loss * opt.lr``). Python side effects the guards do not see (printing,
writing files) happen only when the step is traced.

``.grad`` as eagerly: a step adds to the gradients its leaves had before the call (each call
reads their current values), ``zero_grad()`` / ``.grad = None`` inside the step replaces them
and ``zero_grad(set_to_none=False)`` zeroes them in place. A gradient the step makes anew is a
tensor over the step's gradient buffer, reused by the next call of that trace (rewritten in
place, its version counter advanced, so a graph that read it refuses to backward); eagerly it
would be a new tensor: ``clone()`` one to keep it.

What a compiled step returns: its computed tensors as new tensors (copies of the step's
buffers) that do not require a gradient (a compiled function is a whole step: forward,
backward, update; or it runs under ``no_grad``); a parameter, or an argument returned
unchanged, as that very tensor, as eagerly. Calls from several threads are right (each thread
has its own staging buffers and executor plan; one thread traces at a time). A call that fails
the first time (a full device) changes nothing: every ``.grad`` and the optimizers' state are as
before, and the next call traces again.

Equal to eager execution: with ``fusion=False`` a compiled step runs the very kernels, in the
same order and on the same values, that the eager step runs (the same ops; gradients summed in
the same order; the optimizer's same multi-tensor kernel), so its results are equal bit for bit.
With fusion (the default) the fused dense and loss kernels add the bias and reduce in another
order: the results agree to float32 rounding. Dropout draws its masks from the executor's step
counter (``seed + step``), so a compiled step with dropout in training mode does not draw the
eager step's masks: both are fresh each step, with the same distribution.

What cannot be traced is an error at the first call, never a silently wrong replay: reading a
value (``item()``, ``numpy()``, ``if loss > 0``), in-place ops, random tensors made inside the
step, a ``.grad`` assigned from outside the step, reading a parameter after
``optimizer.step()``, an argument with a gradient history (a view of a leaf that requires a
gradient), ``.long()`` of a float tensor (it goes through the host), or returning Python
numbers (they would be constants of the first call).
"""

from __future__ import annotations

import functools
import itertools
import numbers
import operator
import sys
import sysconfig
import threading
import types
import warnings

import numpy as np

from gpumat import ops
from gpumat.arrays import empty
from gpumat.autograd import check_backward, is_grad_enabled, set_trace
from gpumat.creation import tensor
from gpumat.devices import Device
from gpumat.dtypes import float32
from gpumat.graph.elementwise import add_op, detach_op, zeroslike_op
from gpumat.graph.node import Node, PlaceholderOp, Variable, shape_str
from gpumat.graph.reverse_mode import find_topo_sort, gradients
from gpumat.nn.module import Module
from gpumat.optim.optimizer import Optimizer
from gpumat.runtime import Executor
from gpumat.tensor import Tensor

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
        self.device = None
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
        self.grad_owner: dict = {}  # id(a .grad before the call) -> the tensor it belongs to
        self.steps: list = []  # (optimizer, [(parameter index, gradient node)])
        self.updated: set = set()
        self.module_guards: dict = {}
        self.range_guards: list = []  # (input position or tensor, lo, hi, op, error class)
        self.freed: set = set()

    def _use(self, device: Device, op: str) -> None:
        if self.device is None:
            self.device = device
        elif device != self.device:
            raise ValueError(
                f"{op}: a compiled step runs on one device; it uses {self.device} and {device}"
            )

    def input(self, position: int, arg: Tensor) -> Tensor:
        """A symbolic tensor standing for tensor argument ``arg`` (at ``position``).

        Raises:
            RuntimeError: ``arg`` requires a gradient and was computed outside the step (a view
                of a leaf), with grad mode on: its gradient would flow through a graph recorded
                outside the step, which the trace cannot extend.
        """
        arg._concrete("gpumat.compile")
        if arg._requires_grad and not arg.is_leaf and is_grad_enabled():
            raise RuntimeError(
                f"gpumat.compile: argument {position} was computed outside the step with a "
                "gradient history; pass the leaf it comes from and compute it inside the step, "
                "or detach() it"
            )
        self._use(arg._device, "gpumat.compile")
        node = Variable(f"input{position}")
        self.inputs.append((position, node))
        t = Tensor._symbolic(self, node, arg._shape, arg._dtype, arg._device, arg._range)
        t.__class__ = _Argument  # its .grad is the argument's (after _fill set its own)
        t._arg = arg
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
        owner = self.grad_owner.get(id(t))
        if owner is not None and owner._grad is t:
            # The step reads a .grad from before the call: read it at each call, not this one.
            node = self.grad_node(owner, op)
            if node is not None:
                return node
        if t._requires_grad and not t.is_leaf:
            raise RuntimeError(
                f"{op}: the step uses a tensor that was computed outside it with a gradient "
                "history; compute it inside the step, or detach() it"
            )
        self._use(t._device, op)
        entry = self.feeds.get(id(t))
        if entry is None:
            node = Variable(getattr(t, "_name", "tensor"))
            entry = self.feeds[id(t)] = (t, node)
            if t._requires_grad:
                self.leaves[node] = t
        return entry[1]

    def apply(
        self, op, make, inputs, out_dtype, bounds=None, differentiable: bool = True
    ) -> Tensor:
        """The symbolic result of one op (see :func:`apply_op`, whose defaults these are).

        Raises:
            ValueError: the op's shape rule rejects the shapes, or the inputs are on another
                device than the step's.
            RuntimeError: an input the trace may not read (see :meth:`node_of`).
        """
        if out_dtype is float32:
            bounds = None  # value ranges are kept for int64 and bool tensors only
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
        out = Tensor._symbolic(self, node, shape, out_dtype, inputs[0]._device, bounds)
        out._requires_grad = grad
        return out

    def guard_range(self, source, lo: int, hi: int, op: str, error) -> None:
        """Each call must check that the values of ``source`` lie in [lo, hi]: an int64 argument
        (its input number) or a tensor the step reads (whose storage may change between calls)."""
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
            self._use(t._device, op)
            entry = self.grad_inputs[k] = (t, Variable(f"{getattr(t, '_name', 'tensor')}.grad"))
        return entry[1]

    def backward(self, root: Tensor, gradient, retain_graph: bool) -> None:
        """Add the gradient graph of ``root`` and accumulate symbolic gradients in ``.grad``."""
        check_backward(root, gradient)
        seed = None
        if gradient is not None:
            g = gradient if isinstance(gradient, Tensor) else tensor(gradient, device=root._device)
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
            t._grad = Tensor._symbolic(self, node, t._shape, float32, t._device)
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
        t._grad = Tensor._symbolic(self, node, t._shape, float32, t._device)
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
        # The hyper-parameters now: the first call's update uses them, in case the step changes
        # them after optimizer.step() (a scheduler's step()).
        hyper = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
        self.steps.append((optimizer, pairs, hyper))
        self.updated |= {id(params[i]) for i, _ in pairs}


# ------------------------------------------------------------------------------------------------
# Guards on Python state. A trace runs the step's Python once; what it read then is baked into the
# graph (a float becomes an op's constant, a module's attribute picks a layer, a global picks the
# optimizer). Like torch.compile's guards, each call checks that state first and traces again when
# it changed. Without a bytecode interpreter the sources a step may read are found by walking what
# its code can name: the globals its code (and the code of the functions it reaches) names, its
# closure cells and defaults, a bound method's object, the methods of user classes, and from each
# object the attributes those codes name. Modules (all their attributes, parameters, buffers and
# submodules) and optimizers (their parameter lists) are walked whole: library code reads them.

#: How many traces one compiled function makes (``torch._dynamo.config.cache_size_limit``): a
#: call that matches none of them once the limit is reached runs eagerly (a warning, once).
cache_size_limit = 8

# Values compared by value (immutable); anything else by identity, then walked.
_ATOMIC = (type(None), bool, int, float, complex, str, bytes, np.generic, Device)
# Library code (gpumat, the standard library, installed packages): its globals are not the step's
# state; only its closures are walked (a decorator's wrapper holds the step).
_LIBRARY_DIRS = tuple(
    {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
)
_MAX_ITEMS = 256  # items of a list, tuple, dict or set guarded one by one
_MAX_DEPTH = 4  # levels of attributes and items below a global, a cell or an argument

_NUMBERS = "biufc"  # numpy dtype kinds compared by value


def _same(a, b) -> bool:
    """``a == b`` for guards: same type, equal, or both NaN."""
    if type(a) is not type(b):
        return False
    try:
        return bool(a == b) or (a != a and b != b)
    except Exception:
        return False


def _atomic(value) -> bool:
    """Immutable: guarded by value (numbers, strings, None, devices, tuples of them)."""
    return isinstance(value, _ATOMIC) or (
        type(value) is tuple and all(isinstance(v, _ATOMIC) for v in value)
    )


def _reader(container, keys: tuple):
    """A function reading ``container[k]`` for each key, as a tuple, in C (KeyError if one is
    gone)."""
    if not keys:
        return tuple
    if len(keys) == 1:
        key = keys[0]
        return lambda: (container[key],)
    return functools.partial(operator.itemgetter(*keys), container)


@functools.cache
def _library_module(name: str) -> bool:
    top = name.partition(".")[0]
    if top in ("gpumat", "builtins") or top in sys.stdlib_module_names:
        return True
    path = getattr(sys.modules.get(name) or sys.modules.get(top), "__file__", None) or ""
    return path.startswith(_LIBRARY_DIRS)


def _library(obj) -> bool:
    """Whether ``obj`` (a function, class or Python module) is library code."""
    name = obj.__name__ if isinstance(obj, types.ModuleType) else getattr(obj, "__module__", None)
    return _library_module(name) if isinstance(name, str) else True


def _code_names(code, out: set) -> None:
    """The names ``code`` (and the code nested in it) may read: globals, attributes, strings."""
    out.update(code.co_names)
    for c in code.co_consts:
        if isinstance(c, str):
            out.add(c)
        elif isinstance(c, types.CodeType):
            _code_names(c, out)


class _Guards:
    """The Python state a trace read: ``groups`` and ``arrays`` hold on every call that may
    replay it; ``watches`` (values a replay need not check) and the others all hold after the
    trace unless the step changed them (a side effect a replay would not repeat)."""

    def __init__(self, names: set) -> None:
        self.names = names  # attribute names the step's code may read
        # (reader of a tuple, expected values, their descriptions, the reader's): a value, or
        # a container's items, each by value when immutable, else by identity. In steady state
        # they are the very objects traced: one identity pass over all of them, in C.
        self.groups: list = []
        self.arrays: list = []  # (numpy array, its values when traced, description)
        self._flat = None  # all groups' expected values in one tuple (see failure)
        self.watches: list = []  # (getter, value, description)
        self.tensors: list = []  # every tensor met (their .grad may be read)
        self.modules: set = set()  # ids of the nn.Modules walked (their mode is guarded here)
        self.grew = False  # names found after a filtered walk: walk again
        self._filtered = False
        self._seen: set = set()
        self._keep: list = []  # what the guards name, kept alive (ids stay unique)

    def failure(self):
        """The description of the first guard that fails now, or None."""
        if self._flat is None:
            self._reads = [g[0] for g in self.groups]
            self._lens = tuple([len(g[1]) for g in self.groups])
            self._flat = tuple(itertools.chain.from_iterable(g[1] for g in self.groups))
        try:
            now = [read() for read in self._reads]
            same = tuple(map(len, now)) == self._lens and all(
                map(operator.is_, itertools.chain.from_iterable(now), self._flat)
            )
        except Exception:
            same = False
        if not same:
            what = self._group_failure()
            if what is not None:
                return what
        for value, want, what in self.arrays:
            if not (
                value.shape == want.shape
                and value.dtype == want.dtype
                and np.array_equal(value, want, equal_nan=want.dtype.kind in "fc")
            ):
                return what
        return None

    def _group_failure(self):
        # Item by item: an immutable value equal to the traced one (not the same object) holds.
        for read, want, whats, where in self.groups:
            try:
                now = read()
            except Exception:
                return where
            if len(now) != len(want):
                return where
            if not all(map(operator.is_, now, want)):
                for a, b, what in zip(now, want, whats, strict=True):
                    if a is not b and not (_atomic(b) and _same(a, b)):
                        return what
        return None

    def changed(self):
        """What the trace itself changed (a watch or a check that no longer holds), or None."""
        for get, value, what in self.watches:
            try:
                if not _same(get(), value):
                    return what
            except Exception:
                return what
        return self.failure()

    # ---------------------------------------------------------------- the walk

    def value(self, get, value, what: str, depth: int) -> None:
        """Guard that ``get()`` gives ``value`` (by value when immutable, else by identity) and
        walk what ``value`` holds."""
        self.group(lambda: (get(),), (value,), (what,), what, depth)

    def same(self, get, value, what: str) -> None:
        """Guard that ``get()`` is ``value``, without walking what it holds."""
        self.groups.append((lambda: (get(),), (value,), (what,), what))

    def holds(self, test, what: str) -> None:
        """Guard that ``test()`` is True."""
        self.groups.append((lambda: (test(),), (True,), (what,), what))

    def group(self, read, values: tuple, whats: tuple, where: str, depth: int) -> None:
        """Guard that ``read()`` gives ``values``, each by value when immutable, else by
        identity (``whats`` describe them, ``where`` their container), and walk what they
        hold."""
        self.groups.append((read, values, whats, where))
        for v, what in zip(values, whats, strict=True):
            if not _atomic(v):
                self.contents(v, what, depth)

    def _dict(self, d: dict, what: str, depth: int, attributes: bool) -> None:
        # Its keys and (up to _MAX_ITEMS) its values, read in one go.
        keys = tuple(d)
        kinds = "attributes" if attributes else "keys"
        if len(d) > _MAX_ITEMS:
            self.group(lambda: tuple(d), keys, (f"the {kinds} of {what}",) * len(keys), what, depth)
            return
        whats = tuple([f"{what}.{k}" if attributes else f"{what}[{k!r}]" for k in keys])
        self.group(
            lambda: (*d, *d.values()),
            (*keys, *d.values()),
            (f"the {kinds} of {what}",) * len(keys) + whats,
            f"the {kinds} of {what}",
            depth,
        )

    def _keys(self, mapping, keys: tuple, what: str, depth: int, attributes: bool) -> None:
        # The items of ``mapping`` under ``keys`` (described as attributes of ``what``, or items)
        if not keys:
            return
        whats = tuple([f"{what}.{k}" if attributes else f"{what}[{k!r}]" for k in keys])
        values = tuple([mapping[k] for k in keys])
        self.group(_reader(mapping, keys), values, whats, what, depth)

    def contents(self, value, what: str, depth: int) -> None:
        """Guard what ``value`` (itself guarded by identity) holds."""
        if id(value) in self._seen:
            return
        self._seen.add(id(value))
        self._keep.append(value)
        if isinstance(value, Tensor):
            self.tensors.append(value)  # its storage, shape and requires_grad: the feed guards
        elif isinstance(value, np.ndarray):
            if value.dtype.kind in _NUMBERS:  # numbers: by value (a copy kept), on every call
                self.arrays.append((value, value.copy(), f"{what} (values)"))
        elif isinstance(value, Module):
            self._class(type(value))
            self._module(value, what)
        elif isinstance(value, Optimizer):
            self._optimizer(value, what)
        elif isinstance(value, CompiledFunction):
            pass  # another compiled function: it has its own guards
        elif isinstance(value, types.FunctionType):
            self._function(value, what)
        elif isinstance(value, types.MethodType):
            self.value(lambda: value.__self__, value.__self__, f"{what}.__self__", depth)
            self.value(lambda: value.__func__, value.__func__, f"{what}.__func__", depth)
        elif isinstance(value, (staticmethod, classmethod)):
            self.value(lambda: value.__func__, value.__func__, what, depth)
        elif isinstance(value, property):
            for f in (value.fget, value.fset):
                if f is not None:
                    self.contents(f, what, depth)
        elif isinstance(value, functools.partial):
            self.value(lambda: value.func, value.func, f"{what}.func", depth)
            self.value(lambda: value.args, value.args, f"{what}.args", depth)
            self.value(lambda: value.keywords, value.keywords, f"{what}.keywords", depth)
        elif isinstance(value, types.ModuleType):
            self._namespace(vars(value), what, depth, walk=not _library(value))
        elif isinstance(value, type):
            if not _library(value):
                self._class(value)
                self._namespace(value.__dict__, what, depth, walk=True)
        elif depth >= _MAX_DEPTH:
            return
        elif isinstance(value, (list, tuple)):
            if len(value) <= _MAX_ITEMS:
                whats = tuple([f"{what}[{i}]" for i in range(len(value))])
                self.group(lambda: tuple(value), tuple(value), whats, f"len({what})", depth + 1)
            else:
                n = len(value)
                self.holds(lambda: len(value) == n, f"len({what})")
        elif isinstance(value, dict):
            self._dict(value, what, depth + 1, attributes=False)
        elif isinstance(value, (set, frozenset)):
            if len(value) <= _MAX_ITEMS and all(isinstance(v, _ATOMIC) for v in value):
                frozen = frozenset(value)
                self.holds(lambda: frozenset(value) == frozen, what)
        else:
            attrs = getattr(value, "__dict__", None)
            if isinstance(attrs, dict):
                self._class(type(value))
                self._object(attrs, what, depth)

    def _object(self, attrs: dict, what: str, depth: int) -> None:
        # The attributes the step's code names are guarded; the other plain values are watched
        # (a step that changes them, as a scheduler's step() does, is never replayed).
        self._filtered = True
        named = tuple([name for name in attrs if name in self.names])
        self._keys(attrs, named, what, depth + 1, attributes=True)
        for name, v in list(attrs.items()):
            if name not in self.names and isinstance(v, _ATOMIC):
                self.watches.append((functools.partial(attrs.__getitem__, name), v, what))

    def _namespace(self, names: dict, what: str, depth: int, walk: bool) -> None:
        # A Python module's or a class's attributes that the step's code names.
        self._filtered = True
        keys = tuple(sorted(self.names & names.keys()))
        if walk:
            self._keys(names, keys, what, depth + 1, attributes=True)
        elif keys:  # a library's attributes: themselves, not what they hold
            values = tuple([names[k] for k in keys])
            whats = tuple([f"{what}.{k}" for k in keys])
            self.groups.append((_reader(names, keys), values, whats, what))

    def _module(self, m, what: str) -> None:
        # Every attribute: library code (Module.__call__, forward) reads them, the parameters,
        # buffers and submodules included; depth starts again (networks nest deep).
        self.modules.add(id(m))
        self._dict(m.__dict__, what, 0, attributes=True)

    def _optimizer(self, opt, what: str) -> None:
        # Which parameters it updates; its hyper-parameters are read by every call's update
        # (not guarded), watched only: a step that changes them is never replayed.
        groups = opt.param_groups
        self.same(lambda: opt.param_groups, groups, f"{what}.param_groups")
        n = len(groups)
        self.holds(lambda: len(groups) == n, f"len({what}.param_groups)")
        for g, group in enumerate(groups):
            where = f"{what}.param_groups[{g}]"
            self.same(functools.partial(groups.__getitem__, g), group, where)
            params = group["params"]
            self.value(lambda group=group: group["params"], params, f"{where}['params']", 0)
            for key, v in group.items():
                if key != "params":
                    self.watches.append((functools.partial(group.get, key), v, f"{where}[{key!r}]"))

    def _function(self, fn, what: str) -> None:
        code = fn.__code__
        for name, cell in zip(code.co_freevars, fn.__closure__ or (), strict=True):
            try:
                v = cell.cell_contents
            except ValueError:
                continue  # not bound yet
            self.value(lambda cell=cell: cell.cell_contents, v, f"{name!r} of {what}", 0)
        for i, v in enumerate(fn.__defaults__ or ()):
            get = functools.partial(lambda i: fn.__defaults__[i], i)
            self.value(get, v, f"default {i} of {what}", 0)
        for name, v in (fn.__kwdefaults__ or {}).items():
            get = functools.partial(lambda name: fn.__kwdefaults__[name], name)
            self.value(get, v, f"default {name!r} of {what}", 0)
        wrapped = getattr(fn, "__wrapped__", None)
        if wrapped is not None:
            self.value(lambda: fn.__wrapped__, wrapped, f"{what}.__wrapped__", 0)
        if _library(fn):
            return
        names: set = set()
        _code_names(code, names)
        if not names <= self.names:
            self.grew |= self._filtered
            self.names |= names
        g = fn.__globals__
        keys = tuple(sorted(names & g.keys()))
        values = tuple([g[k] for k in keys])
        whats = tuple([f"global {k!r}" for k in keys])
        self.group(_reader(g, keys), values, whats, f"the globals of {what}", 0)

    def _class(self, cls) -> None:
        # The methods of user classes (a Module subclass's forward): the globals they read.
        for c in cls.__mro__:
            if _library(c) or id(c) in self._seen:
                continue
            self._seen.add(id(c))
            self._keep.append(c)
            kinds = (types.FunctionType, staticmethod, classmethod, property)
            keys = tuple([k for k, v in vars(c).items() if isinstance(v, kinds)])
            self._keys(vars(c), keys, c.__qualname__, 0, attributes=True)


def _guards(fn, objects: list) -> _Guards:
    """The guards of a call of ``fn`` whose non-tensor arguments are ``objects`` (each guarded
    by identity through the call's signature)."""
    names: set = set()
    for _ in range(4):  # again while walking finds code naming attributes already passed over
        guards = _Guards(set(names))
        guards.contents(fn, getattr(fn, "__qualname__", "the step"), 0)
        for i, obj in enumerate(objects):
            if isinstance(obj, np.ndarray) and obj.dtype.kind in _NUMBERS:
                continue  # numpy arguments: by value, against each call's (see _Entry)
            guards.contents(obj, f"argument object {i} ({type(obj).__name__})", 0)
        if not guards.grew:
            break
        names = guards.names
    return guards


class _Argument(Tensor):
    """A tensor argument inside a trace: ``.grad`` reads and sets the argument's own (eagerly
    they are one tensor), so ``x.grad = None`` in the step resets the gradient backward adds to,
    and a parameter passed as an argument has one gradient."""

    @property
    def grad(self):
        return self._arg.grad

    @grad.setter
    def grad(self, value) -> None:
        self._arg.grad = value

    @property
    def _grad(self):
        return self._arg._grad

    @_grad.setter
    def _grad(self, value) -> None:
        self._arg._grad = value


def _signature(value, tensors: list, objects: list):
    """A hashable key of an argument structure; collects its tensors (in order) and the objects
    keyed by identity (kept alive, so their ids are not reused)."""
    if isinstance(value, Tensor):
        if value._data is None:
            value._concrete("gpumat.compile")
        tensors.append(value)
        device = (
            value._device
        )  # by its fields, which hash and compare in C (a Device does in Python)
        return (
            "T",
            value._shape,
            value._dtype.name,
            device._kind,
            device.index,
            value._requires_grad,
        )
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple([_signature(v, tensors, objects) for v in value]))
    if isinstance(value, dict):
        return ("dict", tuple([(k, _signature(v, tensors, objects)) for k, v in value.items()]))
    if value is None or isinstance(value, (bool, numbers.Number, str, bytes, Device)):
        return ("=", type(value).__name__, value)
    objects.append(value)
    if isinstance(value, np.ndarray) and value.dtype.kind in _NUMBERS:
        return ("np", value.shape, value.dtype.str)  # and its values: _Entry.holds
    return ("id", id(value))


_NO_KWARGS = _signature({}, [], [])
_EAGER = object()  # past the cache size limit: the call runs the function itself


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
        guards: _Guards,
    ) -> None:
        self.trace = trace
        self.executor = executor
        self.outputs = outputs  # the step's result, with symbolic tensors in it
        self.slots = slots  # eval node -> its index among the executor's values
        self.objects = objects  # kept alive: the signature holds their ids
        self.guards = guards
        # numpy arguments: compared by value with each call's (the trace made constants of them)
        self.arrays = [
            (i, a.copy())
            for i, a in enumerate(objects)
            if isinstance(a, np.ndarray) and a.dtype.kind in _NUMBERS
        ]
        # A fed tensor whose storage was replaced (.data = ...) must keep the traced layout.
        self.feeds = [
            (t, node, t._requires_grad, t._shape, t._dtype, t._device)
            for t, node in trace.feeds.values()
        ]
        # Which arguments were tensors the step also reads directly (f(w) reading the parameter
        # w too): the two uses are separate inputs, so the pattern is part of the guard.
        self._fed_ids = {id(t) for t, _ in trace.feeds.values()}
        self._arg_is_fed = [id(a) in self._fed_ids for a in args]
        device = trace.device
        # On CUDA and emulated devices the arguments are copied into the step's own buffers, so
        # a captured CUDA graph's addresses stay valid; on the host they are fed in place. Each
        # thread has its buffers (as it has its executor plan): concurrent calls never share one.
        self._staged = device.device_type != "cpu"
        self.inputs = [(pos, node, args[pos].shape) for pos, node in trace.inputs]
        self._returned_inputs = {node: pos for pos, node in trace.inputs}
        self._local = threading.local()  # per thread: staging buffers, the last .grad tensors
        self.steps = [
            (opt, [i for i, _ in pairs], [slots[g] for _, g in pairs], hyper)
            for opt, pairs, hyper in trace.steps
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
        # Modules the step calls that the guards did not reach: their mode when called.
        self.modules = [
            (m, mode) for m, mode in trace.module_guards.values() if id(m) not in guards.modules
        ]
        # The trace-time arguments are not kept (only the parameters and constants it reads).
        trace.touched.clear()
        trace.leaves.clear()

    def _grad_tensors(self, vals: list, device) -> list:
        """The ``.grad`` tensors of this call, over the executor's gradient buffers ``vals``.

        The tensors of the last call are reused when they wrap the same buffers (the executor
        hands a thread the same buffers every run) and still require no gradient and have none:
        their version counters advance, as this call wrote their values in place, so a graph
        that read an earlier ``.grad`` refuses to backward instead of using the new values.
        """
        cached = getattr(self._local, "grads", None)
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
        made = [
            None if k is None else Tensor._make(vals[k], float32, device) for _, k in self.grads
        ]
        self._local.grads = made
        return made

    def failure(self, args: list, objects: list):
        """Why this trace may not run the call with tensor arguments ``args`` and other
        arguments ``objects`` (see :func:`_signature`), or None when every guard holds: the
        Python state it read (:class:`_Guards`), the modes of the modules it called, the fed
        tensors' requires_grad and layout, the gradients the step reads (None or not), which
        tensor arguments are tensors the step reads directly, the numpy arguments' values."""
        for module, training in self.modules:
            if module.training != training:
                return f"the mode of a {type(module).__name__} (training={training})"
        for t, _, rg, shape, dt, device in self.feeds:
            if t._requires_grad != rg or t._shape != shape or t._dtype is not dt:
                return f"a tensor the step reads (requires_grad={rg}, shape {shape_str(shape)})"
            if t._device != device or t._data is None:
                return f"a tensor the step reads (on {device})"
        for owner, none in self.grad_guards:
            t = args[owner] if owner.__class__ is int else owner
            if (t._grad is None) != none:
                return f"a .grad the step reads ({'None' if none else 'not None'})"
        fed = self._fed_ids
        if [id(a) in fed for a in args] != self._arg_is_fed:
            return "which arguments are tensors the step also reads"
        for i, want in self.arrays:
            if not np.array_equal(objects[i], want, equal_nan=want.dtype.kind in "fc"):
                return f"the values of numpy argument {i}"
        return self.guards.failure()

    def run(self, args: list, first: bool = False):
        """One call: check, feed, run the graph, update, set the gradients, return results.
        ``first``: the traced call (its updates use the hyper-parameters optimizer.step() saw).
        """
        for src, lo, hi, op, error in self.trace.range_guards:
            a_lo, a_hi = (args[src] if src.__class__ is int else src)._range
            if a_lo < lo or a_hi > hi:
                bad = a_lo if a_lo < lo else a_hi
                if error is IndexError:
                    raise IndexError(f"{op}: Target {bad} is out of bounds (classes {lo}..{hi}).")
                raise error(
                    f"{op}: value {bad} of a compiled step's argument is outside [{lo}, {hi}]"
                )
        feed = {f[1]: f[0]._data for f in self.feeds}
        for owner, node in self.grad_inputs:
            t = args[owner] if owner.__class__ is int else owner
            feed[node] = t._grad._data
        if self._staged:
            staging = getattr(self._local, "staging", None)
            if staging is None:
                device = self.trace.device
                staging = self._local.staging = [
                    empty(shape, device) for _, _, shape in self.inputs
                ]
            for (pos, node, _), buf in zip(self.inputs, staging, strict=True):
                ops.copy(args[pos]._data, buf)
                feed[node] = buf
        else:
            for pos, node, _ in self.inputs:
                feed[node] = args[pos]._data
        vals = self.executor.run(feed)
        for opt, idx, slots, hyper in self.steps:
            grads = [vals[k] for k in slots]
            groups = opt.param_groups
            now = [{k: g.get(k) for k in h} for g, h in zip(groups, hyper, strict=False)]
            if not first or now == hyper:
                opt._apply_compiled(idx, grads)
                continue
            for g, h in zip(groups, hyper, strict=False):
                g.update(h)  # the step changed them after optimizer.step()
            try:
                opt._apply_compiled(idx, grads)
            finally:
                for g, n in zip(groups, now, strict=False):
                    g.update(n)
        device = self.trace.device
        grads = self._grad_tensors(vals, device)
        for (owner, _), g in zip(self.grads, grads, strict=True):
            t = args[owner] if owner.__class__ is int else owner
            t._grad = g
        for owner, k in self.grads_in_place:
            g = (args[owner] if owner.__class__ is int else owner)._grad
            ops.copy(vals[k], g._data)
            g._vc.value += 1

        def result(sym: Tensor):
            if sym._trace is not self.trace:
                return sym  # a tensor from outside the step (a parameter): itself, as eagerly
            pos = self._returned_inputs.get(sym._tnode)
            if pos is not None:
                return args[pos]  # an argument returned unchanged: that very tensor, as eagerly
            out = vals[self.slots[sym._tnode]]._clone()  # a copy: the buffer is rewritten
            return Tensor._make(out, sym.dtype, device, sym._range)

        return _replace(self.outputs, result)


class CompiledFunction:
    """A function compiled by :func:`gpumat.compile` (callable like it).

    Attributes:
        traces: how many traces have been made (at most ``gpumat.compiler.cache_size_limit``).
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
        self._warned = False
        self._discarded: dict = {}  # key -> why its last trace was not kept
        self._lock = threading.RLock()  # one thread traces at a time (replays run concurrently)
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        """Run the function: replay a trace whose guards hold, else trace the call (or, past
        ``cache_size_limit`` traces, call the function eagerly, warning once).

        Raises:
            RuntimeError: the step does what cannot be traced (see the module docstring).
            TypeError: the step uses no tensors, or returns other values than tensors.
            ValueError: its ops' shape rules or devices reject the inputs; an int64 argument's
                values are out of the range the step checks (IndexError for class indices).
            MemoryError: the device is full; nothing was changed, the next call traces again.
        """
        tensors: list = []
        objects: list = []
        key = (
            _signature(args, tensors, objects),
            _signature(kwargs, tensors, objects) if kwargs else _NO_KWARGS,
            is_grad_enabled(),
            _aliasing(tensors),
        )
        for entry in self._cache.get(key, ()):
            if entry.failure(tensors, objects) is None:
                self.executor = entry.executor
                return entry.run(tensors)
        with self._lock:
            out = self._trace_and_run(key, args, kwargs, tensors, objects)
        if out is _EAGER:
            return self._fn(*args, **kwargs)
        return out

    def _trace_and_run(self, key, args, kwargs, tensors: list, objects: list):
        """A call that no trace may run (under the lock): trace it and run the trace, or
        ``_EAGER`` past the cache size limit."""
        entries = self._cache.get(key, ())
        for entry in entries:  # another thread may have traced it meanwhile
            if entry.failure(tensors, objects) is None:
                self.executor = entry.executor
                return entry.run(tensors)
        if self.traces >= cache_size_limit:
            # torch.compile's recompile limit: new specialisations run eagerly, never traced.
            if not self._warned:
                self._warned = True
                if entries:
                    why = entries[-1].failure(tensors, objects)
                elif key in self._discarded:
                    why = f"the step changes Python state it reads: {self._discarded[key]}"
                else:
                    why = (
                        "a new signature (argument shapes, dtypes, devices, requires_grad, values "
                        "of other arguments, aliasing, grad mode)"
                    )
                warnings.warn(
                    f"gpumat.compile: {getattr(self._fn, '__qualname__', 'a function')} reached "
                    f"cache_size_limit ({cache_size_limit}) traces; calls that match none of "
                    f"them run eagerly from now on (last change: {why}). Raise "
                    "gpumat.compiler.cache_size_limit, or pass changing numbers as tensors.",
                    UserWarning,
                    stacklevel=3,
                )
            return _EAGER
        entry, changed = self._trace(args, kwargs, tensors, objects)
        # The first run may fail (a full device): then nothing is kept or changed, and the next
        # call traces again. The trace left every .grad as it was; the optimizers' state made for
        # the trace is dropped.
        fresh = [opt for opt, _, _ in entry.trace.steps if opt._state is None]
        try:
            for opt in fresh:
                opt._ensure_state()
            out = entry.run(tensors, first=True)
        except BaseException:
            for opt in fresh:
                opt._state = None
            raise
        self.traces += 1
        if changed is None:
            self._cache.setdefault(key, []).append(entry)
        else:
            # The step changed Python state it reads (a counter, a scheduler's step()): this
            # call is right (its Python ran once), a replay would not be: the next one traces.
            self._discarded[key] = changed
        self.executor = entry.executor
        return out

    def _trace(self, args, kwargs, tensors: list, objects: list):
        """A new trace of the call: (its entry, what Python state the step changed or None)."""
        guards = _guards(self._fn, objects)  # the state before the step's Python runs
        trace = Trace()
        for t in (*guards.tensors, *tensors):
            g = t._grad
            if g is not None and g._trace is None:
                trace.grad_owner[id(g)] = t
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
        if trace.device is None:
            raise TypeError("gpumat.compile: the step uses no tensors; there is nothing to compile")
        changed = guards.changed()
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
        for _, pairs, _ in trace.steps:
            for _, g in pairs:
                want(g)
        executor = Executor(
            nodes,
            device=trace.device,
            fusion=self._fusion,
            compiled=True,
            cuda_graph=self._cuda_graph,
        )
        return _Entry(trace, final, outputs, executor, slots, tensors, objects, guards), changed

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
