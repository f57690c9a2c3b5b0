"""Graph nodes and ops: the data structure of gpumat's autodiff.

A graph is built from :func:`Variable` nodes (placeholders fed at run time), node arithmetic
(``x + y``, ``2 * x``, ``x - 3``) and the op helpers of the :mod:`gpumat.graph` family modules
(``matmul_op``, ``relu_op``, ``conv2d_op``, ...). Nothing is computed while building:
:func:`gpumat.graph.gradients` adds the gradient graph (itself made of ops, so it can be
evaluated, printed or differentiated again where the ops allow), and the executor
(:class:`gpumat.runtime.Executor`) infers shapes, plans memory and runs it on numpy (``ctx=None``,
the reference), on the host device (``gpumat.cpu()``) or on CUDA (``gpumat.gpu(i)``,
``gpumat.emu(i)``).

Every op is one :class:`Op` subclass with three methods, together in the file of its kernel
family (needle's ``ops_mathematic.py``; micrograd's operator beside its backward):

- ``compute(node, input_vals, output_val, ctx)`` writes the node's value into ``output_val`` through
  one kernel API, ``kernels_for(ctx)``: :mod:`gpumat.reference` (numpy arrays) when ``ctx`` is
  None, :mod:`gpumat.ops` (``PyGpuMatrix`` on ``ctx``) otherwise. The same function names, so an op
  never branches on the backend. The executor guarantees that ``output_val`` never shares storage
  with an input.
- ``gradient(node, output_grad)`` returns one entry per input: a graph node for the gradient of the
  output with respect to that input (times ``output_grad``), ``None`` when the value does not depend
  on that input's values (only on its shape, as for ``zeroslike_op``), or :class:`Undefined` when
  the gradient exists but is not implemented (asking for it raises ``NotImplementedError``).
- ``infer_shape(node, input_shapes)`` returns the output shape, or raises ``ValueError`` naming the
  op, the node and the shapes.

Values are float32 on gpumat devices. The numpy backend computes in float32 too, unless a feed is
float64, in which case the whole run is float64 (the finite-difference tests rely on this).

Sources: the op set and names follow the dlsys course (UW CSE599G1, assignments 1 and 2); the
op-as-class structure follows CMU's needle.
"""

from __future__ import annotations

import copy
import functools
import inspect
import itertools
from collections.abc import Sequence

import numpy as np

from gpumat import ops, reference
from gpumat._checks import as_int

__all__ = [
    "AxisOp",
    "Node",
    "Op",
    "PlaceholderOp",
    "Undefined",
    "Variable",
    "as_const",
    "kernels_for",
    "placeholder_op",
    "shape_str",
    "short_name",
]

# Node ids make names and error messages unambiguous; itertools.count is atomic under the GIL.
_node_ids = itertools.count()

# Composite names ("(x+y)") are built from the inputs' names; past this length an input is referred
# to by op and id instead, so a 10,000-node chain does not build quadratic-size strings.
_MAX_NAME = 48


def short_name(node: Node) -> str:
    """The node's name, or ``op#id`` past 48 characters (for names built from inputs' names)."""
    name = node.name
    if len(name) <= _MAX_NAME:
        return name
    return f"{node.op.name}#{node.id}"


def shape_str(shape: Sequence[int]) -> str:
    """A shape as Python writes a tuple: ``(3,)``, ``(2, 5)``, ``()``."""
    return "(" + ", ".join(str(int(d)) for d in shape) + ("," if len(shape) == 1 else "") + ")"


class Node:
    """A node of the computation graph: an op applied to input nodes.

    Attributes:
        inputs: list of input nodes.
        op: the :class:`Op` that computes this node's value.
        const_attr: the constant of ``add_byconst_op`` / ``mul_byconst_op`` nodes (a Python float).
        name: a readable name used in error messages, e.g. ``"MatMul(X,W1,False,False)"``.
        id: a process-unique integer.

    ``+``, ``-``, ``*`` and unary ``-`` take nodes or real constants on either side: ``x + y`` is
    ``add_op(x, y)``, ``2 * x`` and ``x * 2`` are ``mul_byconst_op(x, 2)``, ``x - y`` is
    ``x + (-1) * y``. Node-node operations need equal shapes (broadcast with ``broadcastto_op``).
    The operators are defined in :mod:`gpumat.graph.elementwise`, beside the ops they build.
    Nodes hash and compare by identity, so they can key ``feed_dict``.
    """

    def __init__(self) -> None:
        self.inputs: list[Node] = []
        self.op: Op | None = None
        self.const_attr = None
        self.name = ""
        self.id = next(_node_ids)

    def with_inputs(self, inputs: list[Node]) -> Node:
        """A copy of this node (same op and attributes, a new id) reading ``inputs`` instead."""
        new = copy.copy(self)
        new.inputs = list(inputs)
        new.id = next(_node_ids)
        return new

    def __str__(self) -> str:
        return self.name

    __repr__ = __str__


def as_const(value, what: str) -> float:
    """A Python float from a real constant; TypeError for anything else (arrays, strings)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(
        value, (int, float, np.integer, np.floating)
    ):
        raise TypeError(
            f"node {what} constant: expected a Node or a real number, got {type(value).__name__} "
            "(feed arrays through a Variable instead)"
        )
    return float(value)


class Undefined:
    """A gradient that exists but is not implemented; :func:`gradients` raises NotImplementedError
    with ``reason`` if it is ever needed (it is ignored when no requested node depends on it)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return f"Undefined({self.reason!r})"


class Op:
    """Base class of ops. Calling an op creates a node; subclasses define the node's maths.

    Subclasses override ``__call__`` (to set the node's inputs, name and attributes), ``compute``,
    ``gradient`` and ``infer_shape``; ``name`` is the op's public helper name, used in messages.
    """

    name = "op"

    def __init_subclass__(cls, **kwargs):
        # Every op's __call__ annotates its graph-node parameters as ``Node`` (``Node | None``
        # when optional). Checking them here, once for all ops (gpumat.dlsys' and users' ops
        # too), turns a non-node argument into a TypeError naming the op and the parameter,
        # instead of an AttributeError from deep inside the node's name.
        super().__init_subclass__(**kwargs)
        call = cls.__dict__.get("__call__")
        if call is None or getattr(call, "_checks_nodes", False):
            return
        sig = inspect.signature(call)
        node_params = [
            (pname, "None" in p.annotation)
            for pname, p in list(sig.parameters.items())[1:]
            if isinstance(p.annotation, str) and p.annotation.split(" ")[0] == "Node"
        ]

        @functools.wraps(call)
        def checked_call(self, *args, **kwargs):
            try:
                bound = sig.bind(self, *args, **kwargs)
            except TypeError as exc:
                raise TypeError(f"{self.name}: {exc}") from None
            for pname, optional in node_params:
                if pname not in bound.arguments:
                    continue
                value = bound.arguments[pname]
                if not isinstance(value, Node) and not (optional and value is None):
                    raise TypeError(
                        f"{self.name}: argument {pname!r} must be a graph Node (a Variable or "
                        f"an op's result), got {type(value).__name__}"
                    )
            return call(self, *args, **kwargs)

        checked_call._checks_nodes = True
        cls.__call__ = checked_call

    # Positions of inputs whose values compute never reads, only their shapes (zeroslike_op's
    # input, broadcastto_op's target). The executor does not keep those values alive for this
    # op, so such an input's buffer may hold another value (even this op's output) when it runs.
    shape_only_inputs: tuple = ()

    # Whether the executor may compile this op (``Executor(compiled=True)``): it traces the
    # ``gpumat.ops`` calls that ``compute`` makes on a device and replays them natively, so an op
    # whose device compute does anything else (host arithmetic, reading values back) must not be
    # compiled. None: yes for gpumat's own ops (defined in a gpumat module), no for others; an op
    # built only from gpumat.ops calls may set True.
    compilable: bool | None = None
    # For ops with ``takes_run_state``: {ops call name: index of its scalar argument that is
    # seed + step} (dropout), so the compiled step advances that seed each run. An op with run
    # state and calls not listed here is not compiled.
    seeded_scalars: dict = {}

    def __call__(self) -> Node:
        new_node = Node()
        new_node.op = self
        return new_node

    def compute(self, node: Node, input_vals: list, output_val, ctx=None) -> None:
        """Write the value of ``node`` into ``output_val``.

        Args:
            node: the node being computed.
            input_vals: its inputs' values, numpy arrays when ``ctx`` is None, else ``PyGpuMatrix``.
            output_val: preallocated output of the inferred shape (same kind); it never shares
                storage with an input.
            ctx: None for numpy, else the ``gpumat.Context`` the values live on.
        """
        raise NotImplementedError(f"{type(self).__name__}.compute")

    def gradient(self, node: Node, output_grad: Node) -> list:
        """Return one entry per input: the gradient node, ``None`` (no dependence on that input's
        values) or :class:`Undefined`. ``output_grad`` is the gradient node of ``node``."""
        raise NotImplementedError(f"{type(self).__name__}.gradient")

    def infer_shape(self, node: Node, input_shapes: list[tuple]) -> tuple:
        """Return the output shape from the input shapes; ValueError if they are incompatible."""
        raise NotImplementedError(f"{type(self).__name__}.infer_shape")

    def _error(self, node: Node, message: str) -> ValueError:
        return ValueError(f"{self.name} at node {node.name!r}: {message}")

    def _same_shapes(self, node: Node, a: tuple, b: tuple) -> tuple:
        if tuple(a) != tuple(b):
            raise self._error(
                node,
                f"shapes differ: {shape_str(a)} and {shape_str(b)} "
                "(broadcasting is explicit: use broadcastto_op)",
            )
        return tuple(a)


class PlaceholderOp(Op):
    """A value fed at run time (``Variable``); never computed: the executor copies the feed."""

    name = "placeholder_op"

    def __call__(self) -> Node:
        return Op.__call__(self)

    def compute(self, node, input_vals, output_val, ctx=None):
        raise RuntimeError(f"placeholder {node.name!r} is fed, never computed")

    def gradient(self, node, output_grad):
        return None

    def infer_shape(self, node, input_shapes):
        raise ValueError(f"no value fed for variable {node.name!r}")


placeholder_op = PlaceholderOp()


def Variable(name: str) -> Node:  # noqa: N802 (the dlsys course's name)
    """A placeholder node called ``name``, whose value is given in ``Executor.run``'s feed_dict."""
    placeholder_node = placeholder_op()
    placeholder_node.name = str(name)
    return placeholder_node


class AxisOp(Op):
    """An op with an ``axis`` attribute: an int, negative counting from the end (as numpy and
    PyTorch); :meth:`check_axis` normalises it against a shape at shape inference."""

    def _set_axis(self, node: Node, axis) -> None:
        node.axis = as_int(axis, "axis", self.name)

    def check_axis(self, node: Node, shape: tuple, axis: int) -> int:
        """``axis`` normalised to [0, ndim); ValueError naming the op and the shape if it is out
        of range (a 0-d shape has no axis)."""
        nd = len(shape)
        if not -nd <= axis < nd:
            raise self._error(node, f"axis {axis} is out of range for shape {shape_str(shape)}")
        return axis % nd


def kernels_for(ctx):
    """The kernel module for a backend: :mod:`gpumat.reference` (numpy) for ``ctx=None``,
    :mod:`gpumat.ops` for a ``gpumat.Context``. Both have the same functions and arguments."""
    return reference if ctx is None else ops
