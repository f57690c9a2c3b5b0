"""Graph nodes and ops: the data structure of gpumat's autodiff.

A graph is built from :func:`Variable` nodes (placeholders fed at run time), node arithmetic
(``x + y``, ``2 * x``, ``x - 3``) and the op helpers of the :mod:`gpumat.graph` family modules
(``matmul_op``, ``relu_op``, ``conv2d_op``, ...). Nothing is computed while building:
:func:`gpumat.graph.gradients` adds the gradient graph (itself made of ops, so it can be
evaluated, printed or differentiated again where the ops allow), and the executor
(:class:`gpumat.runtime.Executor`) infers shapes, plans memory and runs it on numpy
(``device=None``, the reference), on the host device (``gpumat.cpu()``) or on CUDA
(``gpumat.gpu(i)``, ``gpumat.emu(i)``).

Every op is one :class:`Op` subclass, together in the file of its kernel family (needle's
``ops_mathematic.py``; micrograd's operator beside its backward). It declares what a node of it
holds and writes three methods; the base class builds the node (``Op.__call__``):

- ``inputs``: the names of its graph-node arguments, in order (``optional_inputs``: those that
  may be None and are then left out); ``attrs``: its :class:`Attr` declarations, each checked and
  converted once when the node is built and kept in the node's frozen ``attrs`` record (read as
  ``node.axis``); ``label``: the node name's prefix (``node_name`` for other names).
- ``compute(node, input_vals, output_val, device)`` writes the node's value into
  ``output_val`` through one kernel API, ``kernels_for(device)``: :mod:`gpumat.reference` (numpy
  arrays) when ``device`` is None, :mod:`gpumat.ops` (``PyGpuMatrix`` on ``device``) otherwise.
  The same function names, so an op never branches on the backend. The executor guarantees
  that ``output_val`` never shares storage with an input.
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
import dataclasses
import inspect
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from gpumat import ops, reference
from gpumat._checks import as_int

__all__ = [
    "Attr",
    "AxisOp",
    "Node",
    "Op",
    "PlaceholderOp",
    "TENSOR_METHODS",
    "UnaryGradientOp",
    "UnaryOp",
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


def _name_nodes(node: Node) -> None:
    """Name ``node`` and its unnamed ancestors, inputs first (a name is built from its inputs'),
    iteratively: a chain of 10,000 unnamed nodes needs no deep recursion."""
    stack = [node]
    while stack:
        top = stack[-1]
        pending = [i for i in top.inputs if i._name is None]
        if pending:
            stack.extend(pending)
        else:
            stack.pop()
            if top._name is None:
                top._name = top.op.node_name(top)


def shape_str(shape: Sequence[int]) -> str:
    """A shape as Python writes a tuple: ``(3,)``, ``(2, 5)``, ``()``."""
    return "(" + ", ".join(str(int(d)) for d in shape) + ("," if len(shape) == 1 else "") + ")"


class Node:
    """A node of the computation graph: an op applied to input nodes.

    Attributes:
        inputs: list of input nodes.
        op: the :class:`Op` that computes this node's value.
        attrs: the op's declared attributes (a frozen record, None for ops that declare none);
            each is also read as an attribute of the node: ``node.axis``, ``node.trans_A``,
            ``node.const_attr`` (the constant of ``add_byconst_op`` / ``mul_byconst_op``).
        name: a readable name used in error messages, e.g. ``"MatMul(X,W1,False,False)"``.
        id: a process-unique integer.
        extra_outputs: the :class:`gpumat.runtime.fusion.FusedOutputOp` nodes of an op with
            several outputs (an empty list until the fusion pass adds them; ``()`` otherwise).
        saved: the front end's autograd record of an eagerly run node (its value and versions,
            :class:`gpumat.autograd.Saved`); None for graph-API nodes.

    ``+``, ``-``, ``*`` and unary ``-`` take nodes or real constants on either side: ``x + y`` is
    ``add_op(x, y)``, ``2 * x`` and ``x * 2`` are ``mul_byconst_op(x, 2)``, ``x - y`` is
    ``x + (-1) * y``. Node-node operations need equal shapes (broadcast with ``broadcastto_op``).
    The operators are defined in :mod:`gpumat.graph.elementwise`, beside the ops they build.
    Nodes hash and compare by identity, so they can key ``feed_dict``.
    """

    # The declared attributes are also copied into the instance __dict__: ``node.axis`` is then an
    # ordinary attribute read (~40 ns), where __getattr__'s fallback after a failed slot lookup
    # took ~500 ns, several times in every eager op's shape rule and kernel call.
    __slots__ = (
        "inputs", "op", "attrs", "_name", "id", "extra_outputs", "saved", "__weakref__", "__dict__"
    )  # fmt: skip

    def __init__(self, op: Op | None = None, inputs=(), attrs=None) -> None:
        self.inputs: list[Node] = list(inputs)
        self.op = op
        self.attrs = attrs
        self._name = ""
        self.id = next(_node_ids)
        self.extra_outputs = [] if op is not None and op.num_outputs > 1 else ()
        self.saved = None
        if attrs is not None:
            d = self.__dict__
            for field in attrs.__slots__:
                d[field] = getattr(attrs, field)

    @property
    def name(self) -> str:
        """A readable name for error messages, e.g. ``"MatMul(X,W1,False,False)"``."""
        # An op's node is named on first use (``op.node_name``): eager ops make a node each and
        # most are never named, so building the string at creation was a fixed cost per op.
        if self._name is None:
            _name_nodes(self)
        return self._name

    @name.setter
    def name(self, value: str) -> None:
        self._name = value

    def __getattr__(self, name: str):
        # Reached only for names that are not slots: the op's declared attributes.
        attrs = None if name.startswith("__") or name == "attrs" else self.attrs
        if attrs is None or not hasattr(attrs, name):
            raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")
        return getattr(attrs, name)

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


_REQUIRED = inspect.Parameter.empty


@dataclasses.dataclass(frozen=True)
class Attr:
    """One declared attribute of an op: its ``name`` (also the keyword of the op's call), the
    ``check`` that validates and converts a value, ``check(value, name, op_name)`` (the
    :mod:`gpumat._checks` functions' signature; None keeps the value as given), its ``default``
    (none: a required argument) and ``type``, the converted value's type."""

    name: str
    check: Callable[[Any, str, str], Any] | None = None
    default: Any = _REQUIRED
    type: type = object


def _node_argument(op: Op, pname: str, value) -> Node:
    if not isinstance(value, Node):
        raise TypeError(
            f"{op.name}: argument {pname!r} must be a graph Node (a Variable or an op's result), "
            f"got {type(value).__name__}"
        )
    return value


class Op:
    """Base class of ops. Calling an op creates a node; subclasses declare the node's inputs and
    attributes and define its maths.

    Subclasses set ``name`` (the op's public helper name, used in messages), ``inputs``,
    ``optional_inputs``, ``attrs`` and ``label`` (or override ``node_name``), and write
    ``compute``, ``gradient`` and ``infer_shape``. ``check_attrs`` is the hook for checks that
    relate several attributes. An op never builds its node itself: ``Op.__call__`` does.
    """

    name = "op"
    #: The node-name prefix: ``Relu`` names ``relu_op(x)``'s node ``Relu(x)``.
    label = ""
    #: The graph-node parameters, in call order; ``optional_inputs`` may be None (then left out).
    inputs: tuple[str, ...] = ()
    optional_inputs: tuple[str, ...] = ()
    #: The declared attributes (:class:`Attr`), after the inputs in call order.
    attrs: tuple[Attr, ...] = ()
    #: Outputs written by compute: more than one only for fused ops (``extra_outputs``).
    num_outputs = 1
    #: Whether eager evaluation (``gpumat.autograd``'s backward) takes the value as a view of
    #: input 0's storage from :meth:`view_offset` on, with no kernel: a reshape, a part of
    #: attention's flat gradient. The executor still calls ``compute`` (its buffers are planned).
    view_of_input = False
    # Set per subclass by __init_subclass__ (defaults for Op itself).
    _required_inputs_only = True
    _relates_attrs = False

    def __init_subclass__(cls, **kwargs):
        # The call's signature and the attributes' record type, derived once per op class from
        # its declarations (a subclass that changes nothing inherits them unchanged).
        super().__init_subclass__(**kwargs)
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        params = [
            inspect.Parameter(n, kind, default=None if n in cls.optional_inputs else _REQUIRED)
            for n in cls.inputs
        ]
        params += [inspect.Parameter(a.name, kind, default=a.default) for a in cls.attrs]
        cls._signature = inspect.Signature(params)
        cls._record = (
            dataclasses.make_dataclass(
                f"{cls.__name__}Attrs",
                [(a.name, a.type) for a in cls.attrs],
                frozen=True,
                slots=True,
            )
            if cls.attrs
            else None
        )
        # For __call__'s positional fast path: whether every input is required, and whether the
        # class checks its attributes together (check_attrs overridden).
        cls._required_inputs_only = not cls.optional_inputs
        cls._relates_attrs = cls.check_attrs is not Op.check_attrs

    def __call__(self, *args, **kwargs) -> Node:
        """A new node of this op: the inputs checked to be nodes, the attributes checked and
        converted (TypeError / ValueError naming the op); its name is made when first read."""
        n_in = len(self.inputs)
        n_args = len(args)
        attrs = self.attrs
        if not kwargs and n_in <= n_args <= n_in + len(attrs):
            # The eager front end's common call (positional): the checks of _bound_call without
            # binding a signature; anything unusual (a missing attribute) goes that way for its
            # handling and messages. Every eager op and gradient makes nodes here, so the common
            # case (required inputs only) takes no per-input helper calls.
            if self._required_inputs_only:
                inputs = args[:n_in] if n_args > n_in else args
                for value in inputs:
                    if not isinstance(value, Node):
                        for n, v in zip(self.inputs, inputs, strict=False):
                            _node_argument(self, n, v)  # raises at the first that is not a node
            else:
                inputs = []
                for n, value in zip(self.inputs, args, strict=False):
                    if value is None and n in self.optional_inputs:
                        continue  # an absent optional input, as _bound_call leaves it out
                    inputs.append(_node_argument(self, n, value))
            if not attrs:
                node = Node(self, inputs, None)
                node._name = None
                return node
            values = {}
            for k, a in enumerate(attrs):
                if n_in + k < n_args:
                    value = args[n_in + k]
                elif a.default is _REQUIRED:
                    return self._bound_call(args, kwargs)
                else:
                    value = a.default
                values[a.name] = value if a.check is None else a.check(value, a.name, self.name)
            if self._relates_attrs:
                self.check_attrs(values)
            node = Node(self, inputs, self._record(**values))
            node._name = None
            return node
        return self._bound_call(args, kwargs)

    def _bound_call(self, args, kwargs) -> Node:
        try:
            bound = self._signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{self.name}: {exc}") from None
        bound.apply_defaults()
        given = bound.arguments
        inputs = [
            _node_argument(self, n, given[n])
            for n in self.inputs
            if not (given[n] is None and n in self.optional_inputs)
        ]
        values = {
            a.name: given[a.name] if a.check is None else a.check(given[a.name], a.name, self.name)
            for a in self.attrs
        }
        self.check_attrs(values)
        node = Node(self, inputs, self._record(**values) if self._record else None)
        node._name = None
        return node

    def check_attrs(self, attrs: dict) -> None:
        """Checks between the converted attributes (a dict it may complete); ValueError."""

    def node_name(self, node: Node) -> str:
        """The new node's name: ``label(input names)``."""
        return f"{self.label}({','.join(short_name(i) for i in node.inputs)})"

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
    #: Whether ``compute`` takes the run's mode and step (``training=``, ``step=``): ops with a
    #: state per run (dropout's mask from seed + step).
    takes_run_state = False
    # For ops with ``takes_run_state``: {ops call name: index of its scalar argument that is
    # seed + step} (dropout), so the compiled step advances that seed each run. An op with run
    # state and calls not listed here is not compiled.
    seeded_scalars: dict = {}

    #: The kernel that computes the node from its inputs' values, in order, then the output:
    #: ``kernels_for(device).<kernel>(*values, output_val, *kernel_args(node))`` (the default
    #: ``compute``), where the values leave out the ``shape_only_inputs`` (and a fused op's
    #: outputs follow in their order).
    kernel = ""

    def compute(self, node: Node, input_vals: list, output_val, device=None) -> None:
        """Write the value of ``node`` into ``output_val``: by default the op's ``kernel``.

        Args:
            node: the node being computed.
            input_vals: its inputs' values, numpy arrays when ``device`` is None, else
                ``PyGpuMatrix``.
            output_val: preallocated output of the inferred shape (same kind); it never shares
                storage with an input.
            device: None for numpy, else the ``gpumat.Device`` the values live on.
        """
        if not self.kernel:
            raise NotImplementedError(f"{type(self).__name__}.compute")
        kernel = getattr(kernels_for(device), self.kernel)
        if self.num_outputs == 1 and not self.shape_only_inputs:  # most ops: no lists to build
            kernel(*input_vals, output_val, *self.kernel_args(node))
            return
        values = [v for k, v in enumerate(input_vals) if k not in self.shape_only_inputs]
        outputs = list(output_val) if self.num_outputs > 1 else [output_val]
        kernel(*values, *outputs, *self.kernel_args(node))

    def kernel_args(self, node: Node) -> tuple:
        """The attributes the default ``compute`` passes to ``kernel`` after the output."""
        return ()

    def view_offset(self, node: Node, input_shapes: list) -> int:
        """For a ``view_of_input`` op: where its value starts in input 0's elements."""
        return 0

    #: Why the op has no gradient, for an op that has none (a fused op, a gradient op without a
    #: second derivative): the default ``gradient`` is then :class:`Undefined` for every input.
    no_gradient = ""

    def gradient(self, node: Node, output_grad: Node) -> list:
        """Return one entry per input: the gradient node, ``None`` (no dependence on that input's
        values) or :class:`Undefined`. ``output_grad`` is the gradient node of ``node``."""
        if self.no_gradient:
            return [Undefined(f"{self.name}: {self.no_gradient}")] * len(node.inputs)
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

    def compute(self, node, input_vals, output_val, device=None):
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


#: The ``axis`` attribute: an int, negative counting from the end (as numpy and PyTorch).
AXIS = Attr("axis", as_int, type=int)


class AxisOp(Op):
    """An op with an ``axis`` attribute (:data:`AXIS`, declared by each subclass where it falls
    in its call); :meth:`check_axis` normalises it against a shape at shape inference. Its kernel
    takes the axis after the output."""

    def kernel_args(self, node: Node) -> tuple:
        return (node.axis,)

    def check_axis(self, node: Node, shape: tuple, axis: int) -> int:
        """``axis`` normalised to [0, ndim); ValueError naming the op and the shape if it is out
        of range (a 0-d shape has no axis)."""
        nd = len(shape)
        if not -nd <= axis < nd:
            raise self._error(node, f"axis {axis} is out of range for shape {shape_str(shape)}")
        return axis % nd


#: The gpumat UnaryOps that are also ``gpumat.Tensor`` methods (``tensor_method``), in creation
#: order: the front end makes each such method from this list, so its name is written once.
TENSOR_METHODS: list = []


class UnaryOp(Op):
    """An elementwise op of one node computed by one pointwise kernel, ``kernel(x, out)`` of
    :func:`kernels_for`: any shape, the output of the input's shape. Subclasses name the kernel
    and write ``gradient``; ``tensor_method`` (with its docstring ``tensor_doc``) names the
    float32 ``gpumat.Tensor`` method that applies the op, if any."""

    inputs = ("node_x",)
    tensor_method = ""
    tensor_doc = ""

    def __init__(self) -> None:
        if self.tensor_method and type(self).__module__.startswith("gpumat."):
            TENSOR_METHODS.append(self)

    def infer_shape(self, node, input_shapes):
        return tuple(input_shapes[0])


class UnaryGradientOp(Op):
    """The gradient of a :class:`UnaryOp` from its forward output: ``kernel(y, dy, out)`` for y
    and dy of one shape. Its own gradient (a second derivative) is not implemented."""

    inputs = ("node_y", "node_dy")

    @property
    def no_gradient(self) -> str:
        return f"second derivatives of {self.kernel.removesuffix('_gradient')}"

    def infer_shape(self, node, input_shapes):
        return self._same_shapes(node, input_shapes[0], input_shapes[1])


def kernels_for(device):
    """The kernel module for a backend: :mod:`gpumat.reference` (numpy) for ``device=None``,
    :mod:`gpumat.ops` for a ``gpumat.Device``. Both have the same functions and arguments."""
    return reference if device is None else ops
