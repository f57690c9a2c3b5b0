"""Reverse-mode automatic differentiation over a graph of ops (the seed assignment's API).

A graph is built from :func:`Variable` nodes with node arithmetic (``x + y``, ``2 * x``, ``x - 3``)
and the op helpers below (``matmul_op``, ``relu_op``, ``softmaxcrossentropy_op``, ...). Nothing is
computed while building: :func:`gradients` adds the gradient graph (itself made of ops, so it can
be evaluated, printed or differentiated again where the ops allow), and :class:`Executor`
(``gpumat.executor``, re-exported here) infers shapes, plans memory and runs the graph on numpy
(``ctx=None``, the reference), on the host device (``gpumat.cpu()``) or on CUDA (``gpumat.gpu(i)``).

Values are float32 on gpumat devices. The numpy backend computes in float32 too, unless a feed is
float64, in which case the whole run is float64 (the finite-difference tests rely on this).

Every op is one :class:`Op` subclass with three methods (needle ``ops_mathematic.py``, the seed's
``autodiff.py``):

- ``compute(node, input_vals, output_val, ctx)`` writes the node's value into ``output_val`` (numpy
  arrays when ``ctx`` is None, else ``PyGpuMatrix`` values written through ``gpumat.ops``). The
  executor guarantees that ``output_val`` never shares storage with an input.
- ``gradient(node, output_grad)`` returns one entry per input: a graph node for the gradient of the
  output with respect to that input (times ``output_grad``), ``None`` when the value does not depend
  on that input's values (only on its shape, as for ``zeroslike_op``), or :class:`Undefined` when
  the gradient exists but is not implemented (asking for it raises ``NotImplementedError``).
- ``infer_shape(node, input_shapes)`` returns the output shape, or raises ``ValueError`` naming the
  op, the node and the shapes.

Broadcasting is explicit, as in the seed: ``+`` and ``*`` need equal shapes, and a bias is added
with ``z + broadcastto_op(b, z)``. Then every gradient has its input's shape by construction:
``broadcastto_op``'s gradient sums over the added leading axes (``reducesumaxiszero_op(g, like)``).

Loss scaling and the equivalent learning rate
---------------------------------------------
``softmaxcrossentropy_op(y, y_)`` is the batch mean of the cross-entropy, and its gradient carries
the 1/N of that mean (the seed skeleton's gradient dropped it)::

    L = -(1/N) sum_r sum_c y_[r,c] log softmax(y)[r,c]
    dL/dy = (softmax(y) - y_) / N                      (times the output gradient)

The seed trained MNIST with ``lr = 1e-3`` on batches of N = 1000 with the un-scaled gradient
``softmax(y) - y_``. That is the same parameter update as ``lr = 1e-3 * N = 1.0`` here:
``lr_here = lr_seed * N``. Unlike the seed's, our learning rate does not change meaning with the
batch size.

Sources: the op set and names follow UW CSE599G1 "dlsys" assignments 1 and 2; gradient
accumulation by summing contributions over a reverse topological order follows Karpathy's
micrograd ``engine.py``; the softmax and matmul derivatives are the standard ones (e.g. Goodfellow,
Bengio, Courville, *Deep Learning*, 6.5.4 and 6.2.2.3).
"""

from __future__ import annotations

import functools
import inspect
import itertools
from collections.abc import Iterable, Sequence

import numpy as np

from gpumat import ops

__all__ = [
    "Node",
    "Op",
    "Undefined",
    "Variable",
    "Executor",  # noqa: F822 (provided lazily by __getattr__ below)
    "gradients",
    "find_topo_sort",
    "add_op",
    "add_byconst_op",
    "add_by_const_op",
    "mul_op",
    "mul_byconst_op",
    "mul_by_const_op",
    "matmul_op",
    "placeholder_op",
    "zeroslike_op",
    "oneslike_op",
    "reducesumaxiszero_op",
    "broadcastto_op",
    "relu_op",
    "relu_gradient_op",
    "softmax_op",
    "softmaxcrossentropy_op",
    "softmaxcrossentropy_gradient_op",
    "transpose_op",
]

# Node ids make names and error messages unambiguous; itertools.count is atomic under the GIL.
_node_ids = itertools.count()

# Composite names ("(x+y)") are built from the inputs' names; past this length an input is referred
# to by op and id instead, so a 10,000-node chain does not build quadratic-size strings.
_MAX_NAME = 48


def _short(node: Node) -> str:
    name = node.name
    if len(name) <= _MAX_NAME:
        return name
    return f"{node.op.name}#{node.id}"


def _shape_str(shape: Sequence[int]) -> str:
    return "(" + ", ".join(str(int(d)) for d in shape) + ("," if len(shape) == 1 else "") + ")"


class Node:
    """A node of the computation graph: an op applied to input nodes.

    Attributes:
        inputs: list of input nodes.
        op: the :class:`Op` that computes this node's value.
        const_attr: the constant of ``add_byconst_op`` / ``mul_byconst_op`` nodes (a Python float).
        name: a readable name used in error messages, e.g. ``"MatMul(X,W1,False,False)"``.
        id: a process-unique integer.

    ``+``, ``-`` and ``*`` take nodes or real constants on either side: ``x + y`` is
    ``add_op(x, y)``, ``2 * x`` and ``x * 2`` are ``mul_byconst_op(x, 2)``, ``x - y`` is
    ``x + (-1) * y``. Node-node operations need equal shapes (broadcast with ``broadcastto_op``).
    Nodes hash and compare by identity, so they can key ``feed_dict``.
    """

    def __init__(self) -> None:
        self.inputs: list[Node] = []
        self.op: Op | None = None
        self.const_attr = None
        self.name = ""
        self.id = next(_node_ids)

    def __add__(self, other):
        if isinstance(other, Node):
            return add_op(self, other)
        return add_byconst_op(self, other)

    def __mul__(self, other):
        if isinstance(other, Node):
            return mul_op(self, other)
        return mul_byconst_op(self, other)

    def __neg__(self):
        return mul_byconst_op(self, -1.0)

    def __sub__(self, other):
        if isinstance(other, Node):
            return add_op(self, mul_byconst_op(other, -1.0))
        return add_byconst_op(self, -_as_const(other, "-"))

    def __rsub__(self, other):
        return add_byconst_op(mul_byconst_op(self, -1.0), other)

    # Both are commutative, so the reflected forms are the same operation (the seed's convention).
    __radd__ = __add__
    __rmul__ = __mul__

    def __str__(self) -> str:
        return self.name

    __repr__ = __str__


def _as_const(value, what: str) -> float:
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
        # when optional). Checking them here, once for all ops (gpumat.nn's and gpumat.dlsys'
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
                f"shapes differ: {_shape_str(a)} and {_shape_str(b)} "
                "(broadcasting is explicit: use broadcastto_op)",
            )
        return tuple(a)


# --------------------------------------------------------------------------------------------------
# Elementwise arithmetic
# --------------------------------------------------------------------------------------------------


class AddOp(Op):
    """``a + b`` elementwise; a and b have equal shapes."""

    name = "add_op"

    def __call__(self, node_A: Node, node_B: Node) -> Node:
        new_node = Op.__call__(self)
        new_node.inputs = [node_A, node_B]
        new_node.name = f"({_short(node_A)}+{_short(node_B)})"
        return new_node

    def compute(self, node, input_vals, output_val, ctx=None):
        if ctx is None:
            np.add(input_vals[0], input_vals[1], out=output_val)
        else:
            ops.matrix_elementwise_add(input_vals[0], input_vals[1], output_val)

    def gradient(self, node, output_grad):
        return [output_grad, output_grad]

    def infer_shape(self, node, input_shapes):
        return self._same_shapes(node, input_shapes[0], input_shapes[1])


class AddByConstOp(Op):
    """``a + c`` for a real constant c (``node.const_attr``)."""

    name = "add_byconst_op"

    def __call__(self, node_A: Node, const_val) -> Node:
        new_node = Op.__call__(self)
        new_node.const_attr = _as_const(const_val, "+")
        new_node.inputs = [node_A]
        new_node.name = f"({_short(node_A)}+{new_node.const_attr!r})"
        return new_node

    def compute(self, node, input_vals, output_val, ctx=None):
        if ctx is None:
            np.add(input_vals[0], node.const_attr, out=output_val)
        else:
            ops.matrix_elementwise_add_by_const(input_vals[0], node.const_attr, output_val)

    def gradient(self, node, output_grad):
        return [output_grad]

    def infer_shape(self, node, input_shapes):
        return tuple(input_shapes[0])


class MulOp(Op):
    """``a * b`` elementwise; a and b have equal shapes."""

    name = "mul_op"

    def __call__(self, node_A: Node, node_B: Node) -> Node:
        new_node = Op.__call__(self)
        new_node.inputs = [node_A, node_B]
        new_node.name = f"({_short(node_A)}*{_short(node_B)})"
        return new_node

    def compute(self, node, input_vals, output_val, ctx=None):
        if ctx is None:
            np.multiply(input_vals[0], input_vals[1], out=output_val)
        else:
            ops.matrix_elementwise_multiply(input_vals[0], input_vals[1], output_val)

    def gradient(self, node, output_grad):
        a, b = node.inputs
        return [output_grad * b, output_grad * a]

    def infer_shape(self, node, input_shapes):
        return self._same_shapes(node, input_shapes[0], input_shapes[1])


class MulByConstOp(Op):
    """``a * c`` for a real constant c (``node.const_attr``)."""

    name = "mul_byconst_op"

    def __call__(self, node_A: Node, const_val) -> Node:
        new_node = Op.__call__(self)
        new_node.const_attr = _as_const(const_val, "*")
        new_node.inputs = [node_A]
        new_node.name = f"({_short(node_A)}*{new_node.const_attr!r})"
        return new_node

    def compute(self, node, input_vals, output_val, ctx=None):
        if ctx is None:
            np.multiply(input_vals[0], node.const_attr, out=output_val)
        else:
            ops.matrix_elementwise_multiply_by_const(input_vals[0], node.const_attr, output_val)

    def gradient(self, node, output_grad):
        return [output_grad * node.const_attr]

    def infer_shape(self, node, input_shapes):
        return tuple(input_shapes[0])


# --------------------------------------------------------------------------------------------------
# Matrix product and transpose
# --------------------------------------------------------------------------------------------------


class MatMulOp(Op):
    """``op(A) @ op(B)`` for 2-D A, B, with op(X) = X^T when the matching flag is set.

    Shapes: A is (M, K), or (K, M) with trans_A; B is (K, N), or (N, K) with trans_B; out (M, N).
    """

    name = "matmul_op"

    def __call__(
        self, node_A: Node, node_B: Node, trans_A: bool = False, trans_B: bool = False
    ) -> Node:
        for flag, value in (("trans_A", trans_A), ("trans_B", trans_B)):
            if not isinstance(value, (bool, np.bool_)):
                raise TypeError(f"matmul_op: {flag} must be a bool, got {value!r}")
        new_node = Op.__call__(self)
        new_node.matmul_attr_trans_A = bool(trans_A)
        new_node.matmul_attr_trans_B = bool(trans_B)
        new_node.inputs = [node_A, node_B]
        new_node.name = f"MatMul({_short(node_A)},{_short(node_B)},{bool(trans_A)},{bool(trans_B)})"
        return new_node

    def compute(self, node, input_vals, output_val, ctx=None):
        ta, tb = node.matmul_attr_trans_A, node.matmul_attr_trans_B
        a, b = input_vals
        if ctx is None:
            np.matmul(a.T if ta else a, b.T if tb else b, out=output_val)
        else:
            ops.matrix_multiply(a, ta, b, tb, output_val)

    def gradient(self, node, output_grad):
        # With C = op(A) op(B) and G = dL/dC: dL/dop(A) = G op(B)^T and dL/dop(B) = op(A)^T G; a
        # transposed operand takes the transpose of that. Each case is one matmul with flags.
        a, b = node.inputs
        g = output_grad
        ta, tb = node.matmul_attr_trans_A, node.matmul_attr_trans_B
        if not ta and not tb:  # C = A B
            return [matmul_op(g, b, False, True), matmul_op(a, g, True, False)]
        if ta and not tb:  # C = A^T B
            return [matmul_op(b, g, False, True), matmul_op(a, g, False, False)]
        if not ta and tb:  # C = A B^T
            return [matmul_op(g, b, False, False), matmul_op(g, a, True, False)]
        return [matmul_op(b, g, True, True), matmul_op(g, a, True, True)]  # C = A^T B^T

    def infer_shape(self, node, input_shapes):
        sa, sb = (tuple(s) for s in input_shapes)
        ta, tb = node.matmul_attr_trans_A, node.matmul_attr_trans_B
        desc = f"{'A^T' if ta else 'A'} {_shape_str(sa)} @ {'B^T' if tb else 'B'} {_shape_str(sb)}"
        if len(sa) != 2 or len(sb) != 2:
            raise self._error(node, f"both operands must be 2-D: {desc}")
        m, k = (sa[1], sa[0]) if ta else sa
        kb, n = (sb[1], sb[0]) if tb else sb
        if k != kb:
            raise self._error(node, f"inner dimensions differ ({k} != {kb}): {desc}")
        return (m, n)


class TransposeOp(Op):
    """Transpose of a 2-D array: (R, C) -> (C, R)."""

    name = "transpose_op"

    def __call__(self, node_A: Node) -> Node:
        new_node = Op.__call__(self)
        new_node.inputs = [node_A]
        new_node.name = f"Transpose({_short(node_A)})"
        return new_node

    def compute(self, node, input_vals, output_val, ctx=None):
        if ctx is None:
            np.copyto(output_val, input_vals[0].T)
        else:
            ops.transpose(input_vals[0], output_val)

    def gradient(self, node, output_grad):
        return [transpose_op(output_grad)]

    def infer_shape(self, node, input_shapes):
        s = tuple(input_shapes[0])
        if len(s) != 2:
            raise self._error(node, f"input must be 2-D, got {_shape_str(s)}")
        return (s[1], s[0])


# --------------------------------------------------------------------------------------------------
# Leaves and constants
# --------------------------------------------------------------------------------------------------


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


class ZerosLikeOp(Op):
    """An array of zeros with the input's shape; depends only on that shape."""

    name = "zeroslike_op"
    shape_only_inputs = (0,)

    def __call__(self, node_A: Node) -> Node:
        new_node = Op.__call__(self)
        new_node.inputs = [node_A]
        new_node.name = f"Zeroslike({_short(node_A)})"
        return new_node

    def compute(self, node, input_vals, output_val, ctx=None):
        if ctx is None:
            output_val.fill(0.0)
        else:
            ops.array_set(output_val, 0.0)

    def gradient(self, node, output_grad):
        return [None]

    def infer_shape(self, node, input_shapes):
        return tuple(input_shapes[0])


class OnesLikeOp(Op):
    """An array of ones with the input's shape; depends only on that shape."""

    name = "oneslike_op"
    shape_only_inputs = (0,)

    def __call__(self, node_A: Node) -> Node:
        new_node = Op.__call__(self)
        new_node.inputs = [node_A]
        new_node.name = f"Oneslike({_short(node_A)})"
        return new_node

    def compute(self, node, input_vals, output_val, ctx=None):
        if ctx is None:
            output_val.fill(1.0)
        else:
            ops.array_set(output_val, 1.0)

    def gradient(self, node, output_grad):
        return [None]

    def infer_shape(self, node, input_shapes):
        return tuple(input_shapes[0])


# --------------------------------------------------------------------------------------------------
# Broadcasting and reduction over leading axes
# --------------------------------------------------------------------------------------------------


def _strip_leading_ones(shape: tuple) -> tuple:
    i = 0
    while i < len(shape) and shape[i] == 1:
        i += 1
    return tuple(shape[i:])


def _is_suffix(suffix: tuple, of: tuple) -> bool:
    return len(suffix) <= len(of) and tuple(of[len(of) - len(suffix) :]) == tuple(suffix)


class ReduceSumAxisZeroOp(Op):
    """Sum over leading axes.

    ``reducesumaxiszero_op(a)`` sums over axis 0: (N, ...) -> (...), the seed's op.
    ``reducesumaxiszero_op(a, like)`` sums over as many leading axes as it takes to reach
    ``like``'s shape, which must end a's shape once its own leading 1s are dropped:
    (4, 5, 6) -> (6,), (8, 10) -> (1, 10). This is the gradient of ``broadcastto_op(like, a)``.
    """

    name = "reducesumaxiszero_op"
    shape_only_inputs = (1,)  # like

    def __call__(self, node_A: Node, like: Node | None = None) -> Node:
        new_node = Op.__call__(self)
        new_node.inputs = [node_A] if like is None else [node_A, like]
        new_node.name = f"ReduceSumAxisZero({_short(node_A)})"
        if like is not None:
            new_node.name = f"ReduceSumTo({_short(node_A)},{_short(like)})"
        return new_node

    def compute(self, node, input_vals, output_val, ctx=None):
        x = input_vals[0]
        if ctx is None:
            out_core = _strip_leading_ones(output_val.shape)
            lead = x.ndim - len(out_core)
            np.copyto(output_val, np.sum(x, axis=tuple(range(lead))).reshape(output_val.shape))
        else:
            ops.reduce_sum_axis_zero(x, output_val)

    def gradient(self, node, output_grad):
        grads = [broadcastto_op(output_grad, node.inputs[0])]
        if len(node.inputs) == 2:
            grads.append(None)  # only like's shape is used
        return grads

    def infer_shape(self, node, input_shapes):
        s = tuple(input_shapes[0])
        if len(node.inputs) == 1:
            if len(s) == 0:
                raise self._error(node, "cannot sum over axis 0 of a 0-d array")
            return s[1:]
        like = tuple(input_shapes[1])
        if not _is_suffix(_strip_leading_ones(like), s):
            raise self._error(
                node,
                f"cannot sum {_shape_str(s)} down to {_shape_str(like)} "
                "(the target's shape, without leading 1s, must end the input's shape)",
            )
        return like


class BroadcastToOp(Op):
    """``broadcastto_op(a, b)``: a repeated over new leading axes to b's shape.

    a's shape, without its leading 1s, must end b's shape: (200, 300) -> (130, 200, 300),
    (10,) -> (7, 10), (1, 10) -> (7, 10). The gradient sums over the added axes.
    """

    name = "broadcastto_op"
    shape_only_inputs = (1,)  # the target

    def __call__(self, node_A: Node, node_B: Node) -> Node:
        new_node = Op.__call__(self)
        new_node.inputs = [node_A, node_B]
        new_node.name = f"BroadcastTo({_short(node_A)},{_short(node_B)}.shape)"
        return new_node

    def compute(self, node, input_vals, output_val, ctx=None):
        if ctx is None:
            np.copyto(output_val, input_vals[0].reshape(_strip_leading_ones(input_vals[0].shape)))
        else:
            ops.broadcast_to(input_vals[0], output_val)

    def gradient(self, node, output_grad):
        return [reducesumaxiszero_op(output_grad, node.inputs[0]), None]

    def infer_shape(self, node, input_shapes):
        a, b = (tuple(s) for s in input_shapes)
        if not _is_suffix(_strip_leading_ones(a), b):
            raise self._error(
                node,
                f"cannot broadcast {_shape_str(a)} to {_shape_str(b)} "
                "(the input's shape, without leading 1s, must end the target's shape)",
            )
        return b


# --------------------------------------------------------------------------------------------------
# Activations and the loss
# --------------------------------------------------------------------------------------------------


class ReluOp(Op):
    """max(a, 0) elementwise."""

    name = "relu_op"

    def __call__(self, node_A: Node) -> Node:
        new_node = Op.__call__(self)
        new_node.inputs = [node_A]
        new_node.name = f"Relu({_short(node_A)})"
        return new_node

    def compute(self, node, input_vals, output_val, ctx=None):
        if ctx is None:
            np.maximum(input_vals[0], 0.0, out=output_val)
        else:
            ops.relu(input_vals[0], output_val)

    def gradient(self, node, output_grad):
        return [relu_gradient_op(node.inputs[0], output_grad)]

    def infer_shape(self, node, input_shapes):
        return tuple(input_shapes[0])


class ReluGradientOp(Op):
    """``relu_gradient_op(a, g)``: g where a > 0, else 0 (equal shapes).

    NOTE: the subgradient at a == 0 is taken as 0, as in the kernel (and PyTorch).
    """

    name = "relu_gradient_op"

    def __call__(self, node_A: Node, node_G: Node) -> Node:
        new_node = Op.__call__(self)
        new_node.inputs = [node_A, node_G]
        new_node.name = f"ReluGradient({_short(node_A)},{_short(node_G)})"
        return new_node

    def compute(self, node, input_vals, output_val, ctx=None):
        if ctx is None:
            a, g = input_vals
            np.copyto(output_val, np.where(a > 0, g, 0.0))
        else:
            ops.relu_gradient(input_vals[0], input_vals[1], output_val)

    def gradient(self, node, output_grad):
        # Piecewise constant in a (zero derivative almost everywhere); linear in g, same mask.
        return [None, relu_gradient_op(node.inputs[0], output_grad)]

    def infer_shape(self, node, input_shapes):
        return self._same_shapes(node, input_shapes[0], input_shapes[1])


def _softmax_np(y: np.ndarray) -> np.ndarray:
    # NOTE: subtracting the row max keeps exp() from overflowing; softmax is shift-invariant.
    z = y - y.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def _check_2d(op: Op, node: Node, what: str, shape: tuple) -> None:
    if len(shape) != 2:
        raise op._error(node, f"{what} must be 2-D (rows, classes), got {_shape_str(shape)}")


class SoftmaxOp(Op):
    """``softmax_op(y, axis=-1)``: exp(y) / sum exp(y) along ``axis`` of an array of any rank >= 1
    (by default the last: the seed's row-wise softmax of (rows, classes)), max-subtracted.

    Gradient: ``gpumat.nn.softmax_gradient_op(s, g, axis)`` = s * (g - sum_axis(s * g)), one
    kernel (the Jacobian diag(s) - s s^T applied along the axis). ValueError for an axis out of
    range (a 0-d input has none).
    """

    name = "softmax_op"

    def __call__(self, node_A: Node, axis=-1) -> Node:
        new_node = Op.__call__(self)
        new_node.inputs = [node_A]
        if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
            raise TypeError(f"softmax_op: axis must be an int, got {axis!r}")
        new_node.axis = int(axis)
        suffix = "" if new_node.axis == -1 else f",axis={new_node.axis}"
        new_node.name = f"Softmax({_short(node_A)}{suffix})"
        return new_node

    def compute(self, node, input_vals, output_val, ctx=None):
        y = input_vals[0]
        axis = getattr(node, "axis", -1)
        if ctx is None:
            z = y - y.max(axis=axis, keepdims=True)  # NOTE: no overflow; shift-invariant
            e = np.exp(z)
            np.copyto(output_val, e / e.sum(axis=axis, keepdims=True))
        elif y.ndim == 2 and axis in (-1, 1):
            ops.softmax(y, output_val)
        else:
            ops.softmax_axis(y, output_val, axis)

    def gradient(self, node, output_grad):
        from gpumat import nn

        return [nn.softmax_gradient_op(node, output_grad, getattr(node, "axis", -1))]

    def infer_shape(self, node, input_shapes):
        s = tuple(input_shapes[0])
        axis = getattr(node, "axis", -1)
        if not -len(s) <= axis < len(s):
            raise self._error(node, f"axis {axis} is out of range for shape {_shape_str(s)}")
        return s


class SoftmaxCrossEntropyOp(Op):
    """``softmaxcrossentropy_op(y, y_)``: mean over rows of -sum_c y_ log softmax(y), shape (1,).

    y (logits) and y_ (labels, e.g. one-hot rows) are (N, C) with N >= 1. The gradient with respect
    to y is (softmax(y) - y_) / N times the output gradient. The gradient with respect to the
    labels, -log softmax(y) / N, needs a log kernel that gpumat does not have; asking for it raises
    NotImplementedError (it is never needed to train).
    """

    name = "softmaxcrossentropy_op"

    def __call__(self, node_A: Node, node_B: Node) -> Node:
        new_node = Op.__call__(self)
        new_node.inputs = [node_A, node_B]
        new_node.name = f"SoftmaxXEntropy({_short(node_A)},{_short(node_B)})"
        return new_node

    def compute(self, node, input_vals, output_val, ctx=None):
        y, y_ = input_vals
        if ctx is None:
            # NOTE: log softmax through log-sum-exp of max-shifted logits: no overflow, no log(0).
            z = y - y.max(axis=1, keepdims=True)
            log_softmax = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
            output_val[...] = np.mean(-np.sum(y_ * log_softmax, axis=1))
        else:
            ops.softmax_cross_entropy(y, y_, output_val)

    def gradient(self, node, output_grad):
        y, y_ = node.inputs
        grad = softmaxcrossentropy_gradient_op(y, y_)
        # The seed of gradients() is oneslike_op(loss); multiplying by ones is skipped.
        if not (output_grad.op is oneslike_op and output_grad.inputs[0] is node):
            grad = grad * broadcastto_op(output_grad, y)
        return [grad, Undefined("softmaxcrossentropy_op: gradient with respect to the labels")]

    def infer_shape(self, node, input_shapes):
        sy, sl = (tuple(s) for s in input_shapes)
        _check_2d(self, node, "logits", sy)
        if sy != sl:
            raise self._error(
                node, f"logits {_shape_str(sy)} and labels {_shape_str(sl)} differ in shape"
            )
        if sy[0] < 1:
            raise self._error(node, f"needs at least one row, got {_shape_str(sy)}")
        return (1,)


class SoftmaxCrossEntropyGradientOp(Op):
    """``softmaxcrossentropy_gradient_op(y, y_)``: (softmax(y) - y_) / N for (N, C) y and y_,
    the gradient of the mean loss ``softmaxcrossentropy_op(y, y_)`` with respect to y."""

    name = "softmaxcrossentropy_gradient_op"

    def __call__(self, node_A: Node, node_B: Node) -> Node:
        new_node = Op.__call__(self)
        new_node.inputs = [node_A, node_B]
        new_node.name = f"SoftmaxXEntropyGrad({_short(node_A)},{_short(node_B)})"
        return new_node

    def compute(self, node, input_vals, output_val, ctx=None):
        y, y_ = input_vals
        inv_n = 1.0 / y.shape[0]
        if ctx is None:
            np.copyto(output_val, (_softmax_np(y) - y_) * inv_n)
        else:
            ops.softmax(y, output_val)
            ops.axpy(-1.0, y_, output_val)
            ops.matrix_elementwise_multiply_by_const(output_val, inv_n, output_val)

    def gradient(self, node, output_grad):
        reason = "softmaxcrossentropy_gradient_op: second derivatives of the loss"
        return [Undefined(reason), Undefined(reason)]

    def infer_shape(self, node, input_shapes):
        SoftmaxCrossEntropyOp.infer_shape(self, node, input_shapes)  # same checks as the loss
        return tuple(input_shapes[0])


# --------------------------------------------------------------------------------------------------
# Op instances (the seed's public helpers)
# --------------------------------------------------------------------------------------------------

add_op = AddOp()
add_byconst_op = AddByConstOp()
add_by_const_op = add_byconst_op
mul_op = MulOp()
mul_byconst_op = MulByConstOp()
mul_by_const_op = mul_byconst_op
matmul_op = MatMulOp()
transpose_op = TransposeOp()
placeholder_op = PlaceholderOp()
zeroslike_op = ZerosLikeOp()
oneslike_op = OnesLikeOp()
reducesumaxiszero_op = ReduceSumAxisZeroOp()
broadcastto_op = BroadcastToOp()
relu_op = ReluOp()
relu_gradient_op = ReluGradientOp()
softmax_op = SoftmaxOp()
softmaxcrossentropy_op = SoftmaxCrossEntropyOp()
softmaxcrossentropy_gradient_op = SoftmaxCrossEntropyGradientOp()


def Variable(name: str) -> Node:  # noqa: N802 (the seed's name)
    """A placeholder node called ``name``, whose value is given in ``Executor.run``'s feed_dict."""
    placeholder_node = placeholder_op()
    placeholder_node.name = str(name)
    return placeholder_node


# --------------------------------------------------------------------------------------------------
# Graph traversal and reverse-mode differentiation
# --------------------------------------------------------------------------------------------------


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


def gradients(output_node: Node, node_list: Sequence[Node]) -> list[Node]:
    """Gradient graph nodes of ``output_node`` with respect to each node in ``node_list``.

    Reverse-mode differentiation seeded with ``oneslike_op(output_node)``: for a non-scalar output
    this is the gradient of the sum of its elements. Contributions reaching a node along several
    paths are summed with ``add_op`` (micrograd ``engine.py``), over the reverse of an iterative
    topological order, so depth is unlimited. Only paths that lead to a requested node are
    differentiated. A requested node that the output does not depend on gets ``zeroslike_op(node)``.

    Returns:
        A list of nodes, one per entry of ``node_list``, each with that node's shape.

    Raises:
        NotImplementedError: a needed gradient is :class:`Undefined` (e.g. softmax cross-entropy
            with respect to its labels).
        TypeError: ``output_node`` or an entry of ``node_list`` is not a graph node.
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
    topo = find_topo_sort([output_node])
    wanted = set(node_list)
    # A node is relevant if some requested node is it or one of its ancestors.
    relevant: set[Node] = set()
    for node in topo:
        if node in wanted or any(i in relevant for i in node.inputs):
            relevant.add(node)

    contributions: dict[Node, list[Node]] = {output_node: [oneslike_op(output_node)]}
    node_to_grad: dict[Node, Node] = {}
    for node in reversed(topo):
        grads = contributions.pop(node, None)
        if not grads:
            continue
        grad = _sum_node_list(grads)
        node_to_grad[node] = grad
        if not any(i in relevant for i in node.inputs):
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


def __getattr__(name: str):
    # Executor lives in gpumat.executor, which imports this module; importing it lazily here avoids
    # the cycle whichever module is imported first.
    if name == "Executor":
        from gpumat.executor import Executor

        return Executor
    # The convolution, pooling, reshape and regression-loss ops live in gpumat.nn (which imports
    # this module); they are re-exported here lazily, as Executor is, e.g. autodiff.conv2d_op.
    if name in _NN_OPS:
        from gpumat import nn

        return getattr(nn, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_NN_OPS = (
    "add_channel_bias_op",
    "dropout_op",
    "log_softmax_op",
    "nll_loss_op",
    "reduce_max_op",
    "reduce_mean_op",
    "reduce_sum_op",
    "sigmoid_op",
    "tanh_op",
    "avg_pool2d_op",
    "conv1d_op",
    "conv2d_op",
    "flatten_op",
    "mae_loss_op",
    "max_pool2d_op",
    "mse_loss_op",
    "reshape_op",
)


def __dir__():
    return sorted([*globals(), "Executor", *_NN_OPS])
