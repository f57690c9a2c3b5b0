"""The dlsys course's ``autodiff`` module: graph nodes, ops, ``gradients`` and ``Executor``.

Everything is gpumat's (:mod:`gpumat.graph`: the same ``Node`` class, ops and ``gradients``;
:class:`gpumat.runtime.Executor`), except what the course's skeleton defines differently:

- ``softmaxcrossentropy_op(y, y_)``: the value is the batch mean of the cross-entropy, as in
  gpumat, but the gradient with respect to y is **summed** over the batch, ``softmax(y) - y_``
  (the skeleton's ``(softmax_op(y) + -1 * y_) * output_grad``), so the course's ``lr = 1e-3`` at
  batch 1000 is the update that gpumat.autodiff makes with ``lr = 1.0``.
- ``Executor.memory_plan(feed_shapes)`` is a method (it plans and allocates the arrays of
  ``node_to_arr_map``); the plan's statistics are ``Executor.plan_stats``.
- the skeleton's helpers ``softmax_func``, ``topo_sort_dfs``, ``sum_node_list`` and
  ``broadcast_rule``.

Source: the op set, names and helper signatures of UW CSE599G1 "dlsys" assignment 2's
``python/dlsys/autodiff.py`` (read, not copied).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from gpumat import graph as _graph
from gpumat import reference as _reference
from gpumat.devices import Device
from gpumat.graph import (  # noqa: F401 (re-exported: the dlsys course's names)
    AddByConstOp,
    AddOp,
    BroadcastToOp,
    MatMulOp,
    MulByConstOp,
    MulOp,
    Node,
    OnesLikeOp,
    Op,
    PlaceholderOp,
    ReduceSumAxisZeroOp,
    ReluGradientOp,
    ReluOp,
    SoftmaxOp,
    TransposeOp,
    Undefined,
    Variable,
    ZerosLikeOp,
    add_byconst_op,
    add_op,
    broadcastto_op,
    find_topo_sort,
    gradients,
    matmul_op,
    mul_byconst_op,
    mul_op,
    oneslike_op,
    placeholder_op,
    reducesumaxiszero_op,
    relu_gradient_op,
    relu_op,
    softmax_op,
    transpose_op,
    zeroslike_op,
)
from gpumat.graph.node import kernels_for as _kernels_for
from gpumat.runtime import Executor as _GpumatExecutor

__all__ = [
    "Executor",
    "Node",
    "Op",
    "Variable",
    "add_byconst_op",
    "add_op",
    "broadcast_rule",
    "broadcastto_op",
    "find_topo_sort",
    "gradients",
    "matmul_op",
    "mul_byconst_op",
    "mul_op",
    "oneslike_op",
    "placeholder_op",
    "reducesumaxiszero_op",
    "relu_gradient_op",
    "relu_op",
    "softmax_func",
    "softmax_op",
    "softmaxcrossentropy_gradient_op",
    "softmaxcrossentropy_op",
    "sum_node_list",
    "topo_sort_dfs",
    "transpose_op",
    "zeroslike_op",
]


def softmax_func(y: np.ndarray) -> np.ndarray:
    """Row-wise softmax of a 2-D numpy array (N, C), in y's dtype.

    NOTE: the row max is subtracted before exp(), so large logits cannot overflow.
    """
    y = np.asarray(y)
    if y.ndim != 2:
        raise ValueError(f"softmax_func: y must be 2-D (rows, classes), got shape {y.shape}")
    out = np.empty_like(y)
    _reference.softmax(y, out)
    return out


class SoftmaxCrossEntropyOp(_graph.SoftmaxCrossEntropyOp):
    """``softmaxcrossentropy_op(y, y_)``: the batch mean of -sum_c y_ log softmax(y), shape (1,),
    whose gradient with respect to y is the course's **summed** ``softmax(y) - y_`` (times the
    output gradient), not the derivative of the mean."""

    def gradient_op(self):
        return softmaxcrossentropy_gradient_op


class SoftmaxCrossEntropyGradientOp(_graph.SoftmaxCrossEntropyGradientOp):
    """``softmaxcrossentropy_gradient_op(y, y_)``: softmax(y) - y_ for (N, C) y and y_, the course's
    gradient (summed over the batch, no 1/N)."""

    def compute(self, node, input_vals, output_val, device=None):
        y, y_ = input_vals
        k = _kernels_for(device)
        k.softmax(y, output_val)
        k.axpy(-1.0, y_, output_val)


softmaxcrossentropy_op = SoftmaxCrossEntropyOp()
softmaxcrossentropy_gradient_op = SoftmaxCrossEntropyGradientOp()


def topo_sort_dfs(node: Node, visited: set, topo_order: list) -> None:
    """Appends ``node`` and its not-yet-visited ancestors to ``topo_order``, inputs first
    (post-order depth-first search), and adds them to ``visited``.

    The course's helper, iterative here (no recursion limit on deep graphs). Raises TypeError when
    ``node`` is not a graph node.
    """
    if not isinstance(node, Node):
        raise TypeError(f"topo_sort_dfs: node must be a graph Node, got {type(node).__name__}")
    if node in visited:
        return
    visited.add(node)
    stack = [(node, iter(node.inputs))]
    while stack:
        current, it = stack[-1]
        for child in it:
            if child not in visited:
                visited.add(child)
                stack.append((child, iter(child.inputs)))
                break
        else:
            stack.pop()
            topo_order.append(current)


def sum_node_list(node_list) -> Node:
    """The sum of the nodes with ``add_op``, left to right (no ``0 +`` node as Python's sum makes).

    Raises ValueError for an empty list, TypeError for a non-node entry.
    """
    node_list = list(node_list)
    if not node_list:
        raise ValueError("sum_node_list: the list is empty")
    total = node_list[0]
    if not isinstance(total, Node):
        raise TypeError(f"sum_node_list: entries must be graph Nodes, got {type(total).__name__}")
    for n in node_list[1:]:
        total = add_op(total, n)
    return total


def broadcast_rule(shape_a: tuple, shape_b: tuple) -> tuple:
    """The shape numpy broadcasting gives for ``shape_a`` and ``shape_b``, e.g.
    ``broadcast_rule((3, 2), (4, 3, 2)) == (4, 3, 2)`` (numpy.broadcast_shapes).

    Raises TypeError for a shape that is not a tuple of ints, ValueError for incompatible shapes.
    """
    for what, shape in (("shape_a", shape_a), ("shape_b", shape_b)):
        if not isinstance(shape, tuple) or any(
            isinstance(d, bool) or not isinstance(d, (int, np.integer)) for d in shape
        ):
            raise TypeError(f"broadcast_rule: {what} must be a tuple of ints, got {shape!r}")
    try:
        return tuple(int(d) for d in np.broadcast_shapes(shape_a, shape_b))
    except ValueError as exc:
        raise ValueError(f"broadcast_rule: cannot broadcast {shape_a} and {shape_b}") from exc


class Executor(_GpumatExecutor):
    """gpumat's executor with the dlsys course's API: ``Executor(eval_node_list, ctx=None)``,
    ``run(feed_dict, convert_to_numpy_ret_vals=False)``, ``infer_shape(feed_shapes)``,
    ``memory_plan(feed_shapes)`` (a method here), ``node_to_shape_map``, ``node_to_arr_map``,
    ``topo_order``, ``feed_shapes``, ``ctx``. ``ctx`` (the course's name for gpumat's
    ``device``) is None (numpy), ``ndarray.cpu(0)`` or ``ndarray.gpu(i)`` (or any
    ``gpumat.Device``; gpumat's ``device=`` is accepted too). The plan's statistics are
    ``plan_stats``; gpumat's keyword options (``fusion``, ``compiled``, ...) pass through.

    Raises as :class:`gpumat.runtime.Executor` (TypeError for a ctx that is not a device).
    """

    def __init__(self, eval_node_list, ctx=None, *, device=None, **options) -> None:
        if ctx is not None and device is not None:
            raise TypeError("Executor: pass ctx (the course's name) or device, not both")
        if ctx is not None and not isinstance(ctx, Device):
            raise TypeError(
                f"Executor: ctx must be None (numpy) or a device such as ndarray.cpu(0) or "
                f"ndarray.gpu(0), got {ctx!r}"
            )
        super().__init__(eval_node_list, device if ctx is None else ctx, **options)

    @property
    def ctx(self):
        """The device the executor runs on (None: numpy), the course's name for ``device``."""
        return self.device

    def memory_plan(self, feed_shapes: Mapping) -> dict:
        """Plans and allocates an array for every node except the fed ones, for fed nodes of
        these shapes, and returns ``node_to_arr_map`` (node -> array). ``run`` calls it itself;
        calling it first only allocates early. Arrays of values whose lifetimes do not overlap
        share storage (see gpumat.runtime.memory).

        Raises ValueError from shape inference (a missing feed, incompatible shapes), TypeError
        for a key that is not a node.
        """
        feeds = {}
        for node, shape in dict(feed_shapes).items():
            if not isinstance(node, Node):
                raise TypeError(f"memory_plan: keys must be graph nodes, got {type(node).__name__}")
            if node in self._graph_nodes:
                feeds[node] = (_ShapeOnly(tuple(shape)), False)
        st = self._state
        self._prepare(st, feeds, np.float32)
        # The same key as a run with numpy feeds of these shapes, so that run keeps this plan.
        st.plan_key = (
            frozenset((n, tuple(v.shape), False) for n, (v, _) in feeds.items()),
            np.dtype(np.float32).str,
        )
        return self.node_to_arr_map


class _ShapeOnly:
    # A stand-in feed value for memory_plan: _prepare reads only .shape.
    __slots__ = ("shape",)

    def __init__(self, shape):
        self.shape = shape
